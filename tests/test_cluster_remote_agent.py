"""`yurt agent --servers` as a real process against the fake node RPC (layer 3): it
registers, runs the mock_driver allocation the fake hands it, reports it running, and its API
answers node-local routes itself and forwards the servers' routes to a server."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
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


@asynccontextmanager
async def client_agent(url: str, data: Path, *drivers: str
                       ) -> AsyncIterator[tuple[trio.Process, str]]:
    """`yurt agent --servers url` on a free port, and its API address; SIGTERM at the end
    (its tasks keep running, as they do on any agent stop), killed if it does not stop."""
    env = {k: v for k, v in os.environ.items() if k != "YURT_AGENT_TOKEN"}
    allow = [arg for d in drivers for arg in ("--driver-allow", d)]
    proc = await trio.lowlevel.open_process(
        [YURT, "agent", "--servers", url, "--data-dir", str(data), "--port", "0", *allow],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        assert proc.stderr is not None
        yield proc, await _address(proc.stderr)
    finally:
        proc.send_signal(signal.SIGTERM)
        with trio.move_on_after(30):
            await proc.wait()
        if proc.returncode is None:  # pragma: no cover - never leave it behind
            proc.kill()
            await proc.wait()


async def test_agent_with_servers_runs_what_the_server_hands_it(tmp_path: Path) -> None:
    fake = FakeNodeRPC(ttl=1.0)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(serve_fake, fake)
            fake.servers = [url]
            async with client_agent(url, tmp_path / "data", "mock_driver") as (proc, address):
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
                    assert me.json()["stats"]["client"]["known_servers"] == url
                    jobs = await client.get("/v1/jobs")  # a server's route: forwarded
                    assert jobs.status_code == 200
                    assert jobs.json()[0]["ID"] == "from-the-server"
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
            nursery.cancel_scope.cancel()
    assert proc.returncode == 0


SLEEPER = '''job "sleeper" {
  type = "service"
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo $$ > %s; exec sleep 3600"]
      }
    }
  }
}'''


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_a_restarted_agent_without_servers_stops_nothing(tmp_path: Path) -> None:
    """An agent restarted while no server answers re-attaches its task and leaves it running
    (an empty allocation list before the first pull would stop it); once a server answers,
    it follows the server again."""
    fake = FakeNodeRPC(ttl=1.0)
    data = tmp_path / "data"
    pid_file = tmp_path / "pid"
    pid = 0
    with trio.fail_after(90):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(serve_fake, fake)
            try:
                async with client_agent(url, data, "raw_exec"):
                    await eventually(lambda: bool(fake.nodes))
                    (node_id,) = fake.nodes
                    fake.place(msgspec.structs.replace(
                        job_alloc(SLEEPER % pid_file, "a-sleeper"), node_id=node_id))

                    def running() -> bool:
                        updates = fake.updates_for("a-sleeper")
                        return bool(updates) and updates[-1].client_status == "running"

                    await eventually(running, interval=0.05)
                    await eventually(lambda: pid_file.exists()
                                     and pid_file.read_text().strip().isdigit())
                    pid = int(pid_file.read_text())
                assert _alive(pid)  # an agent's stop leaves its tasks running

                fake.down = True  # every server call now fails
                async with client_agent(url, data, "raw_exec") as (_, address):
                    async with httpx2.AsyncClient(base_url=address, timeout=10) as client:

                        async def restored() -> bool:
                            stats = (await client.get("/v1/agent/self")).json()["stats"]
                            return (stats["client"]["state_loaded"] == "true"
                                    and stats["client"]["restoring_allocations"] == "0")

                        with trio.fail_after(30):
                            while True:  # an HTTP state, polled
                                if await restored():
                                    break
                                await trio.sleep(0.05)
                    # Three more rounds of failed calls, with backoff: time enough for a
                    # stop, had the restore been followed by an empty allocation list.
                    refused = fake.refused_while_down
                    await eventually(lambda: fake.refused_while_down >= refused + 3)
                    assert _alive(pid)
                    batches = len(fake.batches)

                    fake.down = False  # a server answers again
                    pulls = len(fake.get_allocs)
                    await eventually(lambda: len(fake.get_allocs) > pulls)
                    assert fake.get_allocs[-1] == ["a-sleeper"]
                    assert _alive(pid)
                    assert all(u.client_status == "running"
                               for b in fake.batches[batches:] for u in b)

                    fake.place(msgspec.structs.replace(fake.allocs["a-sleeper"],
                                                       desired_status="stop"))

                    def complete() -> bool:
                        updates = fake.updates_for("a-sleeper")
                        return updates[-1].client_status == "complete"

                    await eventually(complete, interval=0.05)
                    await eventually(lambda: not _alive(pid))
            finally:
                if pid and _alive(pid):  # pragma: no cover - never leave it behind
                    with suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            nursery.cancel_scope.cancel()
