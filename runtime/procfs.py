"""Reading a process's facts from /proc.

These files are generated from kernel memory and never wait on a disk, so the event loop may
read them directly (a thread hop would cost more than the read). A process that is gone reads
as None, never as an error.
"""

from __future__ import annotations

from pathlib import Path


def stat_fields(pid: int) -> list[bytes] | None:
    """The fields of /proc/<pid>/stat from field 3 (state) on, or None if there is no such
    process. Field N of proc(5) is at index N - 3."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    return stat[stat.rindex(b")") + 2:].split()
