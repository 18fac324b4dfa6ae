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


#: /proc/net/tcp's state of a listening socket.
_LISTEN = "0A"
#: Local addresses, as /proc/net/tcp{,6} write them, that a loopback client reaches: the
#: loopback ones and the wildcards.
_LOOPBACK_OR_ANY = ("0100007F", "00000000", "00000000000000000000000001000000",
                    "00000000000000000000000000000000")


def tcp_listener_uids(port: int) -> set[int]:
    """The owners (uids) of the TCP sockets listening on `port` at a loopback or wildcard
    address, in this network namespace; empty when none (or /proc/net is not there)."""
    owners: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 8 or fields[3] != _LISTEN:
                continue
            address, _, hex_port = fields[1].partition(":")
            if int(hex_port, 16) == port and (
                    address in _LOOPBACK_OR_ANY or address.startswith("7F")
                    or address.endswith("7F")):
                owners.add(int(fields[7]))
    return owners
