"""Finding and stopping raw_exec starts that no task handle accounts for.

Why this exists: the agent persists a task's handle only after `start_task` returns, so an
agent killed in between leaves a shim and a task that the restarted agent does not know. If
nothing stopped them, the task runner would start the task again (two copies), and a stopped
allocation would keep its first copy for good.

The record of intent is the start's state dir, `<task dir>/.shim/<invocation>`: the driver
makes it before the spawn, and the shim writes into it, before the task exists, its own pid
(`shim`), then the task writes its own pid and start time (`pid`) before its command runs.
A state dir that no handle of the driver accounts for is an orphan start, and `reap` stops
it:

- a live shim (found by its recorded pid, or in /proc if it has not recorded one yet) and
  recognised by its command line (its argv names this very state dir, so a reused pid never
  matches) is frozen with SIGSTOP, so it cannot start or record anything more; each of its
  children (the task, before or after its `setsid`) is killed with its process group; then
  the shim is killed;
- the task of the `pid` file is killed with its group if that pid still is the process that
  started then (a shim that died, e.g. of SIGPIPE, leaves a task re-parented to init);
- the start's cgroup, when tasks get one (`cgroups.py`), is killed and removed,
  which takes the daemons the task forked with `setsid` as well;
- the state dir is removed, so the orphan is handled once.

Killing rather than adopting is deliberate: adopting needs the task runner to take a handle it
never persisted, and Nomad itself restarts a task whose handle was lost. Everything here reads
/proc and small files, and is called in a worker thread.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import time
from collections.abc import Collection, Container, Iterator
from pathlib import Path
from typing import Final

from yurt.runtime.client.drivers import cgroups, reaper
from yurt.runtime.errors import DriverError
from yurt.runtime.lib.procfs import start_time, stat_fields

STATE_DIRS: Final = ".shim"
#: A start as (allocation dir, task dir, invocation) names: the same whichever path spelling
#: (relative, through a link) reached it.
StartKey = tuple[str, str, str]
STOP_POLLS: Final = 1000
STOP_POLL_INTERVAL: Final = 0.001


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except (FileNotFoundError, NotADirectoryError):
        return ""


def _is_shim_of(pid: int, state_dir: Path) -> bool:
    """Whether `pid` runs `sh …/shim.sh STATE_DIR …` for this state dir."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (FileNotFoundError, ProcessLookupError):
        return False
    return (len(argv) > 2 and argv[1].endswith(b"shim.sh")
            and argv[2] == os.fsencode(state_dir))


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return []
    return [int(child) for child in text.split()]


def _kill_tree(pid: int) -> None:
    """SIGKILL `pid` and, if it leads one, its process group (a group with that id can only
    be the one it made: the id is its own pid, which it holds)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def until_stopped(pid: int) -> None:
    """SIGSTOP takes effect when the process next runs: wait (a bounded while) until it has,
    so that no child it forks afterwards escapes the list of its children."""
    for _ in range(STOP_POLLS):
        fields = stat_fields(pid)
        if fields is None or fields[0] in (b"T", b"t", b"Z", b"X"):
            return
        time.sleep(STOP_POLL_INTERVAL)


def _shims_of(state_dir: Path) -> list[int]:
    """The shim processes of this start: the pid it recorded, or, if it has not recorded one
    yet (it was starting when its agent died), every process running it for this state dir,
    found in /proc."""
    text = _read(state_dir / "shim").strip()
    if text.isdigit():
        return [int(text)]
    return [int(entry) for entry in os.listdir("/proc")
            if entry.isdigit() and _is_shim_of(int(entry), state_dir)]


def _stop_shims(shims: list[int], state_dir: Path) -> bool:
    """Freeze every shim first, then kill their children, then them: a shim killed while
    another one still ran could leave that one's child unseen."""
    frozen = []
    for shim in shims:
        if _is_shim_of(shim, state_dir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(shim, signal.SIGSTOP)
            frozen.append(shim)
    for shim in frozen:
        until_stopped(shim)
    frozen = [shim for shim in frozen if _is_shim_of(shim, state_dir)]  # not exited meanwhile
    for child in [child for shim in frozen for child in _children(shim)]:
        _kill_tree(child)
    for shim in frozen:
        # A subreaper shim (no cgroup) adopted the task's orphans, whose groups are not the
        # task's: kill the whole subtree while the shim still holds it.
        reaper.kill_descendants(shim)
    for shim in frozen:
        with contextlib.suppress(ProcessLookupError):
            os.kill(shim, signal.SIGKILL)
    return bool(frozen)


def _stop_task(state_dir: Path) -> bool:
    fields = _read(state_dir / "pid").split()
    if len(fields) != 2 or not all(f.isdigit() for f in fields):
        return False
    pid, start = int(fields[0]), int(fields[1])
    current = start_time(pid)
    if pid <= 1 or (current is not None and current != start):
        return False  # the pid now belongs to another process
    try:  # with the leader gone, its group (grandchildren) may still hold the id
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        if current is None:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return True


def _destroy_cgroup(cgroup: Path) -> bool:
    """Kill what is in the start's cgroup and remove it; True if it existed."""
    if not cgroup.is_dir():
        return False
    with contextlib.suppress(DriverError):  # a cgroup that will not go is no reason to stop
        cgroups.destroy_blocking(cgroup)
    return True


def reap(state_dir: Path, cgroup_root: cgroups.CgroupRoot | None = None) -> bool:
    """Stop the shim, task and task cgroup of an orphan start and remove its state dir; True
    if any process was signalled."""
    stopped = _stop_shims(_shims_of(state_dir), state_dir)
    stopped = _stop_task(state_dir) or stopped
    if cgroup_root is not None:
        alloc_id, _, start_id = start_key(state_dir)
        stopped = _destroy_cgroup(cgroup_root.task_cgroup(alloc_id, start_id)) or stopped
    shutil.rmtree(state_dir, ignore_errors=True)
    return stopped


def trusted_dir(path: Path) -> bool:
    """A real directory (not a link) of the agent's user that no one else may write.

    What `reap` reads (pids and start times to SIGKILL) and what the root shim writes must
    come from directories a task's user cannot change: a task dir made world-writable by an
    older yurt would otherwise let any local user plant `.shim/x/pid` naming a process of
    root's, or swap in links for the shim's files.
    """
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def secure_state_root(task_dir: Path) -> Path:
    """`<task dir>/.shim`, made trustworthy before a start writes into it: a task dir that an
    older yurt left writable by others is narrowed to 0755 (it is the agent's), and a `.shim`
    that is not the agent's own private directory is removed (and so never read)."""
    st = os.lstat(task_dir)
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and st.st_mode & 0o022:
        os.chmod(task_dir, 0o755)
    root = task_dir / STATE_DIRS
    if os.path.lexists(root) and not trusted_dir(root):
        if os.path.islink(root) or not os.path.isdir(root):
            os.unlink(root)
        else:
            shutil.rmtree(root)  # fd-based in 3.11: it does not follow links planted inside
    root.mkdir(mode=0o700, exist_ok=True)
    return root


def state_dirs(task_dir: Path) -> Iterator[Path]:
    """The state dirs of the starts of one task, from trusted directories only."""
    root = task_dir / STATE_DIRS
    if not (trusted_dir(task_dir) and trusted_dir(root)):
        return
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        yield from (entry for entry in root.iterdir() if trusted_dir(entry))


def start_key(state_dir: Path) -> StartKey:
    """The key of the start whose state dir is `<alloc>/<task>/.shim/<invocation>`."""
    return state_dir.parent.parent.parent.name, state_dir.parent.parent.name, state_dir.name


def reap_task_dir(task_dir: Path, known: Container[StartKey],
                  cgroup_root: cgroups.CgroupRoot | None = None) -> int:
    """Reap every start of this task that is not in `known`; how many had processes."""
    return sum(reap(d, cgroup_root) for d in list(state_dirs(task_dir))
               if start_key(d) not in known)


def reap_alloc_root(alloc_root: Path, known: Container[StartKey],
                    cgroup_root: cgroups.CgroupRoot | None = None,
                    alloc_ids: Collection[str] | None = None) -> int:
    """Reap every start under `<alloc_root>/<alloc>/<task>/` not in `known` (only in the
    allocations `alloc_ids`, if given)."""
    found = 0
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for alloc_dir in alloc_root.iterdir():
            if alloc_ids is not None and alloc_dir.name not in alloc_ids:
                continue
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                for task_dir in alloc_dir.iterdir():
                    found += reap_task_dir(task_dir, known, cgroup_root)
    return found
