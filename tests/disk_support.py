"""A real small file system to fill up, for full-disk tests (layer 2; the suite runs as root).

`small_fs` mounts a tmpfs of the size a test asks for with `@pytest.mark.fs_size("4m")`
(default 1 MiB) and unmounts it after; `fill` writes into it until ENOSPC.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def small_fs(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    marker = request.node.get_closest_marker("fs_size")
    size = marker.args[0] if marker else "1m"
    mount = tmp_path / "fs"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
                   check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def fill(directory: Path) -> Path:
    """Write a file until the file system is full; returns it (delete it to free space)."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
    finally:
        os.close(fd)
    return filler
