"""Nomad's `-filter`, `-per-page` and `-page-token` on the list commands (runtime/cli/paging.py),
each once, as a real `yurt` process against an agent on a real socket: the filtered lists,
Nomad's "Results have been paginated" footer whose command line opens the next page, `var
list`'s "Next page token" on stderr and its wrapped `-json`, and exit 2 for a filter the agent
refuses (command/eval_list.go, node_pool_*.go, node_status.go, var_list.go, service_info.go,
deployment_list.go, eval_delete.go)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.agent_support import mock_job, raw_job, running_agent, wait_status
from tests.authz_support import rolled_out
from tests.cli_proc_support import yurt

pytestmark = pytest.mark.slow

FOOTER = "Results have been paginated. To get the next page run:"


def next_command(text: str) -> list[str]:
    """The arguments of the command line the footer prints, less the program's name."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith(FOOTER.strip()))
    command = next(line for line in lines[at + 1:] if line.strip())
    words = shlex.split(command)
    assert words[0] == "yurt"
    return words[1:]


def first_column(text: str) -> list[str]:
    rows = []
    for line in text.splitlines()[1:]:
        if not line.strip():
            break
        rows.append(line.split()[0])
    return rows


async def test_eval_and_deployment_lists_filter_and_page(tmp_path: Path) -> None:
    with trio.fail_after(90):
        async with running_agent(tmp_path) as a:
            for job_id in ("ja", "jb", "jc"):
                answer = await a.client.post("/v1/jobs", json=rolled_out(job_id))
                assert answer.status_code == 200, answer.text
            evals = (await a.client.get("/v1/evaluations")).json()
            assert len(evals) == 3
            out = await yurt(a.address, "eval", "list", "-per-page", "2")
            assert out.returncode == 0, out.stderr
            text = out.stdout.decode()
            newest = sorted(evals, key=lambda e: -e["CreateIndex"])
            assert first_column(text) == [e["ID"][:8] for e in newest[:2]]
            assert f"\n{FOOTER}\n" in text
            args = next_command(text)
            assert args[:4] == ["eval", "list", "-per-page", "2"]
            assert args[-2] == "-page-token"
            out = await yurt(a.address, *args)
            assert out.returncode == 0, out.stderr
            assert first_column(out.stdout.decode()) == [newest[2]["ID"][:8]]
            assert FOOTER not in out.stdout.decode()
            out = await yurt(a.address, "eval", "list", "-filter", "JobID == jb", "-json")
            assert [e["JobID"] for e in json.loads(out.stdout)] == ["jb"]
            out = await yurt(a.address, "eval", "list", "-filter", "JobID ==")
            assert out.returncode == 2
            assert b"failed to read filter expression" in out.stderr

            out = await yurt(a.address, "deployment", "list", "-filter", 'JobID != "jb"',
                             "-json")
            assert out.returncode == 0, out.stderr
            assert sorted(d["JobID"] for d in json.loads(out.stdout)) == ["ja", "jc"]
            out = await yurt(a.address, "deployment", "list", "-filter", "Nope == 1")
            assert out.returncode == 2
            assert b"failed to read result page" in out.stderr


async def test_node_pool_and_node_lists_filter_and_page(tmp_path: Path) -> None:
    with trio.fail_after(90):
        async with running_agent(tmp_path) as a:
            for name in ("p1", "p2"):
                made = await a.client.put("/v1/node/pools", json={"Name": name})
                assert made.status_code == 200, made.text
            for job_id in ("ja", "jb"):
                answer = await a.client.post("/v1/jobs", json=mock_job(job_id))
                assert answer.status_code == 200, answer.text
            pools = [p["Name"] for p in (await a.client.get("/v1/node/pools")).json()]
            out = await yurt(a.address, "node", "pool", "list", "-per-page", "1")
            assert out.returncode == 0, out.stderr
            text = out.stdout.decode()
            assert first_column(text) == pools[:1]
            seen = first_column(text)
            for _ in range(len(pools)):
                if FOOTER not in text:
                    break
                out = await yurt(a.address, *next_command(text))
                assert out.returncode == 0, out.stderr
                text = out.stdout.decode()
                seen += first_column(text)
            assert seen == pools
            out = await yurt(a.address, "node", "pool", "list", "-filter", 'Name matches "^p"')
            assert first_column(out.stdout.decode()) == ["p1", "p2"]

            out = await yurt(a.address, "node", "pool", "jobs", "default", "-per-page", "1")
            assert out.returncode == 0, out.stderr
            text = out.stdout.decode()
            assert first_column(text) == ["ja"]
            assert next_command(text)[-1] == "default.jb"
            out = await yurt(a.address, *next_command(text))  # the flag after the pool
            assert out.returncode == 0, out.stderr
            assert first_column(out.stdout.decode()) == ["jb"]
            out = await yurt(a.address, "node", "pool", "jobs", "-filter", "ID == jb",
                             "default")
            assert first_column(out.stdout.decode()) == ["jb"]

            node_id = a.agent.node.id
            out = await yurt(a.address, "node", "pool", "nodes", "-filter",
                             "Attributes is not empty", "-per-page", "1", "default")
            assert out.returncode == 0, out.stderr
            assert first_column(out.stdout.decode()) == [node_id[:8]]
            out = await yurt(a.address, "node", "pool", "nodes", "-filter", "Status == down",
                             "default")
            assert out.stdout.decode().strip() == "No nodes"

            out = await yurt(a.address, "node", "status", "-filter", "Status == ready",
                             "-per-page", "1")
            assert out.returncode == 0, out.stderr
            assert first_column(out.stdout.decode()) == [node_id[:8]]
            assert FOOTER not in out.stdout.decode()  # one node: one page
            out = await yurt(a.address, "node", "status", "-page-token", "ffff")
            assert out.stdout.decode().strip() == "No nodes registered"


async def test_var_list_pages_on_stderr_and_wraps_its_json(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            for path in ("app/a", "app/b", "db/x"):
                answer = await a.client.put(f"/v1/var/{path}", json={"Items": {"k": "v"}})
                assert answer.status_code == 200, answer.text
            out = await yurt(a.address, "var", "list", "-per-page", "1")
            assert out.returncode == 0, out.stderr
            assert first_column(out.stdout.decode()) == ["default"]
            assert "app/a" in out.stdout.decode()
            assert out.stderr.decode() == "Next page token: default.app/b\n"
            out = await yurt(a.address, "var", "list", "-per-page", "1", "-page-token",
                             "default.app/b", "-json")
            wrapped: dict[str, Any] = json.loads(out.stdout)
            assert [v["Path"] for v in wrapped["Data"]] == ["app/b"]
            assert wrapped["QueryMeta"]["NextToken"] == "default.db/x"
            out = await yurt(a.address, "var", "list", "-filter", 'Path matches "^app"', "-json")
            assert [v["Path"] for v in json.loads(out.stdout)] == ["app/a", "app/b"]
            assert b"Filter queries require a full scan of the data" in out.stderr


async def test_service_info_filters_and_pages(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            job = raw_job("web", "sleep 1000")
            group = job["Job"]["TaskGroups"][0]
            group["Count"] = 2
            group["Services"] = [{"Name": "web-api", "PortLabel": "8080", "Tags": ["v1"]}]
            answer = await a.client.post("/v1/jobs", json=job)
            assert answer.status_code == 200, answer.text
            await wait_status(a.client, "web", "running")
            regs: list[dict[str, Any]] = []
            while len(regs) < 2:  # bounded by fail_after: registration follows the start
                regs = (await a.client.get("/v1/service/web-api")).json()
                await trio.sleep(0.05)
            out = await yurt(a.address, "service", "info", "-per-page", "1", "web-api")
            assert out.returncode == 0, out.stderr
            text = out.stdout.decode()
            assert len(text.split(FOOTER)[0].strip().splitlines()) == 2  # heading, one row
            args = next_command(text)
            token = f"default.{regs[1]['ID']}"
            assert args[-2:] == [f"-page-token={token}", "web-api"]
            out = await yurt(a.address, *args)
            assert out.returncode == 0, out.stderr
            assert regs[1]["AllocID"][:8] in out.stdout.decode()
            assert FOOTER not in out.stdout.decode()
            out = await yurt(a.address, "service", "info", "-filter",
                             f'AllocID == "{regs[0]["AllocID"]}"', "-json", "web-api")
            assert [r["ID"] for r in json.loads(out.stdout)] == [regs[0]["ID"]]
