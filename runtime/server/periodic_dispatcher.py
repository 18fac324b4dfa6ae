"""The periodic dispatcher: the service that launches periodic jobs' children on time.

One Trio task (`PeriodicDispatcher.run`, started by the agent with `nursery.start`) looks at
every active periodic job, asks the sans-io planner (`periodic.plan`) what is due, registers
the children through `LocalServer.register_job`, then sleeps until the earliest next launch,
waking early when the server's state changes (a periodic job registered, a child finished).

Invariants: a job's previous launch is read from the server's state, never kept only in
memory: the latest of its registration time and the launch times its children's IDs carry
(`<id>/periodic-<unix>`). So an agent killed at any point neither loses a launch it had
recorded nor duplicates one: a child registered twice has the same ID and the same spec,
which the server treats as unchanged. Wall-clock time is read through `now` (a parameter,
so tests drive it from the mock clock); sleeps are bounded by `max_sleep` so a wall-clock
step (NTP, suspend) is noticed within that time. A parent whose launch fails (a time zone the
host cannot load, a registration that raises) is logged once per distinct error and retried
on the next tick; the other parents keep their schedules and the dispatcher keeps running.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

import trio

from yurt.runtime.server.dispatch import DispatchError, is_periodic_active, periodic_child
from yurt.runtime.server.scheduler.periodic import launch_of_child, plan
from yurt.runtime.structs import Job, PeriodicConfig

if TYPE_CHECKING:
    from yurt.runtime.server.local import LocalServer
    from yurt.runtime.server.records import Registration

log = logging.getLogger("yurt.server.periodic")

#: The longest sleep between two looks at the wall clock.
MAX_SLEEP: Final = 60.0


@dataclass
class _View:
    """One pass over the server's state per tick: children by parent, and which jobs have
    allocations, live ones or any (so a tick is linear in jobs and allocations)."""

    children: dict[str, list[Job]]
    with_allocs: set[str]
    with_live_allocs: set[str]

    @classmethod
    def of(cls, server: LocalServer) -> _View:
        children: dict[str, list[Job]] = {}
        for job in server.jobs.values():
            if job.parent_id:
                children.setdefault(job.parent_id, []).append(job)
        with_allocs: set[str] = set()
        live: set[str] = set()
        for alloc in server.allocs.values():
            with_allocs.add(alloc.job_id)
            if not alloc.is_terminal():
                live.add(alloc.job_id)
        return cls(children, with_allocs, live)

    def child_running(self, child: Job) -> bool:
        """Nomad's "running child" for prohibit_overlap: not stopped, not dead, and either
        not placed yet (pending) or with an allocation that is not terminal."""
        if child.stop or child.status == "dead":
            return False
        return child.id not in self.with_allocs or child.id in self.with_live_allocs

    def last_launch(self, parent: Job) -> datetime:
        """The latest of the parent's registration and its children's launch times."""
        last = datetime.fromtimestamp(parent.submit_time / 1e9, UTC)
        for child in self.children.get(parent.id, []):
            launched = launch_of_child(parent.id, child.id)
            if launched is not None and launched > last:
                last = launched
        return last


async def launch(server: LocalServer, parent: Job, at: datetime) -> Registration:
    """Register the child of `parent` launched at `at` (Nomad's `createEval`)."""
    if not is_periodic_active(parent):
        if parent.periodic is None:
            raise DispatchError("can't force launch non-periodic job")
        raise DispatchError(f'force launch for job "{parent.id}" failed: can\'t force run '
                            "non-tracked job")
    return await server.register_job(periodic_child(parent, at))


class PeriodicDispatcher:
    def __init__(self, server: LocalServer, *, now: Callable[[], float] = time.time,
                 max_sleep: float = MAX_SLEEP) -> None:
        self.server = server
        self.now = now
        self.max_sleep = max_sleep
        #: Launches skipped under prohibit_overlap, so the schedule moves past them. Lost on
        #: a restart, which then makes one catch-up launch as Nomad's leader does.
        self._skipped: dict[str, datetime] = {}
        #: The last error each failing parent raised, so a lasting fault is logged once.
        self._errors: dict[str, str] = {}

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        started = False
        while True:
            changed = self.server.changed  # taken first: a change during tick wakes us
            wake = await self.tick()
            if not started:  # launches due at start-up (missed while down) are made first
                task_status.started()
                started = True
            delay = self.max_sleep if wake is None else wake - self.now()
            with trio.move_on_after(min(max(delay, 0.0), self.max_sleep)):
                await changed.wait()

    async def _tick_one(self, parent: Job, periodic: PeriodicConfig, view: _View,
                        now: datetime) -> datetime | None:
        """Launch `parent`'s child if it is due; when it is next due."""
        last = max(view.last_launch(parent),
                   self._skipped.get(parent.id, datetime.min.replace(tzinfo=UTC)))
        running = any(view.child_running(c) for c in view.children.get(parent.id, []))
        decision = plan(periodic, last, now, running)
        if decision.skipped:
            self._skipped[parent.id] = now
        if decision.launch is not None:
            current = self.server.jobs.get(parent.id)
            if current is not None and is_periodic_active(current):
                await launch(self.server, current, decision.launch)
        return decision.wake

    def _report(self, parent_id: str, error: Exception) -> None:
        """Log a parent's failure once per distinct error (it is retried on every tick)."""
        text = f"{type(error).__name__}: {error}"
        if self._errors.get(parent_id) != text:
            self._errors[parent_id] = text
            log.error("periodic job %r: launch failed, retried on the next tick: %s",
                      parent_id, text, exc_info=error)

    async def tick(self) -> float | None:
        """Launch what is due now; the unix time of the next launch, None if none."""
        now = datetime.fromtimestamp(self.now(), UTC)
        wakes: list[datetime] = []
        parents = [j for j in self.server.jobs.values() if is_periodic_active(j)]
        view = _View.of(self.server) if parents else None
        for parent in parents:
            if view is None or parent.periodic is None:
                continue
            try:
                wake = await self._tick_one(parent, parent.periodic, view, now)
            except Exception as e:  # one parent's fault must not stop the others
                self._report(parent.id, e)
                continue
            self._errors.pop(parent.id, None)
            if wake is not None:
                wakes.append(wake)
        for gone in self._errors.keys() - {p.id for p in parents}:
            del self._errors[gone]
        return min(wakes).timestamp() if wakes else None
