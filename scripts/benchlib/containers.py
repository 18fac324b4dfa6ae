"""The peer benchmark's docker row: N docker tasks against `docker run` of the same N in a loop.

Two measurements, counted from /proc as every other row (scripts/bench_peers.py `spawn`: a
container's processes are the host's, so its `sleep <marker>` is found like any other):

- yurt's docker driver: a job of N `sleep <marker>` tasks with `driver = "docker"` in the
  busybox image, `network_mode = "none"`, from the request until all N sleeps are live;
- the floor: the same N started by `docker run -d --network none IMAGE sleep <marker>`, one
  after the other, as a user's shell loop would (the daemon's own cost of N containers, plus
  one CLI process per container).

Both talk to one private dockerd (benchlib/dockerd.py: vfs, no bridge, its own data root),
started on the first docker cell and stopped, with everything it holds, by `cleanup`.
Invariants: neither side touches the host's docker (if any); every container either side
made is labelled with the run's marker and removed when its cell ends.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from benchlib.dockerd import (
    BUSYBOX,
    DOCKERD,
    IMAGE,
    INSTALL_HINT,
    DockerDaemon,
    import_image,
    start_dockerd,
    stop_dockerd,
)
from benchlib.systems import System, Workload, Yurt

KEYS = ("docker_all_s", "docker_floor_s", "docker_vs_floor")
#: The label every container of a cell carries, valued with the workload's marker.
LABEL = "yurt.bench.marker"


class Daemon:
    """The benchmark's dockerd: started once, on first use."""

    def __init__(self) -> None:
        self.daemon: DockerDaemon | None = None

    def get(self) -> DockerDaemon:
        if self.daemon is None:
            self.daemon = start_dockerd()
            import_image(self.daemon)
        return self.daemon

    def cleanup(self) -> None:
        if self.daemon is not None:
            stop_dockerd(self.daemon)
            self.daemon = None


def remove_labelled(daemon: DockerDaemon, marker: str) -> int:
    """Remove every container of a cell (running or not); how many there were."""
    ids = daemon.containers(f"label={LABEL}={marker}")
    if ids:
        daemon.cli("rm", "-f", *ids, check=False, timeout=300)
    return len(ids)


def docker_yurt(workdir: Path, yurt_bin: Path, daemon: DockerDaemon) -> Yurt:
    """A yurt agent whose benchmark job runs on docker, against `daemon`."""
    config = workdir / "agent.toml"
    config.write_text(f'[drivers.config.docker]\nendpoint = "{daemon.host}"\n')
    system = DockerYurt(workdir, yurt_bin, driver="docker", config=config)
    system.daemon = daemon
    return system


class DockerYurt(Yurt):
    """yurt with the docker driver: its job's tasks name the image and no network, and carry
    the cell's label; the cell's containers are removed when it is cleaned up."""

    name = "yurt-docker"
    daemon: DockerDaemon

    def job_config(self, workload: Workload) -> str:
        labels = json.dumps({LABEL: workload.marker})
        return (f'        image = "{IMAGE}"\n        network_mode = "none"\n'
                f"        labels = {labels}\n")

    def cleanup(self) -> None:
        super().cleanup()
        if self.workload is not None:
            remove_labelled(self.daemon, self.workload.marker)


class DockerRunLoop(System):
    """`docker run -d` of each of the N containers, one after another, from one shell."""

    name = "docker-run"
    restartable = False

    def __init__(self, workdir: Path, daemon: DockerDaemon) -> None:
        super().__init__(workdir)
        self.daemon = daemon

    def launch(self, workload: Workload, autostart: bool = False) -> None:
        self.workload = workload
        if autostart:
            self.request()

    def request(self) -> None:
        if self.workload is None:
            raise RuntimeError("not launched")
        words = " ".join(self.workload.argv)
        script = (f'for i in $(seq {self.workload.count}); do docker -H "$0" run -d '
                  f"--network none --label {LABEL}={self.workload.marker} {IMAGE} {words} "
                  f">/dev/null || exit 1; done")
        self._popen(["/bin/sh", "-c", script, self.daemon.host])

    def stop_all(self) -> None:
        if self.workload is not None:
            remove_labelled(self.daemon, self.workload.marker)

    def cleanup(self) -> None:
        super().cleanup()
        self.stop_all()


def why_not() -> str:
    """"" when this process can run the docker row, else why not."""
    if not (os.access(DOCKERD, os.X_OK) and os.access(BUSYBOX, os.X_OK)
            and shutil.which("docker")):
        return INSTALL_HINT
    if os.geteuid() != 0:
        return "a private dockerd needs root"
    return ""
