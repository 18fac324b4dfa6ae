"""How the command line prints results: for people at a terminal, for scripts everywhere else.

Nomad's CLI prints plain columns (`formatList`) and `key = value` lines (`formatKV`), and has
`-json` and `-t TEMPLATE` (a Go text/template over the API's data) on its listing and status
verbs; yurt does the same, so a script written for one reads the other. At a terminal a table
may be drawn with rich (borders, cells folded to fit the window, never cut with an ellipsis);
when stdout is not a terminal (a pipe, a file, `$(...)`), every table is plain columns two
spaces apart, never wrapped or cut, whatever `$COLUMNS` says. IDs are shown as Nomad's
8-character prefixes, and an ID column never shrinks below that, at any width.

Everything the CLI shows a person passes through this module, and is made printable here
(runtime/lib/printable.py): a job ID, a task name or an event message is chosen by whoever
wrote the job, and a control character in it (ESC, BEL) would be a command to the operator's
terminal. `echo` and `fail` escape a message (its own newlines kept), the table helpers every
cell and title, so no verb can forget; rich reads no markup in a cell (`[link=…]` would be a
terminal hyperlink). Verbs never call `click.echo` or `print` themselves
(tests/test_cli_control_chars.py holds them to it).

Exact on purpose, never escaped: `--json` (JSON escapes every control character itself),
`-t TEMPLATE` and other output for scripts that ask for a value as it is (`echo_raw`: `var get
-item`, `job parse`), and a task's own output (`alloc logs`, `alloc fs` on a file: bytes,
written by runtime/cli/logs.py and fs.py), as Nomad's are.

Invariants: machine output (`--json`, `-t`) goes to stdout alone, with nothing else around
it; the two flags exclude each other (Nomad's message, exit 2). rich and the Go template
engine are imported only when used: most invocations need neither, and each costs tens of
milliseconds of start-up (scripts/bench_cli).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final, NoReturn, TypeVar

import click

from yurt.runtime.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from yurt.runtime.lib.printable import printable

#: Nomad's short ID length (`shortId`): also the least an ID column may show.
SHORT_ID: Final = 8

F = TypeVar("F", bound=Callable[..., Any])


def echo(message: str = "", *, err: bool = False, nl: bool = True) -> None:
    """A message for a person, on stdout (stderr with `err`), made printable: every control
    character in it escaped, its line breaks kept."""
    click.echo(printable(message, lines=True), err=err, nl=nl)


def echo_raw(text: str, *, nl: bool = True) -> None:
    """Text for a script, on stdout exactly as given: what a user asked for as it is (a
    template's output, a variable's item), never a name woven into a sentence or a table."""
    click.echo(text, nl=nl)


def echo_bytes(data: bytes) -> None:
    """Bytes for a script, on stdout exactly as given, whatever the locale (`fmt -`'s
    formatted file)."""
    click.echo(data, nl=False)


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    """End the command: `yurt: message` on stderr (made printable, as `echo`), exit `code`."""
    echo(f"yurt: {message}", err=True)
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
    """`value` as JSON on stdout, exactly: `json.dumps` writes every control character (and
    everything beyond ASCII) as a `\\u` escape, so nothing in it speaks to a terminal."""
    click.echo(json.dumps(value, indent=2))


def render_template(template: str, value: Any) -> str:
    """`value` formatted by the Go template `template` (exit 2 when it is not valid)."""
    from yurt.runtime.gotemplate import Template, TemplateError

    try:
        return Template("cli", template).execute(value)
    except TemplateError as e:
        fail(f"Error formatting the data: {e}", EXIT_USAGE)


def emit_template(template: str, value: Any) -> None:
    """`value` as the Go template `template` renders it, on stdout exactly (Nomad's `-t`)."""
    echo_raw(render_template(template, value), nl=False)


def emit(value: Any, json_output: bool, template: str, human: Callable[[], None]) -> None:
    """The result as JSON, as a template renders it, or as `human` prints it."""
    check_format(json_output, template)
    if template:
        emit_template(template, value)
    elif json_output:
        emit_json(value)
    else:
        human()


def short(ident: str) -> str:
    return ident[:SHORT_ID]


def format_kv(pairs: Sequence[tuple[str, str]]) -> str:
    """Nomad's `formatKV`: `key = value` lines, the keys padded to the longest; keys and
    values made printable, each on its one line."""
    shown = [(printable(k), printable(v)) for k, v in pairs]
    width = max((len(k) for k, _ in shown), default=0)
    return "\n".join(f"{k.ljust(width)} = {v}" for k, v in shown)


def format_list(rows: Sequence[Sequence[str]]) -> str:
    """Nomad's `formatList`: columns padded to their widest cell, two spaces apart; every
    cell made printable, on its one line."""
    if not rows:
        return ""
    rows = [[printable(cell) for cell in row] for row in rows]
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
            echo(printable(title))
        echo(format_list([list(header), *map(list, rows)]))
        return
    from rich.console import Console

    Console(highlight=False).print(rich_table(header, rows, title=title, id_columns=id_columns))


def rich_table(header: Sequence[str], rows: Sequence[Sequence[str]], *, title: str = "",
               id_columns: Sequence[int] = (0,)) -> Any:
    """The rich `Table` that `print_table` draws at a terminal (same arguments)."""
    from rich.table import Table
    from rich.text import Text

    # `Text`, not `str`: rich would read markup in a string (`[link=URL]` is a hyperlink).
    table = Table(title=Text(printable(title), style="table.title") if title else None,
                  title_justify="left")
    for i, name in enumerate(header):
        if i in id_columns:
            table.add_column(name, no_wrap=True, min_width=SHORT_ID, overflow="ignore")
        else:  # folded, not cut with an ellipsis: narrow windows wrap, nothing is lost
            table.add_column(name, overflow="fold")
    for row in rows:
        table.add_row(*(Text(printable(cell)) for cell in row))
    return table


@contextmanager
def live_block() -> Iterator[Callable[[str], None]]:
    """At a terminal, a block of text redrawn in place (rich's `Live`): each call of the
    function it gives replaces the block (made printable, as `echo`); the last one stays."""
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    with Live(Text(""), console=Console(highlight=False), auto_refresh=False) as live:

        def show(text: str) -> None:
            live.update(Text(printable(text, lines=True)), refresh=True)

        yield show


def quiet_broken_pipe() -> NoReturn:
    """End the command quietly, exit 0: stdout's reader is gone (`| head`)."""
    # Nothing more can be said to the reader, and Python's flush of stdout at exit would raise
    # again, so stdout points at /dev/null from here on (Python's advice).
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(EXIT_OK)
