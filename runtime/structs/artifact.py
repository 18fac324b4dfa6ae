"""The task `artifact` block: `TaskArtifact`, what a task downloads before it starts.

Field names are Nomad's JSON names (`GetterSource`, `GetterOptions`, `GetterHeaders`,
`GetterMode`, `GetterInsecure`, `RelativeDest`, `Chown`); the Python attributes carry the HCL
spellings' meaning, and `runtime/jobspec/fields.py` maps `source`, `options`, `headers`, `mode`,
`insecure`, `destination` onto them.

Invariant: after the jobspec canonicalizes a job (api/tasks.go `TaskArtifact.Canonicalize`),
`getter_mode` is one of any|file|dir and `relative_dest` is set (`local/`, or
`local/<basename of the source>` in file mode), so the client never fills defaults itself.
"""

from __future__ import annotations

from typing import Final

from yurt.runtime.structs.base import Base

GETTER_MODE_ANY: Final = "any"
GETTER_MODE_FILE: Final = "file"
GETTER_MODE_DIR: Final = "dir"
GETTER_MODES: Final = (GETTER_MODE_ANY, GETTER_MODE_FILE, GETTER_MODE_DIR)
#: Digest sizes in bytes of the checksum types go-getter verifies (`options.checksum`).
CHECKSUM_SIZES: Final = {"md5": 16, "sha1": 20, "sha256": 32, "sha512": 64}


class TaskArtifact(Base):
    getter_source: str = ""
    getter_options: dict[str, str] | None = None
    getter_headers: dict[str, str] | None = None
    getter_mode: str = GETTER_MODE_ANY
    getter_insecure: bool = False
    relative_dest: str = ""
    chown: bool = False
