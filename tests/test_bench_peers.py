"""scripts/bench_peers: how it recognises children (layer 0) and a short real run (layer 3).

The benchmark counts every system's children from /proc by a marker, so a shim whose command
line merely names the marker must not count; the short run drives the two floors end to end
and relies on the script's own final /proc check that nothing it started is left.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
sys.path.insert(0, str(SCRIPTS))

from benchlib import procs  # noqa: E402


def test_only_the_sleep_itself_is_a_child_not_a_shim_naming_it() -> None:
    marker = "36000.123456789"
    assert procs.is_child(["/bin/sleep", marker], marker)
    assert procs.is_child(["sleep", marker], marker)
    assert not procs.is_child(["/bin/sh", "-c", 'exec "$@"', "sh", "/bin/sleep", marker], marker)
    assert not procs.is_child(["/bin/sleep", "36000.1"], marker)
    assert not procs.is_child(["/bin/sleep", marker, "extra"], marker)


@pytest.mark.slow
def test_a_short_run_of_both_floors_measures_every_cell_and_leaves_nothing() -> None:
    argv = [sys.executable, str(SCRIPTS / "bench_peers.py"), "--systems", "posix,trio",
            "--rows", "spawn,memory,restart,stop,crash", "--n", "20", "--runs", "1",
            "--kills", "3", "--crash-seconds", "1"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as run:
        try:
            stdout, stderr = run.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            run.terminate()  # SIGTERM: the script stops what it started before it exits
            stdout, stderr = run.communicate(timeout=60)
            pytest.fail(f"bench_peers did not finish in 120 s:\n{stderr}")
    assert run.returncode == 0, stderr
    report = json.loads(stdout.strip().splitlines()[-1])
    assert report["errors"] == []
    for name in ("posix", "trio"):
        cells = report["results"][name]["20"]
        assert cells["spawn_all_s"]["median"] > 0
        assert cells["uss_mib"]["median"] > 1
        assert cells["restart_kills"]["runs"] == [3]
        assert cells["stop_s"]["median"] > 0
        assert cells["crash_spawns_per_s"]["median"] > 0
    assert "clean: no daemon and no child of 4 workloads left in /proc" in stderr
    assert len(report["markers"]) == 4
    for marker in report["markers"]:  # checked here too, not only by the script itself
        assert procs.carrying(marker) == []
