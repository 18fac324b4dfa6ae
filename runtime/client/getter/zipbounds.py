"""A zip archive's directory, judged before `zipfile` builds anything from it.

Why this exists: `zipfile.ZipFile` reads the whole central directory in one `read` when the
archive is opened and builds a `ZipInfo` (with its name, extra field and comment) for every
record in it, before its caller can count them. A record is 46 bytes on disk and some 500 in
memory, so an archive of 200 000 empty entries (11 MB) cost 100 MB before the file-count
limit was even looked at, and the download cap (100 GB by default) leaves room for archives
a hundred times that. Worse, zipfile walks the directory by its declared *byte size* and
never looks at the declared *entry count*: a trailer saying "10 entries" bounds nothing it
builds.

So `check_directory`, given the open archive, does three things with bounded memory:

1. Finds the end-of-central-directory record, and the zip64 record when its locator is
   there, with zipfile's own finder (`zipfile._EndRecData`: it reads at most the 64 KiB an
   archive comment may take plus the fixed records). Judging the very record zipfile is about
   to use is the point: two readers of one trailer that can disagree are the classic zip
   parser differential, where the checked directory is not the one extracted. A finder of our
   own was rejected for that reason (zipfile's has changed in security releases).
2. Refuses from the trailer alone a declared entry count over the file-count limit, and a
   declared directory size no honest archive has: more than the bytes before the trailer,
   more than the declared entries could fill (46 + 3 × 65535 bytes each: the fixed record
   plus the largest name, extra field and comment), or less than they need (46 bytes each).
3. Walks the directory from the file one fixed 46-byte record at a time, skipping the
   variable parts, and refuses as soon as the records outnumber the declared count (itself
   within the limit), and unless they end exactly where the declared size does. This pass
   holds one record, so a lying trailer costs time proportional to the limit, not memory.

What holds afterwards: the directory zipfile reads has exactly `entries` records (≤ the limit
when there is one) filling exactly `size` bytes from `start`. The caller compares zipfile's
`start_dir` and entry count with these, so a Python whose zipfile reads the trailer
differently is refused rather than trusted. What is left: zipfile still holds each record's
name, extra field and comment (up to 3 × 64 KiB each), so its memory is a small multiple of
the directory's size, which the archive's size bounds; it no longer grows with a count nobody
checked. The compression method, encryption and sizes of each entry are judged by the caller
on zipfile's `ZipInfo`s, which are then few.

Pre-zip64 writers that stored the entry count of a >65 535-entry archive modulo 65 536 (which
Go's archive/zip tolerates) are refused by 2.: every writer of the last fifteen years writes
the zip64 record instead.
"""

from __future__ import annotations

import struct
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any, Final, final

from yurt.runtime.client.getter.source import GetterError

#: The fixed part of a central directory record ("PK\1\2"), as zipfile unpacks it.
_RECORD: Final = struct.Struct("<4s4B4HL2L5H2L")
_RECORD_MAGIC: Final = b"PK\001\002"
#: The largest record: the fixed part plus a name, an extra field and a comment of 64 KiB each.
MAX_RECORD: Final = _RECORD.size + 3 * 0xFFFF
#: zipfile refuses (with NotImplementedError) entries that need a later version to extract.
_MAX_EXTRACT_VERSION: Final = 63
#: The zip64 records between the directory and the classic trailer, when they are there.
_ZIP64_TRAILER: Final = 56 + 20
_ZIP64_MAGIC: Final = b"PK\006\006"

#: zipfile's finder of the trailer (private, so absent from the type stubs; see the header).
_END_REC_DATA: Final[Callable[[IO[bytes]], list[Any] | None]] = vars(zipfile)["_EndRecData"]
_CHECK_EVERY: Final = 4096
# Where zipfile's finder puts each field (zipfile's _ECD_* indexes).
_SIG, _TOTAL, _SIZE, _OFFSET, _LOCATION = 0, 4, 5, 6, 9


@final
@dataclass(frozen=True)
class Directory:
    """What was checked: the central directory holds `entries` records, `size` bytes from the
    file offset `start`."""

    entries: int
    start: int
    size: int


def check_directory(f: IO[bytes], name: str, max_files: int,
                    check: Callable[[], None]) -> Directory:
    """Judge the central directory of the zip archive open as `f` (named `name` in messages)
    before `zipfile` reads it. `max_files` of 0 means no file-count limit. `check` is called
    every `_CHECK_EVERY` records and may raise to stop (a cancellation): without a file-count
    limit the directory may hold millions.

    Returns:
        The directory as checked, for the caller to compare with what zipfile read.

    Raises:
        GetterError: not a zip archive, or a trailer or directory refused (see the header).
    """
    try:
        end = _END_REC_DATA(f)
    except (OSError, zipfile.BadZipFile) as e:  # BadZipFile: archives spanning disks
        raise GetterError(f"failed to unpack {name}: {e}") from None
    if not end:
        raise GetterError(f"failed to unpack {name}: File is not a zip file")
    declared, size, offset, location = end[_TOTAL], end[_SIZE], end[_OFFSET], end[_LOCATION]
    if max_files and declared > max_files:
        raise GetterError(f"zip archive declares too many files: {declared} > {max_files}")
    # As zipfile places it: right before the trailer, whatever the offset says (an archive
    # may follow a stub, as self-extracting ones do).
    start = location - size - (_ZIP64_TRAILER if end[_SIG] == _ZIP64_MAGIC else 0)
    if start < 0 or size > declared * MAX_RECORD or size < declared * _RECORD.size:
        raise GetterError(f"zip archive {name} has an implausible central directory: "
                          f"{size} bytes for {declared} entries at offset {offset}")
    _walk(f, name, start, size, declared, check)
    return Directory(entries=declared, start=start, size=size)


def _walk(f: IO[bytes], name: str, start: int, size: int, declared: int,
          check: Callable[[], None]) -> None:
    """Count the records from `start` without holding them: see 3. in the header."""
    f.seek(start)
    pos, count = 0, 0
    while pos < size:
        if count % _CHECK_EVERY == 0:
            check()
        if count == declared:
            raise GetterError(f"zip archive {name} holds more entries than the {declared} "
                              "it declares")
        fixed = f.read(_RECORD.size)
        if len(fixed) != _RECORD.size or pos + _RECORD.size > size:
            raise GetterError(f"zip archive {name} has a truncated central directory")
        record = _RECORD.unpack(fixed)
        if record[0] != _RECORD_MAGIC:
            raise GetterError(f"zip archive {name} has a corrupt central directory: record "
                              f"{count + 1} is not a directory record")
        if record[3] > _MAX_EXTRACT_VERSION:
            raise GetterError(f"zip archive {name}: entry {count + 1} needs zip version "
                              f"{record[3] / 10:.1f} to extract")
        variable = record[12] + record[13] + record[14]  # name, extra field, comment
        f.seek(variable, 1)
        pos += _RECORD.size + variable
        count += 1
    if pos != size or count != declared:
        raise GetterError(f"zip archive {name}: its central directory holds {count} entries "
                          f"in {pos} bytes, its trailer declares {declared} in {size}")
