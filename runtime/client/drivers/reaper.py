"""The fallback for tracking a task's whole process tree where no cgroup can be made.

Why this exists: a task that forks a daemon with `setsid` moves it out of its process group,
so `killpg` no longer reaches it, and when its parent exits the daemon is re-parented to init
and lost. A cgroup per task (`cgroups.py`) is the real answer; where the agent may
not create one, Linux offers `PR_SET_CHILD_SUBREAPER`: orphaned descendants of a subreaper are
re-parented to it instead of init, so the whole tree stays below one known process.

The subreaper must be the shim: it lives as long as the task and survives the agent. The shim
is a POSIX `sh` (small RSS) and `sh` cannot call prctl, but the attribute survives execve(2).
So, only in fallback mode, the agent starts the shim through this module
(`python -I -S reaper.py exec sh shim.sh …`): one prctl, then exec into `sh`, and the Python
interpreter is gone again before the task starts. When the task ends, the shim runs
`reaper.py kill SHIM_PID` to SIGKILL every live descendant left behind before it records the
exit and exits itself (after which its orphans would go to init). The agent calls
`kill_descendants` for the same purpose when it stops a task while the shim lives.

Only the standard library: it runs as a script, outside the agent's environment.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
#: A tree forking as fast as it is killed would keep a kill loop going: bound the rounds.
MAX_ROUNDS = 100
ROUND_PAUSE = 0.005


def _parents() -> dict[int, int]:
    """pid → ppid for every live (non-zombie) process."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2:].split()
        if fields[0] not in (b"Z", b"X"):
            parents[int(entry)] = int(fields[1])
    return parents


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (children, their children, …), `pid` excluded."""
    children: dict[int, list[int]] = {}
    for child, parent in _parents().items():
        children.setdefault(parent, []).append(child)
    found: list[int] = []
    todo = list(children.get(pid, ()))
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, ()))
    return found


def kill_descendants(pid: int, rounds: int = MAX_ROUNDS) -> int:
    """SIGKILL every live descendant of `pid` until none is left (or `rounds` passed).

    Returns how many signals were sent. Killed processes stay zombies until their parent
    reaps them; zombies are dead and not counted as left.
    """
    me = os.getpid()
    sent = 0
    for round_ in range(rounds):
        targets = [p for p in descendants(pid) if p != me]
        if not targets:
            break
        for target in targets:
            try:
                os.kill(target, signal.SIGKILL)
                sent += 1
            except ProcessLookupError:
                pass
        if round_ + 1 < rounds:
            time.sleep(ROUND_PAUSE)  # SIGKILL takes effect asynchronously
    return sent


def become_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "exec":
        become_subreaper()
        # Python set these to SIG_IGN at start-up, and an exec keeps ignored signals: the
        # shim and its task must start with the defaults the agent gave this process.
        for signum in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(signum, signal.SIG_DFL)
        os.execvp(argv[1], argv[1:])
    if len(argv) == 2 and argv[0] == "kill" and argv[1].isdigit():
        kill_descendants(int(argv[1]))
        return 0
    print("usage: reaper.py exec COMMAND [ARG...] | kill PID", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
