"""The deployment watcher under the mock clock (layer 1): the server and a client running mock
tasks, wired as the agent wires them, and a stand-in for the client's health tracker that
reports an allocation healthy once its tasks ran `min_healthy_time`, unhealthy once it failed
(through `update_allocs`, as the alloc sync carries `DeploymentStatus`). A rolling update of
count 3 with max_parallel 1 keeps 2 healthy allocations throughout; a crashing version rolls
back to the last stable one; a stalled rollout fails at its progress deadline. Plus the pure
watcher decisions."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import msgspec
import pytest
import trio
from trio.testing import MockClock

from tests.runtime_support import unix_clock, wired_server
from yurt.runtime.eventstream import EventBroker
from yurt.runtime.jobspec import parse_job
from yurt.runtime.server import deploymentwatcher
from yurt.runtime.server.deploymentbook import latest_deployment
from yurt.runtime.server.local import LocalServer
from yurt.runtime.server.scheduler.deployments import is_healthy
from yurt.runtime.server.scheduler.reschedule import unix_ns
from yurt.runtime.structs import Allocation, AllocDeploymentStatus, Job, Node
from yurt.runtime.structs.update import Deployment, DeploymentState


def job(version_env: str, *, update: str, crash: bool = False, count: int = 3) -> Job:
    config = 'run_for = "2s"\n exit_code = 1' if crash else 'run_for = "24h"'
    return parse_job(f'''job "web" {{
  group "g" {{
    count = {count}
    restart {{
      attempts = 0
      mode = "fail"
    }}
    update {{
      {update}
    }}
    task "t" {{
      driver = "mock_driver"
      env {{ V = "{version_env}" }}
      config {{
        {config}
      }}
    }}
  }}
}}''')


async def report_health(server: LocalServer) -> None:
    """What the client's health tracker does, in the `task_states` manner: healthy after
    `min_healthy_time` running, unhealthy once failed."""
    while True:
        now = unix_clock()
        ready = []
        for alloc in server.allocs.values():
            status = alloc.deployment_status
            if not alloc.deployment_id or (status is not None and status.healthy is not None):
                continue
            group = alloc.job.lookup_group(alloc.task_group) if alloc.job else None
            if group is None or group.update is None:
                continue
            started = [unix_ns(t.started_at) for t in alloc.task_states.values()
                       if t.state == "running"]
            healthy: bool | None = None
            if alloc.client_status == "failed":
                healthy = False
            elif (alloc.client_status == "running" and started
                  and now - max(started) >= group.update.min_healthy_time):
                healthy = True
            if healthy is not None:
                ready.append(msgspec.structs.replace(alloc, deployment_status=(
                    AllocDeploymentStatus(healthy=healthy, canary=status is not None
                                          and status.canary,
                                          timestamp=datetime.fromtimestamp(now / 1e9, tz=UTC)))))
        if ready:
            await server.update_allocs(ready)
        with trio.move_on_after(0.5):
            await server.changed.wait()


@asynccontextmanager
async def server_with_health() -> AsyncIterator[LocalServer]:
    async with wired_server() as server, trio.open_nursery() as nursery:
        nursery.start_soon(report_health, server)
        yield server
        nursery.cancel_scope.cancel()


async def until_done(server: LocalServer, version: int) -> Deployment:
    """The deployment of `version`, once it is no longer active."""
    while True:
        found = [d for d in server.deployments.values()
                 if d.job_version == version and not d.active()]
        if found:
            return found[0]
        await server.changed.wait()


UPDATE = 'max_parallel = 1\n min_healthy_time = "10s"\n healthy_deadline = "1m"\n ' \
         'progress_deadline = "2m"'


async def test_a_rolling_update_keeps_two_of_three_healthy(autojump_clock: MockClock) -> None:
    with trio.fail_after(3600):
        async with server_with_health() as server:
            await server.register_job(job("a", update=UPDATE))
            first = await until_done(server, 0)
            assert (first.status, first.status_description) == (
                "successful", "Deployment completed successfully")
            assert server.jobs["web"].stable
            await server.register_job(job("b", update=UPDATE))
            lowest = 3
            while True:
                live_healthy = [a for a in server.allocs.values()
                                if not a.is_terminal() and is_healthy(a)]
                lowest = min(lowest, len(live_healthy))
                done = [d for d in server.deployments.values() if d.job_version == 1
                        and not d.active()]
                if done:
                    break
                await server.changed.wait()
            assert lowest == 2
            (second,) = done
            assert second.status == "successful"
            state = second.task_groups["g"]
            assert (state.desired_total, state.placed_allocs, state.healthy_allocs) == (3, 3, 3)
            assert server.jobs["web"].version == 1
            assert server.jobs["web"].stable
            live = [a for a in server.allocs.values() if not a.is_terminal()]
            assert {a.job.version for a in live if a.job} == {1}
            assert len(live) == 3
            # The evaluations that placed the next batches came from the watcher.
            watcher_evals = [e for e in server.evals.values()
                             if e.triggered_by == "deployment-watcher"]
            assert len(watcher_evals) >= 2
            assert {e.deployment_id for e in watcher_evals} >= {second.id}


async def test_a_crashing_version_rolls_back_to_the_stable_one(
        autojump_clock: MockClock) -> None:
    update = 'max_parallel = 1\n min_healthy_time = "5s"\n healthy_deadline = "30s"\n ' \
             'progress_deadline = "0s"\n auto_revert = true'
    with trio.fail_after(3600):
        async with server_with_health() as server:
            await server.register_job(job("a", update=update))
            assert (await until_done(server, 0)).status == "successful"
            await server.register_job(job("b", update=update, crash=True))
            failed = await until_done(server, 1)
            assert (failed.status, failed.status_description) == (
                "failed", "Failed due to unhealthy allocations - rolling back to job version 0")
            rollback = await until_done(server, 2)
            assert rollback.status == "successful"
            current = server.jobs["web"]
            assert current.version == 2
            assert current.stable
            assert current.task_groups[0].tasks[0].env == {"V": "a"}
            # The count runs again, all of the reverted version.
            live = [a for a in server.allocs.values() if not a.is_terminal()]
            assert len(live) == 3


async def test_a_stalled_rollout_fails_at_its_progress_deadline(
        autojump_clock: MockClock) -> None:
    update = 'max_parallel = 1\n min_healthy_time = "5s"\n healthy_deadline = "30s"\n ' \
             'progress_deadline = "1m"'
    with trio.fail_after(3600):
        async with server_with_health() as server:
            await server.register_job(job("a", update=update))
            assert (await until_done(server, 0)).status == "successful"
            started = trio.current_time()
            await server.register_job(job("b", update=update, crash=True))
            failed = await until_done(server, 1)
            assert (failed.status, failed.status_description) == (
                "failed", "Failed due to progress deadline")
            waited = trio.current_time() - started
            assert 60 <= waited < 70
            assert server.jobs["web"].version == 1  # no auto_revert: nothing registered


def test_watcher_decisions() -> None:
    d = Deployment(id="d", task_groups={"g": DeploymentState(
        desired_total=2, healthy_allocs=1, progress_deadline=60, auto_revert=True)})
    assert deploymentwatcher.deadline_failure(d, None) == (True, False)
    paused = msgspec.structs.replace(d, status="paused")
    assert deploymentwatcher.deadline_failure(paused, None) == (False, False)
    done = msgspec.structs.replace(d, task_groups={"g": DeploymentState(
        desired_total=2, healthy_allocs=2)})
    assert deploymentwatcher.deadline_failure(done, None) == (False, False)
    base = "Deployment marked as failed"
    current = job("b", update=UPDATE)
    assert deploymentwatcher.rollback_target(current, [current], base) == (
        None, "Deployment marked as failed - no stable job version to auto revert to")
    old = msgspec.structs.replace(job("a", update=UPDATE), stable=True)
    assert deploymentwatcher.rollback_target(current, [current, old], base) == (
        old, "Deployment marked as failed - rolling back to job version 0")
    same = msgspec.structs.replace(current, stable=True, version=3)
    assert deploymentwatcher.rollback_target(current, [same, old], base) == (
        None, "Deployment marked as failed - not rolling back to stable job version 3 as "
              "current job has same specification")
    assert latest_deployment([], "web") is None


async def test_canaries_auto_promote_once_healthy(autojump_clock: MockClock) -> None:
    update = 'max_parallel = 1\n canary = 1\n auto_promote = true\n ' \
             'min_healthy_time = "5s"\n healthy_deadline = "30s"\n progress_deadline = "1m"'
    with trio.fail_after(3600):
        async with server_with_health() as server:
            await server.register_job(job("a", update=update))
            assert (await until_done(server, 0)).status == "successful"
            await server.register_job(job("b", update=update))
            d = latest_deployment(server.deployments.values(), "web")
            assert d is not None
            assert d.status_description == "Deployment is running pending automatic promotion"
            (canary,) = d.task_groups["g"].placed_canaries
            assert len([a for a in server.allocs.values() if not a.is_terminal()]) == 4
            done = await until_done(server, 1)
            assert (done.status, done.task_groups["g"].promoted) == ("successful", True)
            live = [a for a in server.allocs.values() if not a.is_terminal()]
            assert len(live) == 3
            assert canary in {a.id for a in live}
            assert {a.job.version for a in live if a.job} == {1}


def test_a_stopped_healthy_canary_does_not_count_for_auto_promotion() -> None:
    d = Deployment(id="d", task_groups={"g": DeploymentState(
        desired_canaries=1, auto_promote=True, placed_canaries=["c1", "c2"],
        desired_total=2)})
    stopped = Allocation(id="c1", task_group="g", deployment_id="d", desired_status="stop",
                         client_status="complete", deployment_status=AllocDeploymentStatus(
                             healthy=True, canary=True))
    waiting = Allocation(id="c2", task_group="g", deployment_id="d", client_status="running",
                         deployment_status=AllocDeploymentStatus(canary=True))
    assert not deploymentwatcher.on_health(d, None, [stopped, waiting], False, 0).promote
    healthy = msgspec.structs.replace(waiting, deployment_status=AllocDeploymentStatus(
        healthy=True, canary=True))
    assert deploymentwatcher.on_health(d, None, [stopped, healthy], True, 0).promote
    # The decision and the promotion agree.
    promoted = deploymentwatcher.promote(d, None, [stopped, healthy], 5, 0)
    assert promoted.task_groups["g"].promoted


async def test_a_refused_auto_promotion_leaves_the_client_update_accepted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The watcher logs a promotion the server refuses, as Nomad's does: the alloc sync
    that reported the health must not fail (its update is already committed)."""
    update = 'max_parallel = 1\n canary = 1\n auto_promote = true'
    server = LocalServer(Node(id="n1", name="n1"), EventBroker(), None)
    with trio.fail_after(10):
        await server.register_job(job("a", update=update, count=1))
        await server.register_job(job("b", update=update, count=1))
        d = latest_deployment(server.deployments.values(), "web")
        assert d is not None
        assert d.task_groups["g"].placed_canaries
        monkeypatch.setattr(deploymentwatcher, "on_health",
                            lambda *_: deploymentwatcher.HealthDecision(promote=True))
        (canary,) = [a for a in server.job_allocs("web") if a.id in
                     d.task_groups["g"].placed_canaries]
        await server.update_allocs([msgspec.structs.replace(
            canary, client_status="running",
            deployment_status=AllocDeploymentStatus(healthy=False))])
        assert server.allocs[canary.id].client_status == "running"
        assert not server.deployments[d.id].task_groups["g"].promoted


def test_deadlines_handled_are_forgotten_with_their_deployment() -> None:
    running = Deployment(id="r", status="running")
    paused = Deployment(id="p", status="paused")
    done = Deployment(id="s", status="successful")
    handled = {"r": 1, "p": 2, "s": 3, "gone": 4}
    deploymentwatcher.prune_handled(handled, {d.id: d for d in (running, paused, done)})
    assert handled == {"r": 1, "p": 2}
