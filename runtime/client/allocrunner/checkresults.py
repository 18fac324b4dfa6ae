"""`CheckResults`: the latest result of every service check of one allocation.

The service-check hooks write it; allocation health (deployments, drains) and the client API
read it. One instance per `AllocRunner`, in memory only: after an agent restart checks run
again and report fresh results, as Nomad's client does.

Invariant: `changed` is a fresh `trio.Event` after every set, so a reader that waits on the
event it read before looking at `results` never misses a change.
"""

from __future__ import annotations

import trio

from yurt.runtime.structs.checks import CheckQueryResult


class CheckResults:
    def __init__(self) -> None:
        self._results: dict[str, CheckQueryResult] = {}
        self.changed = trio.Event()

    def results(self) -> dict[str, CheckQueryResult]:
        """A copy: check ID → latest result."""
        return dict(self._results)

    def set(self, result: CheckQueryResult) -> None:
        self._results[result.id] = result
        self._notify()

    def remove(self, check_id: str) -> None:
        if self._results.pop(check_id, None) is not None:
            self._notify()

    def _notify(self) -> None:
        self.changed.set()
        self.changed = trio.Event()
