"""The restart tracker: should a task that stopped run again, and after how long?

A pure state machine, Nomad's `client/allocrunner/taskrunner/restarts/restarts.go`
`RestartTracker` rule for rule: the task runner feeds it what happened (a start error, an exit
result, a user-triggered restart, a kill) and asks `decide(now)` once per stop. Time is a
parameter (monotonic nanoseconds), never read here, so the tests walk hours of policy windows in
microseconds, and jitter comes from an injected `random.Random`.

Invariants:
- The delay returned is the delay the runner sleeps. "Restart within policy" is never 0
  (jitter is drawn from [delay, 1.25 × delay), and a 0 s delay counts as 1 ns): Nomad once
  returned 0 here by accident (PR #4909) and restarted crashing tasks in a tight loop.
- A user-triggered restart (`failure=False`) is immediate and not counted against the policy.
- Every decision clears the inputs: each stop is judged on its own facts.
- The attempt window opens at construction and restarts when a decision comes after it ended.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

from yurt.runtime.lib.durations import format_duration
from yurt.runtime.structs import Lifecycle, RestartPolicy

if TYPE_CHECKING:
    from yurt.runtime.client.drivers.protocol import ExitResult

REASON_NO_RESTARTS_ALLOWED: Final = "Policy allows no restarts"
REASON_UNRECOVERABLE: Final = "Error was unrecoverable"
REASON_WITHIN_POLICY: Final = "Restart within policy"
REASON_DELAY: Final = "Exceeded allowed attempts, applying a delay"
REASON_SUCCESSFUL: Final = "Restart unnecessary as task terminated successfully"

JITTER: Final = 0.25

#: One generator for every tracker that is not given its own: a `Random` carries 2.5 KB of
#: state, which per task adds up with thousands of tasks.
_SHARED_RNG: Final = random.Random()

# What the runner does next; the names are Nomad's task event types for the outcome.
Outcome = Literal["Killed", "Restarting", "Not Restarting", "Terminated", ""]


@dataclass(frozen=True)
class Decision:
    outcome: Outcome
    delay: int  # nanoseconds to wait before the next start (Restarting only)
    reason: str


def restarts_on_success(job_type: str, lifecycle: Lifecycle | None) -> bool:
    """Whether a task that exits 0 is restarted: services yes, batch no; prestart and
    poststart tasks only if they are sidecars; poststop never."""
    if lifecycle is not None and lifecycle.hook:
        if lifecycle.hook == "poststop":
            return False
        return lifecycle.sidecar
    return job_type not in ("batch", "sysbatch")


class RestartTracker:
    """Nomad's restart policy for one task runner's lifetime (the count is not persisted)."""

    def __init__(self, policy: RestartPolicy, job_type: str, lifecycle: Lifecycle | None,
                 *, now: int, rng: random.Random | None = None) -> None:
        self.attempts = policy.attempts or 0
        self.interval = policy.interval or 0
        self.delay = policy.delay or 0
        self.mode = policy.mode or "fail"
        self.on_success = restarts_on_success(job_type, lifecycle)
        self.count = 0
        self.window_start = now
        self._rng = rng or _SHARED_RNG
        self._clear()

    def _clear(self) -> None:
        self._start_error: BaseException | None = None
        self._start_error_recoverable = False
        self._exit: ExitResult | None = None
        self._restart_triggered = False
        self._failure = False
        self._killed = False

    # ------------------------------------------------------------------ inputs

    def set_start_error(self, error: BaseException, *, recoverable: bool) -> None:
        self._start_error, self._start_error_recoverable = error, recoverable
        self._failure = True

    def set_exit_result(self, result: ExitResult) -> None:
        self._exit = result
        self._failure = True

    def set_restart_triggered(self, *, failure: bool) -> None:
        if failure:
            self._failure = True
        else:
            self._restart_triggered = True

    def set_killed(self) -> None:
        self._killed = True

    # ------------------------------------------------------------------ decision

    def decide(self, now: int) -> Decision:
        """What to do after the task stopped, at monotonic time `now` (ns)."""
        try:
            return self._decide(now)
        finally:
            self._clear()

    def _decide(self, now: int) -> Decision:
        if self._killed:
            return Decision("Killed", 0, "")
        if self._restart_triggered:
            return Decision("Restarting", 0, "")
        exit_ok = self._exit is not None and self._exit.successful()
        if self.attempts == 0:
            if not self.on_success and exit_ok:
                return Decision("Terminated", 0, REASON_NO_RESTARTS_ALLOWED)
            return Decision("Not Restarting", 0, REASON_NO_RESTARTS_ALLOWED)

        window_end = self.window_start + self.interval
        if now > window_end:
            self.count = 0
            self.window_start = now
            window_end = now + self.interval
        self.count += 1

        if not self._failure:
            # Nomad's quirk, kept on purpose: nothing went wrong, yet the runner asked.
            return Decision("", 0, "")
        if self._start_error is not None:
            if not self._start_error_recoverable:
                return Decision("Not Restarting", 0, REASON_UNRECOVERABLE)
        elif exit_ok and not self.on_success:
            return Decision("Terminated", 0, REASON_SUCCESSFUL)

        if self.count > self.attempts:
            if self.mode == "fail":
                return Decision("Not Restarting", 0,
                                f"Exceeded allowed attempts {self.attempts} in interval "
                                f'{format_duration(self.interval)} and mode is "fail"')
            return Decision("Restarting", max(window_end - now, 0), REASON_DELAY)
        return Decision("Restarting", self._jitter(), REASON_WITHIN_POLICY)

    def _jitter(self) -> int:
        d = self.delay or 1
        return d + int(self._rng.randrange(d) * JITTER)
