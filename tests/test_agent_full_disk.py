"""The agent on a full disk (layer 3 in-process: a real agent, real raw_exec tasks, a real
1 MiB file system mounted for the test): it starts, re-attaches and serves the API."""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from pathlib import Path

import httpx2
import pytest
import trio

from tests.agent_support import raw_job, wait_status
from tests.disk_support import fill
from yurt.runtime.agent.agent import Agent, AgentConfig


def pids_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline and cmdline.startswith(b"/bin/sh\0-c\0"):
                found.append(int(entry.name))
    return found


@pytest.mark.fs_size("4m")
async def test_agent_starts_on_a_full_disk_reattaches_and_serves(small_fs: Path) -> None:
    data = small_fs / "data"
    marker = f"yurt-full-disk-{uuid.uuid4().hex}"
    script = f"while true; do echo {marker}; sleep 0.2; done"
    try:
        await run_scenario(data, marker, script)
    finally:  # a failed run must not leave its task behind
        for pid in pids_with(marker):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


async def run_scenario(data: Path, marker: str, script: str) -> None:
    with trio.fail_after(30):
        agent = Agent(AgentConfig(data_dir=data, port=0))  # leaves tasks running on stop
        async with trio.open_nursery() as nursery:
            address = await nursery.start(agent.run)
            async with httpx2.AsyncClient(base_url=address, timeout=10) as client:
                response = await client.put("/v1/jobs", json=raw_job("full", script))
                assert response.status_code == 200
                await wait_status(client, "full", "running")
            agent.stop()
        before = pids_with(marker)
        assert len(before) == 1
        await trio.to_thread.run_sync(fill, data.parent)

        # dev mode: the second agent kills what it re-attached when it stops.
        agent = Agent(AgentConfig(data_dir=data, port=0, dev_mode=True))
        async with trio.open_nursery() as nursery:
            address = await nursery.start(agent.run)
            async with httpx2.AsyncClient(base_url=address, timeout=10) as client:
                alloc = await wait_status(client, "full", "running")
                assert alloc["TaskStates"]["t"]["State"] == "running"
                assert pids_with(marker) == before  # re-attached, not started again
            agent.stop()
    assert pids_with(marker) == []  # and stopped by the second agent (dev mode)
