"""`Restarter`: Nomad's `check_restart` decision for one check (sans-io; the time is passed
in), as client/serviceregistration/watcher.go makes it.

A check's results are fed in as they come. A passing result (and, with `ignore_warnings`, a
warning) clears the unhealthy state. A failing or pending one inside the grace period (from
the task's start) is ignored; after it, the first one marks the check unhealthy since `now`,
and the task is restarted once it has stayed unhealthy for `interval × (limit − 1)` (so with
`limit = 1`, at the first failure after grace). A restart is a failure for the restart
policy, with Nomad's reason `healthcheck: check "<name>" unhealthy`; the check is watched
again from the task's next start (`started`), as Nomad re-registers it then.
"""

from __future__ import annotations

from typing import final

from yurt.runtime.structs.checks import CHECK_FAILURE, CHECK_PENDING

#: Consul's statuses, for completeness of Nomad's table (Nomad checks have none of these).
_CRITICAL = "critical"
_WARNING = "warning"


def restart_reason(check_name: str) -> str:
    return f'healthcheck: check "{check_name}" unhealthy'


@final
class Restarter:
    def __init__(self, *, check_name: str, limit: int, grace: float, interval: float,
                 ignore_warnings: bool = False) -> None:
        self.check_name = check_name
        self.grace = grace
        self.time_limit = interval * max(limit - 1, 0)
        self.ignore_warnings = ignore_warnings
        self.grace_until: float | None = None  # None: the task is not running
        self.unhealthy_since: float | None = None

    def started(self, now: float) -> None:
        """The task (re)started at `now`: a new grace period, nothing unhealthy yet."""
        self.grace_until = now + self.grace
        self.unhealthy_since = None

    def stopped(self) -> None:
        self.grace_until = None
        self.unhealthy_since = None

    def apply(self, status: str, now: float) -> bool:
        """One result; True when the task must be restarted now (the watch then stops
        until `started`)."""
        if self.grace_until is None:
            return False
        if (status == _WARNING and self.ignore_warnings) or status not in (
                _CRITICAL, CHECK_FAILURE, CHECK_PENDING, _WARNING):
            self.unhealthy_since = None
            return False
        if now < self.grace_until:
            return False
        if self.unhealthy_since is None:
            self.unhealthy_since = now
        if now >= self.unhealthy_since + self.time_limit:
            self.stopped()
            return True
        return False
