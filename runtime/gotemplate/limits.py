"""What one execution of a template may cost: its steps, its text, its nesting.

Why: templates come from whoever submits a job, and the agent renders them. Go's text/template
trusts its author (no budget at all beyond `maxExecDepth`); here a template must not be able to
stall or exhaust the agent, so every execution carries a `Limits`:

- `steps`: node evaluations (statements, pipelines, function calls). A render over 1000
  services with twenty actions each takes ~10^5; the default 5·10^6 is ~1-2 s of CPU here, so
  a doubling `define` chain, `range 1000000000` or a runaway loop ends as a template error
  instead of spinning forever. The budget can be shared by several executions (`spent`).
  A function's work grows with its data, which one step per call would not see: the
  evaluator charges one step per `DATA_PER_STEP` characters (or elements) a call takes and
  returns, and a function whose work is not linear at C speed charges its own (`charge`:
  `regexReplaceAll` runs a Python loop per match).
- `output`: characters the execution may print, and the size of any one string a function
  returns (4 MiB: 64 times Nomad's cap on a variable's items, `MAX_ITEMS_BYTES`, and far
  beyond any configuration file a task reads). Functions whose result can be a product of
  their inputs (`join`, `replaceAll`, `regexReplaceAll`, `printf`, `toJSONPretty`, and the
  variadic `print`, `println`, `html`, `js`, `urlquery`) check the size before they build
  it, so the cap bounds memory and not only the file.
- `depth`: nested `{{template}}` calls. Go allows 100000 (`maxExecDepth`); Python's stack
  does not, so the cap is 100, and deeper Python recursion (nesting inside one template) is
  turned into a template error rather than a RecursionError.
- `stop`: set by the caller that gave up on the render (a cancelled task), so a render in a
  worker thread ends at its next check instead of running out its budget. The evaluator
  looks at it whenever its step count reaches a threshold (`STOP_CHECK_EVERY` past the last
  look), from a single step or from a charge alike: a charge jumps the count, so a test of
  `steps % STOP_CHECK_EVERY == 0` could be skipped for ever.

What a step stands for, beyond the evaluator's own node evaluations:
- data a call touches at C speed: `DATA_PER_STEP` characters (or list elements) a step;
- a Python object a function makes per element of its result (`split`'s strings,
  `parseJSON`'s values), or a Python call per element of its operand (`toJSON`):
  `ELEMENT_STEPS` each, charged before or while it is built, so the budget bounds the memory
  that results kept in variables hold (~50-90 bytes an object, as ~16 characters of a string
  do) and the time of walks in Python;
- time that cannot be counted in advance (a regexp's compile or search, whose worst case is
  far above its usual cost): `NS_PER_STEP` of the thread's CPU time, measured, after a check
  (`afford`) that the worst case fits in what remains of the budget, so one call cannot
  outrun the budget either.

Go's fmt caps a width or precision at 10^6 (`tooLarge` in fmt/print.go); that is fmt's own
rule, kept in `gofmt` with the same constant.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Final, Protocol

MAX_STEPS: Final = 5_000_000
MAX_OUTPUT: Final = 4 << 20
MAX_DEPTH: Final = 100
#: fmt/print.go's `tooLarge`: a width or precision beyond ±10^6 is refused.
FMT_MAX_NUMBER: Final = 1_000_000
#: Steps between two looks at `stop` (a charge carrying the count past the mark looks at once).
STOP_CHECK_EVERY: Final = 1 << 12
#: Characters (or elements) of a call's arguments and result that count as one step: C-speed
#: string work is a few ns a character, a step ~0.2 µs, so this overcharges, on purpose.
DATA_PER_STEP: Final = 16
#: Steps for each Python object a function creates per element of its result (a str of
#: `split`, a value of `parseJSON`): ~0.2 µs and 50-90 bytes each.
ELEMENT_STEPS: Final = 2
#: Thread CPU time that counts as one step, where work is measured rather than counted.
NS_PER_STEP: Final = 200

_running = threading.local()


class Meter(Protocol):
    """What counts a running execution's work (the evaluator)."""

    def charge(self, steps: int) -> None: ...

    def afford(self, steps: int) -> None: ...


@dataclass(slots=True)
class Limits:
    """The bounds of one render. `spent` carries the steps from one execution to the next,
    so a caller that passes the same `Limits` to several executions (a task's templates,
    over several passes) gives them one budget, not one each."""

    steps: int = MAX_STEPS
    output: int = MAX_OUTPUT
    depth: int = MAX_DEPTH
    stop: threading.Event = field(default_factory=threading.Event)
    spent: int = 0


def charge(steps: int) -> None:
    """Count `steps` of a function's work against the execution running on this thread
    (none: nothing to count against, as when a function is called outside a template).

    Raises:
        TemplateError: the execution's budget is spent (raised by the execution).
    """
    meter: Meter | None = getattr(_running, "meter", None)
    if meter is not None:
        meter.charge(steps)


def afford(steps: int) -> None:
    """Refuse, before it starts, work that may cost up to `steps` when what remains of the
    running execution's budget is less (nothing is counted: the caller charges what the work
    did cost once it is done).

    Raises:
        TemplateError: `steps` exceed what remains of the budget (raised by the execution).
    """
    meter: Meter | None = getattr(_running, "meter", None)
    if meter is not None:
        meter.afford(steps)


@contextmanager
def charging(meter: Meter) -> Iterator[None]:
    """Make `meter` what `charge` and `afford` count against on this thread, for the
    duration (an execution)."""
    previous = getattr(_running, "meter", None)
    _running.meter = meter
    try:
        yield
    finally:
        _running.meter = previous
