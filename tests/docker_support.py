"""A real dockerd for the docker driver's tests: one per test session (per pytest worker),
from scripts/benchlib/dockerd.py (a private daemon, `--storage-driver=vfs --iptables=false
--bridge=none`, with the busybox test image `IMAGE` imported, since no registry is reachable).

A missing dockerd or busybox fails the test with the install hint; it never skips.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

from benchlib.dockerd import (
    APPLETS,
    IMAGE,
    DockerDaemon,
    busybox_rootfs_tar,
    import_image,
    start_dockerd,
    stop_dockerd,
)

__all__ = ["APPLETS", "IMAGE", "DockerDaemon", "busybox_rootfs_tar", "dockerd", "dockerd_bridge",
           "import_image"]


@pytest.fixture(scope="session")
def dockerd() -> Iterator[DockerDaemon]:
    """A private dockerd with the busybox test image imported as `IMAGE`."""
    try:
        daemon = start_dockerd()
    except FileNotFoundError as e:
        pytest.fail(str(e), pytrace=False)
    try:
        import_image(daemon)
        yield daemon
    finally:
        stop_dockerd(daemon)


@pytest.fixture(scope="session")
def dockerd_bridge() -> Iterator[DockerDaemon]:
    """A private dockerd whose `bridge` network is a Linux bridge made for it (published ports
    answer on the host's loopback through Docker's userland proxy), the test image imported."""
    try:
        daemon = start_dockerd(bridge=True)
    except FileNotFoundError as e:
        pytest.fail(str(e), pytrace=False)
    try:
        import_image(daemon)
        yield daemon
    finally:
        stop_dockerd(daemon)
