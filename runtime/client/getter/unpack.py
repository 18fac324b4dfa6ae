"""Unpacking a downloaded archive into a fresh staging directory: blocking, run in a thread.

Safety comes from three layers. Before a header is even read whole, its size is bounded: GNU
long names/links and pax headers are held in memory by `tarfile`, so one whose declared size
is over `MAX_HEADER` (1 MiB, Go's `archive/tar` `maxSpecialFileSize`) is refused, as is a chain
of them before one entry, or global pax headers adding up past it (they accumulate for the
rest of the archive); GNU sparse entries are refused outright (their maps are read into
memory with no bound). Without this a 300 KB tar.gz declaring a 2.4 GB long name made
`tarfile` allocate 2.4 GB. At most `MAX_CHAIN` special headers may precede one entry: tarfile
reads the chain by recursion, so a long one of empty headers (bounded in bytes by nothing) was
a `RecursionError`. pax headers are parsed by `pax.py`, never by tarfile (whose parser on
Python < 3.11.10 is quadratic and holds the GIL), which also refuses a pax `size` that is
negative or absurd; every entry's size is judged again once tarfile has laid the pax records
over it. Then every archive entry is checked before anything is written:
go-getter's "entry contains '..'" rule, then the running file count and declared size
against the client's `decompression_file_count_limit` and `decompression_size_limit` (the
sizes in the headers are what is written, and the copy stops there anyway, so a bomb is
refused before it expands). Then the writing itself cannot leave the staging directory: tar
links are refused outright (as Nomad's getter does), other tar members go through `tarfile`'s
`data` filter (absolute names, devices and FIFOs refused, setuid bits stripped; Python ≥
3.11.4) and are written by us, chunk by chunk; zip members are joined to the directory and
checked to stay below it (zipfile never creates links, so nothing written can redirect a later
write). Every file written gets the `data` filter's mode (`safe_mode`): no setuid, setgid or
sticky bit, no group or other write, read and write for its owner; zip entries and a single
file out of a tar included, which the filter itself never sees. A zip archive's directory is
judged before zipfile reads it (`zipbounds.py`: zipfile
builds every record it holds before any count can be checked), every entry is judged and the
declared sizes summed before the first is written, only stored and deflated entries are read
(Go's archive/zip reads no others; zipfile inflates the others without a bound), and each is
written only up to the size its record declares. The single-file decompressors (gz, bz2, xz)
stop at the size limit rather than truncate.

Every loop here calls `check` between chunks and entries, and the archive file is read
through `checkedread.py`, which calls it before every bounded read of the input: the caller
passes Trio's `from_thread.check_cancelled`, so killing a task stops a long unpack or copy
within one chunk of input or output instead of waiting for it to finish (the worker thread
cannot be abandoned: the staging directory it writes is removed right after). Work a reader
does between two reads of its output (a .gz of a million empty members) is thus stopped too.

The staging directory is always new, empty and reachable by the agent alone (the caller makes
it 0700 in the root-owned task directory), so nothing there can be a link an entry would
follow. `copy_tree` reads a `file://` directory source that others may write, so it walks it
by descriptors: each entry is opened `O_PATH | O_NOFOLLOW` relative to its parent, judged on
that descriptor (a link is refused, a FIFO, socket or device skipped, neither opened), and only
a regular file or directory is reopened to read, through the descriptor, never its name again.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import lzma
import os
import stat
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Final, Protocol, cast

from yurt.runtime.client.getter.access import Reader, may
from yurt.runtime.client.getter.checkedread import CheckedReader
from yurt.runtime.client.getter.pax import MAX_SIZE, parse_pax
from yurt.runtime.client.getter.source import GetterError
from yurt.runtime.client.getter.zipbounds import check_directory

_CHUNK: Final = 1 << 20
#: The largest GNU long name/link or pax header read (Go's archive/tar maxSpecialFileSize).
MAX_HEADER: Final = 1 << 20
#: The most special headers (long names and links, pax) read before one entry: a real
#: archive has at most four (a global and a local pax header, a long name, a long link).
MAX_CHAIN: Final = 8
#: The deepest directory tree `copy_tree` copies: each level holds a descriptor open.
MAX_DEPTH: Final = 128

Check = Callable[[], None]


def no_check() -> None:
    """The `check` of a copy nobody can cancel (tests, callers outside Trio)."""


class _Reader(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


def bounded_chunks(src: _Reader, cap: int | None, over: str, check: Check) -> Iterator[bytes]:
    """`src` read to its end in chunks, `check` called before each read; a chunk that would
    take the total past `cap` bytes raises `GetterError(over)` instead of being yielded."""
    total = 0
    while True:
        check()
        chunk = src.read(_CHUNK)
        if not chunk:
            return
        total += len(chunk)
        if cap is not None and total > cap:
            raise GetterError(over)
        yield chunk


_TAR_MODES: Final = {"tar": "r:", "tar.gz": "r:gz", "tgz": "r:gz", "tar.bz2": "r:bz2",
                     "tbz2": "r:bz2", "tar.xz": "r:xz", "txz": "r:xz"}
_SINGLE: Final = {"gz": "gzip", "bz2": "bzip2", "xz": "xz"}
_ZIP_METHODS: Final = frozenset({zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED})
#: General purpose flag bits zipfile cannot read: 0 (encrypted), 5 (compressed patched
#: data) and 6 (strong encryption); it raises RuntimeError or NotImplementedError on them.
_ZIP_UNREADABLE: Final = 0x61
_SPECIAL_HEADERS: Final = {tarfile.GNUTYPE_LONGNAME: "GNU long name",
                           tarfile.GNUTYPE_LONGLINK: "GNU long link",
                           tarfile.XHDTYPE: "pax", tarfile.XGLTYPE: "pax global",
                           tarfile.SOLARIS_XHDTYPE: "pax"}


#: tarfile's own dispatch on the header type, and its application of pax records to an
#: entry (private, so absent from the type stubs).
_PROC_MEMBER: Final[Callable[[tarfile.TarInfo, tarfile.TarFile], tarfile.TarInfo]] = \
    vars(tarfile.TarInfo)["_proc_member"]
_APPLY_PAX_INFO: Final[Callable[[tarfile.TarInfo, dict[str, str], str, str], None]] = \
    vars(tarfile.TarInfo)["_apply_pax_info"]


def _blocks(size: int) -> int:
    """`size` rounded up to whole 512-byte tar blocks."""
    return (size + tarfile.BLOCKSIZE - 1) // tarfile.BLOCKSIZE * tarfile.BLOCKSIZE


def _judge_size(info: tarfile.TarInfo) -> None:
    if not 0 <= info.size <= MAX_SIZE:  # GNU base-256 sizes may be negative, so may pax's
        raise GetterError(f"tar entry with an impossible size ({info.size}): {info.name}")


class _BoundedTarFile(tarfile.TarFile):
    """A `TarFile` that counts the special headers it has read (see `_BoundedTarInfo`)."""

    chain_bytes = 0  # special headers before the entry being read
    chain_count = 0
    global_bytes = 0  # pax global headers so far: tarfile keeps them all


class _BoundedTarInfo(tarfile.TarInfo):
    """Refuses an oversized special header from its 512-byte header block, before `tarfile`
    reads its body into memory, and parses pax headers itself (`pax.py`)."""

    def _proc_member(self, tar: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type == tarfile.GNUTYPE_SPARSE:
            raise GetterError(f"sparse tar entries are not supported: {self.name}")
        _judge_size(self)
        if isinstance(tar, _BoundedTarFile):
            kind = _SPECIAL_HEADERS.get(self.type)
            if kind is None:
                tar.chain_bytes = tar.chain_count = 0
            else:
                tar.chain_bytes += self.size
                tar.chain_count += 1
                if self.type == tarfile.XGLTYPE:
                    tar.global_bytes += self.size
                if max(self.size, tar.chain_bytes, tar.global_bytes) > MAX_HEADER:
                    raise GetterError(f"tar {kind} header too large: {self.size} bytes "
                                      f"(limit {MAX_HEADER})")
                if tar.chain_count > MAX_CHAIN:
                    raise GetterError(f"more than {MAX_CHAIN} special tar headers before one "
                                      "entry")
        return _PROC_MEMBER(self, tar)

    def _proc_pax(self, tar: tarfile.TarFile) -> tarfile.TarInfo:
        """A pax header (global or for the next entry), then the entry it precedes: what
        tarfile's own does, with `pax.py`'s parser. GNU sparse records are refused there,
        so none of tarfile's sparse handling is needed."""
        if tar.fileobj is None:  # pragma: no cover - an open TarFile always has one
            raise GetterError("tar archive is closed")
        body = tar.fileobj.read(_blocks(self.size))[:self.size]
        if len(body) != self.size:
            raise GetterError("tar archive ends inside a pax header")
        # Global records stay in force for the rest of the archive; tarfile lays them over
        # every later entry itself (`_proc_builtin`).
        records = (cast(dict[str, str], tar.pax_headers) if self.type == tarfile.XGLTYPE
                   else dict(tar.pax_headers))
        records.update(parse_pax(body, records, encoding=tar.encoding, errors=tar.errors))
        try:
            entry = self.fromtarfile(tar)
        except tarfile.HeaderError as e:
            raise GetterError(f"bad tar header after a pax header: {e}") from None
        if self.type != tarfile.XGLTYPE:
            _APPLY_PAX_INFO(entry, records, tar.encoding, tar.errors)
            entry.offset = self.offset
            if "size" in records:  # the entry's data ends elsewhere than its header said
                end = entry.offset_data
                if entry.isreg() or entry.type not in tarfile.SUPPORTED_TYPES:
                    end += _blocks(entry.size)
                tar.offset = end
        return entry


def safe_mode(mode: int) -> int:
    """An archive file entry's permission bits as `tarfile.data_filter` leaves them: no
    setuid, setgid or sticky bit, no write for group or others; read and write for the owner,
    and no execute bits at all unless the owner's is set. 0 (an archive that records no mode,
    as zip archives made on Windows) is 0644."""
    if not mode & 0o7777:
        return 0o644
    mode &= 0o755
    if not mode & 0o100:
        mode &= ~0o111
    return mode | 0o600


def _open_single(kind: str, raw: CheckedReader) -> io.BufferedIOBase:
    if kind == "gz":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if kind == "bz2":
        return bz2.BZ2File(raw, "rb")
    return lzma.LZMAFile(cast(IO[bytes], raw), "rb")


def _contains_dot_dot(name: str) -> bool:
    return ".." in name.replace("\\", "/").split("/")


def unpack(archive: Path, kind: str, dest: Path, *, as_dir: bool, max_size: int,
           max_files: int, check: Check = no_check) -> None:
    """Unpack `archive` (go-getter type `kind`) into the directory `dest`, or (not `as_dir`)
    as the single file `dest`. Limits of 0 mean none, as Nomad's client config reads them.
    `check` is called between chunks and may raise to stop (a cancellation).
    Raises `GetterError`."""
    try:
        if kind not in _TAR_MODES and kind != "zip" and as_dir:
            raise GetterError(f"{_SINGLE[kind]}-compressed files can only unarchive to a "
                              "single file")
        with open(archive, "rb") as f:
            raw = CheckedReader(f, check)
            if kind in _TAR_MODES:
                _untar(raw, archive.name, _TAR_MODES[kind], dest, as_dir, max_size,
                       max_files, check)
            elif kind == "zip":
                _unzip(raw, archive.name, dest, as_dir, max_size, max_files, check)
            else:
                with _open_single(kind, raw) as src:
                    _copy_limited(src, dest, 0o644, max_size, check)
    except GetterError:
        raise
    except (OSError, EOFError, ValueError, OverflowError, RuntimeError, tarfile.TarError,
            zipfile.BadZipFile, lzma.LZMAError) as e:
        # ValueError and OverflowError: what the stdlib readers raise on some garbage too
        # (a size field past what a seek or read accepts). RuntimeError: zipfile's answer to
        # an entry it cannot read (NotImplementedError is one), and a RecursionError should
        # a reader still recurse too deep on some header chain.
        raise GetterError(f"failed to unpack {archive.name}: {e}") from None


def _copy_limited(src: _Reader, dest: Path, mode: int, max_size: int, check: Check) -> int:
    """Copy `src` into the new file `dest`, at most `max_size` bytes (0: no limit)."""
    return _copy_capped(src, dest, mode, max_size or None, check,
                        f"decompressed size exceeds the limit of {max_size} bytes")


def _copy_capped(src: _Reader, dest: Path, mode: int, cap: int | None, check: Check,
                 over: str) -> int:
    """Copy `src` in chunks into `dest` (opened without following a link), `check` called
    before each; more than `cap` bytes written raises `GetterError(over)`."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                 mode)
    with os.fdopen(fd, "wb") as out:
        for chunk in bounded_chunks(src, cap, over, check):
            out.write(chunk)
        return out.tell()


def _untar(raw: CheckedReader, name: str, mode: str, dest: Path, as_dir: bool, max_size: int,
           max_files: int, check: Check) -> None:
    count = total = 0
    single_done = False
    with _BoundedTarFile.open(fileobj=cast(IO[bytes], raw), mode=mode,  # type: ignore[call-overload]
                              tarinfo=_BoundedTarInfo) as tar:
        while True:
            check()
            member = tar.next()
            # tarfile keeps every member it read; the loop needs none of them again, and an
            # archive without a file count limit could hold millions.
            tar.members.clear()
            if member is None:
                break
            _judge_size(member)  # again, now that pax records are laid over it
            count += 1
            if max_files and count > max_files:
                raise GetterError(f"tar archive contains too many files: {count} > "
                                  f"{max_files}")
            if as_dir and _contains_dot_dot(member.name):
                raise GetterError(f"entry contains '..': {member.name}")
            if member.issym() or member.islnk():
                # As Nomad's getter (symlinks disabled): a link in a fetched archive is
                # refused, never followed or recreated, whatever its target.
                raise GetterError(f"archive entry is a link: {member.name}")
            if member.sparse is not None:
                raise GetterError(f"sparse tar entries are not supported: {member.name}")
            total += member.size
            if max_size and total > max_size:
                raise GetterError(f"tar archive larger than limit: {max_size}")
            if not as_dir:
                if member.isdir() or not member.isfile():
                    raise GetterError(f"expected a single file: {name}")
                if single_done:
                    raise GetterError(f"expected a single file, got multiple: {name}")
                single_done = True
                src = tar.extractfile(member)
                if src is None:  # pragma: no cover - isfile() members always have data
                    raise GetterError(f"expected a single file: {name}")
                file_mode = safe_mode(member.mode)
                _copy_limited(src, dest, file_mode, 0, check)
                os.chmod(dest, file_mode)  # the umask applied at creation
                continue
            _extract(tar, member, dest, check)
    if count == 0 or (not as_dir and not single_done):
        raise GetterError(f"empty archive: {name}")


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, dest: Path, check: Check) -> None:
    """One member, as `tar.extract(member, dest, filter="data")` writes it, but in chunks
    that `check` can stop."""
    try:
        safe = tarfile.data_filter(member, str(dest))
    except tarfile.FilterError as e:
        raise GetterError(f"refused archive entry: {e}") from None
    target = dest / safe.name
    if safe.isdir():
        target.mkdir(parents=True, exist_ok=True)
        return
    src = tar.extractfile(member)
    if src is None:  # pragma: no cover - the data filter lets only files and dirs through
        raise GetterError(f"refused archive entry: {member.name}")
    mode = safe.mode if safe.mode is not None else 0o644
    with src:
        _copy_limited(src, target, mode, 0, check)
    os.chmod(target, mode)  # the umask applied at creation
    with contextlib.suppress(OSError, OverflowError):  # a time no file system can hold
        os.utime(target, (safe.mtime, safe.mtime))


def _unzip(raw: CheckedReader, name: str, dest: Path, as_dir: bool, max_size: int,
           max_files: int, check: Check) -> None:
    f = cast(IO[bytes], raw)
    # Before zipfile builds one ZipInfo per record (see zipbounds.py); the same open
    # file then goes to zipfile, so the archive judged is the archive read.
    directory = check_directory(f, name, max_files, check)
    with zipfile.ZipFile(f) as zf:
        infos = zf.infolist()
        if (len(infos), zf.start_dir) != (directory.entries, directory.start):
            raise GetterError(f"zip archive {name} was read differently than checked")
        targets = _judge_zip(infos, name, dest, as_dir, max_size, check)
        for info, target in targets:
            check()
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            mode = safe_mode(info.external_attr >> 16)
            with zf.open(info) as src:
                _copy_zip_entry(src, target, mode, info, check)
            os.chmod(target, mode)


def _judge_zip(infos: list[zipfile.ZipInfo], name: str, dest: Path, as_dir: bool,
               max_size: int, check: Check) -> list[tuple[zipfile.ZipInfo, Path]]:
    """Every entry judged, and its target found, before anything is written: a refusal
    leaves nothing behind, and the sizes are summed whole rather than found too large halfway
    through the writing."""
    if not infos:
        raise GetterError(f"empty archive: {name}")
    if not as_dir and len(infos) > 1:
        raise GetterError(f"expected a single file: {name}")
    root = dest.resolve() if as_dir else dest.parent.resolve()
    targets = []
    total = 0
    for info in infos:
        check()
        target = dest
        if as_dir:
            if _contains_dot_dot(info.filename):
                raise GetterError(f"entry contains '..': {info.filename}")
            target = Path(os.path.normpath(root / info.filename.lstrip("/")))
            if target != root and root not in target.parents:
                raise GetterError(f"refused archive entry {info.filename!r}: it would be "
                                  f"written outside {dest.name}")
        if info.flag_bits & _ZIP_UNREADABLE:
            # zipfile would raise RuntimeError asking for a password, or NotImplementedError;
            # Nomad's getter fails on the checksum of what it could not decrypt.
            raise GetterError(f"zip entry {info.filename!r} is encrypted or patched data "
                              f"(flags {info.flag_bits:#x}), which cannot be read")
        if info.compress_type not in _ZIP_METHODS:
            # Go's archive/zip, which Nomad's getter unzips with, knows only these two. And
            # zipfile hands bzip2 and LZMA data to their decompressors without an output
            # bound: one read of a 300 KB LZMA entry of zeros is gigabytes in memory.
            raise GetterError(f"zip entry {info.filename!r} uses an unsupported compression "
                              f"method ({info.compress_type}); only stored and deflated are "
                              "read")
        total += info.file_size
        if max_size and total > max_size:
            raise GetterError(f"zip archive larger than limit: {max_size}")
        if info.is_dir() and not as_dir:
            raise GetterError(f"expected a single file: {name}")
        targets.append((info, target))
    return targets


def _copy_zip_entry(src: _Reader, dest: Path, mode: int, info: zipfile.ZipInfo,
                    check: Check) -> None:
    """Copy one entry in chunks, counting the bytes actually written against the size its
    directory record declares. zipfile also stops at that size (and then finds the CRC
    wrong), but the bound is ours to hold: with every entry within its declared size and the
    declared sizes summed within the limit by `_judge_zip`, what is written is within the
    limit whatever the headers or the compressed data say."""
    _copy_capped(src, dest, mode, info.file_size, check,
                 f"zip entry {info.filename!r} holds more than the {info.file_size} bytes "
                 "its header declares")


def copy_tree(src: Path, dest: Path, *, max_size: int, max_files: int,
              reader: Reader | None = None, check: Check = no_check) -> None:
    """A `file://` directory source copied as a tree into the new directory `dest`.

    Links are refused, as go-getter's client with `DisableSymlinks` refuses them. FIFOs,
    sockets and devices are skipped, as yurt always skipped them, and never opened (go-getter
    would open them: a FIFO blocks the copy for ever, a device may act on open and never
    end). With a `reader` (the task's user) every entry must be readable by it. Raises
    `GetterError`."""
    try:
        top = os.open(src, os.O_PATH | os.O_CLOEXEC)  # the source's own links are followed
    except OSError as e:
        raise GetterError(f"{src}: {e.strerror}") from None
    try:
        if not stat.S_ISDIR(os.fstat(top).st_mode):
            raise GetterError(f"source path must be a directory: {src}")
        _Tree(max_size, max_files, reader, check).copy(top, src, dest, 0)
    except OSError as e:
        raise GetterError(f"{e.filename or src}: {e.strerror}") from None
    finally:
        os.close(top)


class _Tree:
    """The running totals of one `copy_tree`."""

    def __init__(self, max_size: int, max_files: int, reader: Reader | None,
                 check: Check) -> None:
        self.max_size, self.max_files, self.reader, self.check = (max_size, max_files, reader,
                                                                  check)
        self.count = self.total = 0

    def copy(self, dir_path_fd: int, shown: Path, out: Path, depth: int) -> None:
        """Copy the directory open (`O_PATH`) as `dir_path_fd` into the new directory `out`."""
        if depth > MAX_DEPTH:
            raise GetterError(f"directory tree deeper than {MAX_DEPTH} levels: {shown}")
        out.mkdir(parents=True, exist_ok=depth == 0)
        listing = os.open(f"/proc/self/fd/{dir_path_fd}",
                          os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            with os.scandir(listing) as entries:
                names = sorted(entry.name for entry in entries)
        finally:
            os.close(listing)
        for name in names:
            self.check()
            try:
                fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC,
                             dir_fd=dir_path_fd)
            except FileNotFoundError:  # removed while copied
                continue
            try:
                self._entry(fd, shown / name, out / name, depth)
            finally:
                os.close(fd)

    def _entry(self, fd: int, shown: Path, out: Path, depth: int) -> None:
        st = os.fstat(fd)  # the entry itself: opened O_PATH | O_NOFOLLOW
        if stat.S_ISLNK(st.st_mode):
            raise GetterError(f"copying of symlinks has been disabled: {shown}")
        if not stat.S_ISDIR(st.st_mode) and not stat.S_ISREG(st.st_mode):
            return  # a FIFO, socket or device: skipped, never opened (see copy_tree)
        if self.reader is not None and not may(st, self.reader,
                                               5 if stat.S_ISDIR(st.st_mode) else 4):
            raise GetterError(f"{shown}: permission denied for user \"{self.reader.name}\"")
        self.count += 1
        if self.max_files and self.count > self.max_files:
            raise GetterError(f"directory contains too many files: {self.count} > "
                              f"{self.max_files}")
        if stat.S_ISDIR(st.st_mode):
            self.copy(fd, shown, out, depth + 1)
            return
        self.total += st.st_size
        if self.max_size and self.total > self.max_size:
            raise GetterError(f"directory larger than limit: {self.max_size}")
        mode = stat.S_IMODE(st.st_mode) & 0o777
        # Through the descriptor judged above: the name may be something else by now.
        left = self.max_size - self.total + st.st_size if self.max_size else 0
        with open(f"/proc/self/fd/{fd}", "rb") as f:
            _copy_limited(f, out, mode, left, self.check)  # `left`: a file that grows
        os.chmod(out, mode)
