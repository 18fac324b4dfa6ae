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


def start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (clock ticks since boot), or None if there is no pid.

    With the pid, it names one process for good: a pid reused by another process has another
    start time. A zombie still has one; callers that care whether it runs check its state.
    """
    fields = stat_fields(pid)
    return int(fields[19]) if fields is not None else None
