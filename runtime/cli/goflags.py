"""Go's `flag` package for the commands that parse their own flags (`alloc exec`, `action`,
`fmt`): click cannot, since their flags end where the command they run begins (`alloc exec
ID sh -c ...`) or take Go's `-name=false`.

The rules, as Go's `flag.FlagSet.Parse`: flags end at the first argument that is not one (a
lone `-` included) or after `--`; `-name` and `--name` are the same flag; a boolean takes
`-name` or `-name=BOOL` (Go's `ParseBool`), never the next argument; any other flag takes
`-name=VALUE` or the next argument. Beside the command's own flags: `-h`/`-help` ask for the
usage (`HelpRequested`), Nomad's `-token` is refused (a secret on a command line: every user
reads it in /proc), and, where the command talks to an agent, Nomad's general options
(`-address=…`, runtime/cli/general.py `take_go_flag`).

Pure apart from that last hand-off; the callers turn `GoFlagError` into their usage error.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, Final

from yurt.runtime.cli.secret_options import REFUSED, refusal
from yurt.runtime.lib.goparse import parse_go_bool

#: click's settings for such a command: everything after its name reaches `parse_go_flags`.
#: Only `--help` is click's own: as a short option, the `h` of any `-flag=value`
#: (`-address=http://…`, `-check`) would be taken for it; `-h` and `-help` are ours.
GO_FLAG_COMMAND: Final[dict[str, Any]] = {
    "ignore_unknown_options": True, "allow_interspersed_args": False,
    "help_option_names": ["--help"]}


class GoFlagError(Exception):
    """A flag Go's parser would refuse: unknown, a bad boolean, a value missing, or `-token`."""


class HelpRequested(Exception):
    """`-h` or `-help`: print the usage and nothing else."""


def parse_go_flags(args: Sequence[str], *, booleans: Collection[str],
                   valued: Collection[str] = (), general: bool = False
                   ) -> tuple[dict[str, bool | str], list[str]]:
    """(the flags given, by name; the arguments after them).

    Args:
        booleans: the names of the command's boolean flags.
        valued: the names of its flags that take a value.
        general: also take Nomad's general options (the command talks to an agent).

    Raises:
        GoFlagError: see the class.
        HelpRequested: `-h` or `-help`.
    """
    given: dict[str, bool | str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            i += 1
            break
        if not arg.startswith("-") or arg == "-":
            break
        name, has_value, value = arg.lstrip("-").partition("=")
        if name in booleans:
            try:
                given[name] = parse_go_bool(value) if has_value else True
            except ValueError:
                raise GoFlagError(f'invalid boolean value "{value}" for -{name}') from None
        elif name in valued:
            if not has_value:
                i += 1
                if i == len(args):
                    raise GoFlagError(f"flag needs an argument: -{name}")
                value = args[i]
            given[name] = value
        elif name in ("h", "help"):
            raise HelpRequested
        elif f"--{name}" in REFUSED:
            raise GoFlagError(refusal(f"-{name}", daemon=False))
        elif general:
            from yurt.runtime.cli.general import take_go_flag

            after = take_go_flag(args, i)
            if after is None:
                raise GoFlagError(f"flag provided but not defined: -{name}")
            i = after
            continue
        else:
            raise GoFlagError(f"flag provided but not defined: -{name}")
        i += 1
    return given, list(args[i:])


def parse_session_flags(args: Sequence[str], *, booleans: Collection[str],
                        valued: Collection[str]) -> tuple[dict[str, bool | str], list[str], str]:
    """`parse_go_flags` for the commands that open an exec session (`alloc exec`, `action`):
    their flags, the arguments after them, and `-e`'s escape character ("~" by default).
    `-h` prints the running command's usage and ends it (exit 0).

    Raises:
        GoFlagError: as `parse_go_flags`, or a bad `-e`.
    """
    import click

    from yurt.runtime.cli.output import echo_raw

    try:
        given, rest = parse_go_flags(args, booleans=booleans, valued=valued, general=True)
    except HelpRequested:
        ctx = click.get_current_context()
        echo_raw(ctx.get_help())  # yurt's own text
        ctx.exit(0)
    escape = escape_char(str(given["e"])) if "e" in given else "~"
    return given, rest, escape


def escape_char(value: str) -> str:
    """`-e`'s value (Nomad's exec and action): "" for `none`, else one character."""
    if value == "none":
        return ""
    if len(value.encode()) != 1:
        raise GoFlagError("-e requires 'none' or a single character")
    return value
