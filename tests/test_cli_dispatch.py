"""`yurt job dispatch` and `yurt job periodic force` against a real agent on a real socket
(the CLI runs in a worker thread: its HTTP client is blocking, the agent is on this loop)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
from click.testing import CliRunner, Result

from tests.agent_support import raw_job, running_agent
from yurt.runtime.cli import cli

pytestmark = pytest.mark.slow


async def yurt(address: str, *args: str, stdin: bytes | None = None) -> Result:
    runner = CliRunner()
    return await trio.to_thread.run_sync(
        lambda: runner.invoke(cli, list(args), input=stdin, env={"YURT_ADDR": address}))


def template(job_id: str, **extra: Any) -> dict[str, Any]:
    body = raw_job(job_id, "true", job_type="batch")
    body["Job"].update(extra)
    return body


async def test_dispatch_and_periodic_force_verbs(tmp_path: Path) -> None:
    with trio.fail_after(40):
        async with running_agent(tmp_path) as a:
            await a.client.put("/v1/jobs", json=template(
                "p", ParameterizedJob={"MetaRequired": ["who"], "Payload": "optional"}))
            await a.client.put("/v1/jobs", json=template("cron", Periodic={"Spec": "@yearly"}))
            payload = tmp_path / "payload.txt"
            payload.write_bytes(b"from a file")

            r = await yurt(a.address, "job", "dispatch", "-meta", "who=me", "p", str(payload))
            assert r.exit_code == 0, r.output
            child_id = r.output.splitlines()[0].removeprefix("Dispatched Job ID = ")
            assert child_id.startswith("p/dispatch-")
            assert a.agent.server.jobs[child_id].payload == b"from a file"
            assert a.agent.server.jobs[child_id].meta == {"who": "me"}

            r = await yurt(a.address, "job", "dispatch", "-meta", "who=stdin", "--json", "p",
                           "-", stdin=b"from stdin")
            assert r.exit_code == 0, r.output
            out = json.loads(r.output)
            assert a.agent.server.jobs[out["DispatchedJobID"]].payload == b"from stdin"

            once = ("job", "dispatch", "-meta", "who=x", "-idempotency-token", "t1", "-priority",
                    "70", "--json", "p")
            first = json.loads((await yurt(a.address, *once)).output)
            again = json.loads((await yurt(a.address, *once)).output)
            assert first["DispatchedJobID"] == again["DispatchedJobID"]
            assert a.agent.server.jobs[first["DispatchedJobID"]].priority == 70

            # Nomad's periodic force: the launch's evaluation monitored.
            r = await yurt(a.address, "job", "periodic", "force", "cron")
            assert r.exit_code == 0, r.output
            assert 'Monitoring evaluation "' in r.output, r.output
            assert 'finished with status "complete"' in r.output
            (forced,) = [j.id for j in a.agent.server.jobs.values() if j.parent_id == "cron"]
            assert forced.startswith("cron/periodic-")
            # Another job: a second launch within the same second would be the same child.
            await a.client.put("/v1/jobs", json=template("cron2", Periodic={"Spec": "@yearly"}))
            r = await yurt(a.address, "job", "periodic", "force", "-detach", "cron2")
            assert r.exit_code == 0, r.output
            done, ident = r.output.splitlines()
            assert done == "Force periodic successful"
            assert ident.startswith("Evaluation ID: ")
            assert len(ident) == len(
                "Evaluation ID: ") + 36


async def test_dispatch_monitors_waits_and_names_with_a_prefix(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            await a.client.put("/v1/jobs", json=template(
                "p", ParameterizedJob={"Payload": "optional"}))
            # -detach: the two lines only; the evaluation ID shortened unless -verbose.
            r = await yurt(a.address, "job", "dispatch", "-detach", "p")
            assert r.exit_code == 0, r.output
            child, ev = r.output.splitlines()
            assert child.startswith("Dispatched Job ID = p/dispatch-")
            assert ev.startswith("Evaluation ID     = ")
            assert len(ev.split()[-1]) == 8
            # Monitored, -verbose: full IDs; -wait: until the child is dead, its summary.
            r = await yurt(a.address, "job", "dispatch", "-id-prefix-template", "nightly",
                           "-verbose", "-wait", "p")
            assert r.exit_code == 0, r.output
            lines = r.output.splitlines()
            assert lines[0].startswith("Dispatched Job ID = p/dispatch-nightly-"), lines
            assert len(lines[1].split()[-1]) == 36
            assert 'Monitoring evaluation "' in r.output
            assert "Monitoring allocations for job" in r.output
            deployed = r.output[r.output.rindex("Deployed"):].splitlines()
            assert deployed[1].split() == ["Task", "Group", "Queued", "Complete", "Failed",
                                           "Running", "Starting", "Lost", "Unknown"]
            assert deployed[2].split()[:4] == ["g", "0", "1", "0"]
            assert "Allocations" in r.output  # -verbose's section
            child_id = lines[0].split()[-1]
            assert a.agent.server.jobs[child_id].status == "dead"
            # A child whose task fails: -wait exits 2, as Nomad's.
            await a.client.put("/v1/jobs", json=template(
                "bad", ParameterizedJob={"Payload": "optional"}))
            failing = raw_job("bad", "exit 3", job_type="batch")["Job"]
            failing["ParameterizedJob"] = {"Payload": "optional"}
            failing["TaskGroups"][0]["ReschedulePolicy"] = {"Attempts": 0, "Unlimited": False}
            await a.client.put("/v1/jobs", json={"Job": failing})
            r = await yurt(a.address, "job", "dispatch", "-wait", "bad")
            assert r.exit_code == 2, r.output


async def test_dispatch_verbs_exit_codes(tmp_path: Path) -> None:
    with trio.fail_after(40):
        async with running_agent(tmp_path) as a:
            await a.client.put("/v1/jobs", json=template(
                "p", ParameterizedJob={"MetaRequired": ["who"]}))
            refused = await yurt(a.address, "job", "dispatch", "p")
            assert refused.exit_code == 2
            assert "Dispatch did not provide required meta keys: [who]" in refused.output
            unknown = await yurt(a.address, "job", "dispatch", "nope")
            assert unknown.exit_code == 1
            assert 'No parameterized job(s) with prefix or ID "nope" found' in unknown.output
            bad_meta = await yurt(a.address, "job", "dispatch", "-meta", "novalue", "p")
            assert bad_meta.exit_code == 2
            missing_file = await yurt(a.address, "job", "dispatch", "-meta", "who=x", "p",
                                      str(tmp_path / "absent"))
            assert missing_file.exit_code == 2
            assert "error reading payload file" in missing_file.output
            not_periodic = await yurt(a.address, "job", "periodic", "force", "p")
            assert not_periodic.exit_code == 2
            assert "can't force launch non-periodic job" in not_periodic.output
            assert (await yurt(a.address, "job", "periodic", "force", "nope")).exit_code == 1


async def test_job_run_of_a_template_registers_and_returns(tmp_path: Path) -> None:
    """`yurt job run` of a periodic or parameterized job: registered, and said so at once (its
    children run, not it), as Nomad's `job run` does; never a wait for allocations."""
    periodic = tmp_path / "nightly.nomad.hcl"
    periodic.write_text('job "nightly" {\n  type = "batch"\n  periodic {\n'
                        '    crons = ["0 3 * * *"]\n    time_zone = "Europe/Paris"\n  }\n'
                        '  group "g" {\n    task "t" {\n      driver = "raw_exec"\n'
                        '      config { command = "true" }\n    }\n  }\n}\n')
    template_file = tmp_path / "render.nomad.hcl"
    template_file.write_text(periodic.read_text().replace("nightly", "render").replace(
        'periodic {\n    crons = ["0 3 * * *"]\n    time_zone = "Europe/Paris"\n  }',
        "parameterized {}"))
    with trio.fail_after(20):
        async with running_agent(tmp_path / "data") as a:
            ran = await yurt(a.address, "job", "run", str(periodic))
            assert ran.exit_code == 0, ran.output
            assert "Job registration successful" in ran.output
            assert '"0 3 * * *" (Europe/Paris)' in ran.output
            ran = await yurt(a.address, "job", "run", str(template_file))
            assert ran.exit_code == 0, ran.output
            assert "yurt job dispatch render" in ran.output
            assert a.agent.server.job_allocs("nightly") == a.agent.server.job_allocs(
                "render") == []
