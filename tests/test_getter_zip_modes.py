"""Layer 2: the modes of files unpacked from a zip archive, as tar's `data` filter leaves them
(real files).

A zip records each entry's unix mode and zipfile hands it over whole, so an artifact whose
entries say 0777 or 4755 was written group- and world-writable, or setuid, where a tar
archive's were stripped by the extraction filter. Every file now gets `tarfile.data_filter`'s
mode, whichever archive it came from.
"""

from __future__ import annotations

import os
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from yurt.runtime.client.getter.unpack import safe_mode, unpack


def zip_with_modes(path: Path, modes: dict[str, int]) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        for name, mode in modes.items():
            info = zipfile.ZipInfo(name)
            info.create_system = 3  # unix: the mode in the high bits is read
            info.external_attr = (stat.S_IFREG | mode) << 16
            zf.writestr(info, b"#!/bin/sh\n")


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize(("entry", "expected"), [
    (0o777, 0o755),  # no group or other write
    (0o4755, 0o755),  # no setuid
    (0o2775, 0o755),  # no setgid, no group write
    (0o1777, 0o755),  # no sticky bit
    (0o666, 0o644),
    (0o400, 0o600),  # the owner may always read and write
    (0o611, 0o600),  # no execute bits unless the owner's
])
def test_zip_entries_lose_the_bits_the_tar_data_filter_strips(tmp_path: Path, entry: int,
                                                             expected: int) -> None:
    archive = tmp_path / "a.zip"
    zip_with_modes(archive, {"bin/tool": entry})
    old = os.umask(0)  # what the modes become is the unpacker's doing, not the umask's
    try:
        unpack(archive, "zip", tmp_path / "out", as_dir=True, max_size=0, max_files=0)
    finally:
        os.umask(old)
    assert mode_of(tmp_path / "out/bin/tool") == expected


def test_a_single_file_from_a_zip_or_a_tar_gets_the_same_mode(tmp_path: Path) -> None:
    archive = tmp_path / "one.zip"
    zip_with_modes(archive, {"tool": 0o4777})
    tarball = tmp_path / "one.tar"
    with tarfile.open(tarball, "w") as tar:
        info = tarfile.TarInfo("tool")
        info.mode = 0o4777
        tar.addfile(info)
    old = os.umask(0)
    try:
        unpack(archive, "zip", tmp_path / "from-zip", as_dir=False, max_size=0, max_files=0)
        unpack(tarball, "tar", tmp_path / "from-tar", as_dir=False, max_size=0, max_files=0)
    finally:
        os.umask(old)
    assert mode_of(tmp_path / "from-zip") == mode_of(tmp_path / "from-tar") == 0o755


def test_safe_mode_is_the_tar_data_filters() -> None:
    for mode in range(0o10000):
        info = tarfile.TarInfo("f")
        info.mode = mode
        filtered = tarfile.data_filter(info, "/dest").mode
        assert filtered is not None
        if mode:  # 0: an archive that records no mode (zip from Windows) reads as 0644
            assert safe_mode(stat.S_IFREG | mode) == filtered, oct(mode)
