"""End to end with a real agent, raw_exec and a loopback HTTP server (layer 2): a job's
artifact is unpacked before its task starts, and an artifact with a wrong checksum fails with
Nomad's `Failed Artifact Download` event and follows the group's restart policy."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.agent_support import running_agent, wait_status
from tests.http_support import Route, open_file_server

pytestmark = pytest.mark.slow

SECOND = 1_000_000_000


def app_tgz() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = b"greeting=hello\n"
        info = tarfile.TarInfo("app/conf.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def job(job_id: str, script: str, artifact: dict[str, Any], *, job_type: str) -> dict[str, Any]:
    task = {"Name": "t", "Driver": "raw_exec",
            "Config": {"command": "/bin/sh", "args": ["-c", script]},
            "Artifacts": [artifact]}
    policy = {"Attempts": 1, "Interval": 3600 * SECOND, "Delay": SECOND, "Mode": "fail"}
    return {"Job": {"ID": job_id, "Type": job_type,
                    "TaskGroups": [{"Name": "g", "Tasks": [task], "RestartPolicy": policy,
                                    "ReschedulePolicy": {"Attempts": 0, "Unlimited": False}}]}}


async def test_an_artifact_is_unpacked_before_the_task_starts(tmp_path: Path) -> None:
    archive = app_tgz()
    digest = hashlib.sha256(archive).hexdigest()
    with trio.fail_after(60):
        async with open_file_server({"/app.tar.gz": Route(archive)}) as server, \
                running_agent(tmp_path / "data") as a:
            spec = job("unpacked", 'grep -q greeting=hello "$NOMAD_TASK_DIR/app/conf.txt"',
                       {"GetterSource": f"{server.base_url}/app.tar.gz",
                        "GetterOptions": {"checksum": f"sha256:{digest}"}}, job_type="batch")
            r = await a.client.post("/v1/jobs", json=spec)
            assert r.status_code == 200, r.text
            alloc = await wait_status(a.client, "unpacked", "complete")
            full = (await a.client.get(f"/v1/allocation/{alloc['ID']}")).json()
    events = [e["Type"] for e in full["TaskStates"]["t"]["Events"]]
    assert events.index("Downloading Artifacts") < events.index("Started")
    assert "Failed Artifact Download" not in events
    assert full["Job"]["TaskGroups"][0]["Tasks"][0]["Artifacts"][0]["RelativeDest"] == "local/"


async def test_a_wrong_checksum_fails_with_nomads_event_and_the_restart_policy(
        tmp_path: Path) -> None:
    wrong = hashlib.sha256(b"not the archive").hexdigest()
    with trio.fail_after(60):
        async with open_file_server({"/app.tar.gz": Route(app_tgz())}) as server, \
                running_agent(tmp_path / "data") as a:
            source = f"{server.base_url}/app.tar.gz"
            spec = job("badsum", "exit 0", {"GetterSource": source,
                                            "GetterOptions": {"checksum": f"sha256:{wrong}"}},
                       job_type="service")
            r = await a.client.post("/v1/jobs", json=spec)
            assert r.status_code == 200, r.text
            alloc = await wait_status(a.client, "badsum", "failed")
            full = (await a.client.get(f"/v1/allocation/{alloc['ID']}")).json()
    state = full["TaskStates"]["t"]
    events = [e["Type"] for e in state["Events"]]
    assert [t for t in events if t not in ("Received", "Task Setup")] == [
        "Downloading Artifacts", "Failed Artifact Download", "Restarting",
        "Downloading Artifacts", "Failed Artifact Download", "Not Restarting"]
    assert state["Failed"] is True
    assert state["Restarts"] == 1
    assert len(server.requests) == 2  # one download per try: the policy is the only retry
    failed = next(e for e in state["Events"] if e["Type"] == "Failed Artifact Download")
    prefix = f'failed to download artifact "{source}": Checksums did not match for '
    assert failed["DisplayMessage"].startswith(prefix)
    assert f"Expected: {wrong}\n" in failed["DisplayMessage"]
    assert failed["DownloadError"] == failed["DisplayMessage"]
    assert failed["Details"]["download_error"] == failed["DisplayMessage"]
    restarting = next(e for e in state["Events"] if e["Type"] == "Restarting")
    assert restarting["Details"]["start_delay"] == str(restarting["StartDelay"])
    assert restarting["StartDelay"] >= SECOND
