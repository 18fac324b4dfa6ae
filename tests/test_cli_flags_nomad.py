"""Nomad's single-dash long flags (`-detach`, `-tail`, `-verbose`) on every verb.

Layer 0: `nomad_spelling` against the real command tree, token by token (Go's `flag` rules:
flags end at the first positional argument or `--`, a value-taking option consumes the next
token). Layer 2: real `yurt` processes, with an agent where the verb needs one, typed as a
Nomad user types them.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import trio

from tests.agent_support import raw_job, running_agent, wait_status
from tests.cli_proc_support import YURT, yurt
from yurt.runtime.cli import cli
from yurt.runtime.cli.flags import nomad_spelling

ROOT = Path(__file__).parent.parent
JOB_FILE = str(ROOT / "examples" / "mock.nomad.hcl")


@pytest.mark.parametrize(("typed", "parsed"), [
    ("job run -detach f.hcl", "job run --detach f.hcl"),
    ("job run -detach -json f.hcl", "job run --detach --json f.hcl"),
    ("alloc logs -tail -n 2 A", "alloc logs --tail -n 2 A"),
    ("alloc logs -stderr -f A t", "alloc logs --stderr -f A t"),
    ("alloc logs -all A", "alloc logs --all A"),
    ("alloc logs -lines=3 A", "alloc logs --lines=3 A"),
    ("job validate -verbose f.hcl", "job validate --verbose f.hcl"),
    ("alloc restart -all-tasks A", "alloc restart --all-tasks A"),
    ("alloc signal -signal SIGHUP A", "alloc signal --signal SIGHUP A"),
    ("alloc signal -s -verbose A", "alloc signal -s -verbose A"),  # a value, not a flag
    ("events -topic Job -index 0", "events --topic Job --index 0"),
    ("agent -data-dir /d -port 1", "agent --data-dir /d --port 1"),
    ("-version", "--version"),
    ("job status -help", "job status --help"),
    # Declared single-dash spellings and short options keep their meaning.
    ("alloc fs -stat -job web", "alloc fs -stat -job web"),
    ("alloc logs -n 2 -c 3 A", "alloc logs -n 2 -c 3 A"),
    # Nothing after the first positional argument or `--`, nor an unknown flag.
    ("job validate f.hcl -verbose", "job validate f.hcl -verbose"),
    ("job run -- -detach", "job run -- -detach"),
    ("alloc exec A /bin/sh -c -detach", "alloc exec A /bin/sh -c -detach"),
    ("alloc exec -task web -nosuch A sh", "alloc exec -task web -nosuch A sh"),  # its own
    # An unknown word is refused by its name, unless it may be a cluster of short options.
    ("job run -nosuch f.hcl", "job run --nosuch f.hcl"),
    ("alloc logs -fz A", "alloc logs -fz A"),
    ("nosuch -detach", "nosuch -detach"),
])
def test_single_dash_long_flags_are_spelled_for_click(typed: str, parsed: str) -> None:
    assert nomad_spelling(cli, typed.split()) == parsed.split()


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([YURT, *args], capture_output=True, text=True, timeout=60,
                          check=False)


def test_local_verbs_take_single_dash_long_flags() -> None:
    out = run("job", "validate", "-verbose", JOB_FILE)
    assert out.returncode == 0, out.stderr
    assert "restart = attempts" in out.stdout  # the --verbose table
    assert run("-version").stdout.startswith("yurt, version ")
    helped = run("alloc", "logs", "-help")
    assert helped.returncode == 0
    assert helped.stdout.startswith("Usage: yurt alloc logs")
    unknown = run("job", "validate", "-nosuch", JOB_FILE)
    assert unknown.returncode == 2
    assert "No such option '--nosuch'" in unknown.stderr, unknown.stderr  # not "-n"


async def test_remote_verbs_take_single_dash_long_flags(tmp_path: Path) -> None:
    script = "echo out1; echo out2; echo out3; echo err1 >&2; echo err2 >&2; exec sleep 1000"
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            detached = await yurt(a.address, "job", "run", "-detach", JOB_FILE)
            assert detached.returncode == 0, detached.stderr
            assert b"Evaluation ID" in detached.stdout, detached.stdout
            await a.client.post("/v1/jobs", json=raw_job("logs", script))
            alloc_id = str((await wait_status(a.client, "logs", "running"))["ID"])
            while True:  # until the task has written both streams (bounded by fail_after)
                r = await a.client.get(f"/v1/client/fs/logs/{alloc_id}", params={
                    "task": "t", "type": "stderr", "plain": "true"})
                if b"err2\n" in r.content:
                    break
                await trio.sleep(0.05)
            tail = await yurt(a.address, "alloc", "logs", "-tail", "-n", "2", alloc_id)
            assert tail.stdout == b"out2\nout3\n", tail.stderr
            err = await yurt(a.address, "alloc", "logs", "-stderr", alloc_id)
            assert err.stdout == b"err1\nerr2\n", err.stderr
            both = await yurt(a.address, "alloc", "logs", "-all", alloc_id)
            assert sorted(both.stdout.splitlines()) == [b"err1", b"err2", b"out1", b"out2",
                                                        b"out3"], both.stderr
            # Tokens after the first positional reach the command untouched.
            echoed = await yurt(a.address, "alloc", "exec", "-i=false", alloc_id, "/bin/echo",
                                "-detach", "-tail")
            assert echoed.stdout == b"-detach -tail\n", echoed.stderr
