"""The exec driver's task root: the host's `chroot_env`, copied ONCE per host, shared read-only.

Nomad copies its chroot_env into every task dir (client/allocrunner/taskrunner/
task_dir_hook.go with client/config/config.go `DefaultChrootEnv`), "a very slow operation".
yurt builds it once, as hard links where the host paths are on the rootfs' filesystem (a plain
copy elsewhere), in `<rootfs dir>` beside a `.complete` marker, and each task bind-mounts its
top-level directories read-only (execstart.sh). Invariants: a rootfs without the marker is
never used (a build interrupted halfway is redone from scratch); concurrent builds (two
agents, two drivers) are serialised by an flock on `<rootfs dir>.lock`; the tree is a snapshot:
a host upgrade after the build reaches tasks only once the rootfs dir is removed.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Final

from yurt.runtime.errors import DriverError

#: client/config/config.go `DefaultChrootEnv`: the host paths a task's root holds (each at
#: the same path inside; those missing on the host are skipped, as Nomad does).
DEFAULT_CHROOT_ENV: Final = ("/bin", "/etc", "/lib", "/lib32", "/lib64", "/run/resolvconf",
                             "/sbin", "/usr", "/run/systemd/resolve")
MARKER: Final = ".complete"


def _copy(source: str, dest: Path) -> None:
    """`source` at `dest`: a symlink as a symlink, a tree as hard links (`cp -a --link`), or
    copied where linking fails (another filesystem)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if os.path.islink(source):
        os.symlink(os.readlink(source), dest)
        return
    for args in (["cp", "-a", "--link"], ["cp", "-a"]):
        done = subprocess.run([*args, source, str(dest)], capture_output=True, check=False)
        if done.returncode == 0:
            return
        shutil.rmtree(dest, ignore_errors=True)
    raise DriverError(f"cannot copy {source} into the exec rootfs at {dest}: "
                      f"{done.stderr.decode(errors='replace').strip()}")


def build_rootfs(rootfs: Path, paths: tuple[str, ...] = DEFAULT_CHROOT_ENV) -> float:
    """Make `rootfs` hold the host's `paths` unless it already does; return the seconds the
    build took (0.0 when it was there). Blocking: call from a worker thread.

    Raises:
        DriverError: a path cannot be copied, or `rootfs`' parent cannot be written.
    """
    if (rootfs / MARKER).exists():
        return 0.0
    try:
        rootfs.parent.mkdir(parents=True, exist_ok=True)
        lock = os.open(f"{rootfs}.lock", os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise DriverError(f"cannot build the exec rootfs at {rootfs}: {e}") from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (rootfs / MARKER).exists():  # another builder finished meanwhile
            return 0.0
        began = time.monotonic()
        building = rootfs.with_name(rootfs.name + ".building")
        shutil.rmtree(building, ignore_errors=True)
        building.mkdir(mode=0o755)
        for path in paths:
            if os.path.lexists(path):
                _copy(path, building / path.lstrip("/"))
        (building / MARKER).touch()
        shutil.rmtree(rootfs, ignore_errors=True)
        building.rename(rootfs)
        return time.monotonic() - began
    finally:
        os.close(lock)
