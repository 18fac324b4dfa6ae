"""Retrying work that failed because the agent ran out of file descriptors.

EMFILE (this process) and ENFILE (the whole system) say nothing about the task: a moment later,
after other tasks exited or a log pump closed, the same open succeeds. Treating them as a
task's failure failed allocations for good (411 of 500 at `nofile` 1024). So a hook retries
such work with backoff, bounded by an absolute deadline, and only then reports it, marked
recoverable so the restart policy gets its turn as well.
"""

from __future__ import annotations

import errno
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

import trio

from yurt.runtime.errors import HookError

T = TypeVar("T")

#: How long to keep retrying before giving up (a module attribute so tests can shorten it).
FD_RETRY_FOR: Final = 10.0
FD_RETRY_MIN: Final = 0.05
FD_RETRY_MAX: Final = 2.0
FD_EXHAUSTED: Final = frozenset({errno.EMFILE, errno.ENFILE})


async def retry_fd_exhaustion(attempt: Callable[[], Awaitable[T]], what: str,
                              retry_for: float | None = None) -> T:
    """Run `attempt` until it does not fail with EMFILE/ENFILE.

    Args:
        attempt: the work; it must leave nothing open when it raises.
        what: what is being done, for the error message.
        retry_for: seconds before giving up (default `FD_RETRY_FOR`, read at call time).

    Raises:
        HookError: recoverable, when descriptors stay exhausted past the deadline.
        OSError: any other failure of `attempt`, at once.
    """
    deadline = trio.current_time() + (FD_RETRY_FOR if retry_for is None else retry_for)
    delay = FD_RETRY_MIN
    while True:
        try:
            return await attempt()
        except OSError as e:
            if e.errno not in FD_EXHAUSTED:
                raise
            if trio.current_time() + delay > deadline:
                raise HookError(f"{what}: out of file descriptors ({e}); raise the agent's "
                                "nofile limit or run fewer tasks", recoverable=True) from e
        await trio.sleep(delay)
        delay = min(delay * 2, FD_RETRY_MAX)
