"""The HCL parser's tables, cached per user (runtime/jobspec/grammar.py), in fresh processes:
built once into `$XDG_CACHE_HOME/yurt`, loaded from there by the next process; a directory
others may write to is never read (the cache is a pickle) and the parse still works; a
damaged file is rebuilt, not trusted.

Whether lark loaded or built the tables is read from lark's own debug log, not from timing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

HCL_JOB = 'job "web" {\n  group "g" {\n    task "t" {\n      driver = "mock_driver"\n' \
          '    }\n  }\n}\n'
PROBE = f"""
import logging
from lark import logger
logger.setLevel(logging.DEBUG)
from yurt.runtime.jobspec import parse_job
job = parse_job({HCL_JOB!r}, filename="web.nomad.hcl")
print(job.id)
"""


def parse_in_new_process(cache_home: Path) -> str:
    """Parse an HCL job in a new interpreter; lark's log (stderr)."""
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          timeout=120, check=True,
                          env={**os.environ, "XDG_CACHE_HOME": str(cache_home)})
    assert done.stdout == "web\n"
    return done.stderr


def test_built_once_then_loaded(tmp_path: Path) -> None:
    log = parse_in_new_process(tmp_path)
    (cached,) = (tmp_path / "yurt").glob("hcl2-*.lark")
    assert f"Saving grammar to cache: {cached}" in log
    assert (tmp_path / "yurt").stat().st_mode & 0o777 == 0o700
    again = parse_in_new_process(tmp_path)
    assert f"Loading grammar from cache: {cached}" in again
    assert "Saving grammar" not in again


def test_a_directory_others_may_write_is_not_used(tmp_path: Path) -> None:
    shared = tmp_path / "yurt"
    shared.mkdir()
    shared.chmod(0o777)
    planted = shared / "hcl2-planted.lark"
    planted.write_bytes(b"not a pickle anyone should load")
    log = parse_in_new_process(tmp_path)
    assert str(shared) not in log
    assert sorted(p.name for p in shared.iterdir()) == ["hcl2-planted.lark"]


def test_an_unusable_cache_home_falls_back_silently(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    parse_in_new_process(blocker)  # check=True: it parsed, exit 0


def test_a_damaged_cache_file_is_rebuilt(tmp_path: Path) -> None:
    parse_in_new_process(tmp_path)
    (cached,) = (tmp_path / "yurt").glob("hcl2-*.lark")
    cached.write_bytes(cached.read_bytes()[:1000])  # cut short, as by a full disk
    log = parse_in_new_process(tmp_path)
    assert f"Saving grammar to cache: {cached}" in log
    assert f"Loading grammar from cache: {cached}" in parse_in_new_process(tmp_path)
