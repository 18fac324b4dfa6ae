"""The agent's log, fanned out to whoever follows it live (`/v1/agent/monitor`, `yurt monitor`).

Nomad's agent hands each `monitor` request a sink on its logger at the level the request asks
(command/agent/monitor: `monitor.New`), which may be below the level the agent itself writes:
`nomad monitor -log-level=debug` shows debug lines of an agent that logs at info. Here the same
is a `logging.Handler` on the `yurt` logger (`LOG_FANOUT`), attached while anyone subscribes;
while a subscriber wants a lower level than the logger passes, the logger's level is lowered
to it and restored when the last such subscriber leaves (the agent's own stdout handler keeps
its level: runtime/agent/log.py `configure` sets it on the handler).

Back-pressure, stated: **a slow subscriber loses lines, it never slows the agent.** Each
subscriber has a bounded buffer (`capacity` lines, formatted when logged); a line that finds
it full pushes out the oldest, and the count of lines lost is handed to the reader with the
next lines it takes, so it can say so (the API writes a `monitor: N log lines dropped` line).
Logging never blocks and never waits for a reader: `emit` appends under a short lock and, when
the buffer was empty, wakes the reader through its Trio token (`run_sync_soon`: safe from any
thread, as records may come from worker threads).

Rejected: a Trio memory channel per subscriber (`send_nowait` is not thread-safe, and records
are logged from worker threads); the event broker (its topics are the state's, not the log).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Final, final

import trio

#: Lines a subscriber's buffer holds before the oldest are dropped.
DEFAULT_CAPACITY: Final = 1024


@final
class LogSubscription:
    """One follower's bounded buffer of formatted lines (see the module header)."""

    def __init__(self, level: int, formatter: logging.Formatter, capacity: int) -> None:
        self.level = level
        self.formatter = formatter
        self._lines: deque[str] = deque(maxlen=capacity)
        self._lost = 0
        self._lock = threading.Lock()
        self._woken = False
        self._ready = trio.Event()
        self._token = trio.lowlevel.current_trio_token()

    def offer(self, record: logging.LogRecord) -> None:
        """Take one record (any thread): formatted now, buffered, the reader woken."""
        line = self.formatter.format(record)
        with self._lock:
            if len(self._lines) == self._lines.maxlen:
                self._lost += 1  # the deque drops the oldest line as this one goes in
            self._lines.append(line)
            if self._woken:
                return
            self._woken = True
        with suppress(trio.RunFinishedError):  # the agent's run is over: nobody reads
            self._token.run_sync_soon(self._wake)

    def _wake(self) -> None:
        self._ready.set()

    async def take(self) -> tuple[list[str], int]:
        """Wait for lines; return those buffered and how many were lost before them."""
        await self._ready.wait()
        self._ready = trio.Event()
        with self._lock:
            lines, lost = list(self._lines), self._lost
            self._lines.clear()
            self._lost = 0
            self._woken = False
        return lines, lost


@final
class LogFanout(logging.Handler):
    """The handler on the `yurt` logger that copies records to the subscriptions."""

    def __init__(self, logger_name: str = "yurt") -> None:
        super().__init__(logging.DEBUG)
        self._logger = logging.getLogger(logger_name)
        self._subscriptions: list[LogSubscription] = []
        self._base_level: int | None = None  # the logger's level before the first subscriber

    @property
    def subscribers(self) -> int:
        """How many follow the log now."""
        return len(self._subscriptions)

    def emit(self, record: logging.LogRecord) -> None:
        for subscription in list(self._subscriptions):
            if record.levelno >= subscription.level:
                try:
                    subscription.offer(record)
                except Exception:  # a formatter's failure must not break the agent's log
                    self.handleError(record)

    @contextmanager
    def subscribe(self, level: int, formatter: logging.Formatter,
                  capacity: int = DEFAULT_CAPACITY) -> Iterator[LogSubscription]:
        """A subscription to records at `level` and above, for the block's duration; call
        from the Trio thread (the subscription wakes its reader through its token)."""
        subscription = LogSubscription(level, formatter, capacity)
        with self.lock or threading.Lock():
            if not self._subscriptions:
                self._base_level = self._logger.level
                self._logger.addHandler(self)
            self._subscriptions.append(subscription)
            self._set_level()
        try:
            yield subscription
        finally:
            with self.lock or threading.Lock():
                self._subscriptions.remove(subscription)
                self._set_level()
                if not self._subscriptions:
                    self._logger.removeHandler(self)
                    self._logger.setLevel(self._base_level or logging.NOTSET)
                    self._base_level = None

    def _set_level(self) -> None:
        wanted = [s.level for s in self._subscriptions]
        base = self._base_level or logging.WARNING  # NOTSET: the stdlib's default, WARNING
        self._logger.setLevel(min([base, *wanted]))


#: The one fan-out of the agent's log (one agent per process).
LOG_FANOUT: Final = LogFanout()
