"""`yurt fmt` as a user runs it: a real process over real files, Nomad's flags and exit codes
(command/fmt.go: 1 for a file that does not parse or, with -check, would change)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent
YURT = str(Path(sys.executable).parent / "yurt")
UGLY = 'job "web" {\ntype="service"\n  group "g" {\n  count=1\n  }\n}\n'
PRETTY = 'job "web" {\n  type = "service"\n  group "g" {\n    count = 1\n  }\n}\n'


def yurt(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([YURT, *args], capture_output=True, text=True, timeout=60, cwd=cwd,
                          input=stdin, check=False)


def test_check_lists_unformatted_files_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "ugly.nomad").write_text(UGLY)
    (tmp_path / "pretty.nomad.hcl").write_text(PRETTY)
    out = yurt("fmt", "-check", cwd=tmp_path)
    assert out.returncode == 1
    assert out.stdout.splitlines() == ["ugly.nomad"]
    assert (tmp_path / "ugly.nomad").read_text() == UGLY
    assert yurt("fmt", "-check", "pretty.nomad.hcl", cwd=tmp_path).returncode == 0


def test_stdin_to_stdout(tmp_path: Path) -> None:
    out = yurt("fmt", "-", cwd=tmp_path, stdin=UGLY)
    assert (out.returncode, out.stdout, out.stderr) == (0, PRETTY, "")
    checked = yurt("fmt", "-check", "-", cwd=tmp_path, stdin=UGLY)
    assert (checked.returncode, checked.stdout) == (1, PRETTY)


def test_writes_and_lists_then_nothing_left(tmp_path: Path) -> None:
    (tmp_path / "a.hcl").write_text(UGLY)
    (tmp_path / "notes.txt").write_text("x=1\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.nomad").write_text(UGLY)
    out = yurt("fmt", cwd=tmp_path)
    assert (out.returncode, out.stdout) == (0, "a.hcl\n")
    assert (tmp_path / "a.hcl").read_text() == PRETTY
    assert (tmp_path / "sub" / "b.nomad").read_text() == UGLY  # not without -recursive
    assert (tmp_path / "notes.txt").read_text() == "x=1\n"
    deep = yurt("fmt", "-recursive", "-list=false", ".", cwd=tmp_path)
    assert (deep.returncode, deep.stdout) == (0, "")
    assert (tmp_path / "sub" / "b.nomad").read_text() == PRETTY
    assert yurt("fmt", "-check", "-recursive", cwd=tmp_path).stdout == ""


def test_no_write_no_list_prints_the_text(tmp_path: Path) -> None:
    (tmp_path / "a.hcl").write_text(UGLY)
    out = yurt("fmt", "-write=false", "-list=false", "a.hcl", cwd=tmp_path)
    assert (out.returncode, out.stdout) == (0, PRETTY)
    assert (tmp_path / "a.hcl").read_text() == UGLY


def test_parse_error_names_the_place_and_leaves_the_file(tmp_path: Path) -> None:
    bad = 'job "x" {\n  a = \n}\n'
    (tmp_path / "bad.nomad").write_text(bad)
    (tmp_path / "open.hcl").write_text('x = "never closed\n')
    out = yurt("fmt", "bad.nomad", "open.hcl", cwd=tmp_path)
    assert out.returncode == 1
    assert "bad.nomad:3:1: syntax: unexpected '}'" in out.stderr
    assert "open.hcl:1:18: syntax: a quoted string cannot span lines" in out.stderr
    assert (tmp_path / "bad.nomad").read_text() == bad


def test_bad_paths_and_flags(tmp_path: Path) -> None:
    (tmp_path / "job.txt").write_text("x = 1\n")
    out = yurt("fmt", "job.txt", "missing.hcl", cwd=tmp_path)
    assert out.returncode == 1
    assert "Only .nomad and .hcl files can be processed" in out.stderr
    assert "No file or directory at missing.hcl" in out.stderr
    usage = yurt("fmt", "-bogus", cwd=tmp_path)
    assert usage.returncode == 2
    assert "flag provided but not defined: -bogus" in usage.stderr
    assert yurt("fmt", "-list=maybe", cwd=tmp_path).returncode == 2
    assert "-check" in yurt("fmt", "-h", cwd=tmp_path).stdout


def test_formatted_example_parses_to_the_same_job(tmp_path: Path) -> None:
    """`yurt job parse` prints the same job before and after `yurt fmt` rewrote the file."""
    original = ROOT / "examples" / "service-template.nomad.hcl"
    copy = tmp_path / original.name
    shutil.copy(original, copy)
    before = yurt("job", "parse", str(copy), cwd=tmp_path)
    assert before.returncode == 0
    assert yurt("fmt", str(copy), cwd=tmp_path).returncode == 0
    assert yurt("fmt", "-check", str(copy), cwd=tmp_path).returncode == 0
    after = yurt("job", "parse", str(copy), cwd=tmp_path)
    assert after.stdout == before.stdout
