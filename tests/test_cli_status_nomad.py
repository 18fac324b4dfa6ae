"""Nomad's status outputs: `job status`, `status [ID]`, `node status`, `alloc logs -job -task`.

Against an agent on a real socket with a real `yurt` process (layer 2): the section headings,
column names and exit codes of Nomad's command/job_status.go, status.go, node_status.go and
alloc_logs.go. The agent runs in this process, with an ID generator whose IDs all start with
"ab" (as tests/test_cli_prefix.py does), so a prefix shared by an allocation and an
evaluation is certain. Then the pure formatters (runtime/cli/statusfmt.py, job_status.py,
node_status.py, status.py, logs.py), fed API JSON with "now" fixed.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.agent_support import Running, mock_job, raw_job, running_agent
from tests.cli_proc_support import YURT
from yurt.runtime.cli.job_status import job_detail_text, job_list_text
from yurt.runtime.cli.logs import LogsError, check_task, pick_job_alloc
from yurt.runtime.cli.node_status import node_detail_text, node_list_text
from yurt.runtime.cli.status import Ambiguous, resolve_context
from yurt.runtime.cli.statusfmt import ibytes, pretty_time_diff

NOW = 1_800_000_000 * 10**9
S = 10**9


async def yurt(a: Running, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "YURT_ADDR": a.address}
    done = await trio.run_process([YURT, *args], capture_stdout=True, capture_stderr=True,
                                  check=False, env=env)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(),
                                       done.stderr.decode())


@pytest.fixture
def shared_prefix_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    counter = itertools.count(1)
    monkeypatch.setattr("yurt.runtime.server.local.new_id",
                        lambda: (lambda n: f"ab{n:06x}-0000-4000-8000-{n:012x}")(next(counter)))


async def running_allocs(a: Running, job_id: str, n: int) -> list[dict[str, Any]]:
    while True:  # bounded by the test's fail_after
        allocs = (await a.client.get(f"/v1/job/{job_id}/allocations")).json()
        if len(allocs) == n and all(x["ClientStatus"] == "running" for x in allocs):
            return allocs  # type: ignore[no-any-return]
        await trio.sleep(0.05)


def headings(text: str) -> list[str]:
    """The lines that open a section: after a blank line, not `key = value`."""
    lines = text.splitlines()
    return [line for prev, line in itertools.pairwise(lines)
            if not prev and line and " = " not in line]


def keys(text: str) -> list[str]:
    """The keys of the `key = value` block that opens `text`."""
    out = []
    for line in text.splitlines():
        if " = " not in line:
            break
        out.append(line.split(" = ")[0].strip())
    return out


JOB_KEYS = ["ID", "Name", "Submit Date", "Type", "Priority", "Datacenters", "Namespace",
            "Node Pool", "Status", "Periodic", "Parameterized"]
ALLOC_COLUMNS = ["ID", "Node", "ID", "Task", "Group", "Version", "Desired", "Status", "Created",
                 "Modified"]


@pytest.mark.usefixtures("shared_prefix_ids")
async def test_job_status_and_status_by_id_as_nomad_prints_them(tmp_path: Path) -> None:
    with trio.fail_after(90):
        async with running_agent(tmp_path) as a:
            for job_id in ("web", "web-api"):
                assert (await a.client.post("/v1/jobs", json=mock_job(job_id, 2))).is_success
            allocs = await running_allocs(a, "web", 2)
            listing = await yurt(a, "job", "status")
            assert listing.returncode == 0, listing.stderr
            assert listing.stdout.splitlines()[0].split() == [
                "ID", "Type", "Priority", "Status", "Submit", "Date"]
            shown = await yurt(a, "job", "status", "web")
            assert shown.returncode == 0, shown.stderr
            assert keys(shown.stdout) == JOB_KEYS
            assert headings(shown.stdout) == ["Summary", "Allocations"]
            lines = shown.stdout.splitlines()
            i = lines.index("Summary")
            assert lines[i + 1].split() == ["Task", "Group", "Queued", "Starting", "Running",
                                            "Failed", "Complete", "Lost", "Unknown"]
            assert lines[i + 2].split() == ["g", "0", "0", "2", "0", "0", "0", "0"]
            i = lines.index("Allocations")
            assert lines[i + 1].split() == ALLOC_COLUMNS
            assert sorted(row.split()[0] for row in lines[i + 2:]) == sorted(
                x["ID"][:8] for x in allocs)
            short = await yurt(a, "job", "status", "-short", "web")
            assert (short.returncode, keys(short.stdout)) == (0, JOB_KEYS)
            assert len(short.stdout.splitlines()) == len(JOB_KEYS)
            verbose = await yurt(a, "job", "status", "-verbose", "web")
            assert headings(verbose.stdout) == ["Summary", "Evaluations", "Allocations"]
            assert allocs[0]["ID"] in verbose.stdout  # whole IDs
            evals = await yurt(a, "job", "status", "-evals", "-all-allocs", "web")
            assert headings(evals.stdout) == ["Summary", "Evaluations", "Allocations"]
            rolling = mock_job("rollout", 1)
            rolling["Job"]["TaskGroups"][0]["Update"] = {"MaxParallel": 1,
                                                         "HealthCheck": "manual"}
            assert (await a.client.post("/v1/jobs", json=rolling)).is_success
            deployed = await yurt(a, "job", "status", "rollout")
            assert headings(deployed.stdout) == ["Summary", "Latest Deployment", "Deployed",
                                                 "Allocations"], deployed.stdout
            out = deployed.stdout.splitlines()
            i = out.index("Latest Deployment")
            assert [line.split(" = ")[0].strip() for line in out[i + 1:i + 4]] == [
                "ID", "Status", "Description"]
            assert out[out.index("Deployed") + 1].split()[:4] == ["Task", "Group", "Desired",
                                                                   "Placed"]
            data = json.loads((await yurt(a, "job", "status", "-json", "web")).stdout)
            assert set(data) == {"Job", "Summary", "Allocations", "LatestDeployment",
                                 "Evaluations"}
            assert data["Summary"]["Summary"]["g"]["Running"] == 2

            # `yurt status`: the job list without an ID; with one, the object's own status.
            listing = await yurt(a, "job", "status")
            assert (await yurt(a, "status")).stdout == listing.stdout
            by_job = await yurt(a, "status", "web")
            assert (by_job.returncode, keys(by_job.stdout)) == (0, JOB_KEYS)
            by_alloc = await yurt(a, "status", allocs[0]["ID"])
            assert by_alloc.returncode == 0, by_alloc.stderr
            assert by_alloc.stdout.startswith(f"ID                  = {allocs[0]['ID']}\n")
            node_id = allocs[0]["NodeID"]
            by_node = await yurt(a, "status", "-verbose", node_id[:6])
            assert by_node.returncode == 0, by_node.stderr
            assert by_node.stdout.startswith(f"ID              = {node_id}\n")
            assert "\nAttributes\n" in by_node.stdout  # -verbose handed on
            by_eval = await yurt(a, "status", allocs[0]["EvalID"])
            assert by_eval.returncode == 0, by_eval.stderr
            # Nomad's eval status: the short ID unless -verbose.
            assert f"ID                 = {allocs[0]['EvalID'][:8]}\n" in by_eval.stdout
            # "ab": allocations and evaluations share it; "web": two jobs start with it, but
            # one is named exactly.
            both = await yurt(a, "status", "ab")
            assert both.returncode == 1
            said = both.stderr.splitlines()
            assert said[0] == 'yurt: Multiple matches found for id "ab"'
            assert "Allocs:" in said
            assert "Evals:" in said
            jobs = await yurt(a, "status", "web-")
            assert keys(jobs.stdout)[:1] == ["ID"]
            assert jobs.stdout.startswith("ID            = web-api\n")
            two_jobs = await yurt(a, "status", "we")
            assert two_jobs.returncode == 1
            assert "Jobs:\nweb, web-api" in two_jobs.stderr
            nothing = await yurt(a, "status", "zz-nothing")
            assert (nothing.returncode, nothing.stderr) == (
                1, 'yurt: Unable to resolve ID: "zz-nothing"\n')


async def test_node_status_lists_and_shows_a_node(tmp_path: Path) -> None:
    with trio.fail_after(90):
        async with running_agent(tmp_path) as a:
            assert (await a.client.post("/v1/jobs", json=mock_job("web", 1))).is_success
            (alloc,) = await running_allocs(a, "web", 1)
            node_id = alloc["NodeID"]
            listing = await yurt(a, "node", "status")
            assert listing.returncode == 0, listing.stderr
            lines = listing.stdout.splitlines()
            assert lines[0].split() == ["ID", "Node", "Pool", "DC", "Name", "Class", "Drain",
                                        "Eligibility", "Status"]
            assert lines[1].split()[0] == node_id[:8]
            counted = (await yurt(a, "node", "status", "-allocs")).stdout.splitlines()
            assert counted[0].endswith("Running Allocs")
            assert counted[1].split()[-1] == "1"
            assert (await yurt(a, "node", "status", "-quiet")).stdout == f"{node_id}\n"
            stubs = json.loads((await yurt(a, "node", "status", "-json")).stdout)
            assert [n["ID"] for n in stubs] == [node_id]
            detail = await yurt(a, "node", "status", "-self")
            assert detail.returncode == 0, detail.stderr
            assert keys(detail.stdout)[:10] == [
                "ID", "Name", "Node Pool", "Class", "DC", "Drain", "Eligibility", "Status",
                "CSI Controllers", "CSI Drivers"]
            assert "Driver Status" in keys(detail.stdout)
            assert headings(detail.stdout) == [
                "Node Events", "Allocated Resources", "Allocation Resource Utilization",
                "Host Resource Utilization", "Allocations"]
            out = detail.stdout.splitlines()
            assert out[out.index("Allocated Resources") + 1].split() == [
                "CPU", "Memory", "Disk", "Alloc", "Count"]
            assert out[out.index("Node Events") + 1].split() == ["Time", "Subsystem", "Message"]
            i = out.index("Allocations")
            assert out[i + 1].split() == ALLOC_COLUMNS
            assert out[i + 2].split()[0] == alloc["ID"][:8]
            by_prefix = await yurt(a, "node", "status", node_id[:4])
            assert keys(by_prefix.stdout) == keys(detail.stdout)
            verbose = await yurt(a, "node", "status", "-verbose", "-stats", node_id)
            assert verbose.returncode == 0, verbose.stderr
            assert headings(verbose.stdout) == [
                "Drivers", "Node Events", "Allocated Resources",
                "Allocation Resource Utilization", "Host Resource Utilization", "CPU Stats",
                "Memory Stats", "Disk Stats", "Allocations", "Attributes", "Meta"]
            short = await yurt(a, "node", "status", "-short", "-self")
            assert headings(short.stdout) == ["Allocations"]
            assert "Drivers" in keys(short.stdout)
            one = json.loads((await yurt(a, "node", "status", "-self", "-json")).stdout)
            assert one["ID"] == node_id
            assert "Attributes" in one
            missing = await yurt(a, "node", "status", "zz")
            assert missing.returncode == 1
            # After the agent's warning to its operator (ACLs off, raw_exec as root).
            assert missing.stderr.endswith('yurt: No node(s) with prefix "zz" found\n')
            assert (await yurt(a, "node", "status", "z")).returncode == 2
            assert (await yurt(a, "node", "status", "-self", node_id)).returncode == 2


async def test_alloc_logs_of_a_job_and_a_task_by_flag(tmp_path: Path) -> None:
    with trio.fail_after(90):
        async with running_agent(tmp_path) as a:
            job = raw_job("talk", "echo said-by-t; exec sleep 3600")
            assert (await a.client.post("/v1/jobs", json=job)).is_success
            (alloc,) = await running_allocs(a, "talk", 1)
            while True:  # until the task's line is in its log
                out = await yurt(a, "alloc", "logs", "-job", "talk")
                if out.stdout:
                    break
                await trio.sleep(0.05)
            assert (out.returncode, out.stdout) == (0, "said-by-t\n")
            flagged = await yurt(a, "alloc", "logs", "-task", "t", alloc["ID"][:8])
            assert (flagged.returncode, flagged.stdout) == (0, "said-by-t\n")
            # -task wins over the argument, as in Nomad.
            wins = await yurt(a, "alloc", "logs", "-task", "t", alloc["ID"], "nope")
            assert (wins.returncode, wins.stdout) == (0, "said-by-t\n")
            bad = await yurt(a, "alloc", "logs", "-job", "-task", "nope", "ta")
            assert bad.returncode == 1
            assert "Could not find task named: nope, found:\nt" in bad.stderr
            group = await yurt(a, "alloc", "logs", "-job", "-group", "zz", "talk")
            assert group.returncode == 1
            assert 'task group "zz" doesn\'t exist' in group.stderr
            nojob = await yurt(a, "alloc", "logs", "-job", "nosuch")
            assert nojob.returncode == 1
            assert 'No job(s) with prefix or ID "nosuch" found' in nojob.stderr
            assert (await yurt(a, "alloc", "logs", "-group", "g", alloc["ID"])).returncode == 2


# --------------------------------------------------------------------------- pure


def test_times_and_sizes_as_nomad_prints_them() -> None:
    assert pretty_time_diff(0, NOW) == ""
    assert pretty_time_diff(NOW, NOW) == "0s ago"
    assert pretty_time_diff(NOW - 65 * S, NOW) == "1m5s ago"
    assert pretty_time_diff(NOW - (3 * 3600 + 120 + 5) * S, NOW) == "3h2m ago"
    assert pretty_time_diff(NOW + 3600 * S, NOW) == "1h from now"
    assert pretty_time_diff(NOW - 400 * 86400 * S, NOW) == "1y1mo ago"
    assert [ibytes(n) for n in (9, 1536, 64 * 1024**2, 300 * 1024**2)] == [
        "9 B", "1.5 KiB", "64 MiB", "300 MiB"]


def service_job(**extra: Any) -> dict[str, Any]:
    return {"ID": "web", "Name": "web", "Type": "service", "Priority": 50,
            "Datacenters": ["dc1"], "Namespace": "default", "NodePool": "default",
            "Status": "running", "Stop": False, "SubmitTime": NOW - 60 * S,
            "TaskGroups": [{"Name": "g", "Tasks": [{"Name": "t", "Actions": [
                {"Name": "hello"}]}]}], **extra}


def test_job_status_sections_in_nomads_order() -> None:
    alloc = {"ID": "a" * 36, "EvalID": "e" * 36, "NodeID": "n" * 36, "NodeName": "vm",
             "TaskGroup": "g", "JobVersion": 1, "DesiredStatus": "run",
             "ClientStatus": "running", "CreateTime": NOW - 65 * S, "ModifyTime": NOW - 5 * S}
    blocked = {"ID": "b" * 36, "Priority": 50, "TriggeredBy": "queued-allocs",
               "Status": "blocked", "CreateIndex": 9,
               "FailedTGAllocs": {"g": {"NodesEvaluated": 1, "NodesExhausted": 1}}}
    deployment = {"ID": "d" * 36, "Status": "running", "StatusDescription": "in progress",
                  "TaskGroups": {"g": {"AutoRevert": False, "DesiredCanaries": 0,
                                       "ProgressDeadline": 0, "DesiredTotal": 2,
                                       "PlacedAllocs": 1, "HealthyAllocs": 0,
                                       "UnhealthyAllocs": 0}}}
    data = {"Job": service_job(), "Allocations": [alloc], "Evaluations": [blocked],
            "LatestDeployment": deployment,
            "Summary": {"Summary": {"g": {"Running": 1, "Queued": 1}},
                        "Children": {"Pending": 0, "Running": 0, "Dead": 0}}}
    text = job_detail_text(data, now_ns=NOW)
    assert keys(text) == JOB_KEYS
    assert headings(text) == ["Summary", "Placement Failure", "Latest Deployment", "Deployed",
                              "Actions", "Allocations"]
    assert 'Placement Failure\nTask Group "g":\n  * Resources exhausted on 1 nodes' in text
    assert "Deployed\nTask Group  Desired  Placed  Healthy  Unhealthy\n" in text
    assert "Action Name  Task Group  Task\nhello        g           t" in text
    assert text.endswith("aaaaaaaa  nnnnnnnn  g           1        run      running  "
                         "1m5s ago  5s ago")
    verbose = job_detail_text(data, verbose=True, now_ns=NOW)
    assert "Evaluations\nID" in verbose
    assert f"Latest Deployment\nID          = {'d' * 36}" in verbose
    assert job_detail_text(data, short=True, now_ns=NOW).count("\n") == len(JOB_KEYS) - 1


def test_periodic_and_parameterized_parents_show_their_children() -> None:
    periodic = service_job(Type="batch", Periodic={"Spec": "0 * * * *", "TimeZone": "UTC"})
    children = [{"ID": "web/periodic-1", "ParentID": "web", "Status": "dead"},
                {"ID": "web/periodic-x", "ParentID": "other", "Status": "dead"}]
    summary = {"Summary": {}, "Children": {"Pending": 0, "Running": 1, "Dead": 1}}
    text = job_detail_text({"Job": periodic, "Summary": summary, "Children": children},
                           now_ns=NOW)
    assert keys(text) == [*JOB_KEYS, "Next Periodic Launch"]
    assert headings(text) == ["Children Job Summary", "Previously Launched Jobs"]
    assert text.endswith("ID              Status\nweb/periodic-1  dead")
    assert text.splitlines()[len(JOB_KEYS)].endswith(" (1h0m0s from now)")  # NOW is on the hour
    parameterized = service_job(Type="batch", ParameterizedJob={
        "Payload": "required", "MetaRequired": ["a"], "MetaOptional": []})
    text = job_detail_text({"Job": parameterized, "Summary": summary, "Children": []},
                           now_ns=NOW)
    assert headings(text) == ["Parameterized Job", "Parameterized Job Summary",
                              "No dispatched instances of parameterized job found"]


def test_job_list_columns() -> None:
    jobs = [{"ID": "web", "Namespace": "default", "Type": "batch", "Periodic": True,
             "Priority": 50, "Status": "running", "Stop": True, "SubmitTime": NOW}]
    assert job_list_text([]) == "No running jobs"
    rows = job_list_text(jobs).splitlines()
    assert rows[0].split() == ["ID", "Type", "Priority", "Status", "Submit", "Date"]
    assert rows[1].split()[:5] == ["web", "batch/periodic", "50", "running", "(stopped)"]
    assert job_list_text(jobs, all_namespaces=True).split()[1] == "Namespace"


def test_status_picks_the_one_object_as_nomad_does() -> None:
    empty: dict[str, list[str]] = {"jobs": [], "allocs": [], "nodes": []}
    assert resolve_context("x", empty) == ""
    assert resolve_context("web", {**empty, "jobs": ["web", "web-api"]}) == "jobs"
    assert resolve_context("ab", {**empty, "allocs": ["ab12"]}) == "allocs"
    with pytest.raises(Ambiguous, match='Multiple matches found for id "ab"'):
        resolve_context("ab", {**empty, "allocs": ["ab12"], "nodes": ["ab34"]})
    with pytest.raises(Ambiguous) as raised:
        resolve_context("we", {**empty, "jobs": ["web", "web-api"]})
    assert str(raised.value).endswith("\n\nJobs:\nweb, web-api")


def test_node_list_and_detail_sections() -> None:
    node = {"ID": "n" * 36, "Name": "vm", "NodePool": "default", "NodeClass": "",
            "Datacenter": "dc1", "Drain": False, "SchedulingEligibility": "eligible",
            "Status": "ready", "Address": "127.0.0.1", "Version": "0.1.0",
            "Drivers": {"raw_exec": {"Detected": True, "Healthy": False,
                                     "HealthDescription": "off"}},
            "Events": [{"Timestamp": "2026-01-01T00:00:00Z", "Subsystem": "Cluster",
                        "Message": "Node registered", "Details": None}],
            "NodeResources": {"Cpu": {"CpuShares": 1000}, "Memory": {"MemoryMB": 1024},
                              "Disk": {"DiskMB": 2048}},
            "Attributes": {"unique.storage.volume": "/data"}}
    assert node_list_text([]) == "No nodes registered"
    assert node_list_text([node], verbose=True).splitlines()[0].split() == [
        "ID", "Node", "Pool", "DC", "Name", "Class", "Address", "Version", "Drain",
        "Eligibility", "Status"]
    text = node_detail_text(node, [], None, None, now_ns=NOW)
    assert "Driver Status   = raw_exec (unhealthy)" in text
    assert headings(text) == ["Node Events", "Allocated Resources", "Allocations"]
    lines = text.splitlines()
    i = lines.index("Allocated Resources")
    assert [line.split() for line in lines[i + 1:i + 3]] == [
        ["CPU", "Memory", "Disk", "Alloc", "Count"],
        ["0/1000", "MHz", "0", "B/1.0", "GiB", "0", "B/2.0", "GiB", "0"]]
    host = {"Uptime": 3700, "Memory": {"Used": 512 * 1024**2, "Total": 1024**3},
            "DiskStats": [{"Device": "", "Mountpoint": "/data", "Used": 1024**3,
                           "Size": 2 * 1024**3}], "CPUTicksConsumed": 12.7}
    text = node_detail_text(node, [], host, [], now_ns=NOW)
    assert "Uptime          = 1h1m40s" in text
    lines = text.splitlines()
    i = lines.index("Host Resource Utilization")
    assert [line.split() for line in lines[i + 1:i + 3]] == [
        ["CPU", "Memory", "Disk"], ["12/1000", "MHz", "512", "MiB/1.0", "GiB", "1.0", "GiB/2.0",
                                    "GiB"]]


def test_alloc_logs_picks_a_running_allocation_of_the_job() -> None:
    allocs = [{"ID": "dead", "TaskGroup": "g", "ClientStatus": "complete"},
              {"ID": "live", "TaskGroup": "g", "ClientStatus": "running"},
              {"ID": "other", "TaskGroup": "h", "ClientStatus": "complete"}]
    assert pick_job_alloc("web", allocs, "", lambda found: found[0]) == "live"
    assert pick_job_alloc("web", allocs, "h", lambda found: found[0]) == "other"
    with pytest.raises(LogsError, match="job \"web\" doesn't exist or it has no allocations"):
        pick_job_alloc("web", [], "", lambda found: found[0])
    alloc = {"TaskGroup": "g", "Job": {"TaskGroups": [{"Name": "g", "Tasks": [
        {"Name": "a"}, {"Name": "b"}]}]}}
    assert check_task(alloc, "b") == "b"
    with pytest.raises(LogsError, match="Could not find task named: c, found:\na\nb"):
        check_task(alloc, "c")
