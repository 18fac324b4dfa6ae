"""The command's output for scripts and for people (layer 2): a real `yurt` process against an
agent on a real socket, its stdout a pipe (or, for the terminal case, a pseudo-terminal).

Into a pipe: plain columns (no box drawing), nothing cut however narrow `$COLUMNS` is, IDs 8
characters long; `-json` and `-t TEMPLATE` on listing and status verbs (both at once: exit 2);
Nomad's messages for empty lists. At a narrow terminal: IDs still whole.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.agent_support import Running, mock_job, running_agent
from tests.cli_proc_support import YURT

pytestmark = pytest.mark.slow

BOX = set("─│┃━┏┓┗┛┡┩└┘├┤┬┴┼╇╈╋")
LONG_JOB = "a-job-whose-name-is-much-longer-than-any-narrow-terminal-would-show"


async def yurt(a: Running, *args: str, columns: int = 40) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "YURT_ADDR": a.address, "COLUMNS": str(columns)}
    done = await trio.run_process([YURT, *args], capture_stdout=True, capture_stderr=True,
                                  check=False, env=env)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(),
                                       done.stderr.decode())


def unplaceable(job_id: str) -> dict[str, Any]:
    doc = mock_job(job_id)
    doc["Job"]["Constraints"] = [{"LTarget": "${attr.kernel.name}", "RTarget": "plan9",
                                  "Operand": "="}]
    return doc


async def wait_allocs(a: Running, job_id: str, n: int) -> list[dict[str, Any]]:
    while True:  # bounded by the test's fail_after
        allocs: list[dict[str, Any]] = (await a.client.get(
            f"/v1/job/{job_id}/allocations")).json()
        if len(allocs) == n:
            return allocs
        await trio.sleep(0.02)


async def test_empty_lists_say_so_in_nomads_words(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            for args, message in ((["job", "status"], "No running jobs\n"),
                                  (["status"], "No running jobs\n"),
                                  (["tasks"], "No running jobs\n"),
                                  (["eval", "list"], "No evals found\n"),
                                  (["deployment", "list"], "No deployments found\n"),
                                  (["var", "list"], "No variables found\n")):
                out = await yurt(a, *args)
                assert (out.returncode, out.stdout) == (0, message), (args, out.stderr)
            out = await yurt(a, "job", "status", "-json")
            assert (out.returncode, json.loads(out.stdout)) == (0, [])
            assert (await a.client.post("/v1/jobs", json=unplaceable("nowhere"))).is_success
            out = await yurt(a, "job", "status", "nowhere")
            assert out.returncode == 0, out.stderr
            assert out.stdout.endswith("\nNo allocations placed\n")


async def test_piped_tables_are_plain_whole_and_keep_8_character_ids(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            assert (await a.client.post("/v1/jobs", json=mock_job(LONG_JOB, 2))).is_success
            allocs = await wait_allocs(a, LONG_JOB, 2)
            for args in (["job", "status"], ["job", "status", LONG_JOB], ["eval", "list"],
                         ["alloc", "status", allocs[0]["ID"]], ["node", "status"],
                         ["status"], ["tasks"]):
                out = await yurt(a, *args, columns=20)
                assert out.returncode == 0, (args, out.stderr)
                assert not BOX & set(out.stdout), (args, out.stdout)
                assert "…" not in out.stdout, (args, out.stdout)
            listing = (await yurt(a, "job", "status", columns=20)).stdout.splitlines()
            assert listing[0].split() == ["ID", "Type", "Priority", "Status", "Submit", "Date"]
            assert listing[1].split()[:2] == [LONG_JOB, "service"]
            detail = (await yurt(a, "job", "status", LONG_JOB, columns=20)).stdout
            assert f"ID            = {LONG_JOB}\n" in detail
            rows = detail.split("\nAllocations\n", 1)[1].splitlines()
            assert rows[0].split()[:4] == ["ID", "Node", "ID", "Task"]  # Nomad's columns
            assert sorted(r.split()[0] for r in rows[1:]) == sorted(x["ID"][:8] for x in allocs)
            assert all(r.split()[2] == "g" for r in rows[1:])  # the task group


async def test_json_and_template_on_listing_and_status_verbs(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            assert (await a.client.post("/v1/jobs", json=mock_job("web", 2))).is_success
            allocs = await wait_allocs(a, "web", 2)
            alloc_id = allocs[0]["ID"]
            out = await yurt(a, "job", "status", "-t", "{{range .}}{{.ID}} {{.Type}}\n{{end}}")
            assert (out.returncode, out.stdout) == (0, "web service\n")
            out = await yurt(a, "job", "status", "-t", "{{.Job.ID}} {{len .Allocations}}",
                             "web")
            assert (out.returncode, out.stdout) == (0, "web 2")
            out = await yurt(a, "alloc", "status", "-t", "{{.JobID}}/{{.ID}}", alloc_id[:6])
            assert (out.returncode, out.stdout) == (0, f"web/{alloc_id}")
            out = await yurt(a, "alloc", "status", "-json", alloc_id)
            assert json.loads(out.stdout)["ID"] == alloc_id
            checks: list[tuple[list[str], str]] = [
                (["eval", "list"], "{{range .}}{{.JobID}}{{end}}"),
                (["node", "status"], "{{range .}}{{.Status}}{{end}}"),
                (["tasks"], "{{len .Jobs}}"),
                (["deployment", "list"], "{{len .}}"),
                (["namespace", "list"], "{{range .}}{{.Name}}{{end}}"),
                (["var", "list"], "{{len .}}"),
                (["job", "history"], "{{range .}}{{.Version}}{{end}}"),
                (["job", "inspect"], "{{.ID}}"),
                (["var", "get"], "{{.Path}}={{.Items.k}}")]
            expected = ["web", "ready", "1", "0", "default", "1", "0", "web", "p=v"]
            assert (await a.client.put("/v1/var/p", json={"Path": "p", "Items": {"k": "v"}})
                    ).is_success
            for (args, template), want in zip(checks, expected, strict=True):
                if args[:2] in (["job", "history"], ["job", "inspect"]):
                    args = [*args, "web"]
                if args[:2] == ["var", "get"]:
                    args = [*args, "p"]
                out = await yurt(a, *args, "-t", template)
                assert (out.returncode, out.stdout) == (0, want), (args, out.stderr)
                if args[:2] != ["job", "inspect"]:
                    out = await yurt(a, *args, "-json")
                    assert out.returncode == 0, (args, out.stderr)
                    json.loads(out.stdout)
            both = await yurt(a, "job", "status", "-json", "-t", "{{.}}")
            assert both.returncode == 2
            assert "Both json and template formatting are not allowed" in both.stderr
            broken = await yurt(a, "job", "status", "-t", "{{.ID")
            assert broken.returncode == 2
            assert "Error formatting the data" in broken.stderr


def read_terminal(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run `argv` with stdout and stderr on a new pseudo-terminal; (exit status, output)."""
    primary, secondary = pty.openpty()
    try:
        child = subprocess.Popen(argv, stdout=secondary, stderr=secondary, env=env)
    finally:
        os.close(secondary)
    output = b""
    try:
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # EIO: every copy of the terminal's other side is closed
                break
            if not chunk:
                break
            output += chunk
    finally:
        os.close(primary)
    return child.wait(timeout=30), output.decode(errors="replace")


async def test_ids_stay_whole_at_a_narrow_terminal(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            assert (await a.client.post("/v1/jobs", json=mock_job(LONG_JOB, 3))).is_success
            allocs = await wait_allocs(a, LONG_JOB, 3)
            env = {**os.environ, "YURT_ADDR": a.address, "COLUMNS": "24", "TERM": "xterm"}
            for columns in ("24", "60"):
                code, output = await trio.to_thread.run_sync(
                    read_terminal, [YURT, "job", "status", LONG_JOB],
                    {**env, "COLUMNS": columns})
                assert code == 0, output
                # Nomad's status text is plain columns at a terminal too (formatList):
                # never drawn, never cut.
                assert not BOX & set(output), output
                for alloc in allocs:
                    assert alloc["ID"][:8] in output, (columns, output)


def test_job_validate_tables_are_plain_into_a_pipe() -> None:
    example = str(Path(__file__).parent.parent / "examples" / "service-leader-sidecar.nomad.hcl")
    out = subprocess.run([YURT, "job", "validate", "--verbose", example], capture_output=True,
                         text=True, timeout=60, check=False,
                         env={**os.environ, "COLUMNS": "20"})
    assert out.returncode == 0, out.stderr
    assert not BOX & set(out.stdout)
    rows = [line.split() for line in out.stdout.splitlines()[2:]]
    assert rows[0] == ["group", "count", "task", "driver", "stage", "restart", "kill"]
    assert rows[1][:3] == ["frontend", "1", "server"]
    assert rows[2][:6] == ["frontend", "1", "log-shipper", "raw_exec", "prestart", "sidecar"]
