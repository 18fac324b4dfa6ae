"""The job verbs' flags as Nomad's (command/job_stop.go, job_eval.go, job_revert.go,
job_scale.go, job_history.go, job_inspect.go, deployment_status.go, eval_status.go), run as a
user runs them (real `yurt` processes) against an agent on a real socket (layer 2); and the
scheduler's paused eval broker (`PauseEvalBroker`) as `yurt operator scheduler set-config`
sets it."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.agent_support import Running, mock_job, raw_job, running_agent, wait_status
from tests.cli_proc_support import YURT

pytestmark = pytest.mark.slow

EVAL_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


async def yurt(a: Running | None, *args: str, stdin: bytes = b"",
               cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "YURT_ADDR": a.address if a else "http://127.0.0.1:1"}
    done = await trio.run_process([YURT, *args], capture_stdout=True, capture_stderr=True,
                                  check=False, env=env, stdin=stdin, cwd=cwd)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(),
                                       done.stderr.decode())


async def get(a: Running, path: str) -> Any:
    r = await a.client.get(path)
    assert r.status_code == 200, (path, r.text)
    return r.json()


async def test_job_stop_flags(tmp_path: Path) -> None:
    with trio.fail_after(90):
        async with running_agent(tmp_path) as a:
            slow = mock_job("web")
            slow["Job"]["TaskGroups"][0]["ShutdownDelay"] = 30_000_000_000  # 30 s
            assert (await a.client.post("/v1/jobs", json=slow)).status_code == 200
            alloc = await wait_status(a.client, "web", "running")
            # -detach prints the evaluation's ID alone; -eval-priority is its priority;
            # -no-shutdown-delay kills at once despite the group's 30 s.
            began = trio.current_time()
            out = await yurt(a, "job", "stop", "-detach", "-eval-priority", "90",
                             "-no-shutdown-delay", "web")
            assert out.returncode == 0, out
            (eval_id,) = out.stdout.split()
            assert EVAL_ID.fullmatch(eval_id), out.stdout
            assert (await get(a, f"/v1/evaluation/{eval_id}"))["Priority"] == 90
            marked = await get(a, f"/v1/allocation/{alloc['ID']}")
            assert marked["DesiredTransition"]["NoShutdownDelay"] is True
            await wait_status(a.client, "web", "complete")
            assert trio.current_time() - began < 20  # the delay was skipped
            bad = await a.client.delete("/v1/job/web", params={"eval_priority": "101"})
            assert (bad.status_code, bad.text) == (
                400, "Eval priority must be between 1 and 100 inclusively")

            # A prefix asks first (Nomad's answers and exit codes); -yes does not ask.
            assert (await a.client.post("/v1/jobs", json=mock_job("worker"))).status_code == 200
            for answer, code, said in ((b"n\n", 0, "Cancelling job stop"),
                                       (b"yes\n", 0, "an exact ‘y’ is required"),
                                       (b"x\n", 1, "No confirmation detected")):
                out = await yurt(a, "job", "stop", "work", stdin=answer)
                assert out.returncode == code, out
                assert out.stdout.startswith(
                    'Are you sure you want to stop job "worker"? [y/N] '), out.stdout
                assert said in out.stdout
                assert (await get(a, "/v1/job/worker"))["Stop"] is False
            out = await yurt(a, "job", "stop", "-verbose", "work", stdin=b"y\n")
            assert out.returncode == 0, out
            head = out.stdout.splitlines()[0]
            assert head.startswith('Are you sure you want to stop job "worker"? [y/N] ==> ')
            assert re.search(r'Monitoring evaluation "[0-9a-f-]{36}"', head), head
            assert 'finished with status "complete"' in out.stdout
            assert (await get(a, "/v1/job/worker"))["Stop"] is True
            # -global: one region here, nothing more to stop; several jobs at once.
            assert (await a.client.post("/v1/jobs", json=mock_job("api"))).status_code == 200
            out = await yurt(a, "job", "stop", "-global", "-yes", "api", "worker")
            assert out.returncode == 0, out
            assert out.stdout.count("Monitoring evaluation") == 2
            assert (await yurt(a, "job", "stop", "-yes", "nope")).returncode == 1


async def test_job_eval_revert_scale_flags(tmp_path: Path) -> None:
    with trio.fail_after(90):
        async with running_agent(tmp_path) as a:
            # A failed batch allocation whose policy replaces it only in an hour.
            failing = raw_job("b", "exit 3", job_type="batch")
            failing["Job"]["TaskGroups"][0]["ReschedulePolicy"] = {
                "Attempts": 1, "Interval": 3_600_000_000_000, "Delay": 3_600_000_000_000,
                "DelayFunction": "constant", "Unlimited": False}
            assert (await a.client.post("/v1/jobs", json=failing)).status_code == 200
            first = await wait_status(a.client, "b", "failed")
            # The API shows the client's status at once; the server learns of the failure
            # from the client's next update (client/allocsync.py), as a Nomad server does.
            # Until it has, there is nothing failed to force: evaluate again.
            while True:
                out = await yurt(a, "job", "eval", "-force-reschedule", "-verbose", "b")
                assert out.returncode == 0, out
                assert re.search(r'Monitoring evaluation "[0-9a-f-]{36}"', out.stdout), out.stdout
                assert 'finished with status "complete"' in out.stdout
                forced = await get(a, f"/v1/allocation/{first['ID']}")
                if forced["DesiredTransition"]["ForceReschedule"]:
                    break
            assert forced["NextAllocation"]  # replaced now, not in an hour
            out = await yurt(a, "job", "eval", "-detach", "b")
            assert out.returncode == 0, out
            assert re.fullmatch(r'Created eval ID: "[0-9a-f]{8}" \n', out.stdout), out.stdout

            assert (await a.client.post("/v1/jobs", json=mock_job("web"))).status_code == 200
            v1 = mock_job("web")
            v1["Job"]["Meta"] = {"v": "1"}
            assert (await a.client.post("/v1/jobs", json=v1)).status_code == 200
            out = await yurt(a, "job", "revert", "-detach", "web", "0")
            assert out.returncode == 0, out
            assert re.fullmatch(r"Evaluation ID: [0-9a-f-]{36}\n", out.stdout), out.stdout
            out = await yurt(a, "job", "revert", "-verbose", "web", "1")
            assert out.returncode == 0, out
            assert re.search(r'Monitoring evaluation "[0-9a-f-]{36}"', out.stdout), out.stdout

            index = (await get(a, "/v1/job/web"))["JobModifyIndex"]
            stale = await yurt(a, "job", "scale", "-check-index", str(index - 1), "web", "2")
            assert stale.returncode == 2, stale
            assert (f"Enforcing job modify index {index - 1}: job exists with conflicting "
                    f"job modify index: {index}") in stale.stderr
            out = await yurt(a, "job", "scale", "-check-index", str(index), "-detach", "web",
                             "2")
            assert out.returncode == 0, out
            done, ident = out.stdout.splitlines()
            assert done == "Job scale successful"
            assert re.fullmatch(r"Evaluation ID: [0-9a-f-]{36}", ident)
            out = await yurt(a, "job", "scale", "web", "g", "3")
            assert out.returncode == 0, out
            assert 'Allocation "' in out.stdout
            assert 'finished with status "complete"' in \
                out.stdout
            assert (await get(a, "/v1/job/web"))["TaskGroups"][0]["Count"] == 3
            out = await yurt(a, "job", "scale", "web", "nope", "1")
            assert (out.returncode, out.stderr) == (1, "yurt: Group nope not found within "
                                                       "job\n")


async def test_job_history_and_inspect_flags(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            for priority in (50, 60, 70):
                job = mock_job("web")
                job["Job"]["Priority"] = priority
                assert (await a.client.post("/v1/jobs", json=job)).status_code == 200
            out = await yurt(a, "job", "history", "-p", "-diff-version", "0", "web")
            assert out.returncode == 0, out
            blocks = out.stdout.strip().split("\n\n")
            assert [b.splitlines()[0] for b in blocks] == [
                "Version     = 2", "Version     = 1", "Version     = 0"]
            assert 'Priority: "50" => "70"' in blocks[0]  # against version 0, not 1
            assert 'Priority: "50" => "60"' in blocks[1]
            assert "Diff" not in blocks[2]  # version 0 against itself: nothing
            missing = await yurt(a, "job", "history", "-p", "-diff-tag", "golden", "web")
            assert missing.returncode == 2
            assert 'tag "golden" not found' in missing.stderr
            for args, said in ((("-diff-tag", "x"), "can only be used with -p"),
                               (("-full", "-json"), "-json and -t are exclusive"),
                               (("-p", "-diff-tag", "x", "-diff-version", "1"),
                                "mutually exclusive")):
                out = await yurt(a, "job", "history", *args, "web")
                assert out.returncode == 2, out
                assert said in out.stderr
            full = await yurt(a, "job", "history", "-full", "-version", "1", "web")
            assert full.returncode == 0, full
            text = full.stdout
            assert "Full        = JSON Job:\n" in text
            shown = json.loads(text[text.index("{"):].strip())
            assert (shown["Version"], shown["Priority"]) == (1, 60)

            plain = json.loads((await yurt(a, "job", "inspect", "-json", "web")).stdout)
            assert (plain["ID"], plain["Version"]) == ("web", 2)  # the job, not {"Job": ...}
            listed = json.loads((await yurt(a, "job", "inspect", "-json")).stdout)
            assert [j["ID"] for j in listed] == ["web"]
            both = await yurt(a, "job", "inspect", "-json", "-hcl", "web")
            assert (both.returncode, both.stderr) == (2, "yurt: can only use one of -hcl or "
                                                         "-json\n")


async def test_job_validate_json_and_hcl2_strict(tmp_path: Path) -> None:
    with trio.fail_after(30):
        doc = tmp_path / "web.json"
        doc.write_text(json.dumps(mock_job("web")))
        out = await yurt(None, "job", "validate", "-json", str(doc))
        assert out.returncode == 0, out
        assert 'job "web"' in out.stdout
        hcl = tmp_path / "web.nomad"
        hcl.write_text('job "web" {\n  group "g" {\n    task "t" {\n      driver = "mock_driver"'
                       '\n    }\n  }\n}\n')
        strict = await yurt(None, "job", "validate", "-var", "x=1", str(hcl))
        assert strict.returncode == 2, strict
        loose = await yurt(None, "job", "validate", "-hcl2-strict=false", "-var", "x=1",
                           str(hcl))
        assert loose.returncode == 0, loose


async def test_deployment_status_monitor_follows_it_to_the_end(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            job = mock_job("web", 2)
            job["Job"]["TaskGroups"][0]["Update"] = {"MaxParallel": 2, "HealthCheck": "manual"}
            assert (await a.client.post("/v1/jobs", json=job)).status_code == 200
            (d,) = await get(a, "/v1/deployments")
            refused = await yurt(a, "deployment", "status", "-monitor", "-json", d["ID"])
            assert refused.returncode == 2
            assert "The monitor flag cannot be used with the '-json' or '-t' flags" in \
                refused.stderr
            assert (await yurt(a, "deployment", "status", "-monitor", "-wait", "soon",
                               d["ID"])).returncode == 2
            result: list[subprocess.CompletedProcess[str]] = []

            async def follow() -> None:
                result.append(await yurt(a, "deployment", "status", "-monitor", "-wait",
                                         "1s", "-verbose", d["ID"][:8]))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(follow)
                await trio.sleep(1)  # the monitor has printed the running deployment
                allocs = await get(a, f"/v1/deployment/allocations/{d['ID']}")
                r = await a.client.post(f"/v1/deployment/allocation-health/{d['ID']}", json={
                    "DeploymentID": d["ID"],
                    "HealthyAllocationIDs": [x["ID"] for x in allocs]})
                assert r.status_code == 200, r.text
            (out,) = result
            assert out.returncode == 0, out
            assert re.match(r'\S+: Monitoring deployment "[0-9a-f-]{36}"\n', out.stdout)
            assert "Status      = running" in out.stdout
            assert "Status      = successful" in out.stdout
            assert "\nDeployed\n" in out.stdout
            assert "\nAllocations\n" in out.stdout


async def test_eval_status_and_list_flags(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            answer = (await a.client.post("/v1/jobs", json=mock_job("web"))).json()
            eval_id = answer["EvalID"]
            listed = await yurt(a, "eval", "list", "-verbose")
            header, row = listed.stdout.splitlines()
            assert header.split() == ["ID", "Priority", "Triggered", "By", "Job", "ID",
                                      "Namespace", "Node", "ID", "Status", "Placement",
                                      "Failures"]
            assert row.split()[:2] == [eval_id, "50"]
            short = await yurt(a, "eval", "list")
            assert short.stdout.splitlines()[1].split()[0] == eval_id[:8]
            out = await yurt(a, "eval", "status", "-monitor", eval_id[:8])
            assert out.returncode == 0, out
            assert f'Monitoring evaluation "{eval_id[:8]}"' in out.stdout
            assert 'finished with status "complete"' in out.stdout
            out = await yurt(a, "eval", "status", "-verbose", eval_id)
            assert out.returncode == 0, out
            keys = [line.split(" = ")[0].strip() for line in out.stdout.split("\n\n")[0]
                    .splitlines()]
            assert keys == ["ID", "Create Time", "Modify Time", "Status", "Status Description",
                            "Type", "TriggeredBy", "Job ID", "Namespace", "Priority",
                            "Placement Failures", "Previous Eval", "Next Eval",
                            "Blocked Eval"]
            assert re.search(r"Create Time\s+= \d{4}-\d\d-\d\dT", out.stdout)
            assert "\nPlaced Allocations\n" in out.stdout
            assert (await yurt(a, "eval", "status", "e")).returncode == 2
            assert (await yurt(a, "eval", "status", "ffffffff")).returncode == 1


async def test_a_paused_eval_broker_leaves_evaluations_pending(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            out = await yurt(a, "operator", "scheduler", "set-config", "-pause-eval-broker=true")
            assert (out.returncode, out.stderr) == (0, ""), out
            answer = (await a.client.post("/v1/jobs", json=mock_job("web"))).json()
            ev = await get(a, f"/v1/evaluation/{answer['EvalID']}")
            assert ev["Status"] == "pending"
            assert await get(a, "/v1/job/web/allocations") == []
            # A monitor waits on it; unpaused, the evaluation is processed and placed.
            result: list[subprocess.CompletedProcess[str]] = []

            async def follow() -> None:
                result.append(await yurt(a, "eval", "status", "-monitor", answer["EvalID"]))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(follow)
                await trio.sleep(0.5)
                assert not result  # still pending
                out = await yurt(a, "operator", "scheduler", "set-config",
                                 "-pause-eval-broker=false")
                assert out.returncode == 0, out
            (done,) = result
            assert done.returncode == 0, done
            assert 'Allocation "' in done.stdout
            assert 'finished with status "complete"' in done.stdout
            await wait_status(a.client, "web", "running")
