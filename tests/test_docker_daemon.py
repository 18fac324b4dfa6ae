"""The test dockerd and its locally built image (tests/docker_support.py) work as the docker
driver's tests assume: the image runs a command with no network, and the daemon is private."""

from __future__ import annotations

from tests.docker_support import IMAGE, DockerDaemon


def test_the_local_image_runs_with_no_network(dockerd: DockerDaemon) -> None:
    done = dockerd.cli("run", "--rm", "--network", "none", IMAGE, "/bin/sh", "-c",
                       "echo hello; id -u")
    assert done.stdout.split() == ["hello", "0"]
    assert str(dockerd.socket).startswith(str(dockerd.root))
