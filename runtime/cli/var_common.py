"""What the `var` verbs share (runtime/cli/vars.py, runtime/cli/var_put.py): the request's
parameters, the `key=value` items of a command line, a variable printed as Nomad prints it,
and the check-and-set conflict report. Imports only the output helpers at module level.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from yurt.runtime.cli.output import echo
from yurt.runtime.errors import EXIT_FAILED, EXIT_USAGE
from yurt.runtime.lib.printable import printable


def _params(ns: str, **extra: str) -> dict[str, str]:
    return {**({"namespace": ns} if ns else {}), **extra}


def _time(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).astimezone().isoformat(timespec="seconds")


def _cas_conflict(response: Any, check_index: int) -> None:
    """Nomad's report of a check-and-set conflict; exit 1."""
    current = response.json()
    last = (f" The variable was last updated {_time(current['ModifyTime'])}."
            if current.get("ModifyIndex") else "")
    echo("\nCheck-and-Set conflict\n", err=True)
    echo(f"    Your provided check-index ({check_index}) does not match the server-side "
               f"index ({current.get('ModifyIndex', 0)}).{last}\n    If you are sure you "
               "want to perform this operation, add the -force or "
               f"-check-index={current.get('ModifyIndex', 0)} flag before the positional "
               "arguments.", err=True)
    sys.exit(EXIT_FAILED)


def _send(client: Any, method: str, path: str, **kw: Any) -> Any:
    """The response, 2xx or a 409 (a check-and-set conflict, for the caller to report);
    any other error ends the command as `api_client.call` ends it."""
    from yurt.runtime.cli.api_client import fail_on_error

    response = client.request(method, path, **kw)
    # A 409 with a text body is no check-and-set conflict: the variable is locked
    # (api/varlocks.py `refuse_if_locked`, Nomad's "attempting to modify locked variable").
    if response.status_code != 409 or not response.content.lstrip().startswith(b"{"):
        fail_on_error(response)
    return response


def _print_variable(v: dict[str, Any]) -> None:
    rows = [("Namespace", v["Namespace"]), ("Path", v["Path"]),
            ("Create Time", _time(v["CreateTime"])), ("Check Index", str(v["ModifyIndex"]))]
    width = max(len(k) for k, _ in rows)
    for k, value in rows:
        echo(f"{k.ljust(width)} = {value}")
    echo("\nItems")
    _print_pairs(v.get("Items") or {})


def _print_pairs(pairs: dict[str, str]) -> None:
    """`key = value` lines, sorted, the keys (made printable first) padded to the longest; a
    value of several lines keeps them."""
    keys = {printable(k): k for k in pairs}
    width = max((len(k) for k in keys), default=0)
    for shown in sorted(keys):
        echo(f"{shown.ljust(width)} = {pairs[keys[shown]]}")


def _items(args: tuple[str, ...], *, keep_empty: bool = False) -> dict[str, str]:
    """The `key=value` items; `key=` removes the key (with `keep_empty`, it is kept with an
    empty value, for the caller to remove from what it holds)."""
    from yurt.runtime.cli.output import fail

    items: dict[str, str] = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep or not key:
            fail(f"Failed to parse K=V data: {arg!r} is not key=value", EXIT_USAGE)
        if value == "-":
            value = sys.stdin.read()
        elif value.startswith("@"):
            try:
                value = Path(value[1:]).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as e:
                fail(f"error reading {value[1:]!r}: {e}", EXIT_USAGE)
        if value or keep_empty:
            items[key] = value
        else:
            items.pop(key, None)
    return items
