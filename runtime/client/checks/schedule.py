"""`CheckSchedule`: when each service check of the agent is due next (sans-io: a heap of due
times, the time always passed in).

Why a heap and not a timer per check: an agent with 1,000 checks at a 10 s interval has 100
probes a second to start. One loop that sleeps until the earliest due time and pops what is
due costs O(log n) per probe and no task, no cancel scope and no wake-up per idle check.

Rules (Nomad's checker runs a check at once, then `interval` after each run ends):
- `add` makes a check due at `now` (plus an optional offset that spreads a burst of checks
  added together); adding a known key again replaces it (a new interval takes effect at once).
- `pop_due` hands out every check due by `now` (or, with a slack, due within the slack and
  a tenth of its interval: a few probes share one wake-up) and takes it out of the heap:
  while its probe is in flight it is never due again, so a probe that overruns its interval
  cannot pile up.
- `finished` puts a check back, due `interval` after its probe ended.
- `remove` forgets a check, in flight or not; a probe of a removed (or replaced) check that
  finishes later is ignored, because every entry carries the generation it was added with.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import Final, Generic, TypeVar, final

K = TypeVar("K")
#: How early, as a fraction of its interval, a check may run to share a wake-up.
EARLY_FRACTION: Final = 0.1


@dataclass
class _Entry:
    interval: float
    generation: int
    in_flight: bool = False


@final
class CheckSchedule(Generic[K]):
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, K, int]] = []
        self._entries: dict[K, _Entry] = {}
        self._generations = itertools.count()
        self._seq = itertools.count()  # ties broken by insertion order, never by key

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def add(self, key: K, interval: float, now: float, offset: float = 0.0) -> None:
        generation = next(self._generations)
        self._entries[key] = _Entry(interval, generation)
        self._push(now + offset, key, generation)

    def remove(self, key: K) -> None:
        self._entries.pop(key, None)  # its heap entry is skipped when it comes up

    def next_due(self) -> float | None:
        """The earliest due time of a check not in flight; None when there is none."""
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: float, slack: float = 0.0) -> list[tuple[K, int]]:
        """Every check due by `now`, with its generation, in due order; they are in flight
        until `finished`. With `slack`, checks due a little later come too (at most
        `slack`, and at most a tenth of their interval, so none runs much too often)."""
        due: list[tuple[K, int]] = []
        while True:
            self._drop_stale()
            if not self._heap:
                return due
            at, _, key, generation = self._heap[0]
            if at > now + min(slack, self._entries[key].interval * EARLY_FRACTION):
                return due
            heapq.heappop(self._heap)
            self._entries[key].in_flight = True
            due.append((key, generation))

    def finished(self, key: K, generation: int, now: float) -> bool:
        """A probe of `key` (as popped, with its generation) ended at `now`: due again an
        interval later. False when the check was removed or replaced meanwhile."""
        entry = self._entries.get(key)
        if entry is None or entry.generation != generation:
            return False
        entry.in_flight = False
        self._push(now + entry.interval, key, generation)
        return True

    def _push(self, due: float, key: K, generation: int) -> None:
        heapq.heappush(self._heap, (due, next(self._seq), key, generation))

    def _drop_stale(self) -> None:
        heap = self._heap
        while heap:
            _, _, key, generation = heap[0]
            entry = self._entries.get(key)
            if entry is not None and entry.generation == generation and not entry.in_flight:
                return
            heapq.heappop(heap)
