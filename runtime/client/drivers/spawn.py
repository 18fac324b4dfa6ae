"""Starting a raw_exec shim: `os.posix_spawn` on the event loop, as a session leader.

Why posix_spawn: it is vfork + exec, a fraction of a millisecond of the agent's CPU whatever
the agent's size, and it takes everything a shim needs (a new session, signal dispositions,
stdio) as arguments, so it can run on the event loop. `subprocess.Popen` costs about the same
but blocks on its error pipe and can only reset SIGPIPE and SIGXFSZ: SIGINT or SIGQUIT ignored
by the agent (started in the background of a shell) would stay ignored in every task, and
SIGINT is Nomad's default kill signal; trio runs Popen in a worker thread on top.

What posix_spawn does not do is Popen's `close_fds`: a child gets every fd of the agent that
lacks close-on-exec. Python opens its own fds close-on-exec (PEP 446), but not everything in
the agent does: hypercorn marks its listening sockets inheritable (for its worker processes),
and a shim holding the API socket would keep a restarted agent from binding its port.
So before each spawn one `close_range(3, ~0, CLOSE_RANGE_CLOEXEC)` (Linux 5.11+, a bitmap
operation in the kernel, about a microsecond with thousands of fds) marks every fd above
stderr close-on-exec. The agent passes fds to other children only through Popen's
`pass_fds`, which clears the flag in the child, so nothing else depends on inheritable fds.
Where close_range is missing, a walk of /proc/self/fd does the same, in time linear in the
number of fds.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from collections.abc import Callable
from typing import Final

#: Dispositions an exec keeps when they are SIG_IGN, which the agent's may be: Python ignores
#: SIGPIPE and SIGXFSZ, and an agent started in the background of a shell ignores SIGINT and
#: SIGQUIT. The shim, and so the task, starts with them at their defaults (what Popen's
#: restore_signals and, after it, `env --default-signal=INT,QUIT` did before).
DEFAULT_SIGNALS: Final = frozenset({signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT,
                                    signal.SIGQUIT})
CLOSE_RANGE_CLOEXEC: Final = 4
_ALL_FDS: Final = 0xFFFFFFFF


def _close_range() -> Callable[[int, int, int], int] | None:
    with contextlib.suppress(OSError, AttributeError):
        function = ctypes.CDLL(None, use_errno=True).close_range
        function.argtypes = [ctypes.c_uint, ctypes.c_uint, ctypes.c_int]
        function.restype = ctypes.c_int
        return function
    return None


_CLOSE_RANGE: Final = _close_range()


def _walk_cloexec() -> None:
    for entry in os.listdir("/proc/self/fd"):
        fd = int(entry)
        if fd > 2:
            with contextlib.suppress(OSError):  # the listing's own fd, closed by now
                if os.get_inheritable(fd):
                    os.set_inheritable(fd, False)


def cloexec_all_fds() -> None:
    """Mark every fd of this process above stderr close-on-exec."""
    if _CLOSE_RANGE is None or _CLOSE_RANGE(3, _ALL_FDS, CLOSE_RANGE_CLOEXEC) != 0:
        _walk_cloexec()  # no close_range in libc, or a kernel before 5.11


def spawn_shim(argv: list[str], env: dict[str, str]) -> tuple[int, int]:
    """Start `argv` as a session and process-group leader with stdin and stderr on /dev/null
    and stdout on a new pipe, signals in DEFAULT_SIGNALS at their defaults and none blocked;
    return its pid and the pipe's read end (close-on-exec).

    The caller is the child's parent and must reap it. Raises OSError (EMFILE, EAGAIN, …).
    """
    read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
    try:
        cloexec_all_fds()
        # dup2 onto fd 1 clears close-on-exec there only: the shim's stdout is the one
        # write end left once ours is closed, so the reader sees EOF when the shim is gone.
        return os.posix_spawn(argv[0], argv, env, file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, write_fd, 1),
            (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
        ], setsid=True, setsigdef=DEFAULT_SIGNALS, setsigmask=()), read_fd
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
