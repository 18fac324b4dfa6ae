"""Signal names as Nomad takes them, checked where they enter yurt (the API and the CLI).

Nomad's drivers send a name they do not know as SIGINT (consul-template's `signals.Parse` misses,
the driver falls back), and SIGINT stops most tasks: a typo in `alloc signal -s` would kill what
it meant to poke. So every boundary refuses unknown names before a task is touched, and passes
on the canonical spelling. The accepted names are Nomad's `SignalLookup`: the Linux signals by
their `SIG…` names, in any case; the `SIG` prefix may be left out as kill(1) allows. Real-time
signals are not in Nomad's table and are refused.
"""

from __future__ import annotations

import signal
from typing import Final

#: Nomad's `signals.SignalLookup` on Linux (SIGUNUSED is SIGSYS there, and gone from Python).
#: `__members__` keeps the aliases Nomad also lists (SIGIOT, SIGCLD, SIGPOLL).
SIGNAL_NAMES: Final = frozenset(
    name for name in signal.Signals.__members__ if not name.startswith("SIGRT"))


def parse_signal_name(name: str) -> str:
    """The canonical name (`"SIGHUP"`) of a signal name such as `"sighup"` or `"HUP"`.

    Raises:
        ValueError: `name` is not a signal Nomad knows, with a message for the user.
    """
    upper = name.strip().upper()
    canonical = upper if upper.startswith("SIG") else "SIG" + upper
    if canonical not in SIGNAL_NAMES:
        shown = name if len(name) <= 40 else name[:37] + "..."
        raise ValueError(f'unknown signal "{shown}"; expected a name such as "SIGHUP", '
                         '"SIGUSR1" or "SIGTERM"')
    return canonical
