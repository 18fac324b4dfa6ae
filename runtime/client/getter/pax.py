"""pax extended header records (POSIX.1-2001 `"%d %s=%s\\n"`), parsed in linear time.

Why this exists: the `tarfile` of Python 3.11 before 3.11.10 finds pax records with regular
expressions that backtrack quadratically on hostile input (CVE-2024-6232), and it runs them
holding the GIL: a 128 KiB pax header of digits stalled the whole agent for 12 s, a 1 MiB one
(the largest `unpack.py` lets through) for some 750 s, though the unpack runs in a worker
thread. The agent must run on the 3.11 it is given, so `unpack.py`'s `_BoundedTarInfo` reads
pax headers with this parser instead of tarfile's.

How: each record is framed by its own length, so one pass reads the length (a few ASCII
digits up to the first space, searched for within a fixed window), jumps to the record's end,
checks that it ends in a newline, and splits keyword from value at the first `=`. Every byte
is looked at a bounded number of times. Rejected: trying regular expressions that avoid the
backtracking; a length-framed format needs no search at all.

What is stricter than tarfile: a record that is not framed exactly as the format says (a
length that is not ASCII digits, points past the header or not at a newline, a record without
a keyword or `=`) refuses the archive, as Go's `archive/tar` (Nomad's reader) and Python ≥
3.11.10 do, where older tarfile silently stopped reading records. A NUL where a record would
start ends the header (padding). Keywords tarfile acts on keep tarfile's meaning: `hdrcharset`
(BINARY: `path`, `linkpath`, `uname` and `gname` are in the archive's encoding, not UTF-8),
`path`, `linkpath`, `size`, `uid`, `gid`, `uname`, `gname`, `mtime` (applied by tarfile's own
`_apply_pax_info`). Two are judged here: `size` must be a plain non-negative decimal no
larger than a tar size can be (tarfile takes `int()` of anything, a negative size included,
which walked past the decompression limit), and the `GNU.sparse.*` keywords are refused
(sparse entries are not supported, and their maps are read without a bound).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from yurt.runtime.client.getter.source import GetterError

#: The largest entry size a tar header can hold (Go's `archive/tar` parses sizes as int64).
MAX_SIZE: Final = (1 << 63) - 1
#: The keywords whose values `hdrcharset=BINARY` leaves in the archive's encoding.
NAME_KEYWORDS: Final = frozenset({"path", "linkpath", "uname", "gname"})
#: Digits of a record's length: a header is at most `unpack.MAX_HEADER` (1 MiB) long.
_LENGTH_DIGITS: Final = 8
_SIZE_DIGITS: Final = len(str(MAX_SIZE))


def _malformed(offset: int, why: str) -> GetterError:
    return GetterError(f"tar pax header is malformed at byte {offset}: {why}")


def split_records(body: bytes) -> list[tuple[bytes, bytes]]:
    """The (keyword, value) records of the pax header `body`, in order, undecoded.

    Raises:
        GetterError: a record not framed as the format says (see the header).
    """
    records = []
    pos, end = 0, len(body)
    while pos < end and body[pos] != 0:
        space = body.find(b" ", pos, pos + _LENGTH_DIGITS + 1)
        digits = body[pos:space] if space > pos else b""
        if not digits.isdigit():  # bytes.isdigit: ASCII digits only
            raise _malformed(pos, "no record length")
        stop = pos + int(digits)
        # The shortest record after the length: " k=\n".
        if stop < space + 4 or stop > end:
            raise _malformed(pos, f"record length {int(digits)} does not fit")
        if body[stop - 1] != 0x0A:
            raise _malformed(pos, "record does not end in a newline")
        keyword, equals, value = body[space + 1:stop - 1].partition(b"=")
        if not keyword or not equals:
            raise _malformed(pos, "record without a keyword")
        records.append((keyword, value))
        pos = stop
    return records


def _decode(raw: bytes, encoding: str, fallback: str, errors: str) -> str:
    """As tarfile decodes pax fields: strictly in `encoding`, else in `fallback` with the
    archive's error handler (surrogateescape by default, so nothing is lost)."""
    try:
        return raw.decode(encoding, "strict")
    except UnicodeDecodeError:
        return raw.decode(fallback, errors)


def parse_pax(body: bytes, inherited: Mapping[str, str], *, encoding: str,
              errors: str) -> dict[str, str]:
    """The records of the pax header `body`, decoded and judged, to be laid over the
    `inherited` ones (the global headers so far, whose `hdrcharset` still applies).

    Args:
        body: the header's data, exactly its declared size.
        inherited: the pax records already in force.
        encoding: the archive's encoding (`TarFile.encoding`), for `hdrcharset=BINARY`.
        errors: the archive's error handler (`TarFile.errors`).

    Raises:
        GetterError: a malformed record, an invalid `size`, a GNU sparse keyword.
    """
    records = split_records(body)
    charset = inherited.get("hdrcharset")
    for raw_keyword, raw_value in records:
        if raw_keyword == b"hdrcharset":
            charset = raw_value.decode("utf-8", errors)
    names_in = encoding if charset == "BINARY" else "utf-8"
    parsed: dict[str, str] = {}
    for raw_keyword, raw_value in records:
        keyword = _decode(raw_keyword, "utf-8", "utf-8", errors)
        if keyword.startswith("GNU.sparse."):
            raise GetterError(f"sparse tar entries are not supported (pax {keyword})")
        if keyword in NAME_KEYWORDS:
            value = _decode(raw_value, names_in, encoding, errors)
        else:
            value = _decode(raw_value, "utf-8", "utf-8", errors)
        if keyword == "size" and not (raw_value.isdigit() and len(raw_value) <= _SIZE_DIGITS
                                      and int(raw_value) <= MAX_SIZE):
            raise GetterError(f"tar pax header has an invalid size: {value[:40]!r}")
        parsed[keyword] = value
    return parsed
