"""Rolling updates as the pure scheduler decides them (layer 0), in the manner of Nomad's
reconcile_cluster_test.go: a plan applied to a small in-memory state, health set by hand as
the client would report it, the deployment's counts kept as the server keeps them
(deploymentbook.settle). No I/O, no clock: time is a number. And one layer-2 test: deployments
persisted in the server's SQLite come back after a restart."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest
import trio

from yurt.runtime.eventstream import EventBroker
from yurt.runtime.jobspec import parse_job
from yurt.runtime.server import deploymentbook
from yurt.runtime.server.deploymentwatcher import PromotionError, promote
from yurt.runtime.server.local import LocalServer
from yurt.runtime.server.scheduler import deployments, schedule
from yurt.runtime.server.scheduler.plan import Plan
from yurt.runtime.server.scheduler.reschedule import unix_ns
from yurt.runtime.server.state.sqlite import ServerStore
from yurt.runtime.structs import (
    EVAL_STATUS_PENDING,
    Allocation,
    AllocDeploymentStatus,
    DesiredTransition,
    Evaluation,
    Job,
    Node,
)
from yurt.runtime.structs.update import Deployment, DeploymentState

NOW = 1_700_000_000 * 10**9


def job_text(count: int = 3, update: str = "update { max_parallel = 1 }",
             command: str = "sleep") -> str:
    return f'''job "web" {{
  group "g" {{
    count = {count}
    {update}
    task "t" {{
      driver = "raw_exec"
      config {{ command = "{command}" }}
    }}
  }}
}}'''


@dataclass
class World:
    """The server's state as far as the scheduler reads it, and a plan applier."""

    node: Node = field(default_factory=lambda: Node(id="n1", name="n1"))
    allocs: dict[str, Allocation] = field(default_factory=dict)
    deployments: dict[str, Deployment] = field(default_factory=dict)
    job: Job | None = None
    index: int = 10
    ids: itertools.count[int] = field(default_factory=itertools.count)

    def job_allocs(self, job_id: str) -> list[Allocation]:
        return sorted((a for a in self.allocs.values() if a.job_id == job_id),
                      key=lambda a: (a.create_index, a.name))

    def live_allocs(self) -> list[Allocation]:
        return [a for a in self.allocs.values() if not a.is_terminal()]

    def blocked_evals(self, job_id: str) -> list[Evaluation]:
        return []

    def host_volume(self, vol_id: str) -> None:
        return None

    def nodes(self) -> list[Node]:
        return [self.node]

    def new_id(self) -> str:
        return f"id-{next(self.ids)}"

    def register(self, text: str) -> Plan:
        new = parse_job(text)
        version = self.job.version + 1 if self.job is not None else 0
        self.index += 1
        self.job = msgspec.structs.replace(new, version=version, create_index=1,
                                           job_modify_index=self.index)
        return self.evaluate()

    def stop(self) -> Plan:
        assert self.job is not None
        self.job = msgspec.structs.replace(self.job, stop=True, version=self.job.version + 1)
        return self.evaluate()

    def latest(self) -> Deployment | None:
        return deploymentbook.latest_deployment(self.deployments.values(), "web")

    def evaluate(self, triggered_by: str = "job-register", now: int = NOW,
                 start: bool = True) -> Plan:
        """An evaluation of the job, its plan applied; with `start`, the client starts what
        it places at once."""
        self.index += 1
        ev = Evaluation(id=self.new_id(), job_id="web", priority=50, type="service",
                        status=EVAL_STATUS_PENDING, triggered_by=triggered_by)
        plan = schedule(self, ev, self.job, index=self.index, now=now, new_id=self.new_id,
                        deployment=self.latest())
        written = plan.place + plan.stop + plan.update
        for d in deploymentbook.settle(self.deployments, plan.deployments, self.allocs, written,
                                    self.index, now):
            self.deployments[d.id] = d
        for alloc in written:
            self.allocs[alloc.id] = alloc
        if start:
            for alloc in plan.place:
                self.allocs[alloc.id] = msgspec.structs.replace(alloc, client_status="running")
        return plan

    def set_health(self, alloc: Allocation, healthy: bool) -> None:
        """What the client reports (through `update_allocs`)."""
        self.index += 1
        status = AllocDeploymentStatus(
            healthy=healthy, timestamp=datetime.fromtimestamp(NOW / 1e9, tz=UTC),
            canary=deployments.is_canary(alloc))
        after = msgspec.structs.replace(alloc, deployment_status=status)
        for d in deploymentbook.settle(self.deployments, [], self.allocs, [after], self.index,
                                    NOW):
            self.deployments[d.id] = d
        self.allocs[alloc.id] = after

    def running(self, version: int | None = None) -> list[Allocation]:
        return [a for a in self.live_allocs() if version is None
                or (a.job is not None and a.job.version == version)]

    def make_healthy(self, version: int) -> None:
        for alloc in self.running(version):
            if not deployments.is_healthy(alloc):
                self.set_health(alloc, True)


def rolled_out(text: str) -> World:
    """A world running version 0 of the job `text`, its deployment completed."""
    w = World()
    w.register(text)
    w.make_healthy(0)
    w.evaluate()
    return w


def test_a_new_job_with_update_gets_a_deployment_that_completes() -> None:
    w = World()
    plan = w.register(job_text())
    assert len(plan.place) == 3  # nothing to replace: the whole count at once
    (d,) = plan.deployments
    assert (d.status, d.status_description, d.job_version) == (
        "running", "Deployment is running", 0)
    assert {a.deployment_id for a in plan.place} == {d.id}
    state = w.deployments[d.id].task_groups["g"]
    assert (state.desired_total, state.placed_allocs, state.healthy_allocs) == (3, 3, 0)
    assert state.require_progress_by == datetime.fromtimestamp(NOW / 1e9 + 600, tz=UTC)
    w.make_healthy(0)
    assert w.deployments[d.id].task_groups["g"].healthy_allocs == 3
    plan = w.evaluate()
    assert [(x.id, x.status, x.status_description) for x in plan.deployments] == [
        (d.id, "successful", "Deployment completed successfully")]


def test_no_update_block_means_no_deployment_and_every_update_at_once() -> None:
    w = World()
    w.register(job_text(update=""))
    assert w.deployments == {}
    plan = w.register(job_text(update="", command="true"))
    assert (len(plan.place), len(plan.stop), plan.deployments) == (3, 3, [])


def test_reevaluating_an_unchanged_running_job_creates_no_deployment() -> None:
    w = rolled_out(job_text())
    before = dict(w.deployments)
    plan = w.evaluate()
    assert (plan.place, plan.deployments, w.deployments) == ([], [], before)


def test_max_parallel_paces_destructive_updates_by_health() -> None:
    w = rolled_out(job_text())
    plan = w.register(job_text(command="true"))
    (d,) = [x for x in plan.deployments if x.job_version == 1]
    assert (len(plan.place), len(plan.stop)) == (1, 1)
    assert plan.desired["g"].destructive_update == 1
    assert plan.desired["g"].ignore == 2
    assert w.deployments[d.id].task_groups["g"].desired_total == 3
    # Nothing more while the replacement is not healthy.
    plan = w.evaluate()
    assert (plan.place, plan.stop) == ([], [])
    healthy_counts = []
    for _ in range(3):
        w.make_healthy(1)
        healthy_counts.append(len([a for a in w.running() if deployments.is_healthy(a)]))
        plan = w.evaluate()
    assert healthy_counts == [3, 3, 3]  # one old stopped for each new one healthy
    assert w.deployments[d.id].status == "successful"
    assert {a.job.version for a in w.running() if a.job} == {1}


def test_an_unhealthy_allocation_holds_the_rollout() -> None:
    w = rolled_out(job_text(update="update { max_parallel = 2 }"))
    plan = w.register(job_text(update="update { max_parallel = 2 }", command="true"))
    assert len(plan.place) == 2
    first, second = plan.place
    w.set_health(w.allocs[first.id], False)
    w.set_health(w.allocs[second.id], True)
    plan = w.evaluate()
    assert (plan.place, plan.stop) == ([], [])


@pytest.mark.parametrize("status", ["paused", "failed"])
def test_a_paused_or_failed_deployment_makes_no_destructive_update(status: str) -> None:
    w = rolled_out(job_text())
    w.register(job_text(command="true"))
    d = w.latest()
    assert d is not None
    w.deployments[d.id] = msgspec.structs.replace(d, status=status)
    w.make_healthy(1)
    assert len(w.running(0)) == 2
    plan = w.evaluate()
    assert (plan.place, plan.stop, len(w.running(0))) == ([], [], 2)
    assert plan.desired["g"].ignore == 3


def test_a_newer_version_or_a_stop_cancels_the_active_deployment() -> None:
    w = World()
    w.register(job_text())
    first = w.latest()
    plan = w.register(job_text(command="true"))
    assert first is not None
    cancelled = next(x for x in plan.deployments if x.id == first.id)
    assert (cancelled.status, cancelled.status_description) == (
        "cancelled", "Cancelled due to newer version of job")
    second = w.latest()
    assert second is not None
    assert second.id != first.id
    plan = w.stop()
    assert [(x.id, x.status, x.status_description) for x in plan.deployments] == [
        (second.id, "cancelled", "Cancelled because job is stopped")]


def test_canaries_wait_beside_the_old_allocations_until_promoted() -> None:
    update = "update {\n canary = 1\n max_parallel = 1\n }"
    w = rolled_out(job_text(count=2, update=update))
    old = {a.id for a in w.running(0)}
    plan = w.register(job_text(count=2, update=update, command="true"))
    (canary,) = plan.place
    assert plan.stop == []
    assert canary.deployment_status == AllocDeploymentStatus(canary=True)
    d = w.latest()
    assert d is not None
    assert d.status_description == "Deployment is running but requires manual promotion"
    state = d.task_groups["g"]
    assert (state.desired_canaries, state.placed_canaries, state.promoted) == (
        1, [canary.id], False)
    w.make_healthy(1)
    plan = w.evaluate()  # healthy, but not promoted: nothing else happens
    assert (plan.place, plan.stop, {a.id for a in w.running(0)}) == ([], [], old)
    d = w.latest()
    assert d is not None
    w.deployments[d.id] = promote(d, None, w.allocs.values(), w.index + 1, NOW)
    plan = w.evaluate()
    # The canary takes its name over; the other old one is replaced.
    assert len(plan.stop) == 2
    assert {a.id for a in plan.stop} == old
    assert len(plan.place) == 1
    w.make_healthy(1)
    plan = w.evaluate()
    assert w.deployments[d.id].status == "successful"
    assert {a.name for a in w.running()} == {"web.g[0]", "web.g[1]"}


def test_promotion_needs_healthy_canaries() -> None:
    update = "update {\n canary = 1\n }"
    w = rolled_out(job_text(count=2, update=update))
    w.register(job_text(count=2, update=update, command="true"))
    d = w.latest()
    assert d is not None
    with pytest.raises(PromotionError) as info:
        promote(d, None, w.allocs.values(), 99, NOW)
    assert str(info.value) == ('1 error occurred:\n\t* Task group "g" has 0/1 healthy '
                               "allocations\n\n")
    # A group not named is not promoted (nor checked).
    assert not promote(d, ["x"], w.allocs.values(), 99, NOW).task_groups["g"].promoted


def test_account_counts_placements_health_and_progress() -> None:
    d = Deployment(id="d1", task_groups={"g": DeploymentState(
        progress_deadline=60 * 10**9)})
    placed = Allocation(id="a", task_group="g", deployment_id="d1", modify_time=NOW)
    assert deploymentbook.account(d, None, placed)
    later = datetime.fromtimestamp(NOW / 1e9 + 30, tz=UTC)
    healthy = msgspec.structs.replace(placed, deployment_status=AllocDeploymentStatus(
        healthy=True, timestamp=later))
    assert deploymentbook.account(d, placed, healthy)
    unhealthy = msgspec.structs.replace(healthy, deployment_status=AllocDeploymentStatus(
        healthy=False, timestamp=later))
    assert deploymentbook.account(d, healthy, unhealthy)
    s = d.task_groups["g"]
    assert (s.placed_allocs, s.healthy_allocs, s.unhealthy_allocs) == (1, 0, 1)
    assert s.require_progress_by == datetime.fromtimestamp(NOW / 1e9 + 90, tz=UTC)
    assert not deploymentbook.account(d, unhealthy, unhealthy)


async def test_deployments_and_stable_versions_survive_a_restart(tmp_path: Path) -> None:
    """Layer 2: real SQLite, the real clock."""
    node = Node(id="n1", name="n1")
    with trio.fail_after(20):
        store = await ServerStore.open(tmp_path)
        server = LocalServer(node, EventBroker(), store)
        await server.load()
        await server.register_job(parse_job(job_text()))
        (d,) = server.deployments.values()
        healthy = [msgspec.structs.replace(a, client_status="running",
                                           deployment_status=AllocDeploymentStatus(
                                               healthy=True))
                   for a in server.job_allocs("web")]
        await server.update_allocs(healthy)
        # The watcher evaluated on the first healthy one and the deployment completed.
        assert server.deployments[d.id].status == "successful"
        assert server.jobs["web"].stable
        before = dict(server.deployments)
        await store.aclose()
        store = await ServerStore.open(tmp_path)
        again = LocalServer(node, EventBroker(), store)
        await again.load()
        assert again.deployments == before
        assert again.jobs["web"].stable
        assert [v.stable for v in again.versions["web"]] == [True]
        await store.aclose()


def test_scheduling_leaves_the_servers_deployment_untouched() -> None:
    w = World()
    w.register(job_text())
    d = w.latest()
    assert d is not None
    before = msgspec.json.encode(d)
    w.index += 1
    job = msgspec.structs.replace(parse_job(job_text(count=5)), version=1, create_index=1,
                                  job_modify_index=w.index)
    ev = Evaluation(id="e", job_id="web", status=EVAL_STATUS_PENDING)
    plan = schedule(w, ev, job, index=w.index, now=NOW, new_id=w.new_id, deployment=d)
    assert plan.deployments  # it would cancel this one and create another
    assert msgspec.json.encode(d) == before


async def test_terminal_deployments_without_live_allocations_are_collected(
        tmp_path: Path) -> None:
    """Layer 2 (SQLite): Nomad's deployment GC, after an hour, and persisted."""
    now = [NOW]
    node = Node(id="n1", name="n1")
    with trio.fail_after(20):
        store = await ServerStore.open(tmp_path)
        server = LocalServer(node, EventBroker(), store, unix_clock=lambda: now[0])
        await server.register_job(parse_job(job_text()))
        first = next(iter(server.deployments))
        await server.register_job(parse_job(job_text(command="true")))  # cancels it
        assert server.deployments[first].status == "cancelled"
        now[0] += deploymentbook.DEPLOYMENT_GC_THRESHOLD + 1
        await server.gc_evals()
        assert first in server.deployments  # an allocation of it still runs
        await server.stop_job("web")
        await server.update_allocs([msgspec.structs.replace(a, client_status="complete")
                                    for a in server.job_allocs("web")])
        now[0] += deploymentbook.DEPLOYMENT_GC_THRESHOLD + 1
        await server.gc_evals()
        assert server.deployments == {}
        await store.aclose()
        store = await ServerStore.open(tmp_path)
        again = LocalServer(node, EventBroker(), store)
        await again.load()
        assert again.deployments == {}
        await store.aclose()


def test_a_job_is_running_while_its_deployment_is_active() -> None:
    from yurt.runtime.server.records import job_status

    job = parse_job(job_text())
    assert job_status(job, [], False) == "dead"
    assert job_status(job, [], False, rolling=True) == "running"


async def test_a_progress_deadline_that_passed_while_down_fails_on_restart(
        tmp_path: Path) -> None:
    """Layer 2 (SQLite, real clock; the unix clock is a number the test moves)."""
    now = [NOW]
    node = Node(id="n1", name="n1")
    update = ('update {\n max_parallel = 1\n healthy_deadline = "30s"\n '
              'progress_deadline = "1m"\n }')
    with trio.fail_after(20):
        store = await ServerStore.open(tmp_path)
        server = LocalServer(node, EventBroker(), store, unix_clock=lambda: now[0])
        await server.load()
        await server.register_job(parse_job(job_text(update=update)))
        (d,) = server.deployments.values()
        await store.aclose()  # the agent goes away; nothing became healthy
        now[0] += 2 * 60 * 10**9
        store = await ServerStore.open(tmp_path)
        again = LocalServer(node, EventBroker(), store, unix_clock=lambda: now[0])
        await again.load()
        assert again.deployments[d.id].status == "running"
        async with trio.open_nursery() as nursery:
            await nursery.start(again.run)
            while again.deployments[d.id].status == "running":
                await again.changed.wait()
            nursery.cancel_scope.cancel()
        failed = again.deployments[d.id]
        assert (failed.status, failed.status_description) == (
            "failed", "Failed due to progress deadline")
        await store.aclose()


async def test_health_judged_for_another_deployment_is_not_counted() -> None:
    """An update the client queued before an in-place update moved the allocation to a new
    deployment carries the old one's health: the server keeps its own."""
    server = LocalServer(Node(id="n1", name="n1"), EventBroker(), None)
    with trio.fail_after(10):
        await server.register_job(parse_job(job_text(count=1)))
        (alloc,) = server.job_allocs("web")
        moved = msgspec.structs.replace(alloc, deployment_id="d2", deployment_status=None)
        server.allocs[alloc.id] = moved  # as an in-place update to a new version leaves it
        stale = msgspec.structs.replace(alloc, client_status="running",
                                        deployment_status=AllocDeploymentStatus(healthy=True))
        await server.update_allocs([stale])
        assert server.allocs[alloc.id].client_status == "running"
        assert server.allocs[alloc.id].deployment_status is None
        await server.update_allocs([msgspec.structs.replace(stale, deployment_id="d2")])
        status = server.allocs[alloc.id].deployment_status
        assert status is not None
        assert status.healthy


def alloc_failure(w: World, now: int = NOW) -> Plan:
    """An alloc-failure evaluation of the job, its plan applied to the world."""
    return w.evaluate("alloc-failure", now, start=False)


def test_a_failed_canary_is_rescheduled_as_a_canary_after_its_delay() -> None:
    update = "update {\n canary = 1\n max_parallel = 1\n }"
    w = rolled_out(job_text(count=2, update=update))
    plan = w.register(job_text(count=2, update=update, command="true"))
    (canary,) = plan.place
    w.allocs[canary.id] = msgspec.structs.replace(w.allocs[canary.id], client_status="failed")
    plan = alloc_failure(w)
    # Not a fresh canary at once: the service reschedule policy's 30s delay first.
    assert plan.place == []
    (follow,) = plan.evals
    later = unix_ns(follow.wait_until)
    plan = alloc_failure(w, later)
    (again,) = plan.place
    assert again.deployment_status is not None
    assert again.deployment_status.canary
    assert again.previous_allocation == canary.id
    assert again.reschedule_tracker is not None
    assert w.allocs[canary.id].next_allocation == again.id
    # Beside the old allocations, which keep running until the promotion.
    assert plan.stop == []
    d = w.latest()
    assert d is not None
    assert d.task_groups["g"].placed_canaries == [canary.id, again.id]


def test_a_failed_deployment_does_not_reschedule_its_own_failed_allocations() -> None:
    w = rolled_out(job_text(count=3))
    plan = w.register(job_text(count=3, command="true"))
    (new,) = plan.place
    d = w.latest()
    assert d is not None
    w.deployments[d.id] = msgspec.structs.replace(d, status="failed")
    w.allocs[new.id] = msgspec.structs.replace(w.allocs[new.id], client_status="failed")
    # Long after any reschedule delay.
    plan = alloc_failure(w, NOW + 3600 * 10**9)
    assert plan.place == []
    # An allocation of another deployment is still replaced, outside the failed one.
    old = next(a for a in w.live_allocs() if a.deployment_id != d.id)
    w.allocs[old.id] = msgspec.structs.replace(old, client_status="failed")
    plan = alloc_failure(w, NOW + 7200 * 10**9)
    (replacement,) = plan.place
    assert replacement.previous_allocation == old.id
    assert replacement.deployment_id == ""


def test_an_alloc_stop_of_a_waiting_canary_stops_it_and_places_a_fresh_one() -> None:
    update = "update {\n canary = 1\n max_parallel = 1\n }"
    w = rolled_out(job_text(count=2, update=update))
    plan = w.register(job_text(count=2, update=update, command="true"))
    (canary,) = plan.place
    w.allocs[canary.id] = msgspec.structs.replace(
        w.allocs[canary.id], client_status="running",
        desired_transition=DesiredTransition(migrate=True))
    plan = alloc_failure(w)
    (moved,) = plan.stop
    assert moved.id == canary.id
    assert moved.desired_description == "alloc is being migrated"
    (fresh,) = plan.place
    assert fresh.deployment_status is not None
    assert fresh.deployment_status.canary
    assert moved.next_allocation == fresh.id
    # The old version keeps running beside the new canary.
    assert all(a.job is not None and a.job.version == 0 for a in w.live_allocs()
               if a.id != fresh.id)
