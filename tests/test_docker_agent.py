"""docker tasks through a real agent (layer 2: the agent in this process, a real dockerd, the
real clock): a failing container restarted by its restart policy with every run's output in
the task's logs, a container over `memory_max` reported as Nomad reports an OOM kill, and a
stopped job leaving no container behind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from tests.agent_support import run_until, running_agent, stop_job
from tests.docker_support import IMAGE, DockerDaemon
from yurt.runtime.client.drivers.docker.create import LABEL_ALLOC_ID

TIMEOUT = 90


def docker_job(job_id: str, script: str, *, job_type: str = "batch",
               restart: dict[str, Any] | None = None, kill_timeout: int = 2_000_000_000,
               **resources: int) -> dict[str, Any]:
    task = {"Name": "t", "Driver": "docker", "KillTimeout": kill_timeout,
            "Config": {"image": IMAGE, "command": "/bin/sh", "args": ["-c", script]},
            "Resources": {"CPU": 100, "MemoryMB": 32, **resources}}
    return {"Job": {"ID": job_id, "Type": job_type, "TaskGroups": [{
        "Name": "g", "Tasks": [task],
        "RestartPolicy": restart or {"Attempts": 0, "Mode": "fail"}}]}}


async def run_job(dockerd: DockerDaemon, data: Path, job: dict[str, Any],
                  status: str) -> tuple[dict[str, Any], str]:
    """Run `job` until its allocation is `status`; the allocation and the task's stdout (a
    service is stopped then, and its allocation is returned once complete)."""
    async with running_agent(data, driver_config={"docker": {"endpoint": dockerd.host}}) as run:
        alloc = await run_until(run.client, job, status)
        logs_of = f"/v1/client/fs/logs/{alloc['ID']}"
        params = {"task": "t", "type": "stdout", "plain": "true"}
        logs = await run.client.get(logs_of, params=params)
        if job["Job"]["Type"] == "service":
            # A running service's first output reaches its log a moment after it runs (its
            # container's log stream, then the copier, then the pump): waited for, within
            # the caller's deadline.
            while not logs.text:
                await trio.sleep(0.05)
                logs = await run.client.get(logs_of, params=params)
            await stop_job(run.client, job["Job"]["ID"])
            alloc = (await run.client.get(f"/v1/allocation/{alloc['ID']}")).json()
    return alloc, logs.text


async def test_a_failing_container_is_restarted_and_every_run_is_logged(
        dockerd: DockerDaemon, tmp_path: Path) -> None:
    job = docker_job("again", 'echo "run $(date +%s%N)"; exit 3',
                     restart={"Attempts": 2, "Interval": 60_000_000_000,
                              "Delay": 200_000_000, "Mode": "fail"})
    with trio.fail_after(TIMEOUT):
        alloc, stdout = await run_job(dockerd, tmp_path / "data", job, "failed")
    state = alloc["TaskStates"]["t"]
    assert state["Restarts"] == 2
    terminated = [e for e in state["Events"] if e["Type"] == "Terminated"]
    assert [e["Details"]["exit_code"] for e in terminated] == ["3", "3", "3"]
    assert stdout.count("run ") == 3, stdout
    assert dockerd.containers(f"label={LABEL_ALLOC_ID}={alloc['ID']}", "status=running") == []


async def test_over_memory_max_the_alloc_reports_the_oom_kill_as_nomad_does(
        dockerd: DockerDaemon, tmp_path: Path) -> None:
    job = docker_job("oom", "tail /dev/zero", MemoryMB=16, MemoryMaxMB=24)
    with trio.fail_after(TIMEOUT):
        alloc, _ = await run_job(dockerd, tmp_path / "data", job, "failed")
    state = alloc["TaskStates"]["t"]
    terminated = [e for e in state["Events"] if e["Type"] == "Terminated"]
    assert terminated, state["Events"]
    assert terminated[-1]["Details"]["oom_killed"] == "true"
    assert terminated[-1]["Details"]["exit_message"] == "OOM Killed"
    assert state["Failed"] is True


async def test_a_stopped_service_leaves_no_container(dockerd: DockerDaemon,
                                                     tmp_path: Path) -> None:
    job = docker_job("svc", "echo up; while true; do sleep 0.1; done", job_type="service")
    with trio.fail_after(TIMEOUT):
        alloc, stdout = await run_job(dockerd, tmp_path / "data", job, "running")
    assert stdout == "up\n"
    assert dockerd.containers(f"label={LABEL_ALLOC_ID}={alloc['ID']}") == []


async def test_without_kill_signal_a_stop_is_dockers_stop_sigterm(
        dockerd: DockerDaemon, tmp_path: Path) -> None:
    """No `kill_signal`: Docker's stop (the image's stop signal, SIGTERM), as Nomad's, not
    the SIGINT raw_exec gets; the container's handler runs long before `kill_timeout`."""
    job = docker_job("term", "trap 'exit 9' TERM; echo up; while true; do sleep 0.1; done",
                     job_type="service", kill_timeout=20_000_000_000)
    with trio.fail_after(TIMEOUT):
        started = trio.current_time()
        alloc, _ = await run_job(dockerd, tmp_path / "data", job, "running")
        assert trio.current_time() - started < 20  # not the SIGKILL after kill_timeout
    terminated = [e for e in alloc["TaskStates"]["t"]["Events"] if e["Type"] == "Terminated"]
    assert terminated[-1]["Details"]["exit_code"] == "9", alloc["TaskStates"]["t"]["Events"]


async def test_an_image_that_cannot_be_pulled_is_a_driver_failure_with_dockers_words(
        dockerd: DockerDaemon, tmp_path: Path) -> None:
    job = docker_job("nopull", "true")
    job["Job"]["TaskGroups"][0]["Tasks"][0]["Config"]["image"] = "127.0.0.1:9/absent/app:3"
    with trio.fail_after(TIMEOUT):
        alloc, _ = await run_job(dockerd, tmp_path / "data", job, "failed")
    events = alloc["TaskStates"]["t"]["Events"]
    downloading = [e for e in events if e["Type"] == "Driver"]
    assert [e["DisplayMessage"] for e in downloading] == ["Downloading image"], events
    assert downloading[0]["Details"]["image"] == "127.0.0.1:9/absent/app:3"
    failures = [e for e in events if e["Type"] == "Driver Failure"]
    assert failures, events
    message = failures[-1]["DisplayMessage"]
    assert message.startswith("Failed to pull `127.0.0.1:9/absent/app:3`: "), message
    assert "127.0.0.1:9" in message.split(": ", 1)[1]  # what Docker said
    assert dockerd.containers(f"label={LABEL_ALLOC_ID}={alloc['ID']}") == []


async def test_a_container_whose_logs_cannot_be_read_still_runs(
        dockerd: DockerDaemon, tmp_path: Path) -> None:
    """`logging { type = "none" }`: Docker keeps nothing to copy; the task runs and ends as
    any other (Nomad's driver only logs that its logger could not start)."""
    job = docker_job("quiet", "echo unseen; exit 0")
    job["Job"]["TaskGroups"][0]["Tasks"][0]["Config"]["logging"] = {"type": "none"}
    with trio.fail_after(TIMEOUT):
        alloc, stdout = await run_job(dockerd, tmp_path / "data", job, "complete")
    terminated = [e for e in alloc["TaskStates"]["t"]["Events"] if e["Type"] == "Terminated"]
    assert [e["Details"]["exit_code"] for e in terminated] == ["0"]
    assert stdout == ""


async def test_a_restart_with_no_delay_replaces_the_exited_container(
        dockerd: DockerDaemon, tmp_path: Path) -> None:
    """The next run's container takes the task's name at once: the previous run's, exited and
    not yet destroyed, is purged first (as Nomad's `createContainer`), with its output kept."""
    job = docker_job("quick", 'echo "run $(date +%s%N)"; exit 7',
                     restart={"Attempts": 3, "Interval": 60_000_000_000, "Delay": 0,
                              "Mode": "fail"})
    with trio.fail_after(TIMEOUT):
        alloc, stdout = await run_job(dockerd, tmp_path / "data", job, "failed")
    state = alloc["TaskStates"]["t"]
    assert [e["Type"] for e in state["Events"] if e["Type"] == "Driver Failure"] == []
    assert state["Restarts"] == 3
    # (A task keeps its last 10 events, as Nomad's: not every run's are still there.)
    terminated = [e for e in state["Events"] if e["Type"] == "Terminated"]
    assert {e["Details"]["exit_code"] for e in terminated} == {"7"}
    assert stdout.count("run ") == 4, stdout
