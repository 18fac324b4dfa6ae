"""A volume specification file into the API's `HostVolume`, as Nomad's `volume create` and
`volume register` read it (command/volume_register.go `parseVolumeType`,
command/volume_create_host.go `decodeHostVolume`, `parseConstraints`,
`parseHostVolumeCapabilities`).

HCL, or JSON (HCL v1, which Nomad parses these files with, reads both; a file whose first
character is `{` is JSON). Keys are the spec's: `type`, `namespace`, `name`, `id`,
`plugin_id`, `node_id`, `node_pool`, `host_path` (a registered volume's), `capacity`,
`capacity_min`, `capacity_max` (bytes, or "10GiB"/"1GB" as go-humanize's `ParseBytes` reads
them), `constraint {}` blocks, `capability {}` blocks and `parameters {}`.

One difference, deliberate: an unknown key is refused with its file and line, where Nomad's
mapstructure decode ignores it (a misspelt `plugin-id` would otherwise create a volume with
the default plugin). Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

#: Top-level keys a host volume specification may have.
_KEYS: Final = frozenset({"type", "namespace", "name", "id", "plugin_id", "node_id",
                          "node_pool", "host_path", "capacity", "capacity_min",
                          "capacity_max", "constraint", "capability", "parameters"})
_PLAIN: Final = {"namespace": "Namespace", "name": "Name", "id": "ID",
                 "plugin_id": "PluginID", "node_id": "NodeID", "node_pool": "NodePool",
                 "host_path": "HostPath"}
#: command/volume_create_host.go `parseConstraints`: its valid keys.
_CONSTRAINT_KEYS: Final = frozenset({"attribute", "distinct_hosts", "distinct_property",
                                     "operator", "regexp", "set_contains", "value",
                                     "version", "semver"})
_CAPABILITY_KEYS: Final = frozenset({"access_mode", "attachment_mode"})
#: go-humanize's byte units, by their lower-case spelling.
_UNITS: Final = {"": 1, "b": 1, "k": 1000, "kb": 1000, "ki": 1 << 10, "kib": 1 << 10,
                 "m": 1000**2, "mb": 1000**2, "mi": 1 << 20, "mib": 1 << 20,
                 "g": 1000**3, "gb": 1000**3, "gi": 1 << 30, "gib": 1 << 30,
                 "t": 1000**4, "tb": 1000**4, "ti": 1 << 40, "tib": 1 << 40,
                 "p": 1000**5, "pb": 1000**5, "pi": 1 << 50, "pib": 1 << 50}
_BYTES: Final = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


class VolumeSpecError(Exception):
    """A specification that cannot be read: `file:line: what` (line when known)."""


def _line_of(text: str, key: str) -> int:
    """The first line where `key` is set or opens a block (0: not found)."""
    pattern = re.compile(rf'^[ \t]*"?{re.escape(key)}"?[ \t]*[:={{]', re.MULTILINE)
    found = pattern.search(text)
    return text.count("\n", 0, found.start()) + 1 if found else 0


def _where(source: str, text: str, key: str) -> str:
    line = _line_of(text, key)
    return f"{source}:{line}" if line else source


def parse_bytes(value: Any) -> int:
    """go-humanize `ParseBytes`: a number of bytes, or one with a unit ("10GiB", "1 GB").

    Raises:
        ValueError: not a size.
    """
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, int | float):
        return int(value)
    match = _BYTES.match(str(value))
    if match is None or match.group(2).lower() not in _UNITS:
        raise ValueError(f'strconv.ParseFloat: parsing "{value}": invalid syntax')
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def _blocks(value: Any) -> list[dict[str, Any]]:
    """A block's bodies: python-hcl2 lists them; JSON may give one object or a list."""
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(i, dict) for i in items):
        raise ValueError("expected a block")
    return items


def _constraint(body: dict[str, Any]) -> dict[str, str] | None:
    """`parseConstraints` for one block (None: `distinct_hosts = false`, which is dropped)."""
    unknown = sorted(set(body) - _CONSTRAINT_KEYS)
    if unknown:
        raise ValueError(f'invalid key "{unknown[0]}"')
    left, right = str(body.get("attribute", "")), str(body.get("value", ""))
    operand = str(body.get("operator", ""))
    for special in ("version", "semver", "regexp", "set_contains"):
        if special in body:
            operand, right = special, str(body[special])
    if "distinct_hosts" in body:
        enabled = body["distinct_hosts"]
        if isinstance(enabled, str):
            enabled = enabled.lower() in ("1", "t", "true")
        if not enabled:
            return None
        operand, right = "distinct_hosts", "true"
    if "distinct_property" in body:
        operand, left = "distinct_property", str(body["distinct_property"])
    return {"LTarget": left, "RTarget": right, "Operand": operand or "="}


def parse_volume_spec(text: str, source: str) -> tuple[str, dict[str, Any]]:
    """The specification's `type` and its volume as the API's JSON (`HostVolume`).

    Raises:
        VolumeSpecError: a syntax error, an unknown key, a bad value, with `source:line`.
    """
    raw: Any
    if text.lstrip().startswith("{"):
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as e:
            raise VolumeSpecError(f"{source}:{e.lineno}:{e.colno}: parse error: {e.msg}"
                                  ) from None
        if not isinstance(raw, dict):
            raise VolumeSpecError(f"{source}: parse error: root should be an object")
    else:
        from yurt.runtime.errors import JobSpecError
        from yurt.runtime.jobspec.syntax import _load_hcl

        try:
            raw = _load_hcl(text, source)[0]
        except JobSpecError as e:
            raise VolumeSpecError(e.render().replace(": job: syntax: ", ": parse error: ")
                                  ) from None
    kind = raw.get("type", "")
    if not isinstance(kind, str):
        raise VolumeSpecError(f"{_where(source, text, 'type')}: type: expected a string")
    vol: dict[str, Any] = {}
    for key, value in raw.items():
        where = _where(source, text, key)
        if key not in _KEYS:
            raise VolumeSpecError(f'{where}: unknown key "{key}" in a host volume '
                                  f"specification (expected one of {', '.join(sorted(_KEYS))})")
        try:
            if key in _PLAIN:
                if not isinstance(value, str):
                    raise ValueError("expected a string")
                vol[_PLAIN[key]] = value
            elif key == "capacity":
                vol["CapacityBytes"] = parse_bytes(value)
            elif key == "capacity_min":
                vol["RequestedCapacityMinBytes"] = parse_bytes(value)
            elif key == "capacity_max":
                vol["RequestedCapacityMaxBytes"] = parse_bytes(value)
            elif key == "constraint":
                found = [_constraint(b) for b in _blocks(value)]
                vol["Constraints"] = [c for c in found if c is not None]
            elif key == "capability":
                caps = []
                for body in _blocks(value):
                    unknown = sorted(set(body) - _CAPABILITY_KEYS)
                    if unknown:
                        raise ValueError(f'invalid key "{unknown[0]}"')
                    caps.append({"AccessMode": str(body.get("access_mode", "")),
                                 "AttachmentMode": str(body.get("attachment_mode", ""))})
                vol["RequestedCapabilities"] = caps
            elif key == "parameters":
                merged: dict[str, str] = {}
                for body in _blocks(value):
                    merged.update({k: _text(v) for k, v in body.items()})
                vol["Parameters"] = merged
        except ValueError as e:
            raise VolumeSpecError(f"{where}: invalid {key}: {e}") from None
    return kind, vol


def _text(value: Any) -> str:
    """A parameter as the string Nomad's map[string]string decode makes of it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        raise ValueError("a parameter must be a string")
    return str(value)
