"""The StateDB contract, run against every implementation (the `state_db` fixture).

Layer 2 for the SQLite store (real file, real worker threads, real clock); the memory store
runs the same assertions so the fake cannot drift from the real thing.
"""

from __future__ import annotations

from datetime import UTC, datetime

from yurt.runtime.structs import (
    AcknowledgedState,
    Allocation,
    AllocDeploymentStatus,
    AllocNetworkStatus,
    HookState,
    Job,
    LocalState,
    NodeRegistration,
    PluginState,
    TaskEvent,
    TaskHandle,
    TaskState,
)
from yurt.store import StateDB


def _alloc(alloc_id: str, **kw: object) -> Allocation:
    return Allocation(id=alloc_id, name=f"job.g[{alloc_id}]", job_id="job",
                      job=Job(id="job", name="job"), task_group="g", **kw)


async def test_empty_store_returns_empty_collections(state_db: StateDB) -> None:
    allocs, errors = await state_db.get_all_allocations()
    assert allocs == []
    assert errors == {}
    assert await state_db.get_task_runner_state("nope", "t") == (None, None)
    assert await state_db.get_deployment_status("nope") is None
    assert await state_db.get_network_status("nope") is None
    assert await state_db.get_acknowledged_state("nope") is None
    assert await state_db.get_driver_plugin_state() is None
    assert await state_db.get_device_plugin_state() is None
    assert await state_db.get_node_meta() is None
    assert await state_db.get_node_registration() is None


async def test_allocations_round_trip_and_last_write_wins(state_db: StateDB) -> None:
    await state_db.put_allocation(_alloc("a1"))
    await state_db.put_allocation(_alloc("a2"))
    await state_db.put_allocation(_alloc("a1", client_status="running"))
    allocs, errors = await state_db.get_all_allocations()
    assert errors == {}
    by_id = {a.id: a for a in allocs}
    assert set(by_id) == {"a1", "a2"}
    assert by_id["a1"].client_status == "running"
    assert by_id["a2"] == _alloc("a2")


async def test_values_are_copies(state_db: StateDB) -> None:
    state = TaskState(state="running", events=[TaskEvent(type="Started", time=1)])
    await state_db.put_task_state("a1", "web", state)
    state.state = "dead"
    state.events.append(TaskEvent(type="Terminated", time=2))
    _, got = await state_db.get_task_runner_state("a1", "web")
    assert got is not None
    assert got.state == "running"
    assert [e.type for e in got.events] == ["Started"]
    got.restarts = 99
    _, again = await state_db.get_task_runner_state("a1", "web")
    assert again is not None
    assert again.restarts == 0


async def test_task_state_without_allocation(state_db: StateDB) -> None:
    started = datetime(2026, 11, 30, 10, 0, 0, 123456, tzinfo=UTC)
    state = TaskState(state="running", restarts=2, started_at=started)
    local = LocalState(
        hooks={"task_dir": HookState(prestart_done=True, env={"A": "b"}, data={"k": "v"})},
        task_handle=TaskHandle(driver="raw_exec", task_id="a1/web/0123abcd",
                               driver_state={"pid": 42, "start_time": 1.5}),
        run_complete=False,
    )
    await state_db.put_task_state("a1", "web", state)
    await state_db.put_task_runner_local_state("a1", "web", local)
    assert await state_db.get_task_runner_state("a1", "web") == (local, state)
    allocs, _ = await state_db.get_all_allocations()
    assert allocs == []


async def test_per_allocation_values(state_db: StateDB) -> None:
    deploy = AllocDeploymentStatus(healthy=True, canary=True, modify_index=7)
    network = AllocNetworkStatus(interface_name="eth0", address="127.0.0.2")
    acked = AcknowledgedState(client_status="running", modify_time=5,
                              task_states={"web": TaskState(state="running")})
    await state_db.put_deployment_status("a1", deploy)
    await state_db.put_network_status("a1", network)
    await state_db.put_acknowledged_state("a1", acked)
    assert await state_db.get_deployment_status("a1") == deploy
    assert await state_db.get_network_status("a1") == network
    assert await state_db.get_acknowledged_state("a1") == acked
    assert await state_db.get_deployment_status("a2") is None


async def test_delete_allocation_bucket_removes_everything_of_that_alloc(
        state_db: StateDB) -> None:
    for alloc_id in ("a1", "a2"):
        await state_db.put_allocation(_alloc(alloc_id))
        await state_db.put_acknowledged_state(alloc_id, AcknowledgedState(client_status="x"))
        for task in ("web", "side"):
            await state_db.put_task_state(alloc_id, task, TaskState(state="running"))
            await state_db.put_task_runner_local_state(alloc_id, task, LocalState())
    await state_db.delete_allocation_bucket("a1")
    allocs, _ = await state_db.get_all_allocations()
    assert [a.id for a in allocs] == ["a2"]
    assert await state_db.get_acknowledged_state("a1") is None
    assert await state_db.get_task_runner_state("a1", "web") == (None, None)
    assert await state_db.get_task_runner_state("a1", "side") == (None, None)
    assert await state_db.get_task_runner_state("a2", "web") != (None, None)
    assert await state_db.get_acknowledged_state("a2") is not None
    # Deleting again, or deleting what never existed, is a no-op.
    await state_db.delete_allocation_bucket("a1")
    await state_db.delete_allocation_bucket("never")


async def test_delete_task_bucket_removes_only_that_task(state_db: StateDB) -> None:
    await state_db.put_allocation(_alloc("a1"))
    for task in ("web", "side"):
        await state_db.put_task_state("a1", task, TaskState(state="running"))
        await state_db.put_task_runner_local_state("a1", task, LocalState(run_complete=True))
    await state_db.delete_task_bucket("a1", "web")
    assert await state_db.get_task_runner_state("a1", "web") == (None, None)
    local, state = await state_db.get_task_runner_state("a1", "side")
    assert local == LocalState(run_complete=True)
    assert state == TaskState(state="running")
    allocs, _ = await state_db.get_all_allocations()
    assert [a.id for a in allocs] == ["a1"]
    await state_db.delete_task_bucket("a1", "web")
    await state_db.delete_task_bucket("never", "never")


async def test_write_after_delete_is_kept(state_db: StateDB) -> None:
    await state_db.put_task_state("a1", "web", TaskState(state="running"))
    await state_db.delete_allocation_bucket("a1")
    await state_db.put_task_state("a1", "web", TaskState(state="running"))
    _, state = await state_db.get_task_runner_state("a1", "web")
    assert state == TaskState(state="running")


async def test_node_level_state(state_db: StateDB) -> None:
    drivers = PluginState(internal_state={"raw_exec": {"version": 1}})
    devices = PluginState(internal_state={"fake": {"ids": ["d0", "d1"]}})
    await state_db.put_driver_plugin_state(drivers)
    await state_db.put_device_plugin_state(devices)
    await state_db.put_node_meta({"rack": "r1"})
    await state_db.put_node_registration(NodeRegistration(has_registered=True))
    assert await state_db.get_driver_plugin_state() == drivers
    assert await state_db.get_device_plugin_state() == devices
    assert await state_db.get_node_meta() == {"rack": "r1"}
    assert await state_db.get_node_registration() == NodeRegistration(has_registered=True)
    await state_db.put_node_meta({})
    assert await state_db.get_node_meta() == {}
