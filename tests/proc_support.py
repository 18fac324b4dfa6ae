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

from tests.token_support import bootstrap_token
from yurt.runtime.lib.procfs import stat_fields

PF_KTHREAD = 0x00200000  # /proc/PID/stat field 9 (flags): a kernel thread


def _environ(pid: str) -> bytes:
    """/proc/PID/environ, read again while it is empty: during an execve (a task's start execs
    twice) there is a moment when the new image's environment is not mapped yet and the file
    reads empty, and a process caught then would be missed. A process with an environment
    that stays empty reads as empty after a few milliseconds."""
    for _ in range(20):
        raw = Path(f"/proc/{pid}/environ").read_bytes()
        if raw:
            return raw
        time.sleep(0.0005)
    return raw


def processes_with_env(**env: str) -> list[int]:
    """Live processes, shims left out, whose environment has every `NAME=value` given."""
    want = {f"{name}={value}".encode() for name, value in env.items()}
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = stat_fields(int(entry))
        # Zombies are gone in all but name; kernel threads have no environment to wait for.
        if fields is None or fields[0] == b"Z" or int(fields[6]) & PF_KTHREAD:
            continue
        try:
            environ = set(_environ(entry).split(b"\0"))
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if want <= environ and b"shim.sh" not in cmdline:
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
        auth = {"X-Nomad-Token": bootstrap_token(data)}
        with httpx2.Client(base_url=f"http://127.0.0.1:{port}", headers=auth,
                           timeout=10) as client:
            yield process, client
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:  # pragma: no cover - never leave it behind
            process.kill()
            process.wait(timeout=10)
