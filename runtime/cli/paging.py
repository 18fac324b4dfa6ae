"""Nomad's list flags, shared by the list commands: `-filter EXPR`, `-per-page N` and
`-page-token TOKEN` (command/eval_list.go, node_pool_list.go, node_status.go, var_list.go),
and how a paginated answer is read and announced.

- `filter_option` and `page_options` are click decorators; a command takes `filter_expr`,
  `per_page` and `page_token` and hands them to `page_params` for the request's query.
- `get_page(client, path, params)` is the list and the agent's `X-Nomad-NextToken` ("" when
  the list is complete); a 400 (a filter that does not parse or cannot be evaluated) ends the
  command with the agent's text and exit 2, as every refused call does (api_client.py).
- `next_page_hint(token)` is Nomad's footer, printed after the table when a next page
  exists: the same command line without its `-page-token`, then `-page-token <next>`
  (command/eval_list.go `argsWithoutPageToken`).

Kept light: click and the standard library only at module level (tests/test_import_weight.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

import click

if TYPE_CHECKING:
    from yurt.runtime.cli.http import AgentConnection

F = TypeVar("F", bound=Callable[..., Any])

NEXT_TOKEN_HEADER: Final = "X-Nomad-NextToken"


def filter_option(f: F) -> F:
    """`-filter EXPR`: Nomad's filter expression, evaluated by the agent."""
    return click.option("-filter", "--filter", "filter_expr", default="", metavar="EXPR",
                        help="Keep what this filter expression matches (Nomad's syntax).")(f)


def page_options(f: F) -> F:
    """`-per-page N` and `-page-token TOKEN`."""
    f = click.option("-page-token", "--page-token", "page_token", default="",
                     metavar="TOKEN", help="Where to start: a previous page's next token.")(f)
    return click.option("-per-page", "--per-page", "per_page", type=int, default=0,
                        metavar="N", help="How many results a page holds (0: all).")(f)


def page_params(filter_expr: str = "", per_page: int = 0,
                page_token: str = "") -> dict[str, str]:
    """The query parameters of Nomad's `QueryOptions` for these flags (empty ones left out)."""
    params = {"filter": filter_expr, "next_token": page_token}
    if per_page:
        params["per_page"] = str(per_page)
    return {k: v for k, v in params.items() if v}


def get_page(client: AgentConnection, path: str,
             params: dict[str, str]) -> tuple[Any, str]:
    """GET `path`: its JSON answer and the next page's token ("" for the last page)."""
    from yurt.runtime.cli.api_client import fail_on_error

    response = client.request("GET", path, params=params)
    fail_on_error(response)
    return response.json(), response.headers.get(NEXT_TOKEN_HEADER) or ""


def args_without_page_token(argv: list[str]) -> str:
    """command/eval_list.go `argsWithoutPageToken`: the command line, less `-page-token`
    and its value (or `-page-token=…`); the program as its name alone."""
    kept: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.lstrip("-").startswith("page-token") and arg.startswith("-"):
            i += 1 if "=" in arg else 2
            continue
        kept.append(os.path.basename(arg) if i == 0 else arg)
        i += 1
    return " ".join(kept)


def args_with_new_page_token(argv: list[str], next_token: str) -> str:
    """command/service_info.go `argsWithNewPageToken`: the command line with its
    `-page-token` replaced, or `-page-token=<next>` put before the last argument."""
    args = list(argv)
    for i, arg in enumerate(args):
        if arg.startswith("-") and arg.lstrip("-").startswith("page-token"):
            if "=" in arg:
                args[i] = "-page-token=" + next_token
            elif i + 1 < len(args):
                args[i + 1] = next_token
            break
        if i == len(args) - 1:
            args[i:] = ["-page-token=" + next_token, arg]
            break
    if args:
        args[0] = os.path.basename(args[0])
    return " ".join(args)


def next_page_hint(next_token: str) -> str:
    """Nomad's footer when more results exist ("" when none)."""
    if not next_token:
        return ""
    return ("\nResults have been paginated. To get the next page run:\n\n"
            f"{args_without_page_token(sys.argv)} -page-token {next_token}")
