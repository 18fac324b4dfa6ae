"""Keep the cyclic garbage collector's cost tied to what changes, not to what the agent holds.

CPython frees most objects by reference counting; its cyclic collector exists for the rest and
works by traversing tracked containers. A young collection traverses only young objects, but a
full one traverses every container the process holds, and it runs whenever the objects that
survived into the old generation since the last one reach a quarter of it. An agent that holds
10,000 allocations (runners, task runners, their Trio tasks, nurseries, cancel scopes, events,
task states) holds millions of containers that live as long as their allocation: each burst of
work re-traverses all of them, so the per-allocation cost of a burst grows with the number of
allocations already running.

`gc.freeze()` moves every container tracked now into a permanent generation that collections
never traverse again. The agent calls `freeze_long_lived` where everything alive is long-lived
and a burst has just ended: after the restore at start, and after a burst of starts has
settled. It collects first, so what is frozen is live, not garbage.

The price, and why this is not done after every collection: a frozen object that later becomes
part of unreachable *cyclic* garbage is never collected (reference counting still frees
everything that is not in a cycle, which is almost all of a finished allocation). `thaw` puts
the frozen objects back under the collector; `freeze_long_lived` calls it first when most of
what it froze last time has been freed since, so such leftovers are found by that collection
and bounded by what churns between two freezes.

Rejected: raising the collection thresholds (fewer collections, same growth per collection);
disabling the collector (cycles are real: exceptions with tracebacks, Trio's tasks and
nurseries); freezing from a `gc.callbacks` hook after every full collection (freezes whatever
is in flight at an arbitrary moment, and a callback must not run a collection itself).
"""

from __future__ import annotations

import gc
import logging
import time
from dataclasses import dataclass

log = logging.getLogger("yurt.memory")


@dataclass(frozen=True)
class Frozen:
    """What one `freeze_long_lived` did."""

    frozen: int  # containers in the permanent generation afterwards
    collected: int  # unreachable objects the collection before the freeze found
    thawed: bool  # whether the earlier frozen set was put back under the collector first
    seconds: float  # time spent (collection included)


def thaw() -> None:
    """Put every frozen container back under the collector (`gc.unfreeze`)."""
    gc.unfreeze()


def freeze_long_lived(*, thaw_below: float = 0.5) -> Frozen:
    """Collect, then freeze every container alive now (see the module docstring).

    Call it only where what is alive is meant to stay: after the restore, after a burst of
    allocations has started. Members of the frozen set that reference counting frees leave
    it, so its size says how much of it is still alive: when it has fallen below
    `thaw_below` of its size after the last freeze, most of what was frozen is gone and any
    cyclic leftovers are worth one full collection, so it is thawed first.

    Returns:
        What was done, for logs and tests.
    """
    global _frozen_after_last
    start = time.perf_counter()
    thawed = gc.get_freeze_count() < thaw_below * _frozen_after_last
    if thawed:
        thaw()
    collected = gc.collect()
    gc.freeze()
    _frozen_after_last = gc.get_freeze_count()
    result = Frozen(frozen=_frozen_after_last, collected=collected, thawed=thawed,
                    seconds=time.perf_counter() - start)
    log.debug("froze %d long-lived containers (%d collected, thawed: %s) in %.3fs",
              result.frozen, result.collected, result.thawed, result.seconds)
    return result


#: The size of the frozen set right after the last `freeze_long_lived` (one per process, as
#: the collector is).
_frozen_after_last = 0
