"""Layer 2: hostile zip archives against the unpacker — real files, in a capped child process.

Every archive here is built byte by byte (a few KB to a few MB on disk) to lie where zipfile
trusts: a trailer declaring a billion entries, a directory of 200 000 records behind a trailer
declaring few or many, a directory larger than its declared entries could fill, entries whose
headers understate what their data inflates to, compression methods zipfile inflates without a
bound, encrypted entries and versions zipfile refuses with exceptions of its own. The costly
ones run in a child process whose address space is capped (as the tar header bombs of
`test_getter_hardening.py` do; its child hard-codes tar.gz and no limits, so this file has its
own), which reports the refusal, its peak memory above what the imports took, and the time.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path
from typing import Any

import pytest

import yurt.runtime.client.getter.unpack as unpack_module
from tests.getter_support import stop_at_call
from yurt.runtime.client.getter import zipbounds
from yurt.runtime.client.getter.source import GetterError
from yurt.runtime.client.getter.unpack import unpack

pytestmark = pytest.mark.slow

_CD = struct.Struct("<4s4B4HL2L5H2L")
_LOCAL = struct.Struct("<4s2B4HL2L2H")
_EOCD = struct.Struct("<4s4H2LH")
_EOCD64 = struct.Struct("<4sQ2H2L4Q")
_LOCATOR = struct.Struct("<4sLQL")


def record(name: bytes, *, offset: int = 0, method: int = 0, csize: int = 0, usize: int = 0,
           crc: int = 0, flags: int = 0, version: int = 20, mode: int = 0o644) -> bytes:
    """One central directory record (written by "unix", so the mode is read)."""
    return _CD.pack(b"PK\001\002", 20, 3, version, 0, flags, method, 0, 0x21, crc, csize,
                    usize, len(name), 0, 0, 0, 0, mode << 16, offset) + name


def local(name: bytes, *, method: int = 0, csize: int = 0, usize: int = 0, crc: int = 0,
          flags: int = 0) -> bytes:
    return _LOCAL.pack(b"PK\003\004", 20, 0, flags, method, 0, 0x21, crc, csize, usize,
                       len(name), 0) + name


def trailer(count: int, cd_size: int, cd_offset: int, *, zip64: bool = False) -> bytes:
    """The end of central directory record, after the zip64 record and locator if `zip64`."""
    if not zip64:
        return _EOCD.pack(b"PK\005\006", 0, 0, count, count, cd_size, cd_offset, 0)
    at = cd_offset + cd_size
    return (_EOCD64.pack(b"PK\006\006", 44, 45, 45, 0, 0, count, count, cd_size, cd_offset)
            + _LOCATOR.pack(b"PK\006\007", 0, at, 1)
            + _EOCD.pack(b"PK\005\006", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0))


def archive_of(entries: list[tuple[bytes, bytes]], *, method: int = 0, flags: int = 0,
               version: int = 20, zip64: bool = False, usize: int | None = None) -> bytes:
    """A well-formed archive of (name, data) entries, `data` already compressed by
    `method`; `usize` (every entry's declared uncompressed size) defaults to the data's."""
    body, directory = b"", b""
    for name, data in entries:
        size = len(data) if usize is None else usize
        crc = zlib.crc32(data) if method == 0 else 0
        directory += record(name, offset=len(body), method=method, csize=len(data),
                            usize=size, crc=crc, flags=flags, version=version)
        body += local(name, method=method, csize=len(data), usize=size, crc=crc,
                      flags=flags) + data
    return body + directory + trailer(len(entries), len(directory), len(body), zip64=zip64)


def many_records(n: int) -> bytes:
    """`n` empty stored entries' directory records, all pointing at one local header at 0."""
    return b"".join(record(b"f%07d" % i) for i in range(n))


def deflated(size: int) -> tuple[bytes, int]:
    """`size` zeros, deflated (about 1/1000 of it), and their CRC."""
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    chunk = b"\0" * (1 << 20)
    out = [comp.compress(chunk) for _ in range(size >> 20)]
    out.append(comp.flush())
    crc = 0
    for _ in range(size >> 20):
        crc = zlib.crc32(chunk, crc)
    return b"".join(out), crc


# The peak is read from VmHWM, this process image's own high-water mark: `ru_maxrss` survives
# exec, so a child spawned from a large pytest starts with the parent's peak and hides growth.
_CHILD = """
import json, resource, sys, time
from pathlib import Path
from yurt.runtime.client.getter.source import GetterError
from yurt.runtime.client.getter.unpack import unpack

def peak_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))

limit = 1 << 30
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
args = json.loads(sys.argv[1])
before = peak_kib()
started = time.monotonic()
try:
    unpack(Path(args["archive"]), "zip", Path(args["dest"]), as_dir=True,
           max_size=args["max_size"], max_files=args["max_files"])
    error = None
except GetterError as e:
    error = str(e)
print(json.dumps({"error": error, "seconds": time.monotonic() - started,
                  "grew_kib": peak_kib() - before}))
"""


def unpack_in_child(archive: Path, *, max_size: int = 0, max_files: int = 0) -> dict[str, Any]:
    """Unpack `archive` into a new directory in a child capped at 1 GiB of address space."""
    dest = archive.with_suffix(".out")
    dest.mkdir()
    args = {"archive": str(archive), "dest": str(dest), "max_size": max_size,
            "max_files": max_files}
    child = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(args)],
                           capture_output=True, text=True, timeout=120, check=False)
    assert child.returncode == 0, child.stderr[-3000:]
    report: dict[str, Any] = json.loads(child.stdout)
    report["written"] = sorted(str(p.relative_to(dest)) for p in dest.rglob("*"))
    return report


def write(tmp_path: Path, data: bytes, name: str = "hostile.zip") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


# 1. The trailer is judged before zipfile reads the directory.

@pytest.mark.parametrize(("max_files", "error"), [
    (4096, "zip archive declares too many files: 1000000000 > 4096"),
    (0, "zip archive hostile.zip has an implausible central directory: 51 bytes for "
        "1000000000 entries at offset 40"),
])
def test_a_trailer_declaring_a_billion_entries_is_refused(tmp_path: Path, max_files: int,
                                                          error: str) -> None:
    """One real entry behind a zip64 trailer claiming 10**9: zipfile ignores the count and
    would unpack the one; without a count limit the size still cannot hold them."""
    entry = b"hello"
    body = local(b"a.txt", csize=5, usize=5, crc=zlib.crc32(entry)) + entry
    directory = record(b"a.txt", csize=5, usize=5, crc=zlib.crc32(entry))
    data = body + directory + trailer(10**9, len(directory), len(body), zip64=True)
    assert len(data) < 1024
    report = unpack_in_child(write(tmp_path, data), max_files=max_files)
    assert report["error"] == error
    assert report["written"] == []


def test_200k_entries_over_the_limit_are_refused_from_the_trailer(tmp_path: Path) -> None:
    """zipfile built all 200 000 ZipInfos (~100 MB) before the count was checked."""
    directory = many_records(200_000)
    head = local(b"f0000000")
    data = head + directory + trailer(200_000, len(directory), len(head), zip64=True)
    report = unpack_in_child(write(tmp_path, data), max_files=4096)
    assert report["error"] == "zip archive declares too many files: 200000 > 4096"
    assert report["grew_kib"] < 8 << 10
    assert report["seconds"] < 5
    assert report["written"] == []


@pytest.mark.parametrize(("declared", "error"), [
    (200_000 & 0xFFFF, "zip archive hostile.zip holds more entries than the 3392 it declares"),
    (10, "zip archive hostile.zip has an implausible central directory: 10800000 bytes for "
         "10 entries at offset 38"),
])
def test_200k_entries_behind_a_trailer_declaring_few_are_refused(tmp_path: Path,
                                                                 declared: int,
                                                                 error: str) -> None:
    """zipfile walks the directory by its size and never reads the count: a trailer saying
    3 392 (200 000 modulo 65 536, as pre-zip64 writers stored it) or 10 bounded nothing.
    Now 10 cannot fill 10.8 MB, and 3 392 could, so the walk counts to 3 393 and stops."""
    directory = many_records(200_000)
    head = local(b"f0000000")
    data = head + directory + trailer(declared, len(directory), len(head))
    report = unpack_in_child(write(tmp_path, data), max_files=4096)
    assert report["error"] == error
    assert report["grew_kib"] < 8 << 10
    assert report["written"] == []


def test_records_past_the_declared_count_are_refused_at_the_first_extra(
        tmp_path: Path) -> None:
    """A directory that fits its declared count by size (long names on the declared ones)
    but holds more records: found by the walk, after `declared + 1` records, not all."""
    long_name = b"n" * 60_000
    declared = 100
    directory = (b"".join(record(long_name + b"%03d" % i) for i in range(declared))
                 + many_records(100_000))
    assert len(directory) <= declared * (46 + 3 * 0xFFFF)
    head = local(b"x")
    data = head + directory + trailer(declared, len(directory), len(head))
    report = unpack_in_child(write(tmp_path, data), max_files=4096)
    assert report["error"] == ("zip archive hostile.zip holds more entries than the 100 it "
                               "declares")
    assert report["grew_kib"] < 8 << 10
    assert report["written"] == []


def test_a_directory_larger_than_its_entries_could_fill_is_refused(tmp_path: Path) -> None:
    """One declared entry, 100 000 records: with no file count limit, zipfile built them all
    (and, all pointing at one local header, then failed on the second)."""
    directory = many_records(100_000)
    head = local(b"f0000000")
    data = head + directory + trailer(1, len(directory), len(head))
    report = unpack_in_child(write(tmp_path, data), max_files=0)
    assert report["error"] == (f"zip archive hostile.zip has an implausible central "
                               f"directory: {len(directory)} bytes for 1 entries at offset "
                               f"{len(head)}")
    assert report["grew_kib"] < 8 << 10


def test_a_long_directory_is_walked_between_checks(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a file count limit the walk may be long: a kill stops it within 4096 records,
    before zipfile has built any."""
    directory = many_records(100_000)
    head = local(b"f0000000")
    archive = write(tmp_path, head + directory + trailer(100_000, len(directory), len(head),
                                                        zip64=True))
    opened: list[object] = []
    real_init = zipfile.ZipFile.__init__

    def spy(self: zipfile.ZipFile, *args: Any, **kw: Any) -> None:
        opened.append(args[0])
        real_init(self, *args, **kw)

    monkeypatch.setattr(zipfile.ZipFile, "__init__", spy)
    with pytest.raises(KeyboardInterrupt):
        unpack(archive, "zip", tmp_path / "out", as_dir=True, max_size=0, max_files=0,
               check=stop_at_call(3))
    assert opened == []


def test_a_directory_zipfile_reads_differently_than_checked_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stands for a Python whose zipfile finds the trailer otherwise than the check did."""
    archive = write(tmp_path, archive_of([(b"a", b"1"), (b"b", b"2")]))
    monkeypatch.setattr(unpack_module, "check_directory",
                        lambda *a: zipbounds.Directory(entries=1, start=62, size=47))
    with pytest.raises(GetterError, match=r"zip archive hostile\.zip was read differently than "
                                          "checked"):
        unpack(archive, "zip", tmp_path / "out", as_dir=True, max_size=0, max_files=0)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("mutate", "error"), [
    (lambda d: d[:-22], "failed to unpack hostile.zip: File is not a zip file"),
    (lambda d: d.replace(b"PK\001\002", b"PK\001\003", 1), "not a directory record"),
])
def test_a_corrupt_directory_is_a_getter_error(tmp_path: Path, mutate: Any,
                                               error: str) -> None:
    data = archive_of([(b"a", b"1"), (b"b", b"2")])
    with pytest.raises(GetterError, match=error):
        unpack(write(tmp_path, mutate(data)), "zip", tmp_path / "out", as_dir=True,
               max_size=0, max_files=0)


# 2. Entries are judged whole before the first is written.

def test_the_declared_sizes_are_summed_before_anything_is_written(tmp_path: Path) -> None:
    small = b"small\n"
    big, crc = deflated(64 << 20)
    head = local(b"small", csize=len(small), usize=len(small), crc=zlib.crc32(small)) + small
    directory = (record(b"small", csize=len(small), usize=len(small), crc=zlib.crc32(small))
                 + record(b"big", offset=len(head), method=8, csize=len(big), usize=64 << 20,
                          crc=crc))
    body = head + local(b"big", method=8, csize=len(big), usize=64 << 20, crc=crc) + big
    archive = write(tmp_path, body + directory + trailer(2, len(directory), len(body)))
    with pytest.raises(GetterError, match=f"zip archive larger than limit: {32 << 20}"):
        unpack(archive, "zip", tmp_path / "out", as_dir=True, max_size=32 << 20, max_files=0)
    assert not (tmp_path / "out/small").exists()


def test_a_deflate_bomb_whose_header_lies_stops_at_the_declared_size(tmp_path: Path) -> None:
    """256 MiB of zeros declared as 1 KiB: written no further than 1 KiB, refused, in bounded
    memory and time."""
    data, _ = deflated(256 << 20)
    assert len(data) < 1 << 20
    archive = write(tmp_path, archive_of([(b"bomb", data)], method=8, usize=1024))
    report = unpack_in_child(archive, max_size=1 << 20)
    assert report["error"] is not None
    assert "Bad CRC-32 for file 'bomb'" in report["error"]  # zipfile stopped at 1 KiB
    assert (tmp_path / "hostile.out/bomb").stat().st_size <= 1024
    assert report["grew_kib"] < 32 << 10
    assert report["seconds"] < 5


class _Endless:
    """An entry's data stream that never ends: what a decompressor without zipfile's own
    bound would hand over."""

    def __init__(self) -> None:
        self.given = 0

    def read(self, size: int = -1, /) -> bytes:
        if self.given >= 64 << 20:  # a bound on the test itself, should the copy have none
            return b""
        self.given += size
        return b"\0" * size

    def __enter__(self) -> _Endless:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def test_the_copy_holds_the_declared_size_whatever_the_stream_gives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = write(tmp_path, archive_of([(b"a", b"x" * 1000)]))
    stream = _Endless()
    monkeypatch.setattr(zipfile.ZipFile, "open", lambda *a, **kw: stream)
    with pytest.raises(GetterError,
                       match="zip entry 'a' holds more than the 1000 bytes its header "
                             "declares"):
        unpack(archive, "zip", tmp_path / "out", as_dir=True, max_size=0, max_files=0)
    assert stream.given <= 1 << 20  # one chunk
    assert (tmp_path / "out/a").stat().st_size == 0


# 3. Only what Nomad's getter reads is read, and zipfile's own refusals are getter errors.

def test_a_bzip2_bomb_is_refused_before_it_is_inflated(tmp_path: Path) -> None:
    """zipfile inflates bzip2 and LZMA data without an output bound: one read of this
    200-byte archive held its 64 MiB at once (1 GiB is 785 bytes of bzip2, but slow to build
    here). Go's archive/zip, which Nomad's getter unzips with, reads only stored and
    deflated entries."""
    path = tmp_path / "bz2.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_BZIP2) as zf, zf.open("bomb", "w") as out:
        chunk = b"\0" * (16 << 20)
        for _ in range(4):
            out.write(chunk)
    assert path.stat().st_size < 512
    report = unpack_in_child(path, max_size=0)
    assert report["error"] == ("zip entry 'bomb' uses an unsupported compression method "
                               "(12); only stored and deflated are read")
    assert report["grew_kib"] < 8 << 10
    assert report["written"] == []


@pytest.mark.parametrize(("entry", "error"), [
    ({"flags": 1}, "zip entry 'a' is encrypted"),
    ({"method": 99}, r"zip entry 'a' uses an unsupported compression method \(99\)"),
    ({"method": 14}, r"unsupported compression method \(14\)"),
    ({"version": 64}, "hostile.zip: entry 1 needs zip version 6.4 to extract"),
])
def test_what_zipfile_refuses_with_its_own_exceptions_is_a_getter_error(
        tmp_path: Path, entry: dict[str, int], error: str) -> None:
    """zipfile raises RuntimeError (a password needed), NotImplementedError (a method or
    version it lacks): not the download's error, so the agent's task would crash on them."""
    archive = write(tmp_path, archive_of([(b"a", b"payload")], **entry))
    with pytest.raises(GetterError, match=error):
        unpack(archive, "zip", tmp_path / "out", as_dir=True, max_size=0, max_files=0)
    assert not (tmp_path / "out/a").exists()


# 4. Honest archives still unpack, whatever their trailer looks like.

@pytest.mark.parametrize("shape", ["plain", "zip64", "stub", "comment"])
def test_honest_archives_unpack(tmp_path: Path, shape: str) -> None:
    entries = [(b"dir/", b""), (b"dir/a.txt", b"alpha\n"), (b"b.txt", b"beta\n")]
    data = archive_of(entries, zip64=shape == "zip64")
    if shape == "stub":  # a self-extracting archive: offsets relative to the archive's start
        data = b"#!/bin/sh\nexit 1\n" + data
    if shape == "comment":
        data = data[:-2] + struct.pack("<H", 11) + b"PK archive!"
    unpack(write(tmp_path, data, "good.zip"), "zip", tmp_path / "out", as_dir=True,
           max_size=11, max_files=3)
    assert (tmp_path / "out/dir/a.txt").read_bytes() == b"alpha\n"
    assert (tmp_path / "out/b.txt").read_bytes() == b"beta\n"


def test_an_archive_written_by_zipfile_unpacks_at_its_limits(tmp_path: Path) -> None:
    path = tmp_path / "good.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for i in range(100):
            zf.writestr(f"f{i:03d}", b"z" * 1000)
    unpack(path, "zip", tmp_path / "out", as_dir=True, max_size=100_000, max_files=100)
    assert len(list((tmp_path / "out").iterdir())) == 100
    with pytest.raises(GetterError, match="declares too many files: 100 > 99"):
        unpack(path, "zip", tmp_path / "out2", as_dir=True, max_size=0, max_files=99)
    with pytest.raises(GetterError, match="zip archive larger than limit: 99999"):
        unpack(path, "zip", tmp_path / "out3", as_dir=True, max_size=99_999, max_files=0)
