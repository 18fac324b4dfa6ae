"""The exit-status table (runtime/errors.py `EXIT_CODES`), verb by verb, with real processes:
every verb that needs the agent exits 1 when none answers (one line, no traceback); bad input
exits 2 before the agent is asked; SIGINT ends every streaming verb with 130 (layer 2: an
agent on a real socket, real tasks for the streams to follow).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from tests.agent_support import Running, raw_job, running_agent
from tests.cli_proc_support import YURT
from yurt.runtime.cli.jobs import EXIT_PLAN_ERROR
from yurt.runtime.errors import EXIT_INTERRUPTED, EXIT_UNREACHABLE, EXIT_USAGE

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parent.parent
JOB_FILE = str(ROOT / "examples" / "mock.nomad.hcl")

#: Every verb that asks the agent, with arguments it accepts.
REMOTE = [
    ["job", "run", JOB_FILE], ["job", "plan", JOB_FILE], ["job", "stop", "web"], ["job", "status"],
    ["job", "status", "web"], ["job", "history", "web"], ["job", "inspect", "web"],
    ["job", "revert", "web", "0"], ["job", "scale", "web", "1"], ["job", "eval", "web"],
    ["job", "dispatch", "web"], ["job", "periodic", "force", "web"],
    ["alloc", "status", "ab12"], ["alloc", "stop", "ab12"], ["alloc", "restart", "ab12"],
    ["alloc", "signal", "ab12"], ["alloc", "logs", "ab12"], ["alloc", "fs", "ab12"],
    ["alloc", "exec", "ab12", "true"], ["node", "status"],
    ["node", "eligibility", "-enable", "-self"], ["node", "drain", "-enable", "-self"],
    ["status"], ["status", "ab12"], ["tasks"], ["events"], ["eval", "list"],
    ["eval", "status", "ab12"],
    ["deployment", "list"], ["deployment", "status", "ab12"],
    ["deployment", "promote", "ab12"], ["deployment", "fail", "ab12"],
    ["var", "get", "p"], ["var", "put", "p", "a=b"], ["var", "list"], ["var", "purge", "p"],
    ["namespace", "list"], ["namespace", "apply", "n"], ["namespace", "delete", "n"],
    ["namespace", "status", "n"], ["system", "gc"], ["system", "reconcile", "summaries"],
]

#: Bad input, refused before any request (so no agent is needed to see the 2).
BAD_INPUT = [
    ["nosuch"], ["job", "status", "--no-such-flag"], ["job", "status", "-json", "-t", "{{.}}"],
    ["alloc", "status", "a"], ["alloc", "signal", "-s", "SIGNOPE", "ab12"],
    ["node", "drain", "-self"], ["job", "scale", "web", "many"],
    ["var", "put", "-check-index", "x", "p", "a=b"], ["job", "validate", "no/such/file.hcl"],
    ["alloc", "fs", "-n", "1", "-c", "1", "ab12"], ["alloc", "exec", "-e", "xy", "ab12", "sh"],
    ["run", "no/such/file.hcl"], ["job", "run", "no/such/file.hcl"], ["agent", "--port", "70000"],
    ["server", "--etcd", "http://127.0.0.1:9", "--port", "70000"],
]


@pytest.fixture(scope="module")
def nothing_listens() -> Iterator[str]:
    """An address where a connection is refused: a bound port that never listens, held
    for the tests so nothing else takes it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{s.getsockname()[1]}"


def run(args: list[str], addr: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([YURT, *args], capture_output=True, text=True, timeout=60,
                          check=False, env={**os.environ, "YURT_ADDR": addr}, stdin=None)


@pytest.mark.parametrize("args", REMOTE, ids=" ".join)
def test_an_unreachable_agent_exits_1(args: list[str], nothing_listens: str) -> None:
    out = run(args, nothing_listens)
    # `job plan` keeps Nomad's own table: 255 when no plan could be made.
    want = EXIT_PLAN_ERROR if args[:2] == ["job", "plan"] else EXIT_UNREACHABLE
    assert out.returncode == want, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    assert f"cannot reach the agent at {nothing_listens}" in out.stderr, out.stderr


@pytest.mark.parametrize("args", BAD_INPUT, ids=" ".join)
def test_bad_input_exits_2(args: list[str], nothing_listens: str) -> None:
    out = run(args, nothing_listens)
    assert out.returncode == EXIT_USAGE, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    assert "cannot reach the agent" not in out.stderr


async def interrupted(a: Running, args: list[str], ready: bytes) -> tuple[int, bytes]:
    """Start `yurt args`, wait until its stdout shows `ready` (it is streaming), send SIGINT;
    its exit status and what it printed."""
    env = {**os.environ, "YURT_ADDR": a.address}
    process = await trio.lowlevel.open_process([YURT, *args], stdout=subprocess.PIPE,
                                               stderr=subprocess.PIPE, env=env)
    assert process.stdout is not None
    seen = b""
    try:
        while ready not in seen:
            chunk = await process.stdout.receive_some()
            if not chunk:
                assert process.stderr is not None
                why = await process.stderr.receive_some()
                raise AssertionError(f"{args} ended before streaming: {seen!r} {why!r}")
            seen += chunk
        process.send_signal(signal.SIGINT)
        return await process.wait(), seen
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_sigint_ends_every_streaming_verb_with_130(tmp_path: Path) -> None:
    with trio.fail_after(90):
        async with running_agent(tmp_path) as a:
            job = raw_job("stream", "echo started; exec sleep 3600")
            assert (await a.client.post("/v1/jobs", json=job)).is_success
            while True:
                allocs = (await a.client.get("/v1/job/stream/allocations")).json()
                if allocs and allocs[0]["ClientStatus"] == "running":
                    break
                await trio.sleep(0.05)
            alloc_id = allocs[0]["ID"]
            log = "alloc/logs/t.stdout.0"  # `-f` waits for "started" if it is not there yet
            streams = [
                (["events", "--index", "0"], b"Allocation"),
                (["alloc", "fs", "-f", alloc_id[:8], log], b"started"),
                (["alloc", "exec", "-i=false", alloc_id[:8], "/bin/sh", "-c",
                  "echo ready; exec sleep 3600"], b"ready"),
                # Last: the drain goes on in the agent once its follower is gone.
                (["node", "drain", "-enable", "-self", "-deadline", "1h"],
                 b"drain strategy set"),
            ]
            for args, ready in streams:
                code, output = await interrupted(a, args, ready)
                assert code == EXIT_INTERRUPTED, (args, code, output)


#: Malformed agent addresses: the user's input, refused where the client is built.
BAD_ADDRESSES = ["http://127.0.0.1:99999", "notaurl", "http://127.0.0.1:port", "ftp://h:1",
                 "http://:4646"]
#: Verbs that reach the agent by each of the CLI's paths: HTTP, websocket, framed stream.
ADDRESS_VERBS = [["job", "status"], ["alloc", "status", "ab12"], ["alloc", "logs", "ab12"],
                 ["alloc", "fs", "ab12"], ["alloc", "exec", "ab12", "true"], ["events"]]


@pytest.mark.parametrize("addr", BAD_ADDRESSES)
@pytest.mark.parametrize("args", ADDRESS_VERBS, ids=" ".join)
def test_a_malformed_address_is_bad_input(args: list[str], addr: str) -> None:
    out = run(args, addr)
    assert out.returncode == EXIT_USAGE, (out.stdout, out.stderr)
    assert out.stderr.count("\n") == 1, out.stderr  # one line, no traceback
    assert out.stderr.startswith(f"yurt: YURT_ADDR={addr!r}"), out.stderr
    assert "expected http://HOST:PORT" in out.stderr
