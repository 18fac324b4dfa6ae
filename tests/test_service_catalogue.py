"""The server's service catalogue with its SQLite table (layer 2: real files, real clock):
Nomad's upsert indexes, reads in Nomad's order, `choose`, and — so that a crashed agent
leaves nothing stale — registrations of allocations that are terminal or unknown are gone
at load, and dropped in the very commit that makes an allocation client-terminal."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
import trio

from yurt.runtime.eventstream import EventBroker
from yurt.runtime.jobspec import parse_job
from yurt.runtime.server.local import LocalServer
from yurt.runtime.server.services import choose
from yurt.runtime.server.state.sqlite import ServerStore
from yurt.runtime.structs import (
    Node,
    NodeCpuResources,
    NodeMemoryResources,
    NodeResources,
)
from yurt.runtime.structs.service import ServiceRegistration

JOB = ('job "web" {\n group "g" {\n  count = 2\n  task "t" {\n   driver = "mock_driver"\n'
       '  }\n }\n}\n')


def fresh() -> LocalServer:
    node = Node(id="n1", name="n1", node_resources=NodeResources(
        cpu=NodeCpuResources(cpu_shares=4000), memory=NodeMemoryResources(memory_mb=1024)))
    return LocalServer(node, EventBroker(), owns_events=True)


def reg(alloc_id: str, name: str = "web", port: int = 80) -> ServiceRegistration:
    return ServiceRegistration(id=f"_nomad-task-{alloc_id}-group-g-{name}-{port}",
                               service_name=name, job_id="web", alloc_id=alloc_id,
                               address="10.0.0.1", port=port)


async def test_upsert_keeps_create_index_and_unchanged_writes_nothing(tmp_path: Path) -> None:
    with trio.fail_after(10):
        server = fresh()
        server.store = await ServerStore.open(tmp_path)
        services = server.services
        changed = services.changed
        first = await services.upsert([reg("a")])
        assert first is not None
        assert changed.is_set()
        assert await services.upsert([reg("a")]) is None  # nothing changed
        second = await services.upsert([msgspec.structs.replace(reg("a"), tags=["x"])])
        assert second is not None
        assert second > first
        (stored,) = services.registrations("default", "web")
        assert (stored.create_index, stored.modify_index) == (first, second)
        await server.store.aclose()


async def test_reads_are_in_id_order_and_choose_is_stable(tmp_path: Path) -> None:
    with trio.fail_after(10):
        server = fresh()
        await server.services.upsert([reg("c"), reg("a"), reg("b"), reg("a", "other")])
        regs = server.services.registrations("default", "web")
        assert [r.alloc_id for r in regs] == ["a", "b", "c"]
        assert server.services.registrations("other-ns", "web") == []
        picked = choose(regs, "2|key")
        assert len(picked) == 2
        assert choose(list(reversed(regs)), "2|key") == picked
        assert len(choose(regs, "9|key")) == 3
        for bad in ("x|k", "2", "2|"):
            with pytest.raises(ValueError, match="choose must be in form"):
                choose(regs, bad)


async def test_registrations_of_gone_allocations_are_dropped_at_load_and_on_terminal(
        tmp_path: Path) -> None:
    with trio.fail_after(10):
        first = fresh()
        first.store = await ServerStore.open(tmp_path)
        await first.register_job(parse_job(JOB))
        live_a, live_b = sorted(first.allocs)
        await first.services.upsert([reg(live_a), reg(live_b), reg("unknown-alloc")])
        await first.store.aclose()  # the agent dies without deregistering anything

        again = fresh()
        again.store = await ServerStore.open(tmp_path)
        await again.load()
        assert {r.alloc_id for r in again.services.registrations("default", "web")} == {
            live_a, live_b}
        # b finishes on the client: its registration goes in that commit, with an event
        done = msgspec.structs.replace(again.allocs[live_b], client_status="failed")
        await again.update_allocs([done])
        assert [r.alloc_id for r in again.services.registrations("default", "web")] == [live_a]
        kinds = [(e.topic, e.type) for rec in again.broker._history for e in rec.record.events]
        assert ("Service", "ServiceDeregistration") in kinds
        await again.store.aclose()

        third = fresh()
        third.store = await ServerStore.open(tmp_path)
        await third.load()
        assert [r.alloc_id for r in third.services.registrations("default", "web")] == [live_a]
        await third.store.aclose()
