"""`disconnect { stop_on_client_after }`: a client that has lost its servers stops the
allocations that ask for it once that long has passed since the last answered heartbeat
(Nomad's client/heartbeatstop.go `heartbeatStop`).

`stop_timeout` is Nomad's `getDisconnectStopTimeout`; `due` is its `shouldStopAfter`: with no
heartbeat answered yet, the clock runs from the watch's start (Nomad's startup grace).
`watch_heartbeat_stop` runs beside a cluster client (`yurt agent` with servers): it sleeps until
the earliest deadline of the allocations it runs (at most `RECHECK` seconds, as new
allocations arrive unannounced), then destroys each one due, as Nomad's `stopAlloc` destroys
its runner. An embedded server never goes away, so the agent with one does not run the watch.

Invariants: times are the trio clock's seconds; an allocation is destroyed at most once (the
client forgets a destroyed runner); a heartbeat answered before a deadline moves it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Final, Protocol

import trio

from yurt.runtime.structs import Allocation

log = logging.getLogger("yurt.client")

#: The longest the watch sleeps before looking at the allocations again.
RECHECK: Final = 1.0


def stop_timeout(alloc: Allocation) -> float | None:
    """Seconds without a heartbeat after which `alloc` stops, or None."""
    group = alloc.job.lookup_group(alloc.task_group) if alloc.job is not None else None
    if group is None or group.disconnect is None:
        return None
    after = group.disconnect.stop_on_client_after
    return None if after is None else after / 1e9


def due(now: float, last_ok: float | None, started: float, timeout: float) -> bool:
    """Nomad's `shouldStopAfter`."""
    return now > (started if last_ok is None else last_ok) + timeout


class _Runner(Protocol):
    @property
    def alloc(self) -> Allocation: ...


class StoppingClient(Protocol):
    """The client as the watch sees it: its runners, and the way to destroy one."""

    @property
    def runners(self) -> Mapping[str, _Runner]: ...

    def destroy_alloc(self, alloc_id: str) -> Awaitable[None]: ...


async def watch_heartbeat_stop(client: StoppingClient, last_ok: Callable[[], float | None]
                               ) -> None:
    """Until cancelled: destroy the allocations whose stop_on_client_after has passed."""
    started = trio.current_time()
    while True:
        now = trio.current_time()
        wake = now + RECHECK
        for alloc_id, runner in list(client.runners.items()):
            timeout = stop_timeout(runner.alloc)
            if timeout is None or runner.alloc.is_terminal():
                continue
            contact = last_ok()
            if due(now, contact, started, timeout):
                log.warning("alloc %s: no server answered for %.0f s, stopping it "
                            "(stop_on_client_after)", alloc_id, timeout)
                await client.destroy_alloc(alloc_id)
            else:
                wake = min(wake, (started if contact is None else contact) + timeout)
        await trio.sleep_until(max(wake, now) + 0.001)
