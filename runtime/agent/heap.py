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
settled. It collects the young generations first, so the burst's garbage is not frozen.

The price: a frozen object that later becomes part of unreachable *cyclic* garbage is never
collected (reference counting still frees everything that is not in a cycle, which is almost
all of a finished allocation). `freeze_long_lived` thaws the frozen set and collects the whole
heap when it has halved or doubled since, and when the caller says it released long-lived
objects (the agent, after it destroyed allocations): leftovers are found then.

Inside a burst there is no such point, and a burst of thousands of starts pays full
collections over everything it has built so far. `freezing_survivors()` covers that: while
it is open, what survives a full collection is frozen right after it (a collector callback;
the collection has just proven it alive), so the next full collection traverses only what
is newer, and the same doubling rule thaws it (the halving one would need a walk of the
frozen set per collection, see `_after_collection`).

While it is open, the youngest generation is also collected less often: every
`YOUNG_THRESHOLD` new containers instead of CPython's 700, and every tenth of the frozen set
once that is larger. A young collection traverses every young container, and in a burst one
of them is the scheduler's batch of runnable tasks, as large as the node: with a fixed
threshold the number of young collections grows with N and so does the cost of each.
Measured (bench_runtime's life, CPU per allocation, collector time in brackets): N = 1,000
4184 µs (699), N = 10,000 4384 µs (654); with CPython's thresholds and no freezing,
7166 µs (2948) at 1,000 and 9420 µs (5512) at 4,000. The price: up to that many more
containers wait to be collected (a tenth of the live heap at most).

Rejected: disabling the collector (cycles are real: exceptions with tracebacks, Trio's tasks and
nurseries).
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

log = logging.getLogger("yurt.memory")

#: The frozen set is thawed (and the whole heap collected once) when it has fallen below
#: this fraction of its size after the last freeze, or grown past this multiple of its size
#: after the last thaw.
THAW_BELOW = 0.5
THAW_ABOVE = 2.0
#: The youngest generation's collection threshold while `freezing_survivors` is open.
YOUNG_THRESHOLD = 20_000
#: ... and at least one young collection's worth of new containers per this many frozen ones.
YOUNG_PER_FROZEN = 10


@dataclass(frozen=True)
class Frozen:
    """What one `freeze_long_lived` did."""

    frozen: int  # containers in the permanent generation afterwards
    collected: int  # unreachable objects the collection before the freeze found
    thawed: bool  # whether the earlier frozen set was put back under the collector first
    seconds: float  # time spent (collection included)


def freeze_long_lived(*, released: bool = False) -> Frozen:
    """Collect the young generations, then freeze every container alive now (see the module
    docstring).

    Call it only where what is alive is meant to stay: after the restore, after a burst of
    allocations has started. Members of the frozen set that reference counting frees leave
    it, but cyclic garbage stays, so the set is thawed and the whole heap collected once
    before freezing again when either
    - it has fallen below `THAW_BELOW` of its size after the last freeze (most of it died:
      what remains may be cycles), or
    - it has grown past `THAW_ABOVE` times its size after the last thaw (as much new as
      old: CPython's own rule for a full collection, with the frozen set as the old
      generation).
    So cyclic garbage in it is bounded by the live heap, and a full collection costs O(1)
    per object frozen, amortised, whatever the heap's size.

    - or `released`: the caller let go of long-lived objects since the last freeze (the
      agent destroyed allocations). Their cycles died inside the frozen set, where reference
      counting cannot see them die and no count shows it (a runner and its task runners
      refer to each other): only a thaw and a full collection free them.

    Returns:
        What was done, for logs and tests.
    """
    global _frozen_after_last, _frozen_after_thaw
    start = time.perf_counter()
    # Each count walks the whole frozen set: one before and one after, no more.
    now = gc.get_freeze_count()
    thawed = now > 0 and (released or now < THAW_BELOW * _frozen_after_last)
    if thawed:
        gc.unfreeze()
    # A full collection only with a thaw: otherwise the old generation's garbage waits for
    # the next thaw, and the call costs what the young generations hold, not the heap.
    collected = gc.collect(2 if thawed or not now else 1)
    gc.freeze()
    after = gc.get_freeze_count()
    if now and not thawed and after > THAW_ABOVE * _frozen_after_thaw:
        thawed = True
        gc.unfreeze()
        collected += gc.collect()
        gc.freeze()
        after = gc.get_freeze_count()
    _frozen_after_last = after
    if thawed or not now:
        _frozen_after_thaw = _frozen_after_last
    result = Frozen(frozen=_frozen_after_last, collected=collected, thawed=thawed,
                    seconds=time.perf_counter() - start)
    log.debug("froze %d long-lived containers (%d collected, thawed: %s) in %.3fs",
              result.frozen, result.collected, result.thawed, result.seconds)
    return result


@contextmanager
def freezing_survivors() -> Iterator[None]:
    """While open, freeze what survives each full collection and collect the youngest
    generation less often (see the module docstring); when it closes, thaw everything."""
    global _frozen_after_last, _frozen_after_thaw
    thresholds = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, *thresholds[1:])
    gc.callbacks.append(_after_collection)
    try:
        yield
    finally:
        gc.callbacks.remove(_after_collection)
        gc.set_threshold(*thresholds)
        # What the process froze while this was open is the collector's again: an agent that
        # ends (in a test, or embedded) must not keep its whole heap for good.
        gc.unfreeze()
        _frozen_after_last = _frozen_after_thaw = 0


def _after_collection(phase: str, info: dict[str, int]) -> None:
    """A collector callback: after a full collection, freeze its survivors; when the frozen
    set has doubled since the last thaw (the rule of `freeze_long_lived`), thaw it instead,
    so the next full collection goes through the whole heap once and freezes its survivors.

    The frozen set is not counted here: `gc.get_freeze_count` walks all of it, which would
    make every full collection cost the whole heap again. What this collection adds is
    counted instead (it has just traversed those objects anyway); deaths inside the frozen
    set go unseen, so the estimate only overshoots, and a thaw comes early, never late.
    """
    global _frozen_after_last, _frozen_after_thaw
    if phase != "stop" or info.get("generation") != 2:
        return
    survivors = len(gc.get_objects(generation=2))
    gc.freeze()
    _frozen_after_last += survivors
    # Young collections also traverse the scheduler's batch of runnable tasks, which a burst
    # makes as large as the node: their number must shrink as the heap grows.
    gc.set_threshold(max(YOUNG_THRESHOLD, _frozen_after_last // YOUNG_PER_FROZEN),
                     *gc.get_threshold()[1:])
    if not _frozen_after_thaw:
        _frozen_after_thaw = _frozen_after_last
    elif _frozen_after_last > THAW_ABOVE * _frozen_after_thaw:
        gc.unfreeze()
        _frozen_after_last = _frozen_after_thaw = 0


#: The size of the frozen set right after the last `freeze_long_lived`, and after the last
#: one that thawed it first (one pair per process, as there is one collector).
_frozen_after_last = 0
_frozen_after_thaw = 0
