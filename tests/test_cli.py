"""The `yurt` command as a user runs it: a real process, real files, exit codes and output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from runtime import __version__

ROOT = Path(__file__).parent.parent
YURT = str(Path(sys.executable).parent / "yurt")


def yurt(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([YURT, *args], capture_output=True, text=True, timeout=60, cwd=ROOT,
                          check=False)


def test_version_and_help() -> None:
    out = yurt("--version")
    assert out.returncode == 0
    assert __version__ in out.stdout
    help_out = yurt("--help")
    assert help_out.returncode == 0
    assert "job" in help_out.stdout


def test_validate_examples() -> None:
    examples = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "examples").glob("*.nomad.*"))
    out = yurt("job", "validate", *examples)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == len(examples)
    assert lines[0].startswith(f"{examples[0]}: job ")
    assert all(line.endswith("— valid") for line in lines)


def test_validate_reports_every_bad_file_and_exits_2(tmp_path: Path) -> None:
    good = tmp_path / "good.nomad.hcl"
    good.write_text('job "g" {\n  group "x" {\n    task "t" {\n      driver = "mock_driver"\n'
                    "    }\n  }\n}\n")
    bad = tmp_path / "bad.nomad.hcl"
    bad.write_text('job "b" {\n  group "x" {\n    task "t" {\n      driver = "mock_driver"\n'
                   '      kill_timeout = "soon"\n    }\n  }\n}\n')
    syntax = tmp_path / "syntax.nomad.hcl"
    syntax.write_text('job "s" {\n')
    out = yurt("job", "validate", str(good), str(bad), str(syntax))
    assert out.returncode == 2
    assert out.stdout.startswith(f'{good}: job "g"')
    errors = out.stderr.splitlines()
    assert errors[0].startswith(f"{bad}:5:7: job.b.group.x.task.t.kill_timeout: expected a "
                                "duration")
    assert errors[1].startswith(f"{syntax}:2:1: syntax: unexpected end of file")


def test_validate_missing_file() -> None:
    out = yurt("job", "validate", "no/such/file.hcl")
    assert out.returncode == 2
    assert "no/such/file.hcl: file: cannot read" in out.stderr


@pytest.mark.parametrize("flag", ["--verbose"])
def test_validate_verbose_shows_tasks(flag: str) -> None:
    out = yurt("job", "validate", flag, "examples/service-leader-sidecar.nomad.hcl")
    assert out.returncode == 0
    assert "log-shipper" in out.stdout
    assert "prestart sidecar" in out.stdout
    assert "main (leader)" in out.stdout


def test_parse_prints_nomad_json() -> None:
    out = yurt("job", "parse", "examples/mock.nomad.hcl")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    job = doc["Job"]
    assert job["ID"] == "mock-demo"
    assert [t["Name"] for t in job["TaskGroups"][0]["Tasks"]] == ["init", "main", "sidecar"]
    assert job["TaskGroups"][0]["Tasks"][1]["RestartPolicy"]["Delay"] == 100_000_000


def test_parse_bad_file_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    out = yurt("job", "parse", str(bad))
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.startswith(f"{bad}:1:2: syntax:")


def test_unknown_command_is_usage_error() -> None:
    assert yurt("frobnicate").returncode == 2
