"""`yurt node drain -m -meta -monitor` as Nomad's command/node_drain.go: the message and the
metadata land on the node's `LastDrain` (a cancel keeps the drain's and adds its
"cancel_message"), and `-monitor` follows a drain under way without changing it; run as a
user runs them (a real `yurt` process) against an agent on a real socket. Plus the pure
metadata rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from tests.agent_support import Running, mock_job, running_agent, wait_status
from tests.cli_proc_support import yurt
from yurt.runtime.cli.node import drain_meta


async def _node(a: Running) -> dict[str, Any]:
    return dict((await a.client.get(f"/v1/node/{a.agent.node.id}")).json())


def test_drain_meta_as_nomad_builds_it() -> None:
    assert drain_meta(True, None, "go", ("a=b", "c", "d=e=f", "")) == {
        "message": "go", "a": "b", "c": "", "d": "e=f"}
    last = {"Meta": {"message": "go", "a": "b"}}
    assert drain_meta(False, last, "stop", ()) == {"message": "go", "a": "b",
                                                    "cancel_message": "stop"}
    assert drain_meta(True, last, "", ()) == {}  # a new drain starts afresh
    assert drain_meta(False, None, "", ()) == {}


async def test_drain_message_meta_and_monitor(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            node_id = a.agent.node.id
            out = await yurt(a.address, "node", "drain", "-monitor", "-self")
            assert out.returncode == 0, out.stderr
            assert b"No drain strategy set" in out.stderr
            out = await yurt(a.address, "node", "drain", "-monitor", "-enable", "-self")
            assert out.returncode == 2
            assert b"cannot be used with the '-enable' or '-disable' flags" in out.stderr
            # A task that takes its time to stop keeps the drain under way for -monitor.
            doc = mock_job("slow", 1)
            doc["Job"]["TaskGroups"][0]["Tasks"][0]["ShutdownDelay"] = 4 * 10**9
            assert (await a.client.post("/v1/jobs", json=doc)).status_code == 200
            await wait_status(a.client, "slow", "running")
            out = await yurt(a.address, "node", "drain", "-enable", "-detach", "-m", "going",
                             "-meta", "ticket=42", "-meta", "bare", "-self")
            assert out.returncode == 0, out.stderr
            assert out.stdout.decode().strip() == f'Node "{node_id}" drain strategy set'
            node = await _node(a)
            assert node["LastDrain"]["Meta"] == {"message": "going", "ticket": "42",
                                                 "bare": ""}
            assert node["LastDrain"]["Status"] == "draining"
            out = await yurt(a.address, "node", "drain", "-monitor", node_id[:8])
            assert out.returncode == 0, out.stderr
            lines = out.stdout.decode().splitlines()
            assert lines[0].startswith("==> ")
            assert lines[0].endswith(f'Monitoring node "{node_id}": Ctrl-C to detach '
                                     "monitoring")
            assert lines[-1].endswith(f"Drain complete for node {node_id}")
            node = await _node(a)
            assert node["DrainStrategy"] is None  # -monitor only watched it end
            assert node["LastDrain"]["Status"] == "complete"
            # A new drain, then its cancel while its task still waits out its delay: the
            # cancel keeps the drain's metadata and adds its own message.
            out = await yurt(a.address, "node", "eligibility", "-enable", "-self")
            assert out.returncode == 0, out.stderr
            while True:  # the blocked replacement placed and running
                allocs = (await a.client.get("/v1/job/slow/allocations")).json()
                if any(x["ClientStatus"] == "running" for x in allocs):
                    break
                await trio.sleep(0.05)
            out = await yurt(a.address, "node", "drain", "-enable", "-no-deadline",
                             "-detach", "-m", "again", "-self")
            assert out.returncode == 0, out.stderr
            assert (await _node(a))["LastDrain"]["Meta"] == {"message": "again"}
            out = await yurt(a.address, "node", "drain", "-disable", "-m", "enough", "-self")
            assert out.returncode == 0, out.stderr
            last = (await _node(a))["LastDrain"]
            assert last["Status"] == "canceled"
            assert last["Meta"] == {"message": "again", "cancel_message": "enough"}
