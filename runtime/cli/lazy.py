"""Command groups whose subcommands are imported only when used.

Start-up is most of what a `yurt` command costs (scripts/bench_cli), and most of start-up is
importing the command tree. A `LazyGroup` knows each lazy subcommand by name, by the function
that registers it ("package.module:function", called with the group) and by its one-line
help, so `yurt --help` lists every command without importing any of them, and `yurt job
status` imports the job verbs alone.

Invariants:
- A registering function runs at most once per process, however many names it registers
  (`node.register` adds `node`, `system` and `tasks`); afterwards its commands are ordinary
  entries of `commands`, and their lazy entries are gone.
- The short help shown before loading is the loaded command's own (`short_help_of` reads it;
  tests/test_cli_lazy.py checks the table against the commands, so it cannot drift).
- Every command a registering function adds passes through the group's `on_load` callbacks
  (the root's general options and its refusal of secret options), so a lazy command is
  dressed exactly as an eager one is.
- A registering function that does not register the name it is listed under, or a module
  that fails to import, is a bug in yurt, not a usage error: it raises.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import import_module
from typing import Any

import click

#: What a lazy entry's target is: a function that adds commands to the group it is given.
Registrar = Callable[[click.Group], None]
#: An `on_load` callback: the command, and the name it was registered under.
Dresser = Callable[[click.Command, str], None]


@dataclass(frozen=True)
class LazyCommand:
    """Which function registers a subcommand, and what `--help` says of it before."""

    target: str  # "yurt.runtime.cli.module:function"
    short_help: str


def load_registrar(target: str) -> Registrar:
    """The function named by "module:function"."""
    module_name, _, attribute = target.partition(":")
    registrar = getattr(import_module(module_name), attribute)
    if not callable(registrar):
        raise TypeError(f"{target} is not a function")
    return registrar  # type: ignore[no-any-return]


def short_help_of(command: click.Command) -> str:
    """The one line `--help` shows for a command, as click words it in a group's listing."""
    return command.get_short_help_str(limit=45)


class LazyGroup(click.Group):
    """A click group with lazy subcommands (see the module header)."""

    def __init__(self, *args: Any, lazy: Mapping[str, LazyCommand] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy: dict[str, LazyCommand] = dict(lazy or {})
        self.on_load: list[Dresser] = []

    def add_lazy(self, names: str | tuple[str, ...], target: str,
                 short_helps: str | tuple[str, ...]) -> None:
        """List `names` (registered by `target`), with their help lines, in that order."""
        if isinstance(names, str):
            names = (names,)
        if isinstance(short_helps, str):
            short_helps = (short_helps,)
        for name, short_help in zip(names, short_helps, strict=True):
            self.lazy[name] = LazyCommand(target, short_help)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | set(self.lazy))

    def get_command(self, ctx: click.Context | None, cmd_name: str) -> click.Command | None:
        command = self.commands.get(cmd_name)
        if command is not None:
            return command
        entry = self.lazy.get(cmd_name)
        if entry is None:
            return None
        before = set(self.commands)
        load_registrar(entry.target)(self)
        for name in sorted(set(self.commands) - before):
            self.lazy.pop(name, None)
            for dress in self.on_load:
                dress(self.commands[name], name)
        command = self.commands.get(cmd_name)
        if command is None:
            raise RuntimeError(f"{entry.target} did not register {cmd_name!r}")
        return command

    def load_all(self) -> dict[str, click.Command]:
        """Every subcommand, loaded (for tests and tools that walk the whole tree)."""
        for name in list(self.lazy):
            if name in self.lazy:  # an earlier registrar may have added it
                self.get_command(None, name)
        return dict(self.commands)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows: list[tuple[str, str]] = []
        for name in self.list_commands(ctx):
            loaded = self.commands.get(name)
            if loaded is None:
                rows.append((name, self.lazy[name].short_help))
            elif not loaded.hidden:
                rows.append((name, short_help_of(loaded)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def subcommands(command: click.Command) -> dict[str, click.Command]:
    """A group's subcommands, lazy ones loaded; {} for a plain command."""
    if isinstance(command, LazyGroup):
        return command.load_all()
    if isinstance(command, click.Group):
        return dict(command.commands)
    return {}


def subcommand(command: click.Command, name: str) -> click.Command | None:
    """One subcommand of a group (loaded if lazy), or None."""
    if isinstance(command, LazyGroup):
        return command.get_command(None, name)
    if isinstance(command, click.Group):
        return command.commands.get(name)
    return None
