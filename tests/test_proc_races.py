"""The layer-3 tests' view of processes must not race their exit (sans-io, plain pytest)."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.test_restart_e2e import alive


def test_alive_is_false_for_a_process_reaped_between_two_looks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    proc = subprocess.Popen(["true"])
    proc.wait()  # exited and reaped: /proc/<pid> is gone
    # As if the process had still been there for a signal-0 probe a moment before.
    monkeypatch.setattr(os, "kill", lambda pid, sig: None)
    assert not alive(proc.pid)


def test_alive_is_true_for_a_running_process_and_false_for_a_zombie() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        assert alive(proc.pid)
    finally:
        proc.kill()
    # Killed but not reaped yet: a zombie, once the kernel has ended it.
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    assert not alive(proc.pid)
    proc.wait()
