"""A cgroup per raw_exec task, so that stopping a task stops its whole process tree.

Why: a process group is not a tree. A task that forks a daemon with `setsid` (or any
double-forking service) moves it out of its group, and `killpg` leaves it running after the
job is stopped. A cgroup holds every descendant, whatever sessions and groups it makes, and
nothing in it can leave on its own.

How. Where the agent may create cgroups (root, a writable hierarchy), each start gets
`<hierarchy>/yurt/<alloc id>.<start id>` (the start id is the name of the shim's state dir):
a name derived from what the task handle persists, so a restarted agent finds it again, and
which never collides between starts. The task joins it itself, before it execs the command
(a builtin `echo 0 >cgroup.procs` in `shim.sh`), so no fork of the task can escape between
start and join. The shim stays outside: it must survive the kill to record the exit status.

Kill: cgroup v2 writes `cgroup.kill` (Linux 5.14+; with `cgroup.freeze` as the older way);
cgroup v1 has no kill file, so the freezer hierarchy is used: freeze (nothing can fork while
frozen), SIGKILL every pid in `cgroup.procs`, thaw (the kills take effect). Then the directory
is removed once empty. Both versions are supported because hosts differ: a pure v2 host, a v1
host, or a hybrid one (v1 controllers plus an empty v2 tree at `/sys/fs/cgroup/unified`).

Where no cgroup can be made, `reaper.py` is the fallback (a subreaper shim).
`tree_tracking` in the raw_exec plugin config picks one explicitly (tests force each).

cgroupfs, like /proc, lives in kernel memory: reads and writes never wait on a disk, so the
event loop does them directly (see `lib/procfs.py`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from yurt.runtime.errors import DriverError

Kind = Literal["cgroup2", "cgroup1"]
#: Values of the raw_exec plugin option `tree_tracking`.
TRACKING_MODES: Final = ("auto", "cgroup2", "cgroup1", "subreaper")
PARENT: Final = "yurt"
REMOVE_ATTEMPTS: Final = 200
REMOVE_PAUSE: Final = 0.005

@dataclass(frozen=True)
class CgroupRoot:
    """The directory under which this agent makes its tasks' cgroups."""

    path: Path
    kind: Kind

    def task_cgroup(self, alloc_id: str, start_id: str) -> Path:
        return self.path / f"{alloc_id}.{start_id}"


def mounts(mountinfo: str) -> tuple[list[Path], list[Path]]:
    """The cgroup v2 mounts and the v1 freezer mounts listed in /proc/self/mountinfo text."""
    v2: list[Path] = []
    v1_freezer: list[Path] = []
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        point = Path(fields[4].replace("\\040", " "))
        if tail[0] == "cgroup2":
            v2.append(point)
        elif tail[0] == "cgroup" and "freezer" in tail[2].split(","):
            v1_freezer.append(point)
    return v2, v1_freezer


def _usable(mount: Path, kind: Kind) -> CgroupRoot | None:
    """The agent's parent cgroup under `mount`, created if need be; None if it may not."""
    parent = mount / PARENT
    try:
        parent.mkdir(exist_ok=True)
    except OSError:
        return None
    marker = "cgroup.kill" if kind == "cgroup2" else "freezer.state"
    if not os.access(parent / "cgroup.procs", os.W_OK):
        return None
    if kind == "cgroup2" and not (parent / marker).exists() \
            and not (parent / "cgroup.freeze").exists():
        return None  # a v2 tree too old to kill or freeze a cgroup
    return CgroupRoot(parent, kind)


def select_root(mode: str, mountinfo: str | None = None) -> CgroupRoot | None:
    """Where task cgroups go for `mode` (see TRACKING_MODES); None means the subreaper
    fallback. Raises DriverError when a cgroup version asked for by name is not usable."""
    if mode not in TRACKING_MODES:
        raise DriverError(f"tree_tracking must be one of {', '.join(TRACKING_MODES)}, "
                          f"got {mode!r}")
    if mode == "subreaper":
        return None
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            mountinfo = ""
    v2, v1 = mounts(mountinfo)
    candidates: list[tuple[Path, Kind]] = []
    if mode in ("auto", "cgroup2"):
        candidates += [(m, "cgroup2") for m in v2]
    if mode in ("auto", "cgroup1"):
        candidates += [(m, "cgroup1") for m in v1]
    for mount, kind in candidates:
        root = _usable(mount, kind)
        if root is not None:
            return root
    if mode != "auto":
        raise DriverError(f"tree_tracking = {mode!r}, but the agent cannot create a {mode} "
                          "cgroup here (not mounted, or not root)")
    return None


def create(cgroup: Path) -> None:
    try:
        cgroup.mkdir(exist_ok=True)
    except OSError as e:
        raise DriverError(f"cannot create the task's cgroup {cgroup}: {e.strerror}",
                          recoverable=True) from None


def members(cgroup: Path) -> list[int]:
    """The pids in `cgroup` (none if it is gone)."""
    try:
        text = (cgroup / "cgroup.procs").read_text()
    except (FileNotFoundError, OSError):
        return []
    return [int(word) for word in text.split()]


def _write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
    except OSError:
        return False
    return True


def kill(cgroup: Path) -> None:
    """SIGKILL every process in `cgroup` now, without waiting (a gone cgroup is a no-op)."""
    if not cgroup.is_dir():
        return
    if _write(cgroup / "cgroup.kill", "1"):
        return
    v1 = (cgroup / "freezer.state").exists()
    freeze, state = ((cgroup / "freezer.state", ("FROZEN", "THAWED")) if v1
                     else (cgroup / "cgroup.freeze", ("1", "0")))
    frozen = _write(freeze, state[0])  # nothing forks while we list and kill
    try:
        for pid in members(cgroup):
            with contextlib.suppress(ProcessLookupError):  # exited meanwhile
                os.kill(pid, signal.SIGKILL)
    finally:
        if frozen:
            _write(freeze, state[1])  # the SIGKILLs are delivered on thaw


def remove(cgroup: Path) -> bool:
    """Remove `cgroup` if it is empty; True once it is gone."""
    try:
        cgroup.rmdir()
    except FileNotFoundError:
        return True
    except OSError as e:
        if e.errno in (errno.EBUSY, errno.ENOTEMPTY):
            return False
        raise DriverError(f"cannot remove the task's cgroup {cgroup}: {e.strerror}") from None
    return True


def destroy_blocking(cgroup: Path) -> bool:
    """Kill everything in `cgroup` and remove it; True once it is gone.

    Killed processes leave the cgroup only once they have exited, so this kills and retries
    for a bounded number of short rounds (≈1 s). Blocking: call in a worker thread.
    """
    for _ in range(REMOVE_ATTEMPTS):
        kill(cgroup)
        if remove(cgroup):
            return True
        time.sleep(REMOVE_PAUSE)
    return False
