"""The agent's log: one structured line per allocation and task event (runtime/agent/log.py).

Layer 0: `AllocEvents` fed allocation views by hand, and the two line formats. Layer 1: the
driver manager's line per driver state change, under the mock clock. Layer 3: a real
`yurt agent --log-json` runs a job that fails and restarts, a service job that is re-attached
by a second agent on the same data dir and then stopped; every line on its stdout parses as
JSON and the lines for each of those events are there with their IDs.
"""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from trio.testing import MockClock

from tests.proc_support import wait_for
from tests.runtime_support import unix_clock
from tests.test_agent_e2e import YURT, free_port
from tests.test_driver_manager import Scripted
from tests.token_support import bootstrap_token
from yurt.runtime.agent.log import AllocEvents, configure
from yurt.runtime.client.pluginmanager.drivers import DriverManager
from yurt.runtime.lib.logfields import FIELDS, fields
from yurt.runtime.structs import Allocation, TaskEvent, TaskState
from yurt.store import MemoryStateDB

# --------------------------------------------------------------------------- layer 0


def view(status: str, events: list[tuple[int, str]], *, desired: str = "run") -> Allocation:
    return Allocation(id="a1", job_id="web", task_group="g", client_status=status,
                      desired_status=desired,
                      task_states={"t": TaskState(events=[TaskEvent(type=kind, time=t)
                                                          for t, kind in events])})


def messages(lines: list[tuple[int, str, dict[str, Any]]]) -> list[str]:
    return [message for _, message, _ in lines]


def test_each_event_is_logged_once_and_in_order() -> None:
    log = AllocEvents()
    assert messages(log.observe(view("pending", [(1, "Received")]))) == ["task event"]
    started = log.observe(view("running", [(1, "Received"), (2, "Started")]))
    assert messages(started) == ["task started", "allocation started"]
    assert started[0][2] == {"alloc_id": "a1", "job": "web", "group": "g", "task": "t"}
    assert log.observe(view("running", [(1, "Received"), (2, "Started")])) == []
    restart = [(1, "Received"), (2, "Started"), (3, "Terminated"), (4, "Restarting")]
    assert messages(log.observe(view("pending", restart))) == [
        "task exited", "task restarting", "allocation pending"]
    again = log.observe(view("running", [*restart, (5, "Started")]))
    # Back to running after a restart: the allocation started once, only the task again.
    assert [(level, m) for level, m, _ in again] == [(logging.INFO, "task started"),
                                                     (logging.DEBUG, "allocation running")]


def test_a_full_ring_of_events_still_yields_only_the_new_ones() -> None:
    log = AllocEvents()
    log.observe(view("running", [(t, "Started") for t in range(1, 11)]))
    ring = [(t, "Started") for t in range(3, 11)] + [(11, "Terminated"), (12, "Not Restarting")]
    assert messages(log.observe(view("failed", ring))) == [
        "task exited", "task not restarting", "allocation failed"]


def test_failures_stops_and_levels() -> None:
    log = AllocEvents()
    log.observe(view("running", [(1, "Started")]))
    failed = log.observe(view("failed", [(1, "Started"), (2, "Driver Failure")]))
    assert [(level, m) for level, m, _ in failed] == [(logging.ERROR, "task failed"),
                                                      (logging.ERROR, "allocation failed")]
    other = AllocEvents()
    other.observe(view("running", [(1, "Started")]))
    stopped = other.observe(view("complete", [(1, "Started"), (2, "Killed")], desired="stop"))
    assert messages(stopped) == ["task killed", "allocation stopped"]


def test_what_was_known_before_a_restore_is_not_logged_again() -> None:
    log = AllocEvents()
    log.known(view("running", [(1, "Received"), (2, "Started")]))
    assert log.observe(view("running", [(1, "Received"), (2, "Started")])) == []
    assert messages(log.observe(view("running", [(2, "Started"), (3, "Restart Signaled")]))) \
        == ["task restart requested"]


@pytest.fixture
def yurt_logger() -> Iterator[None]:
    """`configure` changes the `yurt` logger: put it back, or caplog in later tests of this
    process would see nothing."""
    root = logging.getLogger("yurt")
    saved = (root.level, root.propagate, list(root.handlers))
    try:
        yield
    finally:
        root.level, root.propagate, root.handlers[:] = saved


@pytest.mark.usefixtures("yurt_logger")
@pytest.mark.parametrize("json_lines", [True, False])
def test_lines_carry_their_fields(json_lines: bool) -> None:
    stream = io.StringIO()
    configure("debug", json_lines, stream)
    logging.getLogger("yurt.alloc").warning("task exited",
                                            extra=fields(alloc_id="a1", reason="a b"))
    logging.getLogger("yurt.gc").debug("plain %d", 3)
    first, second = stream.getvalue().splitlines()
    if json_lines:
        record = json.loads(first)
        assert record.pop("@timestamp").endswith("Z")
        assert record == {"@level": "warn", "@module": "alloc", "@message": "task exited",
                          "alloc_id": "a1", "reason": "a b"}
        assert json.loads(second)["@message"] == "plain 3"
    else:
        assert first.endswith(' [WARN]  alloc: task exited: alloc_id=a1 reason="a b"')
        assert second.endswith(" [DEBUG] gc: plain 3")


@pytest.mark.usefixtures("yurt_logger")
def test_levels_below_the_threshold_are_dropped() -> None:
    stream = io.StringIO()
    configure("WARN", False, stream)
    logging.getLogger("yurt.alloc").info("task started")
    logging.getLogger("yurt.alloc").error("task failed")
    assert [line.split("] ")[0].split()[-1] for line in stream.getvalue().splitlines()] \
        == ["[ERROR"]


async def test_each_driver_state_change_is_one_line(autojump_clock: MockClock,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    """Layer 1: the driver manager with a scripted driver, health changing every 10 s."""
    caplog.set_level(logging.INFO, "yurt.drivers")
    driver = Scripted(["healthy", "healthy", "unhealthy", "healthy"])
    manager = DriverManager({"scripted": lambda config: driver}, state_db=MemoryStateDB(),
                            unix_clock=unix_clock, on_info=lambda name, info: None)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        await trio.sleep(100)
        nursery.cancel_scope.cancel()
    lines = [(r.levelname, r.getMessage(), getattr(r, FIELDS)["healthy"])
             for r in caplog.records if r.name == "yurt.drivers"]
    assert lines == [("INFO", "driver state changed", True),  # the second "healthy": no news
                     ("WARNING", "driver state changed", False),
                     ("INFO", "driver state changed", True)]


# --------------------------------------------------------------------------- layer 3


class LoggedAgent:
    """`yurt agent --log-json` on `data`, its stdout (the log) in a file."""

    def __init__(self, data: Path, log: Path) -> None:
        self.data, self.log, self.port = data, log, free_port()

    @contextmanager
    def running(self) -> Iterator[httpx2.Client]:
        with self.log.open("a") as out:
            process = subprocess.Popen(
                [YURT, "agent", "--data-dir", str(self.data), "--port", str(self.port),
                 "--log-json", "--log-level", "info", "--fake-device", "nvidia/gpu/T4=GPU-0"],
                stdout=out, stderr=subprocess.PIPE,
                text=True, env={k: v for k, v in os.environ.items()
                                if k != "YURT_AGENT_TOKEN"})
        try:
            assert process.stderr is not None
            assert "listening on" in process.stderr.readline()
            auth = {"X-Nomad-Token": bootstrap_token(self.data)}
            with httpx2.Client(base_url=f"http://127.0.0.1:{self.port}", headers=auth,
                               timeout=10) as client:
                yield client
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:  # pragma: no cover - never leave it behind
                process.kill()
                process.wait(timeout=10)

    def records(self) -> list[dict[str, Any]]:
        """Every line so far, each parsed (a line that is not JSON fails the test)."""
        text = self.log.read_text()
        complete = text[:text.rfind("\n") + 1]  # the last line may be half written
        return [json.loads(line) for line in complete.splitlines()]

    def wait(self, message: str, **match: Any) -> dict[str, Any]:
        """The first record with `message` and the fields in `match`, once it is logged."""
        found: list[dict[str, Any]] = []

        def logged() -> bool:
            found[:] = [r for r in self.records() if r["@message"] == message
                        and all(r.get(k) == v for k, v in match.items())]
            return bool(found)

        wait_for(logged, timeout=30)
        return found[0]


def job(job_id: str, script: str, job_type: str, attempts: int) -> dict[str, Any]:
    second = 1_000_000_000
    task = {"Name": "t", "Driver": "raw_exec",
            "Config": {"command": "/bin/sh", "args": ["-c", script]}}
    return {"Job": {"ID": job_id, "Type": job_type, "TaskGroups": [{
        "Name": "g", "Tasks": [task],
        "RestartPolicy": {"Attempts": attempts, "Interval": 60 * second,
                          "Delay": second // 10, "Mode": "fail"}}]}}


def test_a_real_agent_logs_every_allocation_event_as_json(tmp_path: Path) -> None:
    agent = LoggedAgent(tmp_path / "data", tmp_path / "agent.log")
    with agent.running() as api:
        assert api.post("/v1/jobs", json=job("flaky", "exit 3", "batch", 1)).status_code == 200
        assert api.post("/v1/jobs", json=job("svc", "exec sleep 300", "service", 0)
                        ).status_code == 200
        failed = agent.wait("allocation failed", job="flaky")
        svc = agent.wait("allocation started", job="svc")
    flaky = [r["@message"] for r in agent.records()
             if r.get("alloc_id") == failed["alloc_id"]]
    assert flaky == ["task started", "allocation started", "task exited", "task restarting",
                     "task started", "task exited", "task not restarting",
                     "allocation failed"]
    started = agent.wait("agent started")
    assert started["address"] == f"http://127.0.0.1:{agent.port}"
    assert agent.wait("agent stopping")["signal"] == "SIGTERM"
    exited = agent.wait("task exited", job="flaky")
    assert (exited["@level"], exited["exit_code"], exited["task"]) == ("warn", 3, "t")
    assert agent.wait("driver state changed", driver="raw_exec")["healthy"] is True
    device = agent.wait("device state changed", device="nvidia/gpu/T4")
    assert (device["instances"], device["healthy"]) == (1, 1)

    # A second agent on the same data dir re-attaches the service, and logs its stop.
    with agent.running() as api:
        reattached = agent.wait("allocation re-attached", alloc_id=svc["alloc_id"])
        assert (reattached["job"], reattached["tasks"]) == ("svc", ["t"])
        assert api.delete("/v1/job/svc").status_code == 200
        stopped = agent.wait("allocation stopped", alloc_id=svc["alloc_id"])
        assert stopped["@level"] == "info"
    starts = [r for r in agent.records()
              if r["@message"] == "allocation started" and r.get("job") == "svc"]
    assert len(starts) == 1  # the restore did not log the allocation's history again
    devices = [r for r in agent.records() if r["@message"] == "device state changed"]
    assert len(devices) == 2  # once per agent: fingerprints that change nothing are no news


def test_an_exit_that_was_asked_for_is_no_warning() -> None:
    log = AllocEvents()

    def exited(kind_before: str) -> int:
        alloc = Allocation(id=kind_before or "a", job_id="web", task_group="g",
                           client_status="running", task_states={"t": TaskState(events=[
                               TaskEvent(type="Started", time=1),
                               TaskEvent(type=kind_before, time=2),
                               TaskEvent(type="Terminated", time=3, signal=2, exit_code=130)])})
        (level,) = [lvl for lvl, message, _ in log.observe(alloc) if message == "task exited"]
        return level

    assert exited("Killing") == logging.INFO  # a stop or an update killed it
    assert exited("Restart Signaled") == logging.INFO  # `alloc restart`
    assert exited("Signaling") == logging.WARNING  # a signal it did not survive
