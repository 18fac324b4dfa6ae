"""scripts/cli_compat: Nomad's CLI table against the real click tree, and its annotations.

What must hold whatever commands are still missing (the script's exit status carries that):
the committed Nomad data names its source; the table has one row per Nomad command and per
documented flag, each with a known status and a reason wherever it is not ok or missing;
every annotation names a Nomad command or flag and none is stale (`not applicable` or
`out of scope` for something yurt has).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from yurt.runtime.cli import cli

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import cli_compat


@pytest.fixture(scope="module")
def nomad() -> dict[str, object]:
    return cli_compat.load_nomad()


def test_nomad_data_names_its_source(nomad: dict[str, object]) -> None:
    version, commit = nomad["nomad_version"], nomad["nomad_commit"]
    assert isinstance(version, str)
    assert version[0].isdigit()
    assert isinstance(commit, str)
    assert len(commit) == 40
    commands = nomad["commands"]
    assert isinstance(commands, dict)
    assert {"job run", "alloc status", "fmt", "operator raft list-peers"} <= set(commands)
    assert "detach" in commands["job run"]["flags"]
    assert {"address", "token", "namespace", "region"} <= set(nomad["general_options"])  # type: ignore[arg-type]


def test_yurt_side_reads_every_spelling() -> None:
    tree = cli_compat.yurt_commands(cli)
    assert {"json", "t"} <= tree["job status"]  # `--json` and the short `-t`
    assert {"check", "list", "write", "recursive"} <= tree["fmt"]  # Go-style, in the metavar
    assert "task" in tree["alloc exec"]


def test_one_row_per_command_and_flag(nomad: dict[str, object]) -> None:
    rows = cli_compat.compare(nomad, cli_compat.yurt_commands(cli), cli_compat.load_notes())
    commands = nomad["commands"]
    assert isinstance(commands, dict)
    expected = sum(1 + len(c["flags"]) for c in commands.values())
    expected += len(nomad["general_options"])  # type: ignore[arg-type]
    assert len(rows) == expected
    for row in rows:
        assert row.status in cli_compat.STATUSES
        assert bool(row.why) == (row.status not in ("ok", "missing")), row
    by_key = {(r.command, r.flag): r for r in rows}
    for flag in ("check", "list", "write", "recursive", None):
        assert by_key[("fmt", flag)].status == "ok"
    assert by_key[("license", None)].status == "not applicable"
    assert by_key[("tls ca create", None)].status == "out of scope"


def test_annotations_are_not_stale(nomad: dict[str, object]) -> None:
    assert cli_compat.stale_notes(nomad, cli_compat.yurt_commands(cli),
                                  cli_compat.load_notes()) == []


def test_stale_annotations_are_found(nomad: dict[str, object]) -> None:
    tree = cli_compat.yurt_commands(cli)
    notes = {"fmt": ("not applicable", "x"), "fmt -check": ("out of scope", "x"),
             "nomad teleport": ("differs", "x"), "job run -no-such-flag": ("differs", "x"),
             "-no-such-option": ("differs", "x"), "job run -detach": ("fine", ""),
             "-token": ("differs", "refused")}
    problems = "\n".join(cli_compat.stale_notes(nomad, tree, notes))
    assert "fmt: yurt has `fmt`" in problems
    assert "fmt -check: yurt has it" in problems
    assert "'nomad teleport' is not a Nomad command" in problems
    assert "-no-such-flag is not a documented flag" in problems
    assert "-no-such-option: not one of Nomad's General Options" in problems
    assert "job run -detach: status 'fine'" in problems
    assert "job run -detach: no reason given" in problems
    assert "-token" not in problems.replace("-no-such", "")


def test_missing_rows_follow_scope(nomad: dict[str, object]) -> None:
    """A command yurt lacks is missing only when issue 30 asks for it; a subcommand of a
    command yurt has counts as in scope through its group."""
    tree: dict[str, set[str]] = {"job": set(), "job status": {"json"}}
    rows = cli_compat.compare(nomad, tree, {})
    by_key = {(r.command, r.flag): r.status for r in rows}
    assert by_key[("job status", None)] == "ok"
    assert by_key[("job status", "short")] == "missing"
    assert by_key[("service list", None)] == "missing"  # issue 30 names `service`
    assert by_key[("volume create", None)] == "out of scope"
    assert by_key[("server-members", None)] == "out of scope"  # a deprecated alias


def test_script_prints_a_table_a_summary_and_json() -> None:
    script = Path(cli_compat.__file__)
    done = subprocess.run([sys.executable, str(script), "--hide-ok"], capture_output=True,
                          text=True, timeout=120, check=False)
    lines = done.stdout.splitlines()
    assert lines[0].split()[:3] == ["COMMAND", "FLAG", "STATUS"]
    result = json.loads(lines[-1])
    assert result["rows"] == sum(result[s.replace(" ", "_")] for s in cli_compat.STATUSES)
    assert done.returncode == (1 if result["missing"] else 0)
    assert not any(" ok " in line for line in lines[1:-3])
