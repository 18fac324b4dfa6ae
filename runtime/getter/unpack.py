"""Unpacking a downloaded archive into a fresh staging directory: blocking, run in a thread.

Safety comes from two layers. Every archive entry is checked before anything is written:
go-getter's "entry contains '..'" rule, then the running file count and declared size against
the client's `decompression_file_count_limit` and `decompression_size_limit` (the sizes in
the headers are exactly what tarfile and zipfile will write, so a bomb is refused before it
expands). Then the writing itself cannot leave the staging directory: tar links are refused
outright (as Nomad's getter does), other tar members go through `tarfile`'s `data` filter
(absolute names, devices and setuid bits are refused or stripped; Python ≥ 3.11.4), zip
members are joined to the directory and checked to stay below it (zipfile never creates
links, so nothing written can redirect a later write).
The single-file decompressors (gz, bz2, xz) stop at the size limit rather than truncate.

The staging directory is always new and empty (the caller makes it), so nothing already there
can be a link an archive entry would follow.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import stat
import tarfile
import zipfile
from pathlib import Path
from typing import Final, Protocol

from yurt.runtime.getter.access import Reader, may
from yurt.runtime.getter.source import GetterError

_CHUNK: Final = 1 << 20


class _Reader(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...
_TAR_MODES: Final = {"tar": "r:", "tar.gz": "r:gz", "tgz": "r:gz", "tar.bz2": "r:bz2",
                     "tbz2": "r:bz2", "tar.xz": "r:xz", "txz": "r:xz"}
_SINGLE: Final = {"gz": "gzip", "bz2": "bzip2", "xz": "xz"}


def _open_single(kind: str, path: Path) -> io.BufferedIOBase:
    if kind == "gz":
        return gzip.open(path, "rb")
    if kind == "bz2":
        return bz2.open(path, "rb")
    return lzma.open(path, "rb")


def _contains_dot_dot(name: str) -> bool:
    return ".." in name.replace("\\", "/").split("/")


def unpack(archive: Path, kind: str, dest: Path, *, as_dir: bool, max_size: int,
           max_files: int) -> None:
    """Unpack `archive` (go-getter type `kind`) into the directory `dest`, or (not `as_dir`)
    as the single file `dest`. Limits of 0 mean none, as Nomad's client config reads them.
    Raises `GetterError`."""
    try:
        if kind in _TAR_MODES:
            _untar(archive, _TAR_MODES[kind], dest, as_dir, max_size, max_files)
        elif kind == "zip":
            _unzip(archive, dest, as_dir, max_size, max_files)
        else:
            if as_dir:
                raise GetterError(f"{_SINGLE[kind]}-compressed files can only unarchive to a "
                                  "single file")
            with _open_single(kind, archive) as src:
                _copy_limited(src, dest, 0o644, max_size)
    except GetterError:
        raise
    except (OSError, EOFError, tarfile.TarError, zipfile.BadZipFile, lzma.LZMAError) as e:
        raise GetterError(f"failed to unpack {archive.name}: {e}") from None


def _copy_limited(src: _Reader, dest: Path, mode: int, max_size: int) -> int:
    dest.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                 mode)
    with os.fdopen(fd, "wb") as out:
        while chunk := src.read(_CHUNK):
            written += len(chunk)
            if max_size and written > max_size:
                raise GetterError(f"decompressed size exceeds the limit of {max_size} bytes")
            out.write(chunk)
    return written


def _untar(archive: Path, mode: str, dest: Path, as_dir: bool, max_size: int,
           max_files: int) -> None:
    count = total = 0
    single_done = False
    with tarfile.open(archive, mode) as tar:  # type: ignore[call-overload]
        for member in tar:
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
            total += member.size
            if max_size and total > max_size:
                raise GetterError(f"tar archive larger than limit: {max_size}")
            if not as_dir:
                if member.isdir() or not member.isfile():
                    raise GetterError(f"expected a single file: {archive.name}")
                if single_done:
                    raise GetterError(f"expected a single file, got multiple: {archive.name}")
                single_done = True
                src = tar.extractfile(member)
                if src is None:  # pragma: no cover - isfile() members always have data
                    raise GetterError(f"expected a single file: {archive.name}")
                _copy_limited(src, dest, stat.S_IMODE(member.mode) & 0o777 or 0o644, 0)
                continue
            try:
                tar.extract(member, dest, filter="data")
            except tarfile.FilterError as e:
                raise GetterError(f"refused archive entry: {e}") from None
    if count == 0 or (not as_dir and not single_done):
        raise GetterError(f"empty archive: {archive.name}")


def _unzip(archive: Path, dest: Path, as_dir: bool, max_size: int, max_files: int) -> None:
    with zipfile.ZipFile(archive) as zf:
        infos = zf.infolist()
        if not infos:
            raise GetterError(f"empty archive: {archive.name}")
        if not as_dir and len(infos) > 1:
            raise GetterError(f"expected a single file: {archive.name}")
        if max_files and len(infos) > max_files:
            raise GetterError(f"zip archive contains too many files: {len(infos)} > "
                              f"{max_files}")
        root = dest.resolve() if as_dir else dest.parent.resolve()
        total = 0
        for info in infos:
            target = dest
            if as_dir:
                if _contains_dot_dot(info.filename):
                    raise GetterError(f"entry contains '..': {info.filename}")
                target = Path(os.path.normpath(root / info.filename.lstrip("/")))
                if target != root and root not in target.parents:
                    raise GetterError(f"refused archive entry {info.filename!r}: it would be "
                                      f"written outside {dest.name}")
            total += info.file_size
            if max_size and total > max_size:
                raise GetterError(f"zip archive larger than limit: {max_size}")
            if info.is_dir():
                if not as_dir:
                    raise GetterError(f"expected a single file: {archive.name}")
                target.mkdir(parents=True, exist_ok=True)
                continue
            mode = (info.external_attr >> 16) & 0o777 or 0o644
            with zf.open(info) as src:
                _copy_limited(src, target, mode, 0)
            os.chmod(target, mode)


def copy_tree(src: Path, dest: Path, *, max_size: int, max_files: int,
              reader: Reader | None = None) -> None:
    """A `file://` directory source copied as a tree; links are refused, as go-getter's
    client with `DisableSymlinks` refuses them, and with a `reader` (the task's user) every
    entry must be readable by it."""
    count = total = 0
    for dirpath, dirnames, filenames in os.walk(src):
        here = Path(dirpath)
        rel = here.relative_to(src)
        (dest / rel).mkdir(parents=True, exist_ok=True)
        for name in [*dirnames, *filenames]:
            st = os.lstat(here / name)
            if stat.S_ISLNK(st.st_mode):
                raise GetterError(f"copying of symlinks has been disabled: {here / name}")
            if reader is not None and not may(st, reader, 5 if stat.S_ISDIR(st.st_mode) else 4):
                raise GetterError(f"{here / name}: permission denied for user "
                                  f"\"{reader.name}\"")
            count += 1
            if max_files and count > max_files:
                raise GetterError(f"directory contains too many files: {count} > {max_files}")
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
                if max_size and total > max_size:
                    raise GetterError(f"directory larger than limit: {max_size}")
                with open(here / name, "rb") as f:
                    _copy_limited(f, dest / rel / name, stat.S_IMODE(st.st_mode) & 0o777, 0)
                os.chmod(dest / rel / name, stat.S_IMODE(st.st_mode) & 0o777)
