"""`CheckRunner`: the one loop that runs every service check of the agent.

`run` (a service: `await nursery.start(runner.run)`) owns a nursery for the probes in flight
and sleeps until the earliest due time of its `CheckSchedule`, or until a check is added;
then it starts a probe for each check due. A probe runs under the check's `timeout` (a cancel
scope; a probe that runs out is a failure with Nomad's "context deadline exceeded" text),
waits for one of `concurrency` slots first (so a burst of 1,000 due checks opens at most that
many connections at a time), reports a `CheckQueryResult` through the check's `on_result`,
and puts the check back in the schedule an interval after it ended.

Invariants: at most one probe of a check is in flight (the schedule hands a check out once
until it is finished); a removed check reports nothing after `remove` returns (its in-flight
probe is cancelled, and a result of an older generation is dropped); no task exists for an
idle check.
"""

from __future__ import annotations

import collections
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, final

import msgspec
import trio

from yurt.runtime.client.checks.probes import (
    HttpProber,
    HttpTarget,
    Outcome,
    ScriptRunner,
    probe_script,
    probe_tcp,
)
from yurt.runtime.client.checks.schedule import CheckSchedule
from yurt.runtime.structs.checks import CHECK_FAILURE, CheckQueryResult

#: Probes in flight at once in the whole agent.
DEFAULT_CONCURRENCY: Final = 32
#: Checks due within this many seconds of each other start together (see `run`).
BATCH: Final = 0.25
#: Checks added together start spread over this much of their interval (at most), so a
#: restart of an agent with many checks does not probe them all in the same instant.
SPREAD: Final = 0.1


@dataclass(frozen=True)
class CheckJob:
    """One check as the runner runs it. `template` carries the result's identity (ID, mode,
    group, task, service, check name); `on_result` is called with every result."""

    template: CheckQueryResult
    kind: str
    interval: float
    timeout: float
    on_result: Callable[[CheckQueryResult], None]
    http: HttpTarget | None = None
    tcp: tuple[str, int] | None = None
    script: ScriptRunner | None = None


@final
class CheckRunner:
    def __init__(self, *, concurrency: int = DEFAULT_CONCURRENCY,
                 unix_clock: Callable[[], float] = time.time,
                 spread: float = SPREAD,
                 probe: Callable[[CheckJob], Awaitable[Outcome]] | None = None) -> None:
        """`probe` replaces the real probes (tests under the mock clock, which must do no
        real I/O)."""
        self._schedule: CheckSchedule[str] = CheckSchedule()
        self._jobs: dict[str, CheckJob] = {}
        #: Checks per http (host, port): a target no check uses loses its idle connections.
        self._targets: collections.Counter[tuple[str, int]] = collections.Counter()
        self._scopes: dict[str, trio.CancelScope] = {}
        self._limiter = trio.CapacityLimiter(concurrency)
        self._unix_clock = unix_clock
        self._spread = spread
        self._probe_fn = probe or self._outcome
        self._wake = trio.Event()
        self._sleep_until = -math.inf  # when the loop wakes by itself; -inf: it is awake
        self._added = 0
        self.http = HttpProber()
        #: Probes started (benchmarks and tests read it).
        self.probes = 0

    def __len__(self) -> int:
        return len(self._jobs)

    def add(self, job: CheckJob) -> None:
        """Run `job` from now on (at once, then every interval); replaces a check with the
        same ID."""
        key = job.template.id
        self.remove(key)
        self._jobs[key] = job
        if job.http is not None:
            self._targets[(job.http.host, job.http.port)] += 1
        # Successive adds are offset a little (up to SPREAD of the interval, cycling), so a
        # thousand checks registered at once are not all probed in one instant.
        offset = (self._added % 100) / 100 * job.interval * self._spread
        self._added += 1
        self._schedule.add(key, job.interval, trio.current_time(), offset)
        self._wake.set()

    def remove(self, check_id: str) -> None:
        job = self._jobs.pop(check_id, None)
        if job is not None and job.http is not None:
            target = (job.http.host, job.http.port)
            self._targets[target] -= 1
            if self._targets[target] <= 0:  # its idle connections would linger forever
                del self._targets[target]
                self.http.forget(job.http)
        self._schedule.remove(check_id)
        scope = self._scopes.pop(check_id, None)
        if scope is not None:
            scope.cancel()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        try:
            async with trio.open_nursery() as probes:
                task_status.started()
                while True:
                    # What falls due a little later starts now too (schedule.py): one
                    # wake-up for a handful of probes instead of one each (checks drift
                    # apart by their probes' durations, so without it every probe is one).
                    now = trio.current_time()
                    for key, generation in self._schedule.pop_due(now, BATCH):
                        job = self._jobs[key]
                        scope = trio.CancelScope()
                        self._scopes[key] = scope
                        probes.start_soon(self._probe, key, generation, job, scope)
                    due = self._schedule.next_due()
                    self._sleep_until = math.inf if due is None else due
                    with trio.move_on_at(self._sleep_until):
                        await self._wake.wait()
                    self._wake = trio.Event()
                    self._sleep_until = -math.inf
        finally:
            await self.http.aclose()

    async def _probe(self, key: str, generation: int, job: CheckJob,
                     scope: trio.CancelScope) -> None:
        outcome = Outcome(CHECK_FAILURE, "nomad: context deadline exceeded")
        with scope:
            async with self._limiter:
                self.probes += 1
                # One scope for both ends of a probe (fewer scopes per probe: this is the
                # hot path): `remove` cancels it, and its deadline is the check's timeout,
                # counted from when the probe got its slot.
                scope.deadline = trio.current_time() + job.timeout
                outcome = await self._probe_fn(job)
        if self._jobs.get(key) is not job:
            return  # removed meanwhile: nothing to report
        self._scopes.pop(key, None)
        job.on_result(msgspec.structs.replace(
            job.template, status=outcome.status, output=outcome.output,
            status_code=outcome.status_code, timestamp=int(self._unix_clock())))
        now = trio.current_time()
        # The loop sleeps until the earliest due time: wake it only when this check is now
        # due before that (rarely: a shorter interval than every other check's).
        if self._schedule.finished(key, generation, now) and \
                now + job.interval < self._sleep_until:
            self._wake.set()

    async def _outcome(self, job: CheckJob) -> Outcome:
        if job.http is not None:
            return await self.http.probe(job.http)
        if job.tcp is not None:
            return await probe_tcp(*job.tcp)
        if job.script is not None:
            return await probe_script(job.script)
        return Outcome(CHECK_FAILURE, f'check type "{job.kind}" has nothing to probe')
