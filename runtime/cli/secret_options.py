"""No secret on a command line: `--token` is refused by every `yurt` command, with one message.

Every local user can read every process's command line (`/proc/PID/cmdline`, `ps -ef`), so a
token given as an argument is given to all of them, for as long as the process runs. The token
therefore comes from a file or the environment (readable by its owner alone): `--token-file
FILE` or `$YURT_AGENT_TOKEN` for the daemons (`yurt agent`, `yurt server`, `yurt nodesim`),
`$NOMAD_TOKEN` (Nomad's, as a Nomad user's shell has it), `$YURT_TOKEN` or `$YURT_TOKEN_FILE` for
the verbs that speak to an agent (runtime/cli/api_client.py `client_token`).

Nomad's CLI takes `-token` on every command, so a Nomad user will type it. Rather than
click's "No such option" (or, worse, `-t oken` read as a template where a command has `-t`),
`refuse_secret_options` gives every command of the tree a hidden `--token` whose callback ends
the command with exit 2 and says where the token goes instead; Nomad's single-dash `-token`
reaches it through runtime/cli/flags.py's spelling rule. The option is eager, so the refusal
comes before any other check, and nothing runs: no agent starts, no request is sent.
`yurt alloc exec`, which parses its own Go-style flags after click, refuses `-token` there
with the same message (runtime/cli/exec.py `parse_flags`).

Invariants: every command and group has the refusal (tests/test_cli_secret_options.py walks
the tree); no command declares an option named in `REFUSED` itself (`refuse_secret_options`
raises at start-up if one does, so a secret option cannot be added back by mistake).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import click

from yurt.runtime.cli.output import echo
from yurt.runtime.errors import EXIT_USAGE

#: The options that would carry a secret. Nomad's `-token` is the only one the CLI knows.
REFUSED: Final = ("--token",)
#: Where the daemons read their token from (runtime/cli/agent.py `agent_token`).
DAEMON_SOURCES: Final = "--token-file FILE or $YURT_AGENT_TOKEN"
#: Where the verbs that speak to an agent read theirs from (api_client.py `client_token`).
CLIENT_SOURCES: Final = "$NOMAD_TOKEN, $YURT_TOKEN or $YURT_TOKEN_FILE"


def refusal(option: str, *, daemon: bool) -> str:
    """The one-line refusal of `option` (a daemon's token sources, or a client's)."""
    sources = DAEMON_SOURCES if daemon else CLIENT_SOURCES
    return f"{option} is refused: every user can read a command line in /proc; use {sources}"


class SecretOnCommandLine(click.ClickException):
    """A secret given as an argument: exit 2, the refusal as `yurt: ...` on stderr."""

    exit_code = EXIT_USAGE

    def show(self, file: Any = None) -> None:
        echo(f"yurt: {self.message}", err=True)


def _refuse(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    if value is None or ctx.resilient_parsing:  # not given, or shell completion
        return
    daemon = any("--token-file" in p.opts for p in ctx.command.params)
    raise SecretOnCommandLine(refusal(param.opts[0], daemon=daemon))


def _commands(command: click.Command, seen: set[int]) -> Iterator[click.Command]:
    """`command` and every command under it, each once (one may be in two groups)."""
    if id(command) in seen:
        return
    seen.add(id(command))
    yield command
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            yield from _commands(sub, seen)


def refuse_secret_options(root: click.Command) -> None:
    """Give every command under `root` (itself included) the hidden refusing options.

    Raises:
        TypeError: a command declares one of `REFUSED` itself (a bug in yurt).
    """
    for command in _commands(root, set()):
        declared = {name for p in command.params for name in (*p.opts, *p.secondary_opts)}
        for option in REFUSED:
            if option in declared:
                raise TypeError(f"{command.name}: {option} carries a secret on the command "
                                "line; read it from a file or the environment")
            # Its own parameter name: click keys parsed values by name, and a command's
            # `token` (`job dispatch -idempotency-token`) must not be taken for this one.
            name = "refused_" + option.lstrip("-").replace("-", "_")
            command.params.append(click.Option(
                [option, name], metavar="SECRET", hidden=True, is_eager=True,
                expose_value=False, callback=_refuse))
