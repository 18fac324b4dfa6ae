"""Counting a task's processes as an operator would: by the variables in /proc/PID/environ;
this test process's children and zombies; and `wait_for`, the bounded poll for OS state that
offers nothing to block on (sync tests).

Every raw_exec task has NOMAD_ALLOC_ID, NOMAD_JOB_ID and NOMAD_TASK_NAME in its environment, and
so does everything it forks. Shims (their command line names shim.sh) and zombies are left out.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

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
