"""Command groups whose subcommands are imported only when used.

Start-up is most of what a `yurt` command costs (scripts/bench_cli), and most of start-up is
importing the command tree. A `LazyGroup` knows each lazy subcommand by name, by where it
lives ("package.module:attribute") and by its one-line help, so `yurt --help` lists every
command without importing any of them, and `yurt job status` imports the job verbs alone.

Invariants:
- A lazy entry is imported at most once per process; the loaded command replaces the entry
  in `commands`, so click sees an ordinary group afterwards.
- The short help shown before loading is the loaded command's own (`short_help_of` reads it;
  tests/test_cli_lazy.py checks the table against the commands, so it cannot drift).
- Every loaded command passes through the group's `on_load` callbacks (the root's refusal
  of secret options and its general options), so a lazy command is dressed exactly as an
  eager one would be.
- An entry whose module fails to import is a bug, not a usage error: the ImportError
  propagates.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import import_module
from typing import Any

import click


@dataclass(frozen=True)
class LazyCommand:
    """Where a subcommand lives, and what `--help` says of it before it is loaded."""

    target: str  # "yurt.runtime.cli.module:attribute", the attribute a click.Command
    short_help: str


def load_target(target: str) -> click.Command:
    """The click command named by "module:attribute"."""
    module_name, _, attribute = target.partition(":")
    command = getattr(import_module(module_name), attribute)
    if not isinstance(command, click.Command):
        raise TypeError(f"{target} is a {type(command).__name__}, not a click command")
    return command


def short_help_of(command: click.Command) -> str:
    """The one line `--help` shows for a command, as click words it in a group's listing."""
    return command.get_short_help_str(limit=45)


class LazyGroup(click.Group):
    """A click group with lazy subcommands (see the module header)."""

    def __init__(self, *args: Any, lazy: Mapping[str, LazyCommand] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy: dict[str, LazyCommand] = dict(lazy or {})
        self.on_load: list[Callable[[click.Command], None]] = []

    def add_lazy(self, name: str, target: str, short_help: str) -> None:
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
        command = load_target(entry.target)
        for dress in self.on_load:
            dress(command)
        if isinstance(command, LazyGroup):  # its own lazy children are dressed alike
            command.on_load.extend(self.on_load)
        self.add_command(command, cmd_name)
        del self.lazy[cmd_name]
        return command

    def load_all(self) -> dict[str, click.Command]:
        """Every subcommand, loaded (for tests and tools that walk the whole tree)."""
        for name in list(self.lazy):
            self.get_command(None, name)
        return dict(self.commands)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows: list[tuple[str, str]] = []
        for name in self.list_commands(ctx):
            loaded = self.commands.get(name)
            if loaded is not None:
                if loaded.hidden:
                    continue
                rows.append((name, short_help_of(loaded)))
            else:
                rows.append((name, self.lazy[name].short_help))
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
    if isinstance(command, click.Group):
        return command.get_command(None, name)  # type: ignore[arg-type]
    return None
