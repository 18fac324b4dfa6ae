"""The disk side of a raw_exec start and of its end, each in ONE worker-thread hop.

Why a module of its own: these are the blocking parts of `rawexec.py` (a passwd
lookup that may go to NSS, paths on a disk that may be slow, a cgroup that takes up to a
second to empty), each called through `trio.to_thread.run_sync` exactly once per start or per
end, so that the event loop never waits on them and a start never pays a hop per step. The
rest of a start (the spawn, the report, the wait) runs on the event loop.

One exception: a restart. Once a task has started in its task dir (its `.shim` state root
exists and is the agent's), a start of the same task without a `user` only stats the command,
lists that root and makes two directories (its state dir, and a cgroup in kernel memory), all
in directories used moments ago: `prepare_restart` does that on the event loop, as a fraction
of the hop's own cost (a hop is two thread wake-ups and a GIL hand-off, 0.15-0.6 ms), so that
a zero-delay restart goes from the exit to the new spawn without leaving the event loop. What
could block for long stays in the hop: the passwd lookup, the first start in a task dir, and
the reaping of an orphan start found there (`prepare_restart` returns None for those).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
from collections.abc import Container
from pathlib import Path

from yurt.runtime.client.drivers import cgroups, orphans
from yurt.runtime.client.drivers.orphans import StartKey
from yurt.runtime.client.drivers.users import switch_prefix, user_env
from yurt.runtime.errors import DriverError


def resolve_command(command: str, task_dir: Path, path: str) -> str | None:
    """The executable file `command` names, looked up as Nomad's drivers/shared/executor/
    executor.go `lookupBin` does: `<task dir>/local/<command>`, then `<task dir>/<command>`
    (so an absolute `/local/run.sh` is the task's own `local/run.sh`), then an absolute path on
    the host, then `$PATH` for a bare name. A file found in the task dir that is not executable
    is made so (Nomad's `makeExecutable`: a script a template or artifact wrote with mode
    0644 runs); one on the host is not touched. None when nothing executable is found."""
    if not command:
        return None
    inside = command.lstrip("/")
    root = task_dir.resolve()
    for candidate in (task_dir / "local" / inside, task_dir / inside):
        if candidate.is_file():
            with contextlib.suppress(ValueError):
                candidate.resolve().relative_to(root)  # not a link out of the task dir
                if not os.access(candidate, os.X_OK):
                    with contextlib.suppress(OSError):
                        candidate.chmod(candidate.stat().st_mode | 0o555)
            if os.access(candidate, os.X_OK):
                return str(candidate)
            return None
    if command.startswith("/"):
        host = Path(command)
        return command if host.is_file() and os.access(host, os.X_OK) else None
    if "/" in command:
        return None
    return shutil.which(command, path=path)


def prepare_start(user: str, command: str, task_dir: Path, path: str, state_dir: Path,
                  known: Container[StartKey], cgroup_root: cgroups.CgroupRoot | None,
                  cgroup: Path | None) -> tuple[list[str], dict[str, str], str]:
    """Everything a start does on disk before its spawn, in ONE worker-thread hop (the
    passwd lookup may go to NSS, the paths to a slow disk): the words that switch to the
    task's `user` and its HOME/USER/LOGNAME, the command's path, then this start's state dir
    (the record of its intent, made before there is any process, after stopping what earlier
    starts of this task left without a handle) and its cgroup.

    Returns (user switch prefix, user env, command path). Raises DriverError."""
    prefix, home = (switch_prefix(user), user_env(user)) if user else ([], {})
    resolved = resolve_command(command, task_dir, path)
    if resolved is None:
        raise DriverError(f'failed to start task: command "{command}" not found or '
                          "not an executable file")
    orphans.reap_task_dir(task_dir, known, cgroup_root)
    orphans.secure_state_root(task_dir)
    _make_start(state_dir, cgroup)
    return prefix, home, resolved


def prepare_restart(command: str, task_dir: Path, path: str, state_dir: Path,
                    known: Container[StartKey], cgroup: Path | None) -> str | None:
    """`prepare_start` for a task without a `user` that has started in `task_dir` before,
    cheap enough for the event loop (see the module's docstring): the command's path, after
    making this start's state dir and cgroup. None, having done nothing, where the task dir
    needs `prepare_start`: no trusted state root yet, or a start in it that is not in `known`
    (an orphan to reap first). Raises DriverError."""
    root = task_dir / orphans.STATE_DIRS
    if not (orphans.trusted_dir(task_dir) and orphans.trusted_dir(root)):
        return None
    if any(orphans.start_key(d) not in known for d in orphans.state_dirs(task_dir)):
        return None
    resolved = resolve_command(command, task_dir, path)
    if resolved is None:
        raise DriverError(f'failed to start task: command "{command}" not found or '
                          "not an executable file")
    _make_start(state_dir, cgroup)
    return resolved


def _make_start(state_dir: Path, cgroup: Path | None) -> None:
    """This start's state dir (the record of its intent) and its cgroup."""
    try:
        state_dir.mkdir(mode=0o700)
    except FileExistsError:  # a start id used before: nothing of that start may be misread
        for name in ("shim", "pid", "exit", "exit.tmp"):
            (state_dir / name).unlink(missing_ok=True)
    if cgroup is not None:
        cgroups.create(cgroup)


def stop_start(shim_pid: int, state_dir: Path, cgroup_root: cgroups.CgroupRoot | None) -> None:
    """Stop a start that will not be handed to a task runner: freeze its shim (this agent's
    unreaped child, so the pid is surely it, even before it has execed `sh`), stop what it
    started as an orphan start is stopped, then kill it. Blocking: for a worker thread."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(shim_pid, signal.SIGSTOP)
    orphans.until_stopped(shim_pid)
    orphans.reap(state_dir, cgroup_root)
    with contextlib.suppress(ProcessLookupError):
        os.kill(shim_pid, signal.SIGKILL)


def remove_start(cgroup: Path | None, state_dir: Path) -> None:
    """Kill what is left in the start's cgroup and remove it (bounded by itself to ≈1 s while
    killed processes leave it), then its state dir: one worker-thread hop for both."""
    if cgroup is not None:
        cgroups.destroy_blocking(cgroup)
    shutil.rmtree(state_dir, ignore_errors=True)
