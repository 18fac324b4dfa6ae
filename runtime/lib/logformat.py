"""hclog's line formats for the agent's log, shared by the log itself (runtime/agent/log.py
`configure`) and what streams it (runtime/lib/logmonitor.py, `/v1/agent/monitor`).

`HumanFormatter` writes hclog's text lines, `JsonFormatter` its JSON lines (`log_json`); both
read a record's structured fields from `extra=fields(...)` (lib/logfields.py). `LEVELS` maps
Nomad's level names (case-insensitive; trace is debug here) to the stdlib's. Pure: no handler,
no logger, no I/O.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Final, final

from yurt.runtime.lib.logfields import FIELDS


def level_number(name: str) -> int:
    """The stdlib level of Nomad's level `name` (any case).

    Raises:
        ValueError: `name` is not one of `LEVELS`.
    """
    try:
        return LEVELS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown log level {name!r}; expected one of "
                         f"{', '.join(LEVELS)}") from None


#: `--log-level` values, Nomad's names (case-insensitive); trace is debug here.
LEVELS: Final[dict[str, int]] = {
    "trace": logging.DEBUG, "debug": logging.DEBUG, "info": logging.INFO,
    "warn": logging.WARNING, "error": logging.ERROR,
}

_NAMES: Final = {logging.DEBUG: "debug", logging.INFO: "info", logging.WARNING: "warn",
                 logging.ERROR: "error", logging.CRITICAL: "error"}


def _timestamp(created: float) -> str:
    millis = int(created * 1000) % 1000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{millis:03d}Z"


def _module(record: logging.LogRecord) -> str:
    return record.name.removeprefix("yurt.").removeprefix("yurt") or "agent"


def _fields_of(record: logging.LogRecord) -> dict[str, Any]:
    values = getattr(record, FIELDS, None)
    return dict(values) if isinstance(values, dict) else {}


def _scalar(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    # hclog quotes a value with spaces, so `key=value` pairs split on spaces stay pairs.
    return json.dumps(text) if (not text or any(c in text for c in ' "=\n')) else text


def _caller(record: logging.LogRecord) -> str:
    """hclog's caller (`IncludeLocation`): the logging call's file, from the package's root
    (`runtime/agent/agent.py`), and line."""
    path = record.pathname.replace("\\", "/")
    at = max(path.rfind(root) for root in ("/runtime/", "/hooks/", "/store/"))
    if at >= 0:
        path = path[at + 1:]
    return f"{path}:{record.lineno}"


@final
class HumanFormatter(logging.Formatter):
    """hclog's text lines: time, level, module, message, then `key=value` fields; with
    `include_location`, the caller after the level, as hclog writes it."""

    def __init__(self, include_location: bool = False) -> None:
        super().__init__()
        self.include_location = include_location

    def format(self, record: logging.LogRecord) -> str:
        level = f"[{_NAMES.get(record.levelno, 'info').upper()}]"
        where = f"{_caller(record)}: " if self.include_location else ""
        line = (f"{_timestamp(record.created)} {level:<7} {where}{_module(record)}: "
                f"{record.getMessage()}")
        values = _fields_of(record)
        if values:
            line += ": " + " ".join(f"{k}={_scalar(v)}" for k, v in values.items())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


@final
class JsonFormatter(logging.Formatter):
    """hclog's JSON lines (`log_json`): `@timestamp`, `@level`, `@module`, `@message`, and the
    fields at the top level, one object per line; with `include_location`, `@caller`."""

    def __init__(self, include_location: bool = False) -> None:
        super().__init__()
        self.include_location = include_location

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"@timestamp": _timestamp(record.created),
                               "@level": _NAMES.get(record.levelno, "info"),
                               "@module": _module(record), "@message": record.getMessage()}
        if self.include_location:
            out["@caller"] = _caller(record)
        for key, value in _fields_of(record).items():
            out.setdefault(key, value)
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)
