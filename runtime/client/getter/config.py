"""The client's `artifact` settings (Nomad's client `artifact` block) and their parsing.

    [artifact]
    http_read_timeout = "30m"              # the whole of one HTTP download
    http_max_size = "100GB"                # bytes one download may bring
    decompression_size_limit = "100GB"     # bytes one archive may unpack to (0: no limit)
    decompression_file_count_limit = 4096  # entries one archive may hold (0: no limit)

Defaults and messages are Nomad's (`nomad/structs/config/artifact.go`); sizes are read as
go-humanize's `ParseBytes` reads them ("100GB" is 10^11 bytes, "1GiB" 2^30).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

import msgspec

from yurt.runtime.lib.durations import parse_duration

_UNITS: Final = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6,
                 "g": 10**9, "gb": 10**9, "t": 10**12, "tb": 10**12, "p": 10**15,
                 "pb": 10**15, "e": 10**18, "eb": 10**18, "ki": 2**10, "kib": 2**10,
                 "mi": 2**20, "mib": 2**20, "gi": 2**30, "gib": 2**30, "ti": 2**40,
                 "tib": 2**40, "pi": 2**50, "pib": 2**50, "ei": 2**60, "eib": 2**60}
_SIZE: Final = re.compile(r"^\s*([0-9][0-9,]*(?:\.[0-9]*)?)\s*([a-zA-Z]*)\s*$")
_INT64_MAX: Final = 2**63 - 1


def parse_size(text: str) -> int:
    """go-humanize `ParseBytes`: "100GB", "512 MiB", "42"."""
    m = _SIZE.match(text)
    if m is None or m.group(2).lower() not in _UNITS:
        raise ValueError(f"unhandled size name: {text!r}")
    return int(float(m.group(1).replace(",", "")) * _UNITS[m.group(2).lower()])


@dataclass(frozen=True)
class ArtifactConfig:
    """What bounds one artifact download; seconds and bytes."""

    http_read_timeout: float = 1800.0
    http_max_size: int = 100 * 10**9
    decompression_size_limit: int = 100 * 10**9
    decompression_file_count_limit: int = 4096


class ArtifactSettings(msgspec.Struct, forbid_unknown_fields=True):
    """The `[artifact]` table of the agent's config file, as written."""

    http_read_timeout: str = "30m"
    http_max_size: str = "100GB"
    decompression_size_limit: str = "100GB"
    decompression_file_count_limit: int = 4096

    def to_config(self) -> ArtifactConfig:
        """Checked as Nomad's `ArtifactConfig.Validate` checks; raises ValueError."""
        try:
            timeout = parse_duration(self.http_read_timeout)
        except ValueError as e:
            raise ValueError(f"http_read_timeout not a valid duration: {e}") from None
        if timeout <= 0:
            raise ValueError("http_read_timeout must be > 0")
        sizes = {}
        for name in ("http_max_size", "decompression_size_limit"):
            try:
                sizes[name] = parse_size(getattr(self, name))
            except ValueError as e:
                what = "not a valid size" if name == "http_max_size" else "is not a valid size"
                raise ValueError(f"{name} {what}: {e}") from None
            if sizes[name] > _INT64_MAX:
                raise ValueError(f"{name} must be < {_INT64_MAX} but found {sizes[name]}")
        if self.decompression_file_count_limit < 0:
            raise ValueError(f"decompression_file_count_limit must be >= 0 but found "
                             f"{self.decompression_file_count_limit}")
        return ArtifactConfig(http_read_timeout=timeout / 1e9,
                              http_max_size=sizes["http_max_size"],
                              decompression_size_limit=sizes["decompression_size_limit"],
                              decompression_file_count_limit=self.decompression_file_count_limit)
