"""The server's one index space and its evaluations stay consistent around slow and cut writes.

- An index is visible (`X-Nomad-Index`, blocking queries, the event stream) only once its
  change is: while a commit is being written, readers still see the index before it, so a
  client resuming from what it was answered never skips that change.
- The node's own changes are numbered and persisted as any other: a restart never hands out
  an index again.
- A failed allocation and the evaluation that replaces it are one write: a crash between them
  cannot leave the failure without its replacement.
- A batch job's completed allocation is done for its version only (Nomad's
  filterOldTerminalAllocs); a periodic or parameterized parent is never evaluated.

Real SQLite where a store is used, the real clock, absolute bounds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from yurt.runtime.eventstream import EventBroker
from yurt.runtime.jobspec import parse_job
from yurt.runtime.server.local import LocalServer
from yurt.runtime.server.state.sqlite import ServerStore
from yurt.runtime.structs import Node, NodeCpuResources, NodeMemoryResources, NodeResources

JOB = """job "j" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "mock_driver"
      config { run_for = "1s" }
      resources {
        cpu    = 100
        memory = 100
      }
    }
  }
}"""
SERVICE = JOB.replace('type = "batch"', 'type = "service"')


def _node() -> Node:
    return Node(id="n1", name="n1", node_resources=NodeResources(
        cpu=NodeCpuResources(cpu_shares=1000), memory=NodeMemoryResources(memory_mb=1000)))


class HeldStore:
    """A store whose writes wait for `release`."""

    def __init__(self) -> None:
        self.release = trio.Event()
        self.writing = trio.Event()

    async def save(self, *args: Any, **kwargs: Any) -> None:
        self.writing.set()
        await self.release.wait()


async def test_an_index_is_visible_only_once_its_change_is() -> None:
    store = HeldStore()
    server = LocalServer(_node(), EventBroker(), store, owns_events=True)  # type: ignore[arg-type]
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.register_job, parse_job(JOB))
            await store.writing.wait()
            # Taken, not visible: what a reader is answered with does not include it yet.
            assert server.index == 1
            assert (server.visible_index, server.current_index()) == (0, 0)
            assert "j" not in server.jobs
            store.release.set()
        assert "j" in server.jobs
        assert server.visible_index == server.index > 1


async def test_a_node_change_is_numbered_and_persisted(tmp_path: Path) -> None:
    with trio.fail_after(10):
        server = LocalServer(_node(), EventBroker(), await ServerStore.open(tmp_path),
                             owns_events=True)
        await server.load()
        async with trio.open_nursery() as nursery:
            await nursery.start(server.run)
            changed = server.changed
            server.node_updated()  # the agent's start, a driver or a device change
            await changed.wait()
            handed = server.visible_index
            assert server.node.modify_index == handed > 0
            nursery.cancel_scope.cancel()  # as a kill -9: nothing more is written
        again = LocalServer(_node(), EventBroker(), await ServerStore.open(tmp_path),
                            owns_events=True)
        await again.load()
        assert again.take_index() > handed  # never handed out twice


class Crash(BaseException):
    pass


async def test_a_failed_allocation_and_its_evaluation_are_one_write(tmp_path: Path) -> None:
    with trio.fail_after(10):
        store = await ServerStore.open(tmp_path)
        server = LocalServer(_node(), EventBroker(), store, owns_events=True, reschedule=True)
        await server.load()
        (alloc,) = (await server.register_job(parse_job(SERVICE))).placed
        real_save = store.save
        writes = 0

        async def save(*args: Any, **kwargs: Any) -> None:
            nonlocal writes
            writes += 1
            if writes == 2:  # the agent dies right after the failure's write
                raise Crash
            await real_save(*args, **kwargs)

        store.save = save  # type: ignore[method-assign]
        with pytest.raises(Crash):
            await server.update_allocs([msgspec.structs.replace(alloc, client_status="failed")])
        again = LocalServer(_node(), EventBroker(), await ServerStore.open(tmp_path),
                            owns_events=True, reschedule=True)
        await again.load()
        assert again.allocs[alloc.id].client_status == "failed"
        pending = [e for e in again.evals.values() if not e.is_terminal()]
        assert [e.triggered_by for e in pending] == ["alloc-failure"]  # `run` processes it


async def test_a_completed_batch_job_runs_again_at_a_new_version() -> None:
    server = LocalServer(_node(), EventBroker(), None, owns_events=True)
    (alloc,) = (await server.register_job(parse_job(JOB))).placed
    await server.update_allocs([msgspec.structs.replace(alloc, client_status="complete")])
    assert server.jobs["j"].status == "dead"
    assert not (await server.register_job(parse_job(JOB))).placed  # same version: done
    changed = await server.register_job(parse_job(JOB.replace('"1s"', '"2s"')))
    assert server.jobs["j"].version == 1
    assert [a.name for a in changed.placed] == ["j.g[0]"]


async def test_a_periodic_parent_is_never_evaluated() -> None:
    server = LocalServer(_node(), EventBroker(), None, owns_events=True)
    await server.register_job(parse_job(JOB.replace(
        'type = "batch"', 'type = "batch"\n  periodic { crons = ["0 0 1 1 *"] }')))
    with pytest.raises(ValueError, match="can't evaluate periodic job"):
        await server.evaluate("j", "job-register")
    assert server.job_allocs("j") == []


async def test_a_client_update_that_changes_nothing_takes_no_index() -> None:
    # A client stopped after the server took its update but before it saved the
    # acknowledgement sends the same update again at its next start.
    server = LocalServer(_node(), EventBroker(), None, owns_events=True)
    (alloc,) = (await server.register_job(parse_job(SERVICE))).placed
    running = msgspec.structs.replace(alloc, client_status="running")
    await server.update_allocs([running])
    index = server.allocs[alloc.id].modify_index
    await server.update_allocs([running])
    assert server.allocs[alloc.id].modify_index == index
    assert server.take_index() == index + 1  # none taken for the resend
    await server.update_allocs([msgspec.structs.replace(running, client_description="x")])
    assert server.allocs[alloc.id].modify_index > index
