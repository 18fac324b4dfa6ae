"""A group's `shutdown_delay`: the wait between deregistering the group's services and
killing its tasks (Nomad's group_service_hook.go `PreKill`, whose delay follows the
deregistration).

Runs as the allocation's last prekill hook, after group_services has deregistered, for a
group that has a delay when the allocation starts; the delay is read from the allocation's
job when the kill comes (an update in place may have changed it). Skipped when the server
asked for no delay (`DesiredTransition.NoShutdownDelay`, `nomad alloc stop
-no-shutdown-delay`), as Nomad's `ShouldIgnoreShutdownDelay`. Nomad logs the wait and emits
no event; so does this hook.

An update that asks for no delay while the hook waits ends the wait (Nomad's
`shutdownDelayCtx`).

Invariant: it waits at most the delay, on the real clock, and changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from yurt.hooks.base import AllocPrekillHook
from yurt.runtime.structs import Allocation

log = logging.getLogger("yurt.allocrunner")


class GroupShutdownDelayHook(AllocPrekillHook):
    name = "group_shutdown_delay"

    def __init__(self, alloc: Callable[[], Allocation],
                 skipped: trio.Event | None = None) -> None:
        """`skipped`: set when a server copy asks for no delay (the alloc runner's
        `shutdown_delay_skipped`): it ends the wait."""
        self._alloc = alloc
        self._skipped = skipped if skipped is not None else trio.Event()

    async def prekill(self) -> None:
        alloc = self._alloc()  # the job as it is now: an update in place may change the delay
        group = alloc.job.lookup_group(alloc.task_group) if alloc.job is not None else None
        delay = group.shutdown_delay if group is not None else None
        if (not delay or self._skipped.is_set()
                or alloc.desired_transition.should_ignore_shutdown_delay()):
            await trio.lowlevel.checkpoint()
            return
        log.debug("alloc %s: waiting for the group's shutdown_delay of %d ns before killing "
                  "its tasks", alloc.id, delay)
        # Nomad's alloc_runner.go `Update` cancels `shutdownDelayCtx` when a copy asks for
        # no delay (a `job stop -no-shutdown-delay` after a plain stop): so does this.
        with trio.move_on_after(delay / 1e9):
            await self._skipped.wait()
