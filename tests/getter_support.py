"""Small pieces the getter's tests share.

`stop_at_call(n)` stands for the cancellation check the getter's blocking copies call between
chunks and reads: it raises on its `n`th call, so a test can tell that a copy or a walk stops
at the first check that says so, long before the work would end by itself.
"""

from __future__ import annotations

from collections.abc import Callable


def stop_at_call(n: int) -> Callable[[], None]:
    """A check that raises `KeyboardInterrupt` on its `n`th call: any `BaseException` stands
    for Trio's `Cancelled` in the agent, which no `except Exception` in the getter may swallow."""
    calls = 0

    def check() -> None:
        nonlocal calls
        calls += 1
        if calls == n:
            raise KeyboardInterrupt

    return check
