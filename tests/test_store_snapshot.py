"""`get_all_state`: everything a restart reads, in one read, against every store.

Layer 2 for the SQLite store (real file, real worker threads), the same assertions for the
memory store. The snapshot must agree with the per-key reads it replaces, and a corrupt row
must be reported where it belongs without hiding the rest.
"""

from __future__ import annotations

from yurt.runtime.structs import (
    AcknowledgedState,
    Allocation,
    AllocDeploymentStatus,
    HookState,
    Job,
    LocalState,
    TaskHandle,
    TaskState,
)
from yurt.store import KeyValueStateDB, StateDB
from yurt.store.base import alloc_key, task_key
from yurt.store.protocol import SavedTask, StateSnapshot


def _alloc(alloc_id: str) -> Allocation:
    return Allocation(id=alloc_id, name=f"job.g[{alloc_id}]", job_id="job",
                      job=Job(id="job", name="job"), task_group="g")


def _local(pid: int) -> LocalState:
    return LocalState(hooks={"task_dir": HookState(prestart_done=True, env={"A": "b"})},
                      task_handle=TaskHandle(driver="raw_exec", task_id=f"t{pid}",
                                             driver_state={"pid": pid}))


async def test_empty_store_gives_an_empty_snapshot(state_db: StateDB) -> None:
    assert await state_db.get_all_state() == StateSnapshot()


async def test_snapshot_holds_what_the_per_key_reads_return(state_db: StateDB) -> None:
    for i in range(3):
        alloc_id = f"a{i}"
        await state_db.put_allocation(_alloc(alloc_id))
        await state_db.put_acknowledged_state(alloc_id, AcknowledgedState(
            client_status="running", modify_time=i))
        for task in ("web", "side"):
            await state_db.put_task_runner_local_state(alloc_id, task, _local(i))
            await state_db.put_task_state(alloc_id, task, TaskState(state="running",
                                                                    restarts=i))
    # Neither of these is part of a restart: not in the snapshot.
    await state_db.put_deployment_status("a0", AllocDeploymentStatus(healthy=True))
    # A task with only its state (its local state not written yet).
    await state_db.put_task_state("a0", "only-state", TaskState(state="pending"))

    snapshot = await state_db.get_all_state()
    allocs, errors = await state_db.get_all_allocations()
    assert sorted(snapshot.allocations, key=lambda a: a.id) == sorted(allocs,
                                                                     key=lambda a: a.id)
    assert snapshot.errors == errors == {}
    for i in range(3):
        alloc_id = f"a{i}"
        assert snapshot.acknowledged[alloc_id] == await state_db.get_acknowledged_state(
            alloc_id)
        for task in ("web", "side"):
            local, state = await state_db.get_task_runner_state(alloc_id, task)
            assert snapshot.tasks[alloc_id][task] == SavedTask(local=local, state=state)
            assert local == _local(i)
    assert snapshot.tasks["a0"]["only-state"] == SavedTask(state=TaskState(state="pending"))
    assert set(snapshot.tasks) == {"a0", "a1", "a2"}


async def test_snapshot_values_are_copies(state_db: StateDB) -> None:
    await state_db.put_task_state("a1", "web", TaskState(state="running"))
    first = await state_db.get_all_state()
    saved = first.tasks["a1"]["web"].state
    assert saved is not None
    saved.state = "dead"
    second = await state_db.get_all_state()
    assert second.tasks["a1"]["web"].state == TaskState(state="running")


async def test_deleted_buckets_are_gone_from_the_snapshot(state_db: StateDB) -> None:
    for alloc_id in ("a1", "a2"):
        await state_db.put_allocation(_alloc(alloc_id))
        await state_db.put_task_state(alloc_id, "web", TaskState(state="running"))
        await state_db.put_task_state(alloc_id, "side", TaskState(state="running"))
    await state_db.delete_allocation_bucket("a1")
    await state_db.delete_task_bucket("a2", "side")
    snapshot = await state_db.get_all_state()
    assert [a.id for a in snapshot.allocations] == ["a2"]
    assert snapshot.tasks == {"a2": {"web": SavedTask(state=TaskState(state="running"))}}


async def test_corrupt_rows_are_reported_where_they_belong(state_db: StateDB) -> None:
    assert isinstance(state_db, KeyValueStateDB)
    for alloc_id in ("good", "bad"):
        await state_db.put_allocation(_alloc(alloc_id))
        await state_db.put_task_state(alloc_id, "web", TaskState(state="running"))
        await state_db.put_acknowledged_state(alloc_id, AcknowledgedState(client_status="x"))
    await state_db._put(alloc_key("bad", "alloc"), b"{not json")
    await state_db._put(task_key("good", "broken", "local_state"), b'{"Hooks": 5}')
    await state_db._put(alloc_key("good", "acknowledged_state"), b"[]")

    snapshot = await state_db.get_all_state()
    assert [a.id for a in snapshot.allocations] == ["good"]
    assert set(snapshot.errors) == {"bad"}
    assert "failed to decode allocation" in snapshot.errors["bad"]
    # The bad allocation's tasks are still read: the caller decides what to do with them.
    assert snapshot.tasks["bad"]["web"] == SavedTask(state=TaskState(state="running"))
    broken = snapshot.tasks["good"]["broken"]
    assert broken.local is None
    assert broken.error is not None
    assert "local_state" in broken.error
    assert snapshot.tasks["good"]["web"].error is None
    # An acknowledged state that cannot be read is as if none was: the update is resent.
    assert "good" not in snapshot.acknowledged
    assert snapshot.acknowledged["bad"] == AcknowledgedState(client_status="x")
