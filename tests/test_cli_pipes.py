"""A reader that leaves (`yurt ... | head`) ends every streaming verb quietly with exit 0, as
it ends `cat` and `nomad alloc logs`: never "cannot reach the agent ... Broken pipe", exit 1.

Layer 2: a real `yurt` process against a real agent. The reader is the test: it reads the
first bytes, closes its end of the pipe as `head` does, and then the verb's next write must
end it. `events` writes only when an event comes (with none arriving it never notices, as
Nomad's `event stream` does not), so the test keeps registering jobs until the process ends.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import trio

from tests.agent_support import Running, raw_job, running_agent, wait_status
from tests.cli_proc_support import YURT, spawned

MANY_LINES = "seq 1 200000; sleep 1000"  # far more than a pipe buffer holds
JOB_FILE = str(Path(__file__).parent.parent / "examples" / "mock.nomad.hcl")


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["job", "status", "--help"],
                                  ["job", "validate", "-verbose", JOB_FILE]], ids=" ".join)
def test_a_reader_gone_before_the_first_write_is_no_error(args: list[str]) -> None:
    """The safety net in `main()`'s root group: any verb, even click's own `--help`, whose
    reader has left before it wrote (the read end closed first: the first write fails)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        out = subprocess.run([YURT, *args], stdout=write_end, stderr=subprocess.PIPE,
                             text=True, timeout=60, check=False)
    finally:
        os.close(write_end)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""


async def read_then_leave(proc: trio.Process) -> bytes:
    """Read the first bytes as `head` would, close the pipe, and answer what the verb said
    on stderr until it ended."""
    assert proc.stdout is not None
    assert proc.stderr is not None
    assert await proc.stdout.receive_some(10)
    await proc.stdout.aclose()
    return b"".join([chunk async for chunk in proc.stderr])


async def leave_while_events_come(a: Running, proc: trio.Process) -> bytes:
    errors = b""

    async def reader(cancel: trio.CancelScope) -> None:
        nonlocal errors
        errors = await read_then_leave(proc)
        cancel.cancel(reason="the verb ended")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader, nursery.cancel_scope)
        for n in range(10_000):  # each registration is a Job event the verb writes
            await a.client.post("/v1/jobs", json=raw_job(f"more{n}", "true", job_type="batch"))
            await trio.sleep(0.05)
    return errors


async def test_events_end_quietly_when_the_reader_leaves(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            await a.client.post("/v1/jobs", json=raw_job("first", "sleep 1000"))
            await wait_status(a.client, "first", "running")
            for json_flag in ([], ["--json"]):
                async with spawned(a.address, "events", *json_flag, "--index", "1") as proc:
                    errors = await leave_while_events_come(a, proc)
                assert proc.returncode == 0, errors
                assert errors == b""


async def test_alloc_fs_ends_quietly_when_the_reader_leaves(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            await a.client.post("/v1/jobs", json=raw_job("fs", MANY_LINES))
            alloc_id = str((await wait_status(a.client, "fs", "running"))["ID"])
            path = "alloc/logs/t.stdout.0"
            while True:  # until the whole output is in the file (bounded by fail_after)
                r = await a.client.get(f"/v1/client/fs/stat/{alloc_id}", params={"path": path})
                if r.status_code == 200 and r.json()["Size"] >= 1_000_000:
                    break
                await trio.sleep(0.05)
            for follow in (["-f"], []):
                async with spawned(a.address, "alloc", "fs", *follow, alloc_id, path) as proc:
                    errors = await read_then_leave(proc)
                assert proc.returncode == 0, errors
                assert errors == b""
