"""What a re-render does to the task, and when a re-render happens: pure decisions, with time
passed in (Nomad's `onTemplateRendered` and consul-template's `wait` quiescence).

`decide(changed)`: the templates whose file changed on a re-render give one action. Any
`restart` template restarts the task (and nothing else runs: the restarted task reads every
file fresh); otherwise each distinct `change_signal` is sent once and each `change_script` runs;
`noop` templates do nothing. The splay is the largest splay among the templates that act:
the action waits a random time below it, so a fleet of tasks does not act at once.

`Quiescence(min, max)`: after a change, render once no further change came for `min`, but
never later than `max` after the first change of the burst (consul-template's `wait`). Without
a `wait` block a change renders at once.

`missing_message(deps)`: Nomad's "Missing: …" text (sorted, at most three, "and N more").
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from yurt.runtime.structs.template import ChangeScript, Template, WaitConfig

MISSING_DEP_EVENT_LIMIT: Final = 3


@dataclass
class ChangeAction:
    restart: bool = False
    signals: list[str] = field(default_factory=list)
    scripts: list[ChangeScript] = field(default_factory=list)
    splay: int = 0  # ns

    @property
    def acts(self) -> bool:
        return self.restart or bool(self.signals) or bool(self.scripts)


def decide(changed: Sequence[Template]) -> ChangeAction:
    action = ChangeAction()
    for tmpl in changed:
        if tmpl.change_mode == "noop":
            continue
        if tmpl.change_mode == "restart":
            action.restart = True
        elif tmpl.change_mode == "signal":
            if tmpl.change_signal not in action.signals:
                action.signals.append(tmpl.change_signal)
        elif tmpl.change_mode == "script" and tmpl.change_script is not None:
            action.scripts.append(tmpl.change_script)
        action.splay = max(action.splay, tmpl.splay)
    if action.restart:
        action.signals, action.scripts = [], []
    return action


def splay_delay(splay: int, rng: random.Random) -> int:
    """A random wait in [0, splay) ns (Go's rand.Int63n)."""
    return rng.randrange(splay) if splay > 0 else 0


@dataclass
class Quiescence:
    """One template's (or the task's) `wait`: when the pending burst of changes is due."""

    wait: WaitConfig | None
    first: int | None = None  # ns, the first change of the pending burst
    last: int | None = None

    def change(self, now: int) -> None:
        if self.first is None:
            self.first = now
        self.last = now

    def due_at(self) -> int | None:
        """When to render (ns), or None when nothing is pending."""
        if self.first is None or self.last is None:
            return None
        if self.wait is None:
            return self.last
        low = self.wait.min or 0
        high = self.wait.max if self.wait.max is not None else 4 * low
        return min(self.last + low, self.first + max(high, low))

    def rendered(self) -> None:
        self.first = self.last = None


def task_wait(templates: Sequence[Template]) -> WaitConfig | None:
    """One wait for a task's templates, which render together: the longest one given."""
    waits = [t.wait for t in templates if t.wait is not None]
    if not waits:
        return None
    mins = [w.min for w in waits if w.min is not None]
    maxs = [w.max for w in waits if w.max is not None]
    return WaitConfig(min=max(mins) if mins else None, max=max(maxs) if maxs else None)


def missing_message(deps: Sequence[str]) -> str:
    names = sorted(set(deps))
    if len(names) > MISSING_DEP_EVENT_LIMIT:
        extra = len(names) - MISSING_DEP_EVENT_LIMIT
        names = [*names[:MISSING_DEP_EVENT_LIMIT], f"and {extra} more"]
    return "Missing: " + ", ".join(names)
