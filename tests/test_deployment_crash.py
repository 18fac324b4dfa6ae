"""Deployments across an agent killed at the wrong moment (layer 3: real SQLite, the real
clock): what the watcher decides from persisted state is decided again on load."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
import trio

from tests.test_deployments import job_text
from yurt.runtime.eventstream import EventBroker
from yurt.runtime.jobspec import parse_job
from yurt.runtime.server import deploymentwatcher
from yurt.runtime.server.local import LocalServer
from yurt.runtime.server.state.sqlite import ServerStore
from yurt.runtime.structs import Allocation, AllocDeploymentStatus, Node
from yurt.runtime.structs.eval import Evaluation


class Killed(BaseException):
    """The agent dying (kill -9) at this point: nothing after it runs."""


async def report_healthy(server: LocalServer) -> None:
    await server.update_allocs([msgspec.structs.replace(
        a, client_status="running", deployment_status=AllocDeploymentStatus(healthy=True))
        for a in server.job_allocs("web") if not a.is_terminal()
        and (a.deployment_status is None or a.deployment_status.healthy is None)])


async def loaded(path: Path, node: Node) -> tuple[ServerStore, LocalServer]:
    """A server on the SQLite store at `path`, with what an earlier one left there."""
    store = await ServerStore.open(path)
    server = LocalServer(node, EventBroker(), store)
    await server.load()
    return store, server


def live_v1(server: LocalServer) -> list[Allocation]:
    return [a for a in server.job_allocs("web") if not a.is_terminal() and a.job.version == 1]


async def test_health_committed_before_a_crash_moves_the_rollout_on_after_restart(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node = Node(id="n1", name="n1")
    with trio.fail_after(20):
        store, server = await loaded(tmp_path, node)
        await server.register_job(parse_job(job_text()))
        await report_healthy(server)
        await server.register_job(parse_job(job_text(command="true")))
        assert len(live_v1(server)) == 1

        async def killed(*_: object) -> None:
            raise Killed

        # The client's health is committed; the watcher's reaction never happens.
        monkeypatch.setattr(deploymentwatcher, "after_alloc_updates", killed)
        with pytest.raises(Killed):
            await report_healthy(server)
        monkeypatch.undo()
        await store.aclose()

        store, again = await loaded(tmp_path, node)
        assert len(live_v1(again)) == 1
        async with trio.open_nursery() as nursery:
            await nursery.start(again.run)
            # Started means caught up: the next batch of max_parallel 1 is placed.
            assert len(live_v1(again)) == 2
            d = max(again.deployments.values(), key=lambda d: d.create_index)
            assert d.status == "running"
            assert d.task_groups["g"].placed_allocs == 2
            nursery.cancel_scope.cancel()
        await store.aclose()


def test_health_is_unseen_only_when_newer_than_the_latest_evaluation() -> None:
    evals = [Evaluation(id="a", create_index=10, status="complete"),
             Evaluation(id="b", create_index=30, status="canceled"),
             Evaluation(id="c", create_index=12, snapshot_index=14, status="complete")]
    latest = deploymentwatcher.latest_eval_index(evals)
    assert latest == 14
    healthy = Allocation(id="x", deployment_status=AllocDeploymentStatus(
        healthy=True, modify_index=15))
    assert deploymentwatcher.health_unseen([healthy], latest)
    seen = msgspec.structs.replace(healthy, deployment_status=AllocDeploymentStatus(
        healthy=True, modify_index=14))
    assert not deploymentwatcher.health_unseen([seen], latest)
    unhealthy = msgspec.structs.replace(healthy, deployment_status=AllocDeploymentStatus(
        healthy=False, modify_index=20))
    assert not deploymentwatcher.health_unseen([unhealthy], latest)
    assert deploymentwatcher.latest_eval_index([]) == 0


async def test_a_crash_after_failing_a_deployment_keeps_its_rollback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    update = "update {\n max_parallel = 1\n auto_revert = true\n progress_deadline = \"0s\"\n }"
    node = Node(id="n1", name="n1")
    with trio.fail_after(20):
        store, server = await loaded(tmp_path, node)
        await server.register_job(parse_job(job_text(count=1, update=update)))
        await report_healthy(server)
        assert server.jobs["web"].stable
        await server.register_job(parse_job(job_text(count=1, update=update,
                                                     command="true")))
        (new,) = live_v1(server)

        async def killed(*_: object, **__: object) -> None:
            raise Killed

        # Killed right after the watcher's commit, before anything else happens.
        monkeypatch.setattr(server, "_process", killed)
        with pytest.raises(Killed):
            await server.update_allocs([msgspec.structs.replace(
                new, client_status="running",
                deployment_status=AllocDeploymentStatus(healthy=False))])
        monkeypatch.undo()
        await store.aclose()

        store, again = await loaded(tmp_path, node)
        failed = next(d for d in again.deployments.values() if d.job_version == 1)
        assert failed.status == "failed"
        assert failed.status_description == (
            "Failed due to unhealthy allocations - rolling back to job version 0")
        # The rollback is the job's next version, with the stable version's spec.
        assert again.jobs["web"].version == 2
        assert again.jobs["web"].task_groups[0].tasks[0].config == (
            again.versions["web"][-1].task_groups[0].tasks[0].config)
        async with trio.open_nursery() as nursery:
            await nursery.start(again.run)
            # The pending evaluation places the reverted version.
            while not any(a.job.version == 2 for a in again.job_allocs("web")
                          if a.job is not None and not a.is_terminal()):
                await again.changed.wait()
            nursery.cancel_scope.cancel()
        await store.aclose()
