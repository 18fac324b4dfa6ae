"""`yurt agent --servers` as a real process against the fake node RPC (layer 3): it
registers, runs the mock_driver allocation the fake hands it, reports it running, and its API
answers node-local routes while refusing server routes with 501."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import httpx2
import msgspec
import trio

from tests.cli_proc_support import YURT
from tests.cluster_remote_fake import FakeNodeRPC, serve_fake
from tests.runtime_support import eventually, job_alloc

JOB = '''job "web" {
  type = "service"
  group "g" {
    task "t" {
      driver = "mock_driver"
      config {
        run_for = "1h"
      }
      resources {
        cpu    = 10
        memory = 10
      }
    }
  }
}'''


async def _address(stderr: trio.abc.ReceiveStream) -> str:
    """The API address from the agent's "listening on" line."""
    seen = b""
    while b"\n" not in seen:
        chunk = await stderr.receive_some()
        assert chunk, f"the agent ended before listening: {seen!r}"
        seen += chunk
    line = seen.decode().splitlines()[0]
    assert "listening on" in line, line
    return line.split("listening on ", 1)[1].split(" ", 1)[0]


async def test_agent_with_servers_runs_what_the_server_hands_it(tmp_path: Path) -> None:
    fake = FakeNodeRPC(ttl=1.0)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(serve_fake, fake)
            fake.servers = [url]
            env = {k: v for k, v in os.environ.items() if k != "YURT_AGENT_TOKEN"}
            proc = await trio.lowlevel.open_process(
                [YURT, "agent", "--servers", url, "--data-dir", str(tmp_path / "data"),
                 "--port", "0", "--driver-allow", "mock_driver"],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
            try:
                assert proc.stderr is not None
                address = await _address(proc.stderr)
                await eventually(lambda: bool(fake.nodes))
                (node_id,) = fake.nodes
                secret = (tmp_path / "data" / "node-secret").read_text().strip()
                assert fake.secrets[node_id] == secret
                assert fake.nodes[node_id].drivers["mock_driver"].healthy

                alloc = msgspec.structs.replace(job_alloc(JOB, "a-remote-1"), node_id=node_id)
                fake.place(alloc)

                def running() -> bool:
                    updates = fake.updates_for("a-remote-1")
                    return bool(updates) and updates[-1].client_status == "running"

                await eventually(running, interval=0.05)
                assert fake.get_allocs[0] == ["a-remote-1"]

                async with httpx2.AsyncClient(base_url=address, timeout=10) as client:
                    me = await client.get("/v1/agent/self")
                    assert me.status_code == 200
                    jobs = await client.get("/v1/jobs")
                    assert jobs.status_code == 501
                    assert "--servers" in jobs.json()["error"]
                    ls = await client.get("/v1/client/fs/ls/a-remote-1", params={"path": "/"})
                    assert ls.status_code == 200, ls.text
                    assert "alloc" in [e["Name"] for e in ls.json()]
                    assert (await client.get("/v1/client/stats")).status_code == 200
                assert not (tmp_path / "data" / "server").exists()  # no server.db

                # The server stops the allocation: the client stops it and says so.
                fake.place(msgspec.structs.replace(fake.allocs["a-remote-1"],
                                                   desired_status="stop"))

                def complete() -> bool:
                    updates = fake.updates_for("a-remote-1")
                    return updates[-1].client_status == "complete"

                await eventually(complete, interval=0.05)
            finally:
                proc.send_signal(signal.SIGTERM)
                with trio.move_on_after(30):
                    await proc.wait()
                if proc.returncode is None:  # pragma: no cover - never leave it behind
                    proc.kill()
                    await proc.wait()
            nursery.cancel_scope.cancel()
    assert proc.returncode == 0
