"""The node simulator's profile: what its nodes offer and how their allocations behave.

A TOML file (stdlib `tomllib`), every key optional:

    [node]
    datacenter = "dc1"
    node_class = ""
    cpu = 4000                # MHz, the node's CPU shares
    memory_mb = 8192
    meta = { rack = "r1" }
    [[node.devices]]          # device groups, as a fingerprinter would report them
    vendor = "nvidia"
    type = "gpu"
    name = "T4"
    count = 1                 # instances
    attributes = { memory = "16 GiB" }

    [alloc]
    start_delay = [0.1, 0.5]  # seconds, drawn uniformly per allocation
    run_time = [1.0, 5.0]     # how long a batch allocation (or a failing one) runs
    failure_probability = 0.0

Input errors are the user's: `ProfileError` names the file, the field and what it expected,
and nothing half-read is used. Unknown keys are refused too (a misspelt `memory_mb` would
silently give every node the default).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, final

from yurt.runtime.client.allocrunner.simulated import AllocProfile

DEFAULT_CPU: Final = 4000
DEFAULT_MEMORY_MB: Final = 8192


class ProfileError(Exception):
    """A profile that cannot be used: `file: field: expected …, got …`."""


@final
@dataclass(frozen=True)
class DeviceProfile:
    vendor: str
    type: str
    name: str
    count: int = 1
    attributes: dict[str, str] = field(default_factory=dict)


@final
@dataclass(frozen=True)
class NodeProfile:
    """What every simulated node offers."""

    datacenter: str = "dc1"
    node_class: str = ""
    cpu: int = DEFAULT_CPU
    memory_mb: int = DEFAULT_MEMORY_MB
    devices: tuple[DeviceProfile, ...] = ()
    meta: dict[str, str] = field(default_factory=dict)


@final
@dataclass(frozen=True)
class Profile:
    node: NodeProfile = field(default_factory=NodeProfile)
    alloc: AllocProfile = field(default_factory=AllocProfile)


_NODE_KEYS: Final = frozenset({"datacenter", "node_class", "cpu", "memory_mb", "devices", "meta"})
_ALLOC_KEYS: Final = frozenset({"start_delay", "run_time", "failure_probability"})
_DEVICE_KEYS: Final = frozenset({"vendor", "type", "name", "count", "attributes"})


def load_profile(path: Path) -> Profile:
    """The profile in `path`.

    Raises:
        ProfileError: the file cannot be read, is not TOML, or a field is wrong.
    """
    try:
        data = tomllib.loads(path.read_text())
    except OSError as e:
        raise ProfileError(f"{path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ProfileError(f"{path}: not UTF-8 text: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise ProfileError(f"{path}: not valid TOML: {e}") from None
    return parse_profile(data, str(path))


def parse_profile(data: dict[str, Any], source: str) -> Profile:
    """A profile from decoded TOML; `source` names it in errors."""
    reader = _Reader(source)
    reader.only(data, "", frozenset({"node", "alloc"}))
    node = reader.table(data, "node")
    alloc = reader.table(data, "alloc")
    reader.only(node, "node.", _NODE_KEYS)
    reader.only(alloc, "alloc.", _ALLOC_KEYS)
    devices = []
    raw_devices = node.get("devices", [])
    if not isinstance(raw_devices, list):
        raise reader.error("node.devices", "an array of tables ([[node.devices]])", raw_devices)
    for i, raw in enumerate(raw_devices):
        where = f"node.devices[{i}]"
        if not isinstance(raw, dict):
            raise reader.error(where, "a table", raw)
        reader.only(raw, where + ".", _DEVICE_KEYS)
        devices.append(DeviceProfile(
            vendor=reader.string(raw, where + ".vendor", required=True),
            type=reader.string(raw, where + ".type", required=True),
            name=reader.string(raw, where + ".name", required=True),
            count=reader.integer(raw, where + ".count", 1, minimum=1),
            attributes=reader.strings(raw, where + ".attributes")))
    node_profile = NodeProfile(
        datacenter=reader.string(node, "node.datacenter", "dc1") or "dc1",
        node_class=reader.string(node, "node.node_class", ""),
        cpu=reader.integer(node, "node.cpu", DEFAULT_CPU, minimum=1),
        memory_mb=reader.integer(node, "node.memory_mb", DEFAULT_MEMORY_MB, minimum=1),
        devices=tuple(devices), meta=reader.strings(node, "node.meta"))
    defaults = AllocProfile()
    probability = alloc.get("failure_probability", defaults.failure_probability)
    if (isinstance(probability, bool) or not isinstance(probability, int | float)
            or not 0 <= probability <= 1):
        raise reader.error("alloc.failure_probability", "a number in [0, 1]", probability)
    alloc_profile = AllocProfile(
        start_delay=reader.span(alloc, "alloc.start_delay", defaults.start_delay),
        run_time=reader.span(alloc, "alloc.run_time", defaults.run_time),
        failure_probability=float(probability))
    return Profile(node_profile, alloc_profile)


@final
class _Reader:
    """Typed reads of decoded TOML, each failure a `ProfileError` naming the field."""

    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, where: str, expected: str, got: object) -> ProfileError:
        return ProfileError(f"{self.source}: {where}: expected {expected}, got {got!r}")

    def only(self, table: dict[str, Any], prefix: str, allowed: frozenset[str]) -> None:
        for key in table:
            if key not in allowed:
                raise ProfileError(f"{self.source}: {prefix}{key}: unknown field (expected "
                                   f"one of {', '.join(sorted(allowed))})")

    def table(self, data: dict[str, Any], key: str) -> dict[str, Any]:
        value = data.get(key, {})
        if not isinstance(value, dict):
            raise self.error(key, f"a table ([{key}])", value)
        return value

    def string(self, table: dict[str, Any], where: str, default: str = "", *,
               required: bool = False) -> str:
        key = where.rsplit(".", 1)[-1]
        if key not in table:
            if required:
                raise ProfileError(f"{self.source}: {where}: required (a string)")
            return default
        value = table[key]
        if not isinstance(value, str):
            raise self.error(where, "a string", value)
        return value

    def integer(self, table: dict[str, Any], where: str, default: int, *, minimum: int) -> int:
        value = table.get(where.rsplit(".", 1)[-1], default)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(where, f"an integer >= {minimum}", value)
        return value

    def strings(self, table: dict[str, Any], where: str) -> dict[str, str]:
        value = table.get(where.rsplit(".", 1)[-1], {})
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise self.error(where, "a table of strings", value)
        return dict(value)

    def span(self, table: dict[str, Any], where: str,
             default: tuple[float, float]) -> tuple[float, float]:
        value = table.get(where.rsplit(".", 1)[-1], list(default))
        if isinstance(value, int | float) and not isinstance(value, bool):
            value = [value, value]
        if (not isinstance(value, list) or len(value) != 2
                or any(isinstance(v, bool) or not isinstance(v, int | float) for v in value)
                or not 0 <= value[0] <= value[1]):
            raise self.error(where, "seconds, or [low, high] with 0 <= low <= high", value)
        return float(value[0]), float(value[1])
