"""Layer 2: archive readers held to bounds by `unpack` — real archive files on disk.

Covered: pax headers parsed by `client/getter/pax.py`, never by tarfile (whose parser on Python
< 3.11.10 is quadratic), and in linear time; negative or absurd pax sizes (local and global)
refused before the decompression limit is passed; chains of special headers bounded in count; a
recursion in a reader mapped to `GetterError`; a .gz of empty members stopped by `check`; zip
entries zipfile cannot read (flag bits 5 and 6) refused; honest archives of every kind still
unpack through the checked reader.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import yurt.runtime.client.getter.unpack as unpack_module
from yurt.runtime.client.getter.source import GetterError
from yurt.runtime.client.getter.unpack import MAX_CHAIN, unpack

pytestmark = pytest.mark.slow

LIMIT = 1 << 20


class Stop(Exception):
    """What the test's `check` raises, as Trio's `Cancelled` would in the agent."""


def record(text: bytes) -> bytes:
    """One pax record `"%d %s\\n"`, its length counting its own digits."""
    n = len(text) + 2
    n += len(str(n + len(str(n))))
    out = str(n).encode() + b" " + text + b"\n"
    assert len(out) == n
    return out


def pax_block(kind: bytes, body: bytes) -> bytes:
    header = tarfile.TarInfo("././@PaxHeader")
    header.type = kind
    header.size = len(body)
    return header.tobuf(tarfile.USTAR_FORMAT) + body + b"\0" * (-len(body) % 512)


def member(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"") -> bytes:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(data)
    info.mode = 0o644
    return info.tobuf(tarfile.USTAR_FORMAT) + data + b"\0" * (-len(data) % 512)


def write_tar(path: Path, *blocks: bytes) -> Path:
    path.write_bytes(b"".join(blocks) + b"\0" * 1024)
    return path


def written(dest: Path) -> int:
    return sum(f.stat().st_size for f in dest.rglob("*") if f.is_file()) if dest.exists() else 0


# 1. pax headers: our parser, linear, same meaning as tarfile's.

def test_pax_archives_unpack_without_tarfiles_pax_parser(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """tarfile's `_proc_pax` is the quadratic one (CVE-2024-6232 on 3.11.7): never called."""
    def refuse(*args: object) -> None:
        raise AssertionError("tarfile's own pax parser was used")

    monkeypatch.setattr(tarfile.TarInfo, "_proc_pax", refuse)
    long_name = "d/" + "n" * 150 + "/caf\u00e9.txt"  # past ustar's 100 bytes: a pax path
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(long_name)
        info.size, info.mtime, info.uid = 5, 1_234_567_890.5, 1 << 40  # pax mtime and uid
        tar.addfile(info, io.BytesIO(b"hello"))
    archive = tmp_path / "a.tar"
    archive.write_bytes(buf.getvalue())
    unpack(archive, "tar", tmp_path / "out", as_dir=True, max_size=LIMIT, max_files=10)
    out = tmp_path / "out" / long_name
    assert out.read_bytes() == b"hello"
    assert out.stat().st_mtime == 1_234_567_890.5


def test_global_and_local_pax_records_apply_as_tarfile_applies_them(tmp_path: Path) -> None:
    """A global path/mtime applies to every later entry until a local record overrides it;
    hdrcharset=BINARY keeps a name in the archive's encoding; a local size moves the data."""
    archive = write_tar(
        tmp_path / "a.tar",
        pax_block(tarfile.XGLTYPE, record(b"mtime=1000000000")),
        pax_block(tarfile.XHDTYPE, record(b"path=first") + record(b"size=3")),
        member("ignored", data=b"abc"),
        member("second", data=b"xyz"),
        pax_block(tarfile.XHDTYPE, record(b"hdrcharset=BINARY") + record(b"path=caf\xe9")),
        member("ignored2", data=b"q"),
    )
    unpack(archive, "tar", tmp_path / "out", as_dir=True, max_size=LIMIT, max_files=10)
    out = tmp_path / "out"
    assert (out / "first").read_bytes() == b"abc"
    assert (out / "second").read_bytes() == b"xyz"
    assert (out / "second").stat().st_mtime == 1_000_000_000
    # Python's default tar encoding is the file system's (UTF-8 here), with surrogateescape:
    # the raw byte survives to the file name.
    assert os.fsencode(next(p.name for p in out.iterdir() if p.name.startswith("caf"))) \
        == b"caf\xe9"


_REDOS_CHILD = """
import sys, time
from pathlib import Path
from yurt.runtime.client.getter.source import GetterError
from yurt.runtime.client.getter.unpack import unpack

t0 = time.monotonic()
try:
    unpack(Path(sys.argv[1]), "tar", Path(sys.argv[2]), as_dir=True, max_size=0, max_files=0)
    print("unpacked")
except GetterError as e:
    print("refused:", e)
print("seconds", time.monotonic() - t0)
"""


@pytest.mark.parametrize("body", [b"1" * (1 << 20),  # CVE-2024-6232's shape: ~750 s before
                                  record(b"k=" + b"1" * ((1 << 20) - 20)),
                                  b"".join(record(b"k=v") for _ in range(150_000))])
def test_a_pax_header_of_the_largest_size_is_parsed_in_linear_time(tmp_path: Path,
                                                                   body: bytes) -> None:
    """In a child process with a deadline: the quadratic parser held the GIL for minutes,
    which no in-process timeout can interrupt."""
    assert len(body) <= unpack_module.MAX_HEADER
    archive = write_tar(tmp_path / "a.tar", pax_block(tarfile.XHDTYPE, body), member("x"))
    (tmp_path / "out").mkdir()
    child = subprocess.run([sys.executable, "-c", _REDOS_CHILD, str(archive),
                            str(tmp_path / "out")], capture_output=True, text=True,
                           timeout=30, check=False)
    assert child.returncode == 0, child.stderr[-2000:]
    assert float(child.stdout.split("seconds")[1]) < 5  # milliseconds, on any machine
    expected = "refused: tar pax header is malformed" if body[:2] == b"11" else "unpacked"
    assert expected in child.stdout


@pytest.mark.parametrize("body", [b"5 k=v\n", b"x k=v\n", b"6 kv\n\0", b"7 k=v\n", b"6 =v\n",
                                  b"99 k=v\n", b"0 k=v\n", b"6 k=v!"])
def test_a_malformed_pax_record_is_refused(tmp_path: Path, body: bytes) -> None:
    archive = write_tar(tmp_path / "a.tar", pax_block(tarfile.XHDTYPE, body), member("x"))
    with pytest.raises(GetterError, match="pax header is malformed"):
        unpack(archive, "tar", tmp_path / "out", as_dir=True, max_size=0, max_files=0)


# 2. pax sizes cannot walk past the decompression limit.

@pytest.mark.parametrize("kind", [tarfile.XGLTYPE, tarfile.XHDTYPE])
def test_a_negative_pax_size_is_refused_before_the_limit_is_passed(tmp_path: Path,
                                                                   kind: bytes) -> None:
    """The reviewer's archive: a negative size (global: on a directory; local: on a file)
    drove the running total below zero, and 2 MiB were written under a 1 MiB limit."""
    big = b"a" * (2 * LIMIT)
    blocks = [pax_block(kind, record(b"size=-1000000000000"))]
    blocks.append(member("d", tarfile.DIRTYPE) if kind == tarfile.XGLTYPE else member("d/neg"))
    blocks += [pax_block(tarfile.XHDTYPE, record(b"size=%d" % len(big))), member("d/big"),
               big]
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(gzip.compress(b"".join(blocks) + b"\0" * 1024))
    with pytest.raises(GetterError, match="invalid size"):
        unpack(archive, "tar.gz", tmp_path / "out", as_dir=True, max_size=LIMIT, max_files=0)
    assert written(tmp_path / "out") <= LIMIT


@pytest.mark.parametrize("value", [b"-1", b"+5", b" 5", b"5_0", b"", b"1e3",
                                   b"9" * 19, b"1" + b"0" * 30])
def test_a_pax_size_that_is_not_a_plain_tar_size_is_refused(tmp_path: Path,
                                                            value: bytes) -> None:
    archive = write_tar(tmp_path / "a.tar", pax_block(tarfile.XHDTYPE, record(b"size=" + value)),
                        member("x"))
    with pytest.raises(GetterError, match="invalid size"):
        unpack(archive, "tar", tmp_path / "out", as_dir=True, max_size=0, max_files=0)


def test_gnu_sparse_pax_records_are_refused(tmp_path: Path) -> None:
    archive = write_tar(tmp_path / "a.tar",
                        pax_block(tarfile.XHDTYPE, record(b"GNU.sparse.major=1")
                                  + record(b"GNU.sparse.minor=0")), member("x"))
    with pytest.raises(GetterError, match="sparse"):
        unpack(archive, "tar", tmp_path / "out", as_dir=True, max_size=0, max_files=0)


# 5. Chains of special headers are bounded in count, and recursion is a GetterError.

def empty_long_names(n: int) -> bytes:
    header = tarfile.TarInfo("././@LongLink")
    header.type = tarfile.GNUTYPE_LONGNAME
    header.size = 0
    return header.tobuf(tarfile.USTAR_FORMAT) * n


@pytest.mark.parametrize("n", [MAX_CHAIN + 1, 5000])
def test_a_chain_of_empty_special_headers_is_refused_by_count(tmp_path: Path, n: int) -> None:
    """Empty headers add nothing to the byte bound; 5000 of them made tarfile recurse into a
    RecursionError, which escaped as a non-GetterError."""
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(gzip.compress(empty_long_names(n) + member("x") + b"\0" * 1024))
    with pytest.raises(GetterError, match=f"more than {MAX_CHAIN} special tar headers"):
        unpack(archive, "tar.gz", tmp_path / "out", as_dir=True, max_size=LIMIT, max_files=10)


def test_a_recursion_in_a_reader_is_a_getter_error(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the count (as on a reader we do not foresee), the recursion itself is still
    the download's error, not the agent's."""
    monkeypatch.setattr(unpack_module, "MAX_CHAIN", 1 << 30)
    archive = tmp_path / "a.tar"
    archive.write_bytes(empty_long_names(sys.getrecursionlimit() * 2) + member("x")
                        + b"\0" * 1024)
    with pytest.raises(GetterError, match="recursion"):
        unpack(archive, "tar", tmp_path / "out", as_dir=True, max_size=LIMIT, max_files=10)


def test_a_usual_chain_of_special_headers_unpacks(tmp_path: Path) -> None:
    """A global and a local pax header around a GNU long name: what real archives hold."""
    name = "l" * 200
    long_name = tarfile.TarInfo("././@LongLink")
    long_name.type = tarfile.GNUTYPE_LONGNAME
    long_name.size = len(name) + 1
    archive = write_tar(tmp_path / "a.tar",
                        pax_block(tarfile.XGLTYPE, record(b"comment=release")),
                        long_name.tobuf(tarfile.USTAR_FORMAT)
                        + (name.encode() + b"\0").ljust(512, b"\0"),
                        pax_block(tarfile.XHDTYPE, record(b"mtime=1000000000")),
                        member("short", data=b"data"))
    unpack(archive, "tar", tmp_path / "out", as_dir=True, max_size=LIMIT, max_files=10)
    assert (tmp_path / "out" / name).read_bytes() == b"data"


# 3. Reading the archive itself is checked: empty gzip members cannot hide the work.

@pytest.mark.parametrize("kind", ["gz", "tar.gz"])
def test_a_gzip_of_empty_members_is_stopped_by_check(tmp_path: Path, kind: str) -> None:
    """200 000 empty members (4 MB): one GzipFile.read walked them all with no check
    between (check was called twice in the whole .gz unpack)."""
    payload = gzip.compress(member("x", data=b"x") + b"\0" * 1024 if kind == "tar.gz"
                            else b"x")
    archive = tmp_path / f"a.{kind}"
    archive.write_bytes(gzip.compress(b"", mtime=0) * 200_000 + payload)
    calls = [0]

    def check() -> None:
        calls[0] += 1
        if calls[0] == 100:
            raise Stop

    with pytest.raises(Stop):
        unpack(archive, kind, tmp_path / "out", as_dir=kind == "tar.gz", max_size=0,
               max_files=0, check=check)


_PLAIN_TAR = member("f", data=b"tar data") + b"\0" * 1024
_COMPRESS = {"gz": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}


@pytest.mark.parametrize("kind", ["gz", "bz2", "xz", "tar", "tar.gz", "tgz", "tar.bz2",
                                  "tbz2", "tar.xz", "txz", "zip"])
def test_honest_archives_of_every_kind_unpack_through_the_checked_reader(
        tmp_path: Path, kind: str) -> None:
    archive = tmp_path / f"a.{kind}"
    calls = [0]

    def check() -> None:
        calls[0] += 1

    if kind in _COMPRESS:
        archive.write_bytes(_COMPRESS[kind](b"single" * 100_000))
        unpack(archive, kind, tmp_path / "out", as_dir=False, max_size=LIMIT, max_files=1,
               check=check)
        assert (tmp_path / "out").read_bytes() == b"single" * 100_000
    else:
        if kind == "zip":
            with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
                z.writestr("f", b"tar data")
        else:
            suffix = kind.removeprefix("tar").lstrip(".") or "none"
            method = {"gz": "gz", "tgz": "gz", "bz2": "bz2", "tbz2": "bz2", "xz": "xz",
                      "txz": "xz"}.get(suffix)
            archive.write_bytes(_COMPRESS[method](_PLAIN_TAR) if method else _PLAIN_TAR)
        unpack(archive, kind, tmp_path / "out", as_dir=True, max_size=LIMIT, max_files=1,
               check=check)
        assert (tmp_path / "out" / "f").read_bytes() == b"tar data"
    assert calls[0] > 1


# 6. zip entries zipfile cannot read are refused before anything is written.

@pytest.mark.parametrize("bit", [0x20, 0x40])
def test_a_zip_entry_zipfile_cannot_read_is_refused(tmp_path: Path, bit: int) -> None:
    """Flag bit 5 (patched data) and 6 (strong encryption): zipfile raised
    NotImplementedError, which escaped as a non-GetterError."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("f", b"hello")
    data = bytearray(buf.getvalue())
    for magic, offset in ((b"PK\3\4", 6), (b"PK\1\2", 8)):  # local and central flag fields
        at = data.index(magic)
        data[at + offset:at + offset + 2] = bit.to_bytes(2, "little")
    archive = tmp_path / "a.zip"
    archive.write_bytes(bytes(data))
    with pytest.raises(GetterError, match="cannot be read"):
        unpack(archive, "zip", tmp_path / "out", as_dir=True, max_size=LIMIT, max_files=10)
    assert not (tmp_path / "out").exists()


def test_what_zipfile_raises_as_not_implemented_is_a_getter_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Any other NotImplementedError zipfile may grow is mapped at the boundary too."""
    def unreadable(*args: object, **kwargs: object) -> None:
        raise NotImplementedError("some future zip feature")

    archive = tmp_path / "a.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("f", b"hello")
    monkeypatch.setattr(zipfile.ZipFile, "open", unreadable)
    with pytest.raises(GetterError, match="some future zip feature"):
        unpack(archive, "zip", tmp_path / "out", as_dir=True, max_size=LIMIT, max_files=10)
