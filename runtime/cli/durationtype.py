"""`GO_DURATION`: a click option type for Go durations ("300s", "5m", "1h30m"), as Nomad's
flags and yurt's job files spell every duration (runtime/lib/durations.py `parse_duration`).

Its value is seconds (a float), what the commands' code works in. A bare number is refused,
as Go's `time.ParseDuration` refuses it ("300" has no unit); "0" is zero, as in Go.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from yurt.runtime.lib.durations import parse_duration

if TYPE_CHECKING:  # generic in the typed click; not subscripted at run time (older clicks)
    _ParamType = click.ParamType[float]
else:
    _ParamType = click.ParamType


class GoDuration(_ParamType):
    """A Go duration, converted to seconds."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> float:
        if isinstance(value, float):
            return value
        try:
            return parse_duration(str(value)) / 1e9
        except ValueError as e:
            self.fail(str(e), param, ctx)


GO_DURATION = GoDuration()
