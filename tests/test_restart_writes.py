"""What a zero-delay restart writes, and when (layer 1, `autojump_clock`, mock driver): the
ended run's `Terminated` and cleared handle go in the same store batch as the next run's
`Started` and handle, written once that run has started; with a delay, the end is written at
once, before the sleep."""

from __future__ import annotations

import dataclasses

import trio
from trio.testing import MockClock

from tests.runtime_support import crash_loop_alloc, harness
from yurt.runtime.client.allocrunner.runner import AllocRunner
from yurt.runtime.client.drivers.mock import MockDriver
from yurt.runtime.client.taskrunner import events
from yurt.runtime.structs import LocalState, TaskState
from yurt.store import MemoryStateDB


class Recording(MemoryStateDB):
    """Records every task state write (its last event) and every handle write, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[str, str | None]] = []

    async def put_task_state(self, alloc_id: str, task: str, state: TaskState) -> None:
        self.writes.append(("state", state.events[-1].type if state.events else None))
        await super().put_task_state(alloc_id, task, state)

    async def put_task_runner_local_state(self, alloc_id: str, task: str,
                                          state: LocalState) -> None:
        handle = state.task_handle
        self.writes.append(("handle", handle.task_id if handle is not None else None))
        await super().put_task_runner_local_state(alloc_id, task, state)


async def run_to_the_end(delay: str) -> tuple[Recording, AllocRunner, MockDriver]:
    db = Recording()
    async with harness() as h:
        h.config = dataclasses.replace(h.config, state_db=db)
        ar = h.start(crash_loop_alloc(delay))
        with trio.fail_after(600):
            await ar.wait_done.wait()
        h.nursery.cancel_scope.cancel()
    return db, ar, h.driver


def handles(db: Recording) -> list[str | None]:
    """The handles written from the first start on, each once, in order."""
    written: list[str | None] = []
    for kind, value in db.writes:
        if kind == "handle" and (value is not None or written) and (
                not written or written[-1] != value):
            written.append(value)
    return written


async def test_a_zero_delay_restart_writes_the_end_with_the_next_start(
        autojump_clock: MockClock) -> None:
    db, ar, driver = await run_to_the_end("0s")
    starts = [task_id for _, kind, task_id in driver.log if kind == "start"]
    assert len(starts) == 4
    # The handle goes from each run straight to the next: no write of a cleared handle
    # between them (a crash there re-attaches to the ended run), and None only at the end.
    assert handles(db) == [*starts, None]
    # No state write ends with a restart decision, nor with an exit but the last one: both
    # are written with the next run's `Started`. The last exit, which no start follows, is
    # written on its own, before its `Not Restarting`.
    last_events = [value for kind, value in db.writes if kind == "state"]
    assert events.RESTARTING not in last_events
    assert last_events.count(events.TERMINATED) == 1
    assert last_events.index(events.TERMINATED) < last_events.index(events.NOT_RESTARTING)
    assert [e.type for e in ar.task_runners["t"].state.events][-3:] == [
        events.STARTED, events.TERMINATED, events.NOT_RESTARTING]


async def test_a_restart_with_a_delay_writes_the_end_before_it_sleeps(
        autojump_clock: MockClock) -> None:
    db, _, driver = await run_to_the_end("5s")
    starts = [task_id for _, kind, task_id in driver.log if kind == "start"]
    assert len(starts) == 4
    # Each run's end (its cleared handle) is on disk while the restart sleeps.
    assert handles(db) == [starts[0], None, starts[1], None, starts[2], None, starts[3], None]
    assert events.RESTARTING in [value for kind, value in db.writes if kind == "state"]


class StuckOnTheSecondHandle(MemoryStateDB):
    """A store whose write of the second run's handle (the batch that records the first
    run's end) never returns."""

    def __init__(self) -> None:
        super().__init__()
        self.handles: list[str] = []
        self.stuck = trio.Event()

    async def put_task_runner_local_state(self, alloc_id: str, task: str,
                                          state: LocalState) -> None:
        handle = state.task_handle
        if handle is not None and handle.task_id not in self.handles:
            self.handles.append(handle.task_id)
            if len(self.handles) == 2:
                self.stuck.set()
                await trio.sleep_forever()
        await super().put_task_runner_local_state(alloc_id, task, state)


async def test_a_run_whose_end_was_cut_while_recorded_is_destroyed_by_the_teardown(
        autojump_clock: MockClock) -> None:
    db = StuckOnTheSecondHandle()
    async with harness() as h:
        h.config = dataclasses.replace(h.config, state_db=db)
        ar = h.start(crash_loop_alloc("0s"))
        with trio.fail_after(600):
            await db.stuck.wait()
            first = db.handles[0]
            assert first in h.driver._tasks  # ended, not yet handed back to the driver
            ar.destroy()
            await ar.destroyed.wait()
        # The teardown cancelled the write that recorded the end; the ended run is
        # destroyed all the same, not left in the driver with nobody to destroy it.
        assert first not in h.driver._tasks
        h.nursery.cancel_scope.cancel()
