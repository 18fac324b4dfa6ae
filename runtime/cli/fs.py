"""`yurt alloc fs`: Nomad's `nomad alloc fs`, over /v1/client/fs.

`yurt alloc fs ALLOC [PATH]` stats PATH (default `/`, the allocation directory) and lists it
when it is a directory, prints it when it is a file (`cat`); `-stat` prints the stat line only;
`-f` follows the file (the framed stream); `-tail` starts near the end: `-c N` bytes before it,
or `-n N` lines (10 without either), as Nomad does: it reads about 120 bytes a line back and
keeps the last N lines of that; `-job` takes a job ID for ALLOC and picks one of its
allocations at random (of `-group`'s, a running one if any, as Nomad's `getRandomJobAlloc`);
`-verbose` lists an ambiguous prefix's matches with whole IDs. Tables are Nomad's (`Mode Size
Modified Time Name`, sizes in IEC units, `-H` for bytes). A reader that leaves (`| head`)
ends it quietly with 0. Exit codes: 0 ok, 1 a failed request (unknown allocation, missing
file), 2 bad input (a bad flag, a path the agent refuses with 400).

The module is imported with the CLI, also by `yurt agent`: the HTTP client and rich are
imported inside the command (tests/test_import_weight.py), as runtime/cli/__init__.py does.
"""

from __future__ import annotations

import base64
import json
import math
import sys
from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

import click

if TYPE_CHECKING:
    from yurt.runtime.cli.http import AgentConnection

DEFAULT_TAIL_LINES: Final = 10
BYTES_PER_LINE: Final = 120


def register(alloc: click.Group) -> None:
    """Attach `fs` to the `alloc` group."""
    alloc.add_command(alloc_fs)


@click.command("fs")
@click.argument("alloc_id", metavar="ALLOC")
@click.argument("path", default="/", required=False)
@click.option("-stat", "--stat", "stat", is_flag=True, help="Show the file's stat line only.")
@click.option("-f", "--follow", "follow", is_flag=True,
              help="Keep printing what is written to the file.")
@click.option("-tail", "--tail", "tail", is_flag=True,
              help="Start near the end of the file (see -n and -c).")
@click.option("-n", "lines", type=int, default=-1, help="With -tail: the last N lines.")
@click.option("-c", "count", type=int, default=-1, help="With -tail: the last N bytes.")
@click.option("-H", "machine", is_flag=True, help="Sizes in bytes, for scripts.")
@click.option("-job", "--job", "job", is_flag=True,
              help="ALLOC is a job ID: use one of its allocations at random, a running one "
                   "if any.")
@click.option("-group", "--group", "group", default="", metavar="GROUP",
              help="With -job: pick among this task group's allocations.")
@click.option("-verbose", "--verbose", "verbose", is_flag=True,
              help="Whole IDs (in the list of an ambiguous prefix's matches).")
def alloc_fs(alloc_id: str, path: str, stat: bool, follow: bool, tail: bool, lines: int,
             count: int, machine: bool, job: bool, group: str, verbose: bool) -> None:
    """List a directory or print a file of an allocation (paths from its directory)."""
    from yurt.runtime.cli.api_client import api, call, resolve_alloc
    from yurt.runtime.cli.output import fail, quiet_broken_pipe
    from yurt.runtime.errors import EXIT_INTERRUPTED, EXIT_USAGE

    if lines != -1 and count != -1:
        fail("Both -n and -c are not allowed", EXIT_USAGE)
    if lines < -1 or count < -1:
        fail("Invalid size is specified", EXIT_USAGE)
    if group and not job:
        fail("-group is only valid with -job", EXIT_USAGE)
    with api() as client:
        full_id = (_job_alloc(client, alloc_id, group) if job
                   else resolve_alloc(client, alloc_id, full_ids=verbose))
        info = call(client, "GET", f"/v1/client/fs/stat/{full_id}", params={"path": path})
        if stat:
            _table(["Mode", "Size", "Modified Time", "Content Type", "Name"],
                   [[info["FileMode"], _size(info["Size"], machine), _time(info["ModTime"]),
                     info["ContentType"], _name(info)]])
            return
        if info["IsDir"]:
            files = call(client, "GET", f"/v1/client/fs/ls/{full_id}", params={"path": path})
            _table(["Mode", "Size", "Modified Time", "Name"],
                   [[f["FileMode"], _size(f["Size"], machine), _time(f["ModTime"]), _name(f)]
                    for f in files])
            return
        keep = -1
        offset = 0
        if tail:
            keep = DEFAULT_TAIL_LINES if lines == -1 and count == -1 else lines
            back = count if count != -1 else keep * BYTES_PER_LINE
            offset = max(int(info["Size"]) - min(back, int(info["Size"])), 0)
        try:
            _write(_tail_lines(_read(client, full_id, path, offset, follow), keep))
        except KeyboardInterrupt:  # Ctrl-C ends a -f: reported as every interrupt is
            sys.exit(EXIT_INTERRUPTED)
        except BrokenPipeError:  # stdout's reader left (`| head`): the socket's errors are
            quiet_broken_pipe()  # TransportError, so this is the reader, and that is fine


def _job_alloc(client: AgentConnection, job_id: str, group: str) -> str:
    """One of the job's allocations (of `group`, when given), at random, a running one if
    any: Nomad's command/alloc_fs.go `getRandomJobAlloc`, shared with `alloc logs`."""
    import random
    from urllib.parse import quote

    from yurt.runtime.cli.api_client import call, resolve_job
    from yurt.runtime.cli.logs import LogsError, pick_job_alloc
    from yurt.runtime.cli.output import fail

    job_id = resolve_job(client, job_id)
    allocs = call(client, "GET", f"/v1/job/{quote(job_id, safe='')}/allocations")
    try:
        return pick_job_alloc(job_id, allocs, group, random.choice)
    except LogsError as e:
        fail(str(e), e.code)


def _read(client: AgentConnection, alloc_id: str, path: str, offset: int, follow: bool
          ) -> Iterator[bytes]:
    """The file's bytes from `offset`: plain (readat), or framed and followed (stream); an
    empty chunk marks the end of what was there when the request came (following only)."""
    from yurt.runtime.cli.output import fail
    from yurt.runtime.errors import EXIT_FAILED, EXIT_USAGE

    if follow:
        url = f"/v1/client/fs/stream/{alloc_id}"
        params = {"path": path, "offset": str(offset), "origin": "start", "follow": "true"}
    else:
        url = f"/v1/client/fs/readat/{alloc_id}"
        params = {"path": path, "offset": str(offset)}
    with client.stream("GET", url, params=params, timeout=None) as response:
        if response.status_code >= 400:
            response.read()
            fail(response.text.strip(),
                  EXIT_USAGE if response.status_code == 400 else EXIT_FAILED)
        if not follow:
            yield from response.iter_bytes()
            return
        decoder, text = json.JSONDecoder(), ""
        for chunk in response.iter_text():
            text += chunk
            while text:
                try:
                    frame, end = decoder.raw_decode(text)
                except json.JSONDecodeError:
                    break  # the rest of this frame is still on its way
                text = text[end:]
                if frame.get("Data"):
                    yield base64.b64decode(frame["Data"])
                elif not frame.get("FileEvent"):
                    yield b""  # a heartbeat: nothing more was there
                if frame.get("FileEvent") == "file deleted":
                    return


def _tail_lines(chunks: Iterator[bytes], keep: int) -> Iterator[bytes]:
    """Only the last `keep` lines of what was there when the read began (`keep` < 0: all),
    then everything that follows."""
    if keep < 0:
        yield from chunks
        return
    head = b""
    for chunk in chunks:
        if not chunk:
            break
        head += chunk
    kept = head.splitlines(keepends=True)[-keep:] if keep else []
    yield b"".join(kept)
    yield from chunks


def _write(chunks: Iterator[bytes]) -> None:
    for chunk in chunks:
        sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()


def _name(info: dict[str, Any]) -> str:
    return f"{info['Name']}/" if info["IsDir"] else str(info["Name"])


def _size(size: int, machine: bool) -> str:
    """Go's `humanize.IBytes` (`4.0 KiB`, `20 B`), or the byte count with -H."""
    if machine or size < 10:
        return f"{size}" if machine else f"{size} B"
    exp = min(math.floor(math.log(size) / math.log(1024)), 6)
    value = math.floor(size / 1024 ** exp * 10 + 0.5) / 10
    unit = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")[exp]
    return f"{value:.0f} {unit}" if value >= 10 else f"{value:.1f} {unit}"


def _time(stamp: str) -> str:
    """Nomad's `formatTime`: `01/02/06 15:04:05 MST`, in local time."""
    return datetime.fromisoformat(stamp).astimezone().strftime("%m/%d/%y %H:%M:%S %Z")


def _table(header: list[str], rows: list[list[str]]) -> None:
    """Columns as Nomad's `formatList` aligns them: two spaces apart, no borders; a file name
    the task chose made printable (runtime/cli/output.py)."""
    from yurt.runtime.cli.output import echo, format_list

    echo(format_list([header, *rows]))
