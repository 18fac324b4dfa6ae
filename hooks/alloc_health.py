"""`alloc_health_watcher`: decide once whether a new allocation is healthy, for deployments
and drains (Nomad's `client/allocrunner/health_hook.go`).

Prerun (or the first update, whichever comes first) starts one watcher task when the
allocation's health is tracked at all (`health.health_params`) and not set yet. The watcher
feeds the sans-io `Tracker` with every client view the alloc runner broadcasts and every
change of the service-check results, sleeps until the tracker's next timer or the deadline,
and on a verdict sets the runner's `ClientHealth` and asks the runner to publish: the client
view then carries `DeploymentStatus{Healthy, Timestamp}` and the alloc sync takes it to the
server. An unhealthy deployment allocation first gets Nomad's `Alloc Unhealthy` task events.

The watcher lives in the nursery lent to the alloc runner and is cancelled by postrun,
shutdown and destroy, and by an update, which starts it again (a new `DeploymentID` clears
the health first, as Nomad's hook does). Health is set in the same step that reached the
verdict, so a watcher that was cancelled can never set it; the events that explain an
unhealthy verdict are emitted after it under a bounded shield, since the stop that verdict
often brings (a failed deployment's rollback) cancels the watcher.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Final, Protocol, final

import trio

from yurt.hooks.base import (
    AllocDestroyHook,
    AllocPostrunHook,
    AllocPrerunHook,
    AllocShutdownHook,
    AllocUpdateHook,
)
from yurt.runtime.client.allocrunner.broadcaster import AllocBroadcaster
from yurt.runtime.client.allocrunner.checkresults import CheckResults
from yurt.runtime.client.allocrunner.health import (
    ALLOC_UNHEALTHY,
    ClientHealth,
    Tracker,
    Verdict,
    health_params,
)
from yurt.runtime.client.checks.registration import no_checks
from yurt.runtime.client.taskrunner import events
from yurt.runtime.structs import Allocation, TaskEvent

log = logging.getLogger("yurt.health")

#: How long the `Alloc Unhealthy` events may take to persist once a cancellation came.
EVENTS_TIMEOUT: Final = 10.0


def unhealthy_event(now: int, message: str) -> TaskEvent:
    """Nomad's `NewTaskEvent("Alloc Unhealthy").SetMessage(message)`."""
    event = events.new_event(ALLOC_UNHEALTHY, now, message=message)
    event.details["message"] = message
    return event


class EventSink(Protocol):
    async def emit_event(self, event: TaskEvent) -> None: ...


class HealthHost(Protocol):
    """What the hook needs of its alloc runner."""

    @property
    def alloc(self) -> Allocation: ...  # the server's copy
    @property
    def health(self) -> ClientHealth: ...
    @property
    def check_results(self) -> CheckResults: ...
    @property
    def broadcaster(self) -> AllocBroadcaster[Allocation]: ...
    @property
    def task_runners(self) -> Mapping[str, EventSink]: ...

    def client_alloc(self) -> Allocation: ...


@final
class AllocHealthHook(AllocPrerunHook, AllocUpdateHook, AllocPostrunHook, AllocShutdownHook,
                      AllocDestroyHook):
    name = "alloc_health_watcher"

    def __init__(self, host: HealthHost, *, nursery: trio.Nursery,
                 publish: Callable[[], None], unix_clock: Callable[[], int],
                 expected_checks: Callable[[Allocation], int] = no_checks) -> None:
        self._host = host
        self._nursery = nursery
        self._publish = publish
        self._unix_clock = unix_clock
        self._expected_checks = expected_checks
        self._ran_once = False
        self._deployment_id = host.alloc.deployment_id
        self._scope: trio.CancelScope | None = None

    # ------------------------------------------------------------------ phases

    async def prerun(self) -> None:
        await trio.lowlevel.checkpoint()
        if self._ran_once:  # an update beat prerun to it
            return
        self._ran_once = True
        self._start()

    async def update(self, alloc: Allocation) -> None:
        await trio.lowlevel.checkpoint()
        self._ran_once = True
        self._stop()
        if alloc.deployment_id != self._deployment_id:
            self._host.health.clear()  # a new deployment judges the allocation afresh
            self._publish()  # persisted cleared, so a restart does not bring the old back
        self._deployment_id = alloc.deployment_id
        self._start()

    async def postrun(self) -> None:
        await trio.lowlevel.checkpoint()
        self._stop()

    async def shutdown(self) -> None:
        await trio.lowlevel.checkpoint()
        self._stop()

    async def destroy(self) -> None:
        await trio.lowlevel.checkpoint()
        self._stop()

    # ------------------------------------------------------------------ watcher

    def _start(self) -> None:
        host = self._host
        if host.health.has_health():
            return  # set once; never judged again (a restored allocation keeps it)
        alloc = host.alloc
        params = health_params(alloc)
        group = alloc.job.lookup_group(alloc.task_group) if alloc.job is not None else None
        if params is None or group is None:
            return
        tracker = Tracker(group, params, expected_checks=self._expected_checks(alloc),
                          now=trio.current_time())
        self._scope = scope = trio.CancelScope()
        self._nursery.start_soon(self._watch, tracker, params.deploy, scope)

    def _stop(self) -> None:
        if self._scope is not None:
            self._scope.cancel()
            self._scope = None

    async def _watch(self, tracker: Tracker, deploy: bool, scope: trio.CancelScope) -> None:
        host = self._host
        wake = trio.Event()

        async def feed_allocs() -> None:
            nonlocal wake
            listener = host.broadcaster.listen()
            try:
                async for alloc in listener:
                    tracker.alloc_updated(alloc, trio.current_time())
                    wake.set()
            finally:
                listener.close()

        async def feed_checks() -> None:
            nonlocal wake
            while True:
                changed = host.check_results.changed
                tracker.checks_updated(host.check_results.results(), trio.current_time())
                wake.set()
                await changed.wait()

        with scope:
            async with trio.open_nursery() as feeds:
                tracker.alloc_updated(host.client_alloc(), trio.current_time())
                feeds.start_soon(feed_allocs)
                feeds.start_soon(feed_checks)
                while True:
                    decision = tracker.poll(trio.current_time())
                    if decision.verdict is not None:
                        break
                    with trio.move_on_at(decision.wake_at if decision.wake_at is not None
                                         else float("inf")):
                        await wake.wait()
                    wake = trio.Event()
                feeds.cancel_scope.cancel()
                if decision.verdict is Verdict.STOPPED:
                    return
                # Set in the step that reached the verdict: a watcher cancelled (by an
                # update, postrun or shutdown) never gets here.
                healthy = decision.verdict is Verdict.HEALTHY
                host.health.set(healthy, events.datetime_of(self._unix_clock()))
                self._publish()
                log.debug("alloc %s health set: healthy=%s", host.alloc.id, healthy)
                if not healthy and deploy and not host.alloc.is_desired_stopped():
                    # Shielded: the health just published may fail the deployment, whose
                    # rollback stops this allocation and so cancels the watcher; Nomad sets
                    # the health and appends every task's event in one step, so no stop may
                    # leave some tasks without theirs. Bounded: they are only persisted.
                    with trio.CancelScope(shield=True) as emitting:
                        emitting.deadline = trio.current_time() + EVENTS_TIMEOUT
                        for task, message in decision.task_events.items():
                            runner = host.task_runners.get(task)
                            if runner is not None:
                                await runner.emit_event(
                                    unhealthy_event(self._unix_clock(), message))
