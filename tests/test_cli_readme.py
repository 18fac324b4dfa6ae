"""README.md's command table and exit-status table against the code they describe.

The command table's first column names verbs as users type them: each code span is a path
from `yurt` (`yurt job status [-json] JOB`), where one word may list alternatives
(`status\\|restart\\|stop`), followed by flags and arguments. Every path must be a command of
the click tree, every flag one of that command's options, and every visible leaf command of
the tree must appear in the table. The exit-status column may only use codes of the exit
table, and the exit-status table must say exactly what `EXIT_CODES` says. Either side
changing alone fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from yurt.runtime.cli import cli
from yurt.runtime.cli.jobs import EXIT_PLAN_ERROR
from yurt.runtime.cli.lazy import subcommands
from yurt.runtime.errors import EXIT_CODES

README = Path(__file__).parent.parent / "README.md"


def _section_table(title: str) -> list[list[str]]:
    """The rows (cells, unescaped `\\|` kept inside cells) of the first table after the
    heading `title`."""
    lines = README.read_text(encoding="utf-8").splitlines()
    start = lines.index(title)
    rows: list[list[str]] = []
    for line in lines[start + 1:]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip().replace("\\|", "|")
                 for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if set("".join(cells)) <= set("-: "):
            continue  # the separator row
        rows.append(cells)
    return rows[1:]  # without the header


def _leaves(group: click.Group, path: tuple[str, ...] = ()) -> dict[tuple[str, ...],
                                                                        click.Command]:
    found: dict[tuple[str, ...], click.Command] = {}
    for name, command in subcommands(group).items():
        if command.hidden:
            continue
        if isinstance(command, click.Group):
            found.update(_leaves(command, (*path, name)))
        else:
            found[(*path, name)] = command
    return found


def _options(command: click.Command) -> set[str]:
    """The command's flags; a command that parses its own (`alloc exec`, Go-style) shows
    them in its arguments' metavar, and those count."""
    found = {o for p in command.params if isinstance(p, click.Option) for o in p.opts}
    for param in command.params:
        if isinstance(param, click.Argument) and param.metavar:
            found |= set(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", param.metavar))
    return found


def documented(span: str) -> tuple[list[tuple[str, ...]], list[str]]:
    """The command paths a code span names, and the flags it shows.

    Raises:
        AssertionError: a word that should be a command is not one.
    """
    words = span.split()
    assert words[:1] == ["yurt"], f"a command span starts with `yurt`: {span!r}"
    paths: list[tuple[str, ...]] = [()]
    node: click.Command = cli
    flags: list[str] = []
    runs_itself = False  # a group run with its own options (`yurt server --etcd URL`)
    for word in words[1:]:
        if (isinstance(node, click.Group) and node.invoke_without_command
                and word.startswith("-")):
            runs_itself = True
        if isinstance(node, click.Group) and not runs_itself:
            names = word.split("|")
            if names[0].startswith("-") and len(paths) == 1 and paths == [()]:
                flags.append(word)  # `yurt --version`: an option of the root group
                continue
            missing = [n for n in names if n not in subcommands(node)]
            assert not missing, f"{span!r}: no command {missing} under {paths[0] or 'yurt'}"
            paths = [(*p, n) for p in paths for n in names]
            # Alternatives are leaves, or groups whose next word applies to the last one.
            node = subcommands(node)[names[-1]]
            continue
        flags += [f for f in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", word)]
    return paths, flags


def table_commands() -> list[tuple[str, list[tuple[str, ...]], list[str], str]]:
    rows = []
    for cells in _section_table("## Commands"):
        for span in re.findall(r"`(yurt[^`]*)`", cells[0]):
            paths, flags = documented(span)
            rows.append((span, paths, flags, cells[2]))
    return rows


def _command_at(path: tuple[str, ...]) -> click.Command:
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group)
        command = subcommands(command)[name]
    return command


def test_every_documented_command_and_flag_exists() -> None:
    leaves = _leaves(cli)
    for span, paths, flags, _ in table_commands():
        for path in paths:
            if path == ():
                assert set(flags) <= {"--version", "--help"}, span
                continue
            command = cli
            for name in path:
                assert isinstance(command, click.Group)
                command = subcommands(command)[name]
            if isinstance(command, click.Group):
                continue  # `yurt job plan|…|dispatch …`: its leaves are listed below it
            assert path in leaves
        commands = [leaves[p] for p in paths if p in leaves] + [
            g for g in (_command_at(p) for p in paths)
            if isinstance(g, click.Group) and g.invoke_without_command]
        for flag in flags:
            if flag in ("--help", "--version"):
                continue
            assert any(flag in _options(c) for c in commands), (
                f"README shows {flag} for {span!r}, which has no such option")


def test_every_command_of_the_tree_is_documented() -> None:
    covered = {p for _, paths, _, _ in table_commands() for p in paths}
    missing = sorted(" ".join(p) for p in _leaves(cli) if p not in covered)
    assert missing == [], f"commands missing from README's command table: {missing}"


def test_the_exit_status_column_uses_the_exit_table() -> None:
    allowed = set(EXIT_CODES) | {EXIT_PLAN_ERROR}
    for span, _, _, status in table_commands():
        if status == "the command's":
            continue
        codes = {int(n) for n in re.findall(r"\b\d+\b", status)}
        assert codes, f"no exit status for {span!r}"
        assert codes <= allowed, f"{span!r}: {codes - allowed} is not in the exit table"


def test_the_exit_status_table_is_the_codes() -> None:
    rows = _section_table("### Exit status")
    assert {int(code): meaning for code, meaning in rows} == EXIT_CODES


@pytest.mark.parametrize("span", ["yurt job nosuch FILE", "yurt alloc status|nosuch ALLOC"])
def test_a_command_the_code_lacks_is_caught(span: str) -> None:
    with pytest.raises(AssertionError, match="no command"):
        documented(span)


def test_a_flag_the_code_lacks_is_caught() -> None:
    paths, flags = documented("yurt job status [--no-such-flag] JOB")
    (command,) = (_leaves(cli)[p] for p in paths)
    assert "--no-such-flag" in flags
    assert "--no-such-flag" not in _options(command)
