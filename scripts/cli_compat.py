"""Nomad's CLI against yurt's: one row per command and per (command, flag), so a gap is seen.

Nomad's side is data committed beside this script, `cli_compat_nomad.json`: every command of
Nomad's command table (command/commands.go `Commands`) and the flags each command's Help()
lists (Nomad's CLI docs are generated from those texts), with the Nomad version and commit it
was taken from. The General Options (command/meta.go `generalOptionsUsage`) are listed once
and checked on one representative remote verb (`REPRESENTATIVE`), on it or on a group above
it. yurt's side is read from the click tree itself (`yurt.runtime.cli.cli`): a flag is there
when some spelling of an option names it (`--detach`, `-json`, `-t`); Nomad's single-dash
spelling of a long option reaches it through runtime/cli/flags.py `nomad_spelling`. A command
that parses its own Go-style flags (`alloc exec`) shows them in its argument's metavar.

Statuses: `ok` (yurt has it), `missing` (in scope, yurt lacks it), `differs` (yurt has it, or
something in its place, that behaves otherwise), `not applicable` (no such thing on yurt:
Enterprise, Consul, Vault, Raft's files...), `out of scope` (not among issue 30's commands).
The reasons of the last three are the annotations of `cli_compat_notes.json`: a key is a
command (`"license"`, which also covers its subcommands), a command and a flag
(`"job run -vault-namespace"`), or a general option (`"-token"`); the value is
`[status, why]`. A command's annotation covers its own rows that are not `ok` and have none
of their own. In scope are `ISSUE_30`'s commands and everything yurt already has; the rest is
`out of scope` with a default reason unless annotated.

Output: the table (`--hide-ok` leaves out the `ok` rows), a summary line, then one JSON line.
Exit status: 1 when a row is `missing`, else 0. Re-run after a merge: nothing here names
yurt's commands except `ISSUE_30` and the annotations, which tests/test_cli_compat.py keeps
honest (an annotation must name a Nomad command or flag, and may not call something yurt has
`not applicable` or `out of scope`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import click

from yurt.runtime.cli.lazy import subcommands

HERE = Path(__file__).resolve().parent
NOMAD_FILE: Final = HERE / "cli_compat_nomad.json"
NOTES_FILE: Final = HERE / "cli_compat_notes.json"

#: Issue 30 point 6: the commands a daily single-node user reaches for (a group names its
#: subcommands too), beside the ones whose output the issue asks to be Nomad's.
ISSUE_30: Final = (
    "job init", "job restart", "job allocs", "job deployments", "job promote", "job run",
    "job plan", "job status", "job validate", "status", "alloc status", "alloc logs",
    "node status", "alloc checks", "service", "operator scheduler", "operator raft",
    "operator snapshot", "operator api", "monitor", "ui", "version", "server members",
    "agent-info", "var lock", "var init", "deployment pause", "deployment resume",
    "deployment unblock", "eval delete", "fmt",
)
#: The remote verb the General Options are checked on.
REPRESENTATIVE: Final = "job status"
GENERAL: Final = "(general options)"
STATUSES: Final = ("ok", "missing", "differs", "not applicable", "out of scope")


@dataclass(frozen=True)
class Row:
    command: str
    flag: str | None  # None: the command's own row
    status: str
    why: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"command": self.command, "flag": self.flag, "status": self.status,
                "why": self.why}


def load_nomad(path: Path = NOMAD_FILE) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def load_notes(path: Path = NOTES_FILE) -> dict[str, tuple[str, str]]:
    raw = json.loads(path.read_text(encoding="utf-8"))
    return {key: (value[0], value[1]) for key, value in raw["notes"].items()}


def _flags_of(command: click.Command) -> set[str]:
    """Every flag name the command accepts, without dashes. An option that only refuses (its
    help starts "Refused:", the message says why) is not counted: yurt does not do what it
    asks, so the row needs an annotation that says why, like an absent flag."""
    found: set[str] = set()
    for param in command.params:
        if isinstance(param, click.Option) and (param.help or "").startswith("Refused:"):
            continue
        if isinstance(param, click.Option):
            found |= {o.lstrip("-") for o in (*param.opts, *param.secondary_opts)}
        elif isinstance(param, click.Argument) and param.metavar:
            found |= {m.lstrip("-") for m in
                      re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", param.metavar)}
    return found


def yurt_commands(root: click.Group) -> dict[str, set[str]]:
    """Every command path of the click tree (groups included) and its flags; a command's
    entry also holds the flags of the groups above it (where general options may live)."""
    found: dict[str, set[str]] = {}

    def walk(group: click.Group, path: tuple[str, ...], inherited: set[str]) -> None:
        for name, command in subcommands(group).items():
            here = (*path, name)
            flags = _flags_of(command) | inherited
            found[" ".join(here)] = flags
            if isinstance(command, click.Group):
                walk(command, here, flags)

    walk(root, (), _flags_of(root))
    return found


def in_scope(command: str, yurt: dict[str, set[str]]) -> bool:
    if command in yurt:
        return True
    return any(command == s or command.startswith(s + " ") or s.startswith(command + " ")
               for s in ISSUE_30)


def _command_note(command: str, notes: dict[str, tuple[str, str]]) -> tuple[str, str] | None:
    """The annotation of the command or of the nearest group above it."""
    words = command.split()
    for n in range(len(words), 0, -1):
        note = notes.get(" ".join(words[:n]))
        if note is not None:
            return note
    return None


def _judge(command: str, flag: str | None, present: bool, note: tuple[str, str] | None,
           deprecated: str | None, scoped: bool) -> Row:
    """One row: ok when yurt has it; else the annotation (the row's own, or its command's);
    else out of scope for a deprecated alias or a command issue 30 does not ask for; else
    missing."""
    if present:
        return Row(command, flag, "ok")
    if note is not None:
        return Row(command, flag, *note)
    if deprecated:
        return Row(command, flag, "out of scope", f"deprecated alias of `{deprecated}`")
    if scoped:
        return Row(command, flag, "missing")
    return Row(command, flag, "out of scope", "not among issue 30's commands")


def compare(nomad: dict[str, Any], yurt: dict[str, set[str]],
            notes: dict[str, tuple[str, str]]) -> list[Row]:
    """The rows of the table: Nomad's commands in order, each command's row then its flags'
    rows, then the General Options checked on `REPRESENTATIVE`."""
    rows: list[Row] = []
    for command, facts in nomad["commands"].items():
        cnote = _command_note(command, notes)
        deprecated = facts.get("deprecated_for")
        scoped = in_scope(command, yurt)
        rows.append(_judge(command, None, command in yurt, notes.get(command) or cnote,
                           deprecated, scoped))
        flags = yurt.get(command, set())
        for flag in facts["flags"]:
            note = notes.get(f"{command} -{flag}") or cnote
            rows.append(_judge(command, flag, flag in flags, note, deprecated, scoped))
    flags = yurt.get(REPRESENTATIVE, set())
    for flag in nomad["general_options"]:
        note = notes.get(f"-{flag}")
        if flag in flags and note is not None and note[0] == "differs":
            rows.append(Row(GENERAL, flag, *note))  # there, but not as Nomad's
        else:
            rows.append(_judge(GENERAL, flag, flag in flags, note, None, True))
    return rows


def stale_notes(nomad: dict[str, Any], yurt: dict[str, set[str]],
                notes: dict[str, tuple[str, str]]) -> list[str]:
    """Annotations that name nothing of Nomad's, carry an unknown status or no reason, or
    call something yurt has `not applicable` / `out of scope`."""
    problems: list[str] = []
    commands = nomad["commands"]
    for key, (status, why) in notes.items():
        if status not in STATUSES[2:]:
            problems.append(f"{key}: status {status!r} is none of {STATUSES[2:]}")
        if not why.strip():
            problems.append(f"{key}: no reason given")
        absent_only = status in ("not applicable", "out of scope")
        if key.startswith("-"):
            if key[1:] not in nomad["general_options"]:
                problems.append(f"{key}: not one of Nomad's General Options")
            elif absent_only and key[1:] in yurt.get(REPRESENTATIVE, set()):
                problems.append(f"{key}: yurt has it, yet it is marked {status!r}")
            continue
        command, _, flag = key.partition(" -")
        if command not in commands:
            problems.append(f"{key}: {command!r} is not a Nomad command")
        elif flag and flag not in commands[command]["flags"]:
            problems.append(f"{key}: -{flag} is not a documented flag of `{command}`")
        elif absent_only and flag and flag in yurt.get(command, set()):
            problems.append(f"{key}: yurt has it, yet it is marked {status!r}")
        elif absent_only and not flag and command in yurt:
            problems.append(f"{key}: yurt has `{command}`, yet it is marked {status!r}")
    return problems


def render(rows: list[Row], hide_ok: bool) -> str:
    shown = [r for r in rows if not (hide_ok and r.status == "ok")]
    width = max([len(r.command) for r in shown] + [7])
    fwidth = max([len(r.flag or "") + 1 for r in shown] + [4])
    lines = [f"{'COMMAND':<{width}}  {'FLAG':<{fwidth}}  {'STATUS':<14}  WHY"]
    for r in shown:
        flag = f"-{r.flag}" if r.flag else ""
        lines.append(f"{r.command:<{width}}  {flag:<{fwidth}}  {r.status:<14}  {r.why}".rstrip())
    return "\n".join(lines)


def summary(rows: list[Row], nomad: dict[str, Any]) -> dict[str, Any]:
    counts = Counter(r.status for r in rows)
    missing = sorted({r.command for r in rows if r.status == "missing"})
    return {"nomad_version": nomad["nomad_version"], "rows": len(rows),
            **{status.replace(" ", "_"): counts.get(status, 0) for status in STATUSES},
            "commands_with_missing": missing}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hide-ok", action="store_true", help="Leave out the ok rows.")
    args = parser.parse_args(argv)
    from yurt.runtime.cli import cli

    nomad, notes = load_nomad(), load_notes()
    yurt = yurt_commands(cli)
    rows = compare(nomad, yurt, notes)
    print(render(rows, args.hide_ok))
    result = summary(rows, nomad)
    print()
    print(f"Nomad {nomad['nomad_version']} ({nomad['nomad_commit'][:12]}): {len(rows)} rows, "
          + ", ".join(f"{result[s.replace(' ', '_')]} {s}" for s in STATUSES))
    for problem in stale_notes(nomad, yurt, notes):
        print(f"stale annotation: {problem}", file=sys.stderr)
    print(json.dumps(result))
    return 1 if result["missing"] else 0


if __name__ == "__main__":
    sys.exit(main())
