"""How the command line prints results: for people at a terminal, for scripts everywhere else.

Nomad's CLI prints plain columns (`formatList`) and `key = value` lines (`formatKV`), and has
`-json` and `-t TEMPLATE` (a Go text/template over the API's data) on its listing and status
verbs; yurt does the same, so a script written for one reads the other. At a terminal a table
may be drawn with rich (borders, cells folded to fit the window, never cut with an ellipsis);
when stdout is not a terminal (a pipe, a file, `$(...)`), every table is plain columns two
spaces apart, never wrapped or cut, whatever `$COLUMNS` says. IDs are shown as Nomad's
8-character prefixes, and an ID column never shrinks below that, at any width.

Invariants: machine output (`--json`, `-t`) goes to stdout alone, with nothing else around
it; the two flags exclude each other (Nomad's message, exit 2). rich and the Go template
engine are imported only when used: most invocations need neither, and each costs tens of
milliseconds of start-up (scripts/bench_cli).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, Final, NoReturn, TypeVar

import click

from yurt.runtime.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE

#: Nomad's short ID length (`shortId`): also the least an ID column may show.
SHORT_ID: Final = 8

F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    """End the command: `yurt: message` on stderr, exit `code`."""
    click.echo(f"yurt: {message}", err=True)
    sys.exit(code)


def stdout_is_terminal() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):  # replaced or closed stdout: not a terminal
        return False


def output_options(f: F) -> F:
    """`-json/--json` and `-t TEMPLATE`, as Nomad's listing and status verbs take them."""
    f = click.option("-t", "template", default="", metavar="TEMPLATE",
                     help="Format the API's data with a Go template (Nomad's -t).")(f)
    return click.option("-json", "--json", "json_output", is_flag=True,
                        help="Print the API's JSON instead of text.")(f)


def check_format(json_output: bool, template: str) -> None:
    """Refuse `-json` with `-t` before anything is asked of the agent (exit 2)."""
    if json_output and template:
        fail("Both json and template formatting are not allowed", EXIT_USAGE)


def emit_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2))


def render_template(template: str, value: Any) -> str:
    """`value` formatted by the Go template `template` (exit 2 when it is not valid)."""
    from yurt.runtime.gotemplate import Template, TemplateError

    try:
        return Template("cli", template).execute(value)
    except TemplateError as e:
        fail(f"Error formatting the data: {e}", EXIT_USAGE)


def emit(value: Any, json_output: bool, template: str, human: Callable[[], None]) -> None:
    """The result as JSON, as a template renders it, or as `human` prints it."""
    check_format(json_output, template)
    if template:
        click.echo(render_template(template, value), nl=False)
    elif json_output:
        emit_json(value)
    else:
        human()


def short(ident: str) -> str:
    return ident[:SHORT_ID]


def format_kv(pairs: Sequence[tuple[str, str]]) -> str:
    """Nomad's `formatKV`: `key = value` lines, the keys padded to the longest."""
    width = max((len(k) for k, _ in pairs), default=0)
    return "\n".join(f"{k.ljust(width)} = {v}" for k, v in pairs)


def format_list(rows: Sequence[Sequence[str]]) -> str:
    """Nomad's `formatList`: columns padded to their widest cell, two spaces apart."""
    if not rows:
        return ""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in rows)


def print_table(header: Sequence[str], rows: Sequence[Sequence[str]], *, title: str = "",
                id_columns: Sequence[int] = (0,)) -> None:
    """A table: drawn with rich at a terminal, plain columns otherwise.

    Args:
        header: the column names.
        rows: the cells, as text.
        title: a line above the table ("" for none).
        id_columns: the columns holding IDs: never narrower than `SHORT_ID`, never wrapped.
    """
    if not stdout_is_terminal():
        if title:
            click.echo(title)
        click.echo(format_list([list(header), *map(list, rows)]))
        return
    from rich.console import Console

    Console(highlight=False).print(rich_table(header, rows, title=title, id_columns=id_columns))


def rich_table(header: Sequence[str], rows: Sequence[Sequence[str]], *, title: str = "",
               id_columns: Sequence[int] = (0,)) -> Any:
    """The rich `Table` that `print_table` draws at a terminal (same arguments), for callers
    that print it among other rich output."""
    from rich.table import Table

    table = Table(title=title or None, title_justify="left")
    for i, name in enumerate(header):
        if i in id_columns:
            table.add_column(name, no_wrap=True, min_width=SHORT_ID, overflow="ignore")
        else:  # folded, not cut with an ellipsis: narrow windows wrap, nothing is lost
            table.add_column(name, overflow="fold")
    for row in rows:
        table.add_row(*row)
    return table


def quiet_broken_pipe() -> NoReturn:
    """End the command quietly, exit 0: stdout's reader is gone (`| head`)."""
    # Nothing more can be said to the reader, and Python's flush of stdout at exit would raise
    # again, so stdout points at /dev/null from here on (Python's advice).
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(EXIT_OK)
