"""The job files of examples/real/ whose tasks run on docker or exec run here, unchanged
(layer 3: a real `yurt agent`, a real dockerd with a bridge network, the real clock).

No registry is reachable, so each image such a job names is built locally first, from the
static busybox (`IMAGES`: a stand-in that behaves as the job's users rely on, e.g. a "redis"
answering `+PONG` on its port). A new docker or exec job file in the folder fails here until
its image is given one.
"""

from __future__ import annotations

import re
import signal
import socket
from pathlib import Path

import pytest

from tests.docker_support import DockerDaemon, import_image
from tests.proc_support import wait_for
from tests.test_agent_e2e import User
from tests.test_examples_real import REAL
from tests.test_exec_reattach_e2e import start_agent
from tests.test_execdriver import ROOTFS

pytestmark = pytest.mark.slow

#: Image → the CMD of its local stand-in.
IMAGES = {
    "redis:7": ["/bin/sh", "-c", "while true; do printf '+PONG\\r\\n' | nc -l -p 6379; done"],
}
DRIVERS = re.compile(r'driver\s*=\s*"(docker|exec)"')
JOBS = sorted(p.name for p in REAL.glob("*.nomad.hcl") if DRIVERS.search(p.read_text()))


def test_the_real_jobs_of_docker_and_exec_are_these() -> None:
    assert JOBS == ["init-example-docker.nomad.hcl"]
    images = set(re.findall(r'image\s*=\s*"([^"]+)"', (REAL / JOBS[0]).read_text()))
    assert images <= set(IMAGES), images - set(IMAGES)


def test_init_example_docker_serves_on_its_mapped_port(tmp_path: Path,
                                                      dockerd_bridge: DockerDaemon) -> None:
    for image, cmd in IMAGES.items():
        import_image(dockerd_bridge, image, cmd=cmd)
    user = User(tmp_path)
    config = tmp_path / "agent.toml"
    config.write_text(f'[drivers.config.docker]\nendpoint = "{dockerd_bridge.host}"\n\n'
                      f'[drivers.config.exec]\nrootfs_dir = "{ROOTFS}"\n')
    agent = start_agent(user, config)
    try:
        user.yurt("job", "run", str(REAL / "init-example-docker.nomad.hcl"))

        def allocation() -> dict[str, object]:
            (only,) = user.json("job", "status", "example-docker")["Allocations"]
            return user.json("alloc", "status", only["ID"])  # type: ignore[no-any-return]

        wait_for(lambda: allocation()["ClientStatus"] == "running", timeout=60)
        shared = allocation()["AllocatedResources"]["Shared"]  # type: ignore[index]
        (db,) = [p for p in shared["Ports"] if p["Label"] == "db"]
        assert db["To"] == 6379
        # The group's port is mapped to the container's 6379 (bridge: a mapping).
        with socket.create_connection((db["HostIP"], db["Value"]), timeout=10) as conn:
            conn.sendall(b"PING\r\n")
            assert conn.recv(64) == b"+PONG\r\n"
        containers = dockerd_bridge.containers("status=running")
        assert len(containers) == 1
        user.yurt("job", "stop", "example-docker")
        wait_for(lambda: allocation()["ClientStatus"] == "complete", timeout=60)
        wait_for(lambda: dockerd_bridge.containers("status=running") == [], timeout=30)
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=30)
