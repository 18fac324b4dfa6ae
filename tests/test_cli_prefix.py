"""IDs by prefix, as Nomad's CLI takes them (layer 2: a real `yurt` process, an agent on a real
socket). Jobs: an exact ID wins, else the one job the prefix starts; several: listed, exit 2;
none: Nomad's message, exit 1. Allocations: at least two characters; an ambiguous prefix
lists the allocations it matches (exit 2) instead of the API's bare refusal.

The agent runs in this process, so its ID generator is replaced by one whose IDs all start
with "ab": an ambiguous allocation prefix is then certain, not a birthday-paradox draw.
"""

from __future__ import annotations

import itertools
import os
import subprocess
from pathlib import Path

import pytest
import trio

from tests.agent_support import Running, mock_job, running_agent
from tests.cli_proc_support import YURT

pytestmark = pytest.mark.slow



async def yurt(a: Running, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "YURT_ADDR": a.address}
    done = await trio.run_process([YURT, *args], capture_stdout=True, capture_stderr=True,
                                  check=False, env=env, stdin=b"")
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(),
                                       done.stderr.decode())


@pytest.fixture
def shared_prefix_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    counter = itertools.count(1)
    monkeypatch.setattr("yurt.runtime.server.local.new_id",
                        lambda: (lambda n: f"ab{n:06x}-0000-4000-8000-{n:012x}")(next(counter)))


async def allocs_of(a: Running, job_id: str, n: int) -> list[str]:
    while True:  # bounded by the test's fail_after
        allocs = (await a.client.get(f"/v1/job/{job_id}/allocations")).json()
        if len(allocs) == n:
            return sorted(x["ID"] for x in allocs)
        await trio.sleep(0.02)


@pytest.mark.usefixtures("shared_prefix_ids")
async def test_ambiguous_allocation_prefix_lists_the_matches(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            assert (await a.client.post("/v1/jobs", json=mock_job("web", 2))).is_success
            first, second = await allocs_of(a, "web", 2)
            assert first[:2] == second[:2] == "ab"
            for verb in (["status"], ["stop"], ["restart"], ["signal"], ["logs"], ["fs"]):
                out = await yurt(a, "alloc", *verb, "ab")
                assert out.returncode == 2, (verb, out.stderr)
                lines = out.stderr.splitlines()
                assert lines[0] == "yurt: Prefix matched multiple allocations", verb
                assert lines[2].split() == ["ID", "Name", "Task", "Group", "Desired",
                                            "Status"]
                assert sorted(line.split()[0] for line in lines[3:]) == [first[:8],
                                                                         second[:8]]
            short = await yurt(a, "alloc", "status", "a")
            assert short.returncode == 2
            assert "Identifier must contain at least two characters." in short.stderr
            missing = await yurt(a, "alloc", "status", "zz")
            assert missing.returncode == 1
            assert 'No allocation(s) with prefix or id "zz" found' in missing.stderr
            unique = await yurt(a, "alloc", "status", first[:8])
            assert unique.returncode == 0, unique.stderr
            assert f"ID                  = {first}\n" in unique.stdout


async def test_job_ids_match_by_prefix_and_exact_ids_win(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            for job_id in ("web", "web-api", "worker"):
                assert (await a.client.post("/v1/jobs", json=mock_job(job_id))).is_success
            out = await yurt(a, "job", "status", "wor")
            assert out.returncode == 0, out.stderr
            assert out.stdout.startswith("ID            = worker\n")
            out = await yurt(a, "job", "status", "web")  # also the start of "web-api"
            assert out.returncode == 0, out.stderr
            assert out.stdout.startswith("ID            = web\n")
            out = await yurt(a, "job", "status", "we")
            assert out.returncode == 2
            lines = out.stderr.splitlines()
            assert lines[0] == 'yurt: Prefix "we" matched multiple jobs'
            assert [line.split()[0] for line in lines[2:]] == ["ID", "web", "web-api"]
            out = await yurt(a, "job", "status", "nope")
            assert out.returncode == 1
            assert out.stderr == 'yurt: No job(s) with prefix or ID "nope" found\n'
            out = await yurt(a, "job", "history", "-t", "{{range .}}{{.ID}}{{end}}", "web-")
            assert (out.returncode, out.stdout) == (0, "web-api")
            # A prefix match asks first (Nomad's job stop); stdin closed: no answer, exit 1.
            out = await yurt(a, "job", "stop", "work")
            assert out.returncode == 1, out
            assert out.stdout == 'Are you sure you want to stop job "worker"? [y/N] '
            assert "Failed to parse answer: EOF" in out.stderr
            assert (await a.client.get("/v1/job/worker")).json()["Stop"] is False
            out = await yurt(a, "job", "stop", "-yes", "work")
            assert out.returncode == 0, out
            assert 'Evaluation "' in out.stdout
            assert 'finished with status "complete"' in out.stdout
            assert (await a.client.get("/v1/job/worker")).json()["Stop"] is True
            assert (await a.client.get("/v1/job/web")).json()["Stop"] is False
