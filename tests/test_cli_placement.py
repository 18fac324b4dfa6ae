"""`yurt job run` / `yurt job status` and placement failures, through a real `yurt` process
against a real agent (layer 2), plus Nomad's metric wording at layer 0.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import trio

from tests.agent_support import running_agent
from tests.cli_proc_support import yurt
from yurt.runtime.cli.evalfmt import format_alloc_metrics, placement_failure_section


def job_file(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def raw_exec_job(
    job_id: str,
    *,
    job_type: str = "batch",
    command: str = "/bin/true",
    resources: str = "",
    group_extra: str = "",
) -> str:
    return f'''job "{job_id}" {{
  type = "{job_type}"
  group "g" {{
    {group_extra}
    task "t" {{
      driver = "raw_exec"
      config {{ command = "{command}" }}
      {resources}
    }}
  }}
}}
'''


HUGE = "resources { memory = 100000000 }"
WINDOWS = 'constraint {\n  attribute = "${attr.kernel.name}"\n  value = "windows"\n}'


# ------------------------------------------------------------------------- layer 0


def test_metrics_in_nomads_words() -> None:
    metric = {
        "NodesEvaluated": 0,
        "NodesAvailable": {"dc1": 0, "dc2": 1},
        "ClassFiltered": {"gpu": 2},
        "ConstraintFiltered": {"${attr.os} = x": 1},
        "NodesExhausted": 3,
        "ClassExhausted": {"big": 1},
        "DimensionExhausted": {"memory": 3, "cpu": 1},
        "QuotaExhausted": ["q1"],
    }
    assert format_alloc_metrics(metric, "  ") == [
        "  * No nodes were eligible for evaluation",
        '  * No nodes are available in datacenter "dc1"',
        '  * Class "gpu": 2 nodes excluded by filter',
        '  * Constraint "${attr.os} = x": 1 nodes excluded by filter',
        "  * Resources exhausted on 3 nodes",
        '  * Class "big" exhausted on 1 nodes',
        '  * Dimension "cpu" exhausted on 1 nodes',
        '  * Dimension "memory" exhausted on 3 nodes',
        '  * Quota limit hit "q1"',
    ]


def test_status_section_only_while_an_evaluation_is_blocked() -> None:
    failed = {
        "ID": "e1",
        "Status": "complete",
        "CreateIndex": 5,
        "FailedTGAllocs": {"g": {"NodesEvaluated": 1, "NodesExhausted": 1}},
    }
    older = {
        **failed,
        "ID": "e0",
        "CreateIndex": 2,
        "FailedTGAllocs": {"old": {"NodesEvaluated": 1}},
    }
    blocked = {"ID": "e2", "Status": "blocked", "CreateIndex": 6}
    section = placement_failure_section([older, failed, blocked])
    assert section.splitlines() == [
        "Placement Failure",
        'Task Group "g":',
        "  * Resources exhausted on 1 nodes",
    ]
    assert placement_failure_section([failed]) == ""  # nothing waits: nothing to explain


# ------------------------------------------------------------------------- layer 2


async def test_unplaceable_job_explains_why_and_exits_2_at_once(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path / "data") as a:
            started = time.monotonic()
            out = await yurt(
                a.address,
                "job",
                "run",
                job_file(tmp_path, "huge.hcl", raw_exec_job("huge", resources=HUGE)),
            )
            took = time.monotonic() - started
            assert out.returncode == 2, (out.stdout, out.stderr)
            err = out.stdout.decode()  # on stdout, as Nomad's monitor prints it
            assert re.search(
                r'==> \S+: Evaluation "[0-9a-f]{8}" finished with status "complete" '
                "but failed to place all allocations:",
                err,
            ), err
            assert re.search(r'    \S+: Task Group "g" \(failed to place 1 allocation\):', err)
            assert "      * Resources exhausted on 1 nodes" in err
            assert '      * Dimension "memory" exhausted on 1 nodes' in err
            assert re.search(r'Evaluation "[0-9a-f]{8}" waiting for additional capacity', err)
            assert took < 20  # no wait for allocations that cannot come
            constrained = await yurt(
                a.address,
                "job",
                "run",
                job_file(tmp_path, "win.hcl", raw_exec_job("win", group_extra=WINDOWS)),
            )
            assert constrained.returncode == 2
            assert (
                '* Constraint "${attr.kernel.name} = windows": 1 nodes excluded by filter'
                in constrained.stdout.decode()
            )


async def test_job_status_shows_the_placement_failure(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path / "data") as a:
            path = job_file(tmp_path, "huge.hcl", raw_exec_job("huge", resources=HUGE))
            assert (await yurt(a.address, "job", "run", path)).returncode == 2
            status = await yurt(a.address, "job", "status", "huge")
            assert status.returncode == 0, status.stderr
            text = status.stdout.decode()
            assert "Status        = pending" in text
            assert (
                'Placement Failure\nTask Group "g":\n  * Resources exhausted on 1 nodes\n'
                '  * Dimension "memory" exhausted on 1 nodes\n'
            ) in text
            # Stopped, nothing waits for capacity any more: nothing to explain.
            assert (await yurt(a.address, "job", "stop", "huge")).returncode == 0
            stopped = (await yurt(a.address, "job", "status", "huge")).stdout.decode()
            assert "Placement Failure" not in stopped
            assert "Status        = dead (stopped)" in stopped  # Nomad's getStatusString
            listed = (await yurt(a.address, "job", "status")).stdout.decode()
            assert "dead (stopped)" in listed
            # Nomad's `job stop -purge`: the job is gone from the server.
            purged = await yurt(a.address, "job", "stop", "-purge", "huge")
            assert purged.returncode == 0, purged.stderr
            assert b'==> ' in purged.stdout
            assert b'Monitoring evaluation "' in purged.stdout
            assert (await a.client.get("/v1/job/huge")).status_code == 404


async def test_detach_prints_the_evaluation_id(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path / "data") as a:
            out = await yurt(
                a.address,
                "job",
                "run",
                "--detach",
                job_file(tmp_path, "ok.hcl", raw_exec_job("ok")),
            )
            assert out.returncode == 0, out.stderr
            lines = out.stdout.decode().splitlines()
            assert lines[0] == "Job registration successful"
            eval_id = lines[1].removeprefix("Evaluation ID: ")
            evals = (await a.client.get("/v1/job/ok/evaluations")).json()
            assert [e["ID"] for e in evals if e["TriggeredBy"] == "job-register"] == [eval_id]
            # As Nomad's -detach: registered is success, whatever the evaluation finds.
            huge = await yurt(
                a.address,
                "job",
                "run",
                "--detach",
                job_file(tmp_path, "huge.hcl", raw_exec_job("huge", resources=HUGE)),
            )
            assert huge.returncode == 0, huge.stderr
            assert huge.stdout.decode().startswith("Job registration successful\nEvaluation ID: ")
            assert b"failed to place" not in huge.stdout + huge.stderr


async def test_batch_jobs_with_every_allocation_terminal_are_dead(tmp_path: Path) -> None:
    with trio.fail_after(40):
        async with running_agent(tmp_path / "data") as a:
            done = await yurt(
                a.address, "job", "run", job_file(tmp_path, "ok.hcl", raw_exec_job("ok"))
            )
            assert done.returncode == 0, done.stderr
            no_retry = "restart { attempts = 0 }\n    reschedule { attempts = 0 }"
            failed = await yurt(
                a.address,
                "job",
                "run",
                job_file(
                    tmp_path,
                    "bad.hcl",
                    raw_exec_job("bad", command="/bin/false", group_extra=no_retry),
                ),
            )
            # Nomad's `job run`: placed is success, whatever the task does later.
            assert failed.returncode == 0, failed.stderr
            for job_id in ("ok", "bad"):  # until the job has ended (bounded by fail_after)
                while (await a.client.get(f"/v1/job/{job_id}")).json()[  # noqa: ASYNC110
                        "Status"] != "dead":
                    await trio.sleep(0.05)
                shown = (await yurt(a.address, "job", "status", job_id)).stdout.decode()
                assert "Status        = dead" in shown, shown
            listed = (await yurt(a.address, "job", "status", "--json")).stdout.decode()

            assert {j["ID"]: j["Status"] for j in json.loads(listed)} == {
                "ok": "dead",
                "bad": "dead",
            }
