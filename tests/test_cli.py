"""The `yurt` command as a user runs it: a real process, real files, exit codes and output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from yurt.runtime import __version__

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


GOOD_TASK = '    task "t" {\n      driver = "mock_driver"\n    }\n'

BAD_FILES = {
    # name: (file text, line, column, field)
    "unknown field": (
        'job "j" {\n  group "g" {\n    task "t" {\n      driver = "mock_driver"\n'
        '      colour = "red"\n    }\n  }\n}\n', 5, 7, "job.j.group.g.task.t.colour"),
    "bad duration": (
        'job "j" {\n  group "g" {\n    task "t" {\n      driver = "mock_driver"\n'
        '      kill_timeout = "1 minute"\n    }\n  }\n}\n', 5, 7,
        "job.j.group.g.task.t.kill_timeout"),
    "two leaders": (
        'job "j" {\n  group "g" {\n    task "a" {\n      driver = "mock_driver"\n'
        '      leader = true\n    }\n    task "b" {\n      driver = "mock_driver"\n'
        '      leader = true\n    }\n  }\n}\n', 9, 7, "job.j.group.g.task.b.leader"),
    "bad restart mode": (
        'job "j" {\n  group "g" {\n    restart {\n      mode = "sometimes"\n    }\n'
        + GOOD_TASK + "  }\n}\n", 4, 7, "job.j.group.g.restart.mode"),
    "attempts x delay > interval": (
        'job "j" {\n  group "g" {\n    restart {\n      attempts = 10\n      delay = "1m"\n'
        '      interval = "5m"\n    }\n' + GOOD_TASK + "  }\n}\n", 3, 5,
        "job.j.group.g.restart"),
    "duplicate task names": (
        'job "j" {\n  group "g" {\n' + GOOD_TASK + GOOD_TASK + "  }\n}\n", 6, 5,
        "job.j.group.g.task.t"),
    "syntax error": ('job "j" {\n  group "g" {\n    count = = 2\n  }\n}\n', 3, 13, "syntax"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_job_file_exits_2_naming_file_line_and_field(case: str, tmp_path: Path) -> None:
    text, line, column, field = BAD_FILES[case]
    path = tmp_path / "job.nomad.hcl"
    path.write_text(text)
    out = yurt("job", "validate", str(path))
    assert out.returncode == 2
    assert out.stdout == ""
    first = out.stderr.splitlines()[0]
    assert first.startswith(f"{path}:{line}:{column}: {field}: "), first


def _task_job(config_value: str) -> str:
    return ('job "j" {\n  group "g" {\n    task "t" {\n      driver = "mock_driver"\n'
            f"      meta = {{ x = {config_value} }}\n    }}\n  }}\n}}\n")


#: Inputs that once ended `yurt job validate` with a traceback: (file name, text, line).
HOSTILE_FILES = {
    "template.nomad.hcl": (_task_job('"%{ for x in y }"'), 5),
    "deep-list.nomad.hcl": (_task_job("[" * 1000 + "]" * 1000), 5),
    "deep-expr.nomad.hcl": (_task_job("(" * 1000 + "1" + ")" * 1000), 5),
    "deep-blocks.nomad.hcl": ('job "j" {\n' + 'group "g" {\n' * 2000 + "}\n" * 2001, 0),
    "deep.json": ('{"Job": ' + "[" * 1000 + "]" * 1000 + "}", 1),
    "surrogate.json": ('{"Job": {"ID": "\\ud800", "TaskGroups": [{"Name": "g", "Tasks": '
                       '[{"Name": "t", "Driver": "mock_driver"}]}]}}', 1),
    "nan.json": ('{"Job": {"ID": "j", "Priority": NaN, "TaskGroups": []}}', 1),
    "huge-int.json": ('{"Job": {"ID": "j", "Priority": 1' + "0" * 5000 + "}}", 0),
}


def test_hostile_job_files_are_file_line_errors_not_tracebacks(tmp_path: Path) -> None:
    paths = []
    for name, (text, _) in HOSTILE_FILES.items():
        (tmp_path / name).write_text(text)
        paths.append(str(tmp_path / name))
    out = yurt("job", "validate", *paths)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    assert out.stdout == ""
    for name, (_, line) in HOSTILE_FILES.items():
        prefix = f"{tmp_path / name}:{line}:" if line else f"{tmp_path / name}:"
        assert any(e.startswith(prefix) for e in out.stderr.splitlines()), (name, out.stderr)


def test_no_command_hides_the_module_that_runs_it() -> None:
    # A command's function named like a module of runtime/cli/ (`def run` beside cli/run.py)
    # is what `from yurt.runtime.cli import run` finds in a fresh `yurt` process, not the
    # module: the command then fails on its first line. In-process tests miss it once the
    # module was imported by anything else, so this looks from a new interpreter.
    probe = ("import json, pkgutil, types\n"
             "import yurt.runtime.cli as cli\n"
             "names = [m.name for m in pkgutil.iter_modules(cli.__path__)]\n"
             "print(json.dumps(sorted(name for name in names if not isinstance(\n"
             "    getattr(cli, name, None), types.ModuleType | None))))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True)
    assert json.loads(done.stdout) == []
