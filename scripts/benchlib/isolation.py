"""The peer benchmark's exec row: N exec tasks against the physical cost of their isolation.

Three measurements, counted from /proc as every other row (scripts/bench_peers.py `spawn`):

- yurt's exec driver: a job of N `sleep <marker>` tasks with `driver = "exec"`, from the
  request until all N sleeps are live — beside raw_exec's "all children live" of the same N;
- the floor: the same N started by the posix floor (posix_floor.py, a posix_spawn loop) as
  `unshare --mount --uts --pid --ipc --fork chroot ROOTFS /bin/sleep <marker>`, the kernel
  work every exec task needs and nothing more (no cgroups, no mounts of the task root);
- the host chroot's build (runtime/client/drivers/chroot.py `build_rootfs`), once per
  benchmark: cold (the first build, file cache as found), warm (a second build into a fresh
  directory right after) and found (an agent start finding it built).

Invariants: the agents use the rootfs this module built (never /var/lib/yurt), which is removed
with `cleanup`; exec needs root, so without it the row fails with that reason.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from benchlib.systems import PosixFloor, Workload, Yurt

KEYS = ("exec_all_s", "exec_floor_s", "exec_vs_floor")
CHROOT_KEYS = ("chroot_cold_s", "chroot_warm_s", "chroot_found_ms")
#: util-linux's unshare with exec's namespaces (drivers/exec: mount, PID, IPC, UTS).
UNSHARE = ("--mount", "--uts", "--pid", "--ipc", "--fork", "--kill-child")


class Rootfs:
    """The benchmark's exec rootfs: built once (timed), shared by every exec cell."""

    def __init__(self) -> None:
        self.base: Path | None = None
        self.timings: dict[str, float] | None = None

    @property
    def path(self) -> Path:
        if self.base is None:
            raise RuntimeError("the exec rootfs is not built")
        return self.base / "rootfs"

    def build(self) -> dict[str, float]:
        """Build it if not yet; the cold, warm and found timings of that first build."""
        if self.timings is None:
            from yurt.runtime.client.drivers import chroot  # the script's yurt (PYTHONPATH)
            self.base = Path(tempfile.mkdtemp(prefix="peers-exec-rootfs-"))
            cold = chroot.build_rootfs(self.path)
            again = self.base / "warm"
            warm = chroot.build_rootfs(again)
            shutil.rmtree(again, ignore_errors=True)
            began = time.perf_counter()
            found = chroot.build_rootfs(self.path)
            assert found == 0.0
            self.timings = {"chroot_cold_s": cold, "chroot_warm_s": warm,
                            "chroot_found_ms": 1000 * (time.perf_counter() - began)}
        return self.timings

    def cleanup(self) -> None:
        """Remove it: hard links of the host's files, so only the links go."""
        if self.base is not None:
            shutil.rmtree(self.base, ignore_errors=True)


def exec_yurt(workdir: Path, yurt_bin: Path, rootfs: Path) -> Yurt:
    """A yurt agent whose benchmark job runs on exec, with `rootfs` as its chroot."""
    config = workdir / "agent.toml"
    config.write_text(f'[drivers.config.exec]\nrootfs_dir = "{rootfs}"\n')
    system = Yurt(workdir, yurt_bin, driver="exec", config=config)
    system.name = "yurt-exec"
    return system


class UnshareFloor(PosixFloor):
    """The posix floor, its workload wrapped in exec's namespaces and chroot."""

    name = "unshare"

    def __init__(self, workdir: Path, rootfs: Path) -> None:
        super().__init__(workdir)
        self.rootfs = rootfs

    def launch(self, workload: Workload, autostart: bool = False) -> None:
        unshare = shutil.which("unshare") or "/usr/bin/unshare"
        wrapped = Workload(count=workload.count, marker=workload.marker,
                           argv=[unshare, *UNSHARE, "chroot", str(self.rootfs),
                                 *workload.argv])
        super().launch(wrapped, autostart)


def why_not() -> str:
    """"" when this process can run the exec row, else why not."""
    if os.geteuid() != 0:
        return "exec needs root"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    return ""
