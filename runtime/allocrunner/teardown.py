"""An allocation's teardown: the kill order, destroy and shutdown (Nomad's `killTasks`,
`destroyImpl` and `Shutdown`, reference §1.7 and §1.11).

Apart from the run loop (`runner.py`): the run loop owns the task runners and decides when
tasks die of their own accord; teardown is what others ask of an allocation from outside,
in the nursery lent to the alloc runner (or the caller's task, for `*_and_wait`).

Kill order (`kill_tasks`): prekill hooks, then the leader alone, then the other main tasks
together, then sidecars together; poststop tasks are never killed: once everything else is
dead the coordinator opens their stage and they run.

The functions work on the alloc runner's private state (same package, same invariants).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

import trio

from yurt.hooks.base import AllocDestroyHook, AllocPrekillHook, AllocShutdownHook
from yurt.runtime.errors import YurtError
from yurt.runtime.structs import ZERO_TIME, TaskEvent, TaskState
from yurt.runtime.taskrunner import events

if TYPE_CHECKING:
    from yurt.runtime.allocrunner.runner import AllocRunner
    from yurt.runtime.taskrunner.runner import TaskRunner

log = logging.getLogger("yurt.allocrunner")

#: How long a destroy waits for the runners to finish after their kills before cancelling
#: them (a driver that never reports an exit must not keep a destroy from completing).
DESTROY_GRACE: Final = 30.0


async def kill_tasks(ar: AllocRunner) -> dict[str, TaskState]:
    """Nomad's `killTasks` (reference §1.7): leader, then main, then sidecars."""
    async with ar._kill_lock:
        await ar._run_hooks(AllocPrekillHook, "prekill")

        def killing(tr: TaskRunner) -> TaskEvent | None:
            if tr.state.finished_at != ZERO_TIME:
                return None
            reason = (ar.alloc.desired_description
                      if ar.alloc.desired_status == "evict" else "")
            return events.new_event(events.KILLING, ar._config.unix_clock(),
                                    kill_timeout=tr.kill_timeout, kill_reason=reason)

        async def kill(tr: TaskRunner) -> None:
            # Bounded: a driver that never reports the exit must not hold up the rest
            # of the kill order (the task runner keeps waiting for it on its own).
            with trio.move_on_after(tr.kill_bound()) as scope:
                error = await tr.kill(killing(tr))
                if error:
                    log.error("failed to kill task %s of alloc %s: %s", tr.name, ar.id,
                              error)
            if scope.cancelled_caught:
                log.error("task %s of alloc %s did not stop within %.0fs; moving on",
                          tr.name, ar.id, tr.kill_bound())

        runners = [tr for tr in ar.task_runners.values() if not tr.is_poststop]
        for tr in runners:
            if tr.is_leader:
                await kill(tr)
        for group in ([tr for tr in runners if not tr.is_leader and not tr.is_sidecar],
                      [tr for tr in runners if not tr.is_leader and tr.is_sidecar]):
            async with trio.open_nursery() as nursery:
                for tr in group:
                    nursery.start_soon(kill, tr)
        return {name: tr.task_state() for name, tr in ar.task_runners.items()}


def release_unstarted(ar: AllocRunner) -> None:
    """Stopping before the task runners started (prerun still waiting): end the prerun,
    and count the runners as finished, for there is nothing for them to stop."""
    if ar._runners_started:
        return
    ar._prerun_scope.cancel()
    for tr in ar.task_runners.values():
        tr.done.set()


async def destroy(ar: AllocRunner) -> None:
    """Nomad's `destroyImpl`: kill, persist the final state, destroy hooks, delete the bucket."""
    if ar._shutdown_launched:
        await ar.shutdown_done.wait()
    release_unstarted(ar)
    if ar._run_launched:
        # Shielded (an agent shutting down still finishes a destroy it started) and
        # bounded (kills are bounded per task; runners that still do not finish are
        # cancelled after a grace period).
        with trio.CancelScope(shield=True):
            await kill_tasks(ar)
            # A runner cancelled from outside ended without stopping its task: a destroy
            # must not leave it behind.
            for tr in ar.task_runners.values():
                if tr.handle is not None:
                    with trio.move_on_after(tr.kill_bound()):
                        try:
                            await tr.driver.destroy_task(tr.handle.task_id, force=True)
                        except YurtError as e:
                            log.error("destroying task %s: %s", tr.name, e)
            await ar._publish()
            with trio.move_on_after(DESTROY_GRACE):
                await ar.wait_done.wait()
            if not ar.wait_done.is_set():
                log.error("alloc %s: runners did not finish; cancelling them", ar.id)
                ar._run_scope.cancel()
                await ar.wait_done.wait()
    else:
        # Never run: the task runners never started, so there is nothing to wait for.
        for tr in ar.task_runners.values():
            tr.done.set()
        ar.wait_done.set()
        ar._handler_done.set()
    await ar._run_hooks(AllocDestroyHook, "destroy")
    await ar._handler_done.wait()
    await ar._db.delete_allocation_bucket(ar.id)
    ar.broadcaster.close()
    ar.shutdown_done.set()
    ar.destroyed.set()


async def shutdown(ar: AllocRunner) -> None:
    """Agent shutdown: the runners stop, the tasks keep running."""
    release_unstarted(ar)
    async with trio.open_nursery() as nursery:
        for tr in ar.task_runners.values():
            nursery.start_soon(tr.shutdown_and_wait)
    if ar._run_launched:
        await ar.wait_done.wait()
    await ar._run_hooks(AllocShutdownHook, "shutdown")
    ar.shutdown_done.set()
