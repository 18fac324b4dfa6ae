"""`yurt alloc logs` as a user runs it: a real `yurt` process against a real agent (layer 2),
plus the pure pieces (flags, line windows, line joining) at layer 0.

Every wait is bounded by `fail_after`; tasks that must be "running with output" are waited on
through the API, never slept for.
"""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import pytest
import trio

from tests.agent_support import Running, raw_job, running_agent, wait_status
from tests.cli_proc_support import spawned, yurt
from tests.proc_support import processes_with_env
from yurt.runtime.cli.logs import (
    BYTES_PER_LINE,
    MAX_WINDOW,
    LineJoiner,
    LogsError,
    LogsRequest,
    last_lines,
    only_task,
    request,
    window_holds,
)


async def wait_output(a: Running, alloc_id: str, want: bytes, stream: str = "stdout") -> None:
    """Until the task's `stream` holds `want` (bounded by the caller)."""
    while True:
        r = await a.client.get(
            f"/v1/client/fs/logs/{alloc_id}", params={"task": "t", "type": stream, "plain": "true"}
        )
        if want in r.content:
            return
        await trio.sleep(0.05)


async def started(a: Running, job_id: str, script: str, *, job_type: str = "service") -> str:
    await a.client.post("/v1/jobs", json=raw_job(job_id, script, job_type=job_type))
    return str((await wait_status(a.client, job_id, "running"))["ID"])


# ------------------------------------------------------------------------- layer 0


def make(
    *,
    follow: bool = False,
    stderr: bool = False,
    all_streams: bool = False,
    tail: bool = False,
    lines: int | None = None,
    nbytes: int | None = None,
) -> LogsRequest:
    return request(
        follow=follow, stderr=stderr, all_streams=all_streams, tail=tail, lines=lines, nbytes=nbytes
    )


def test_flags_make_nomads_requests() -> None:
    assert make() == LogsRequest(("stdout",), follow=False)
    assert make(tail=True).lines == 10  # Nomad's default tail
    assert make(tail=True, nbytes=5) == LogsRequest(("stdout",), False, None, 5)
    assert make(lines=3, follow=True) == LogsRequest(("stdout",), True, 3)  # -n implies tail
    assert make(all_streams=True).streams == ("stdout", "stderr")
    assert make(stderr=True).streams == ("stderr",)
    with pytest.raises(LogsError, match="-n and -c") as caught:
        make(lines=1, nbytes=1)
    assert caught.value.code == 2
    with pytest.raises(LogsError, match="--all includes stderr"):
        make(stderr=True, all_streams=True)
    with pytest.raises(LogsError, match="-c must be 0 or more"):
        make(nbytes=-5)


def test_last_lines_and_windows() -> None:
    assert last_lines(b"a\nb\nc\n", 2) == b"b\nc\n"
    assert last_lines(b"a\nb\nc", 2) == b"b\nc"  # an unfinished last line counts
    assert last_lines(b"a\nb\n", 5) == b"a\nb\n"
    assert last_lines(b"a\nb\n", 0) == b""
    window = 3 * BYTES_PER_LINE
    assert window_holds(b"short log\n", window, 3)  # the whole log
    long_lines = (b"x" * 200 + b"\n") * 2
    assert not window_holds(long_lines[-window:], window, 3)  # must grow
    assert window_holds(b"x" * MAX_WINDOW, MAX_WINDOW, 3)  # cannot grow


def test_joined_streams_never_mix_within_a_line() -> None:
    out: list[bytes] = []
    joiner = LineJoiner(out.append)
    joiner.feed("stdout", b"out 1\nout ")
    joiner.feed("stderr", b"err 1\n")
    joiner.feed("stdout", b"2\n")
    joiner.feed("stderr", b"unfinished")
    joiner.flush("stderr")
    assert out == [b"out 1\n", b"err 1\n", b"out 2\n", b"unfinished"]


# ------------------------------------------------------------------------- layer 2

TICKER = "i=0; while true; do i=$((i+1)); echo line $i; sleep 0.05; done"


async def test_follow_ends_when_the_allocation_finishes(tmp_path: Path) -> None:
    script = "for i in 1 2 3 4 5; do echo line $i; sleep 0.2; done"
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            alloc_id = await started(a, "b", script, job_type="batch")
            out = await yurt(a.address, "alloc", "logs", "-f", alloc_id[:8])
            assert out.returncode == 0, out.stderr
            assert out.stdout == b"".join(b"line %d\n" % i for i in range(1, 6))


async def test_follow_ends_when_the_job_is_stopped(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            alloc_id = await started(a, "svc", TICKER)
            await wait_output(a, alloc_id, b"line 3\n")
            async with spawned(a.address, "alloc", "logs", "-f", alloc_id) as follow:
                assert follow.stdout is not None
                seen = b""
                while b"line 5\n" not in seen:  # it is following
                    seen += await follow.stdout.receive_some()
                assert (await a.client.delete("/v1/job/svc")).status_code == 200
                async for chunk in follow.stdout:
                    seen += chunk
            assert follow.returncode == 0
            assert seen.startswith(b"line 1\nline 2\n")
            assert seen.endswith(b"\n")


async def test_tail_lines_and_bytes_as_nomads_tail(tmp_path: Path) -> None:
    long_line = "y" * 500
    script = (
        f"i=0; while [ $i -lt 100 ]; do i=$((i+1)); echo line $i; done; "
        f"for i in 1 2 3 4 5 6; do echo {long_line}$i >&2; done; sleep 1000"
    )
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            alloc_id = await started(a, "tail", script)
            await wait_output(a, alloc_id, b"line 100\n")
            await wait_output(a, alloc_id, f"{long_line}6\n".encode(), "stderr")
            three = await yurt(a.address, "alloc", "logs", "-n", "3", alloc_id)
            assert three.stdout == b"line 98\nline 99\nline 100\n", three.stderr
            ten = await yurt(a.address, "alloc", "logs", "--tail", alloc_id)
            assert ten.stdout.splitlines()[0] == b"line 91"
            assert len(ten.stdout.splitlines()) == 10
            nine_bytes = await yurt(a.address, "alloc", "logs", "-c", "9", alloc_id)
            assert nine_bytes.stdout == b"line 100\n"
            # Lines far longer than Nomad's 120-byte guess: still the last 4 whole lines.
            long_ones = await yurt(a.address, "alloc", "logs", "--stderr", "-n", "4", alloc_id)
            assert long_ones.stdout.splitlines() == [
                f"{long_line}{i}".encode() for i in (3, 4, 5, 6)
            ]
            both = await yurt(a.address, "alloc", "logs", "--all", "-n", "1", alloc_id)
            assert both.stdout == f"line 100\n{long_line}6\n".encode()
            refused = await yurt(a.address, "alloc", "logs", "-n", "1", "-c", "1", alloc_id)
            assert refused.returncode == 2
            assert b"-n and -c" in refused.stderr


async def test_tail_then_follow_loses_and_repeats_nothing(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            alloc_id = await started(a, "tf", TICKER)
            await wait_output(a, alloc_id, b"line 20\n")
            async with spawned(a.address, "alloc", "logs", "-f", "-n", "2", alloc_id) as follow:
                assert follow.stdout is not None
                seen = b""
                while seen.count(b"\n") < 40:
                    seen += await follow.stdout.receive_some()
                follow.send_signal(signal.SIGINT)
            assert follow.returncode == 130  # Ctrl-C, as every streaming verb
            numbers = [int(line.split()[1]) for line in seen.splitlines()]
            assert numbers[0] >= 19  # two lines back, not the whole log
            assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))


async def test_all_follows_both_streams_line_by_line(tmp_path: Path) -> None:
    script = (
        "for i in 1 2 3 4 5 6 7 8; do printf 'out %s ' $i; sleep 0.01; echo done; "
        "echo err $i >&2; sleep 0.1; done"
    )
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            alloc_id = await started(a, "all", script, job_type="batch")
            out = await yurt(a.address, "alloc", "logs", "--all", "-f", alloc_id)
            assert out.returncode == 0, out.stderr
            lines = out.stdout.decode().splitlines()
            assert sorted(lines) == sorted(
                [f"out {i} done" for i in range(1, 9)] + [f"err {i}" for i in range(1, 9)]
            )


async def test_a_closed_pipe_ends_quietly_with_0(tmp_path: Path) -> None:
    script = "seq 1 200000; sleep 1000"  # far more than a pipe buffer holds
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            alloc_id = await started(a, "pipe", script)
            await wait_output(a, alloc_id, b"\n200000\n")
            for follow in ([], ["-f"]):
                async with spawned(a.address, "alloc", "logs", *follow, alloc_id) as head:
                    assert head.stdout is not None
                    assert head.stderr is not None
                    assert (await head.stdout.receive_some(10)).startswith(b"1\n")
                    await head.stdout.aclose()  # `| head` read what it wanted
                    errors = b"".join([chunk async for chunk in head.stderr])
                assert head.returncode == 0
                assert errors == b""


def test_the_only_task_or_nomads_list_of_them() -> None:
    def alloc(*tasks: str) -> dict[str, object]:
        group = {"Name": "g", "Tasks": [{"Name": t} for t in tasks]}
        return {"ID": "0123456789abcdef", "TaskGroup": "g", "Job": {"TaskGroups": [group]}}

    assert only_task(alloc("web")) == "web"
    with pytest.raises(LogsError) as caught:
        only_task(alloc("web", "sidecar"))
    assert caught.value.code == 2
    assert str(caught.value) == (
        'Allocation "01234567" is running the following tasks:\n'
        "  * web\n  * sidecar\n\nPlease specify the task."
    )


async def test_an_agent_that_stops_breaks_the_follow_off(tmp_path: Path) -> None:
    # The agent stops, its tasks keep running (not dev mode): the follow has not seen the end
    # of the allocation and must say so (exit 1), not end as if the output were complete.
    job_id = f"kept-{uuid.uuid4().hex[:8]}"
    try:
        with trio.fail_after(30):
            async with running_agent(tmp_path, dev_mode=False) as a:
                alloc_id = await started(a, job_id, TICKER)
                await wait_output(a, alloc_id, b"line 3\n")
                async with spawned(a.address, "alloc", "logs", "-f", alloc_id) as follow:
                    assert follow.stdout is not None
                    assert follow.stderr is not None
                    seen = b""
                    while b"line 5\n" not in seen:
                        seen += await follow.stdout.receive_some()
                    a.agent.stop()
                    errors = b"".join([chunk async for chunk in follow.stderr])
            assert follow.returncode == 1
            assert b"broke off the log stream" in errors
    finally:
        for pid in processes_with_env(NOMAD_JOB_ID=job_id):
            os.kill(pid, signal.SIGKILL)
