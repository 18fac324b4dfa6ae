"""`yurt operator scheduler|raft|api|snapshot` against a real agent (layer 2: an agent on a
real socket, real `yurt` processes), in Nomad's output shapes (command/operator_*.go): the
scheduler configuration's lines, the raft peers' columns, the snapshot's inspect table; and a
snapshot saved, the state changed, the agent stopped, the snapshot restored offline and the
state as it was when saved."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import trio

from tests.agent_support import Running, mock_job, running_agent
from tests.cli_proc_support import YURT

pytestmark = pytest.mark.slow


async def yurt(a: Running | None, *args: str, cwd: Path | None = None,
               stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "YURT_ADDR": a.address if a else "http://127.0.0.1:1"}
    done = await trio.run_process([YURT, *args], capture_stdout=True, capture_stderr=True,
                                  check=False, env=env, cwd=cwd, stdin=stdin)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(),
                                       done.stderr.decode())


def kv(text: str) -> dict[str, str]:
    return {k.strip(): v.strip() for k, _, v in (line.partition("=")
                                                 for line in text.splitlines() if "=" in line)}


async def test_scheduler_config_get_and_set(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            got = await yurt(a, "operator", "scheduler", "get-config")
            assert got.returncode == 0, got.stderr
            assert list(kv(got.stdout)) == [
                "Scheduler Algorithm", "Memory Oversubscription", "Reject Job Registration",
                "Pause Eval Broker", "Preemption System Scheduler",
                "Preemption Service Scheduler", "Preemption Batch Scheduler",
                "Preemption SysBatch Scheduler", "Node Limit For Feasibility Checks",
                "Modify Index"]
            index = kv(got.stdout)["Modify Index"]
            done = await yurt(a, "operator", "scheduler", "set-config",
                              "-scheduler-algorithm=spread", "-preempt-batch-scheduler=false",
                              "-pause-eval-broker=true", f"-check-index={index}")
            assert (done.returncode, done.stdout) == (0, "Scheduler configuration updated!\n")
            assert "does not act on it" not in done.stderr  # the scheduler honours it
            now = kv((await yurt(a, "operator", "scheduler", "get-config")).stdout)
            assert now["Scheduler Algorithm"] == "spread"
            assert now["Preemption Batch Scheduler"] == "false"
            assert now["Preemption Service Scheduler"] == "true"
            assert now["Pause Eval Broker"] == "true"
            stale = await yurt(a, "operator", "scheduler", "set-config",
                               f"-check-index={int(now['Modify Index']) + 100}",
                               "-scheduler-algorithm=binpack")
            assert stale.returncode == 1
            assert "does not match current state value" in stale.stderr
            refused = await yurt(a, "operator", "scheduler", "set-config",
                                 "-node-limit-for-feasibility-checks=5")
            assert refused.returncode == 2
            js = await yurt(a, "operator", "scheduler", "get-config", "-json")
            assert '"SchedulerAlgorithm": "spread"' in js.stdout


async def test_raft_peers_and_remove_peer(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            peers = await yurt(a, "operator", "raft", "list-peers")
            assert peers.returncode == 0, peers.stderr
            header, row = peers.stdout.splitlines()
            assert header.split() == ["Node", "ID", "Address", "State", "Voter",
                                      "RaftProtocol"]
            assert row.split()[3:] == ["leader", "true", "3"]
            removed = await yurt(a, "operator", "raft", "remove-peer", "-peer-id", "x")
            assert removed.returncode == 1
            assert "Error removing peer" in removed.stderr
            assert (await yurt(a, "operator", "raft", "remove-peer")).returncode == 2


async def test_operator_api_calls_the_agent_and_dryrun_hides_the_token(
        tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            put = await yurt(a, "operator", "api", "-X", "PUT", "/v1/var/x/y",
                             stdin=b'{"Items": {"a": "1"}}')
            assert put.returncode == 0, put.stderr
            assert '"Path":"x/y"' in put.stdout.replace(" ", "")
            got = await yurt(a, "operator", "api", "/v1/var/x/y")
            assert '"Items":{"a":"1"}' in got.stdout.replace(" ", "")
            missing = await yurt(a, "operator", "api", "/v1/var/nope")
            assert missing.returncode == 0
            assert "variable not found" in missing.stdout
            env = {**{k: v for k, v in os.environ.items() if k != "YURT_TOKEN"},
                   "YURT_ADDR": a.address, "NOMAD_TOKEN": "s3cret-token"}
            dry = await trio.run_process(
                [YURT, "operator", "api", "-dryrun", "-X", "DELETE", "-filter",
                 'Name == "x"', "/v1/jobs"], capture_stdout=True, env=env, stdin=b"")
            text = dry.stdout.decode()
            assert "s3cret-token" not in text
            assert text.startswith("curl \\\n  -X DELETE")
            assert '-H "X-Nomad-Token: ${NOMAD_TOKEN}"' in text
            assert f"'{a.address}/v1/jobs?filter=Name+%3D%3D+%22x%22'" in text


async def test_snapshot_save_inspect_then_offline_restore_brings_the_state_back(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    snap = tmp_path / "before.snap"
    with trio.fail_after(120):
        async with running_agent(data) as a:
            assert (await a.client.post("/v1/jobs", json=mock_job("kept"))).is_success
            assert (await a.client.put("/v1/var/app/cfg", json={
                "Items": {"v": "old"}})).status_code == 200
            saved = await yurt(a, "operator", "snapshot", "save", str(snap))
            assert (saved.returncode, saved.stdout) == (0, f"State file written to {snap}\n")
            assert snap.stat().st_mode & 0o777 == 0o600
            again = await yurt(a, "operator", "snapshot", "save", str(snap))
            assert again.returncode == 1
            assert "Destination file already exists" in again.stderr
            # The state moves on after the snapshot.
            assert (await a.client.post("/v1/jobs", json=mock_job("later"))).is_success
            assert (await a.client.put("/v1/var/app/cfg", params={"cas": "0"}, json={
                "Items": {"v": "new"}})).status_code == 409
            assert (await a.client.put("/v1/var/app/cfg", json={
                "Items": {"v": "new"}})).status_code == 200
            live = await yurt(a, "operator", "snapshot", "restore", "-data-dir", str(data),
                              str(snap))
            assert live.returncode == 1
            assert "is running on" in live.stderr
            index_after = int((await a.client.get("/v1/jobs")).headers["X-Nomad-Index"])
        inspected = await yurt(None, "operator", "snapshot", "inspect", str(snap))
        assert inspected.returncode == 0, inspected.stderr
        head, _, table = inspected.stdout.partition("\n\n")
        assert list(kv(head)) == ["Created", "ID", "Size", "Index", "Term", "Version"]
        rows = table.splitlines()
        assert rows[0].split() == ["Type", "Count", "Size"]
        assert rows[-1].split()[0] == "Total"
        types = {r.split()[0]: r.split()[1] for r in rows[1:-2]}
        assert types["JobSnapshot"] == "1"
        assert types["VariablesSnapshot"] == "1"
        restored = await yurt(None, "operator", "snapshot", "restore", "-data-dir", str(data),
                              str(snap))
        assert (restored.returncode, restored.stdout) == (0, "Snapshot Restored\n"), \
            restored.stderr
        assert list((data / "server").glob("pre-restore-*/server.db"))
        async with running_agent(data) as a:
            jobs = sorted(j["ID"] for j in (await a.client.get("/v1/jobs")).json())
            assert jobs == ["kept"]
            var = (await a.client.get("/v1/var/app/cfg")).json()
            assert var["Items"] == {"v": "old"}
            # Indexes never go backwards after a restore.
            assert int((await a.client.get("/v1/jobs")).headers["X-Nomad-Index"]) > \
                index_after


async def test_a_damaged_snapshot_is_refused_before_anything_is_written(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    snap = tmp_path / "s.snap"
    with trio.fail_after(60):
        async with running_agent(data) as a:
            assert (await yurt(a, "operator", "snapshot", "save", str(snap))).returncode == 0
        raw = bytearray(snap.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        snap.write_bytes(bytes(raw))
        before = (data / "server" / "server.db").read_bytes()
        done = await yurt(None, "operator", "snapshot", "restore", "-data-dir", str(data),
                          str(snap))
        assert done.returncode == 1
        assert "Error inspecting snapshot" in done.stderr
        assert (data / "server" / "server.db").read_bytes() == before
        assert not list((data / "server").glob("pre-restore-*"))
        inspected = await yurt(None, "operator", "snapshot", "inspect", str(snap))
        assert inspected.returncode == 1
