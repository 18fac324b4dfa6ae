"""Counting a task's processes as an operator would: by the variables in /proc/PID/environ;
this test process's children and zombies; `wait_for`, the bounded poll for OS state that
offers nothing to block on (sync tests); and `spawned_agent`, an agent as its own process.

Every raw_exec task has NOMAD_ALLOC_ID, NOMAD_JOB_ID and NOMAD_TASK_NAME in its environment, and
so does everything it forks. Shims (their command line names shim.sh) and zombies are left out.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import httpx2

from yurt.runtime.procfs import stat_fields


def processes_with_env(**env: str) -> list[int]:
    """Live processes, shims left out, whose environment has every `NAME=value` given."""
    want = {f"{name}={value}".encode() for name, value in env.items()}
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = set(Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"))
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        fields = stat_fields(int(entry))
        if (want <= environ and b"shim.sh" not in cmdline and fields is not None
                and fields[0] != b"Z"):
            found.append(int(entry))
    return found


def wait_for(predicate: Callable[[], bool], timeout: float = 20) -> None:
    """Poll OS state that offers nothing to block on (/proc, files), with a deadline."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def our_children() -> set[int]:
    """Live or zombie children of this test process (any of its threads spawned them)."""
    me = os.getpid()
    found: set[int] = set()
    for tid in os.listdir(f"/proc/{me}/task"):
        with suppress(OSError):  # a thread that ended since the listing
            found |= {int(c) for c in Path(f"/proc/{me}/task/{tid}/children").read_text().split()}
    return found


def zombie(pid: int) -> bool:
    """Whether `pid` has exited and waits for its parent to reap it."""
    fields = stat_fields(pid)
    return fields is not None and fields[0] == b"Z"


@contextmanager
def spawned_agent(data: Path) -> Iterator[tuple[subprocess.Popen[str], httpx2.Client]]:
    """`yurt agent` as its own process (no token) on a free loopback port, and a client for
    it; sent SIGTERM when the block ends, killed if it does not stop. Its tasks outlive it,
    as they do any agent: the caller stops what it started."""
    from tests.test_agent_e2e import YURT, free_port

    port = free_port()
    process = subprocess.Popen([YURT, "agent", "--data-dir", str(data), "--port", str(port)],
                               stderr=subprocess.PIPE, text=True,
                               env={k: v for k, v in os.environ.items()
                                    if k != "YURT_AGENT_TOKEN"})
    try:
        assert process.stderr is not None
        assert "listening on" in process.stderr.readline()
        with httpx2.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            yield process, client
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:  # pragma: no cover - never leave it behind
            process.kill()
            process.wait(timeout=10)
