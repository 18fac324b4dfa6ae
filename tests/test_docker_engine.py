"""The Engine API client (drivers/docker/engine.py) against a real dockerd: the negotiated API
version, JSON calls, Docker's own error messages, streams, and an unreachable daemon."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.docker_support import IMAGE, DockerDaemon
from yurt.runtime.client.drivers.docker.engine import (
    DEFAULT_ENDPOINT,
    DockerEngine,
    DockerError,
    DockerUnreachable,
    endpoint_from,
)


def test_the_endpoint_is_the_plugins_then_docker_host_then_the_default() -> None:
    assert endpoint_from("unix:///a.sock", {"DOCKER_HOST": "tcp://h:1"}) == "unix:///a.sock"
    assert endpoint_from("", {"DOCKER_HOST": "tcp://h:1"}) == "tcp://h:1"
    assert endpoint_from("", {}) == DEFAULT_ENDPOINT


async def test_json_calls_errors_and_streams(dockerd: DockerDaemon) -> None:
    engine = DockerEngine(dockerd.host)
    try:
        with trio.fail_after(60):
            assert await engine.api_version() == "1.41"
            image = await engine.request("GET", f"/images/{IMAGE}/json")
            assert image["Id"].startswith("sha256:")
            with pytest.raises(DockerError) as missing:
                await engine.request("GET", "/images/no-such-image:0/json")
            assert missing.value.status == 404
            assert "no-such-image" in str(missing.value)
            created = await engine.request("POST", "/containers/create", body={
                "Image": IMAGE, "Cmd": ["/bin/sh", "-c", "echo out; echo err >&2"],
                "HostConfig": {"NetworkMode": "none"}})
            cid = created["Id"]
            try:
                await engine.request("POST", f"/containers/{cid}/start")
                waited = await engine.request("POST", f"/containers/{cid}/wait",
                                            read_timeout=None)
                assert waited["StatusCode"] == 0
                data = b""
                async with engine.stream("GET", f"/containers/{cid}/logs",
                                         params={"stdout": "1", "stderr": "1"}) as body:
                    async for chunk in body:
                        data += chunk
                # The multiplexed stream: an 8-byte header (stream, 0, 0, 0, size) per frame.
                frames = set()
                while data:
                    size = int.from_bytes(data[4:8], "big")
                    frames.add((data[0], data[8:8 + size]))
                    data = data[8 + size:]
                assert frames == {(1, b"out\n"), (2, b"err\n")}
            finally:
                await engine.request("DELETE", f"/containers/{cid}", params={"force": "1"})
    finally:
        await engine.aclose()


async def test_an_absent_daemon_is_unreachable_and_recoverable(tmp_path: Path) -> None:
    engine = DockerEngine(f"unix://{tmp_path}/absent.sock")
    try:
        with trio.fail_after(30), pytest.raises(DockerUnreachable) as gone:
            await engine.request("GET", "/_ping", versioned=False)
        assert gone.value.recoverable
        assert "absent.sock" in str(gone.value)
    finally:
        await engine.aclose()
