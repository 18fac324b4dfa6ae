"""The structured fields of a log line: `log.info("task started", extra=fields(task="t"))`.

Any module logs to its `yurt.*` logger with `extra=fields(...)`; the agent's formatters
(`agent/log.py`, `HumanFormatter` and `JsonFormatter`) write them as hclog's `key=value` pairs
or JSON members. A record without them is just a message.

Invariant: the fields ride on the record under the one attribute `FIELDS`, as a dict; this
module imports nothing, so a client or server module can log fields without importing the agent.
"""

from __future__ import annotations

from typing import Any, Final

#: The record attribute that holds a line's structured fields.
FIELDS: Final = "yurt_fields"


def fields(**values: Any) -> dict[str, Any]:
    """`extra=` for a log call: `log.info("task started", extra=fields(task="t"))`."""
    return {FIELDS: values}
