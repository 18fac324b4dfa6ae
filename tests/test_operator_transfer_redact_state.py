"""`operator raft transfer-leadership`, `operator snapshot redact` and `operator snapshot
state` against a real agent (layer 2), as Nomad's command/operator_raft_leadership_transfer.go,
operator_snapshot_redact.go and operator_snapshot_state.go answer; plus the pure peer choice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from tests.agent_support import mock_job, running_agent, wait_status
from tests.test_operator_cli import yurt
from yurt.runtime.cli.operator import transfer_target
from yurt.runtime.lib.snapshot import read

pytestmark = pytest.mark.slow


def test_transfer_target() -> None:
    me = {"ID": "n1", "Address": "127.0.0.1:4647", "Leader": True}
    assert transfer_target([me], "n1", "") == (me, "")
    assert transfer_target([me], "", "127.0.0.1:4647") == (me, "")
    assert transfer_target([me], "n2", "")[1] == 'id "n2" was not found in the Raft configuration'
    assert transfer_target([me], "", "")[1] == ("an address or id is required for the "
                                               "destination peer")
    assert transfer_target([me], "n1", "x")[1] == "cannot give both an address and id"


async def test_transfer_leadership_to_itself_is_a_no_op(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            peer = (await a.client.get("/v1/operator/raft/configuration")).json()["Servers"][0]
            done = await yurt(a, "operator", "raft", "transfer-leadership", "-peer-id",
                              peer["ID"])
            assert done.returncode == 0, done.stderr
            assert done.stdout == f'Transferred leadership to peer with id "{peer["ID"]}"\n'
            done = await yurt(a, "operator", "raft", "transfer-leadership", "-peer-address",
                              peer["Address"])
            assert done.returncode == 0, done.stderr
            assert done.stdout == ("Transferred leadership to peer with address "
                                   f'"{peer["Address"]}"\n')
            other = await yurt(a, "operator", "raft", "transfer-leadership", "-peer-id", "nope")
            assert other.returncode == 1
            assert other.stderr == ("yurt: Error transferring leadership to peer: id "
                                    '"nope" was not found in the Raft configuration\n')
            neither = await yurt(a, "operator", "raft", "transfer-leadership")
            assert neither.returncode == 1
            assert "an address or id is required" in neither.stderr


async def test_snapshot_redact_and_state(tmp_path: Path) -> None:
    snap = tmp_path / "s.snap"
    with trio.fail_after(60):
        async with running_agent(tmp_path / "data") as a:
            assert (await a.client.post("/v1/jobs", json=mock_job("web"))).status_code == 200
            alloc = await wait_status(a.client, "web", "running")
            saved = await yurt(a, "operator", "snapshot", "save", str(snap))
            assert saved.returncode == 0, saved.stderr
        assert "keyring" in read(snap).files
        state = await yurt(None, "operator", "snapshot", "state", str(snap))
        assert state.returncode == 0, state.stderr
        doc = json.loads(state.stdout)
        assert [j["ID"] for j in doc["Jobs"]] == ["web"]
        assert alloc["ID"] in [x["ID"] for x in doc["Allocs"]]
        assert doc["Evals"][0]["JobID"] == "web"
        assert doc["SnapshotMeta"][0]["Index"] == read(snap).meta["Index"]
        assert doc["RootKeys"] == [{"Redacted": False}]
        assert {"ACLTokens", "ACLPolicies", "Deployments", "JobVersions", "Nodes",
                "Indexes"} <= set(doc)
        # -filter keeps what matches in every table, and what it cannot be evaluated on
        # (a selector the object lacks) is left out, as nomad/fsm.go `FSMFilter` does.
        only = await yurt(None, "operator", "snapshot", "state", "-filter",
                          'JobID == "web" and DesiredStatus == "run"', str(snap))
        assert only.returncode == 0, only.stderr
        kept = json.loads(only.stdout)
        assert [x["ID"] for x in kept["Allocs"]] == [alloc["ID"]]
        assert kept["Jobs"] == []  # a job has no JobID
        assert kept["Evals"] == []  # an evaluation has no DesiredStatus
        assert kept["SnapshotMeta"] == doc["SnapshotMeta"]
        refused = await yurt(None, "operator", "snapshot", "state", "-filter",
                             'ID ==', str(snap))
        assert refused.returncode == 2
        assert "Invalid filter expression" in refused.stderr
        # redact: in place, the root key gone, everything else kept and verified.
        before = read(snap)
        done = await yurt(None, "operator", "snapshot", "redact", str(snap))
        assert done.returncode == 0, done.stderr
        assert done.stdout == "Snapshot redacted\n"
        after = read(snap)
        assert "keyring" not in after.files
        assert after.meta["Redacted"] is True
        assert after.meta["Index"] == before.meta["Index"]
        assert {k: v for k, v in before.files.items() if k != "keyring"} == after.files
        assert snap.stat().st_mode & 0o777 == 0o600
        assert not await trio.Path(str(snap) + ".tmp").exists()
        state = await yurt(None, "operator", "snapshot", "state", str(snap))
        assert json.loads(state.stdout)["RootKeys"] == []
        # A damaged file is refused and left as it is.
        damaged = tmp_path / "bad.snap"
        damaged.write_bytes(b"not a snapshot")
        done = await yurt(None, "operator", "snapshot", "redact", str(damaged))
        assert done.returncode == 1
        assert damaged.read_bytes() == b"not a snapshot"
        missing = await yurt(None, "operator", "snapshot", "state", str(tmp_path / "none"))
        assert missing.returncode == 1
        assert "Error opening snapshot file" in missing.stderr
