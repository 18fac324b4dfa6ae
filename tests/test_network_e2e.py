"""A two-port web job end to end (layer 2: `yurt agent` as its own process, real raw_exec
processes, loopback HTTP, real clock, every wait bounded): each task serves on the dynamic
port the scheduler gave it, found through `${NOMAD_PORT_…}`; the agent is killed with
SIGKILL and started again on the same data dir, and the allocation keeps its ports, its
processes keep serving, and the restarted agent still counts those ports as taken."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.proc_support import spawned_agent, wait_for

pytestmark = pytest.mark.slow

MARKER = "yurt-e2e-ports-5d2a"


def server_task(name: str, label: str) -> dict[str, Any]:
    return {"Name": name, "Driver": "raw_exec",
            "Config": {"command": sys.executable,
                       "args": ["-m", "http.server", f"${{NOMAD_PORT_{label}}}", "--bind",
                                "127.0.0.1", "--directory", "${NOMAD_TASK_DIR}"]},
            "Env": {"MARKER": MARKER}}


def web_job() -> dict[str, Any]:
    return {"Job": {"ID": "web", "TaskGroups": [{
        "Name": "g", "Networks": [{"DynamicPorts": [{"Label": "http"}, {"Label": "admin"}]}],
        "Tasks": [server_task("web", "http"), server_task("admin", "admin")]}]}}


def serves(port: int) -> bool:
    try:
        return httpx2.get(f"http://127.0.0.1:{port}/", timeout=2).status_code == 200
    except httpx2.TransportError:
        return False


def markers() -> list[int]:
    return sorted(int(p) for p in os.listdir("/proc") if p.isdigit()
                  and f"MARKER={MARKER}".encode() in _environ(p))


def _environ(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""


def running_alloc(client: httpx2.Client) -> dict[str, Any]:
    allocs: list[dict[str, Any]] = []

    def running() -> bool:
        nonlocal allocs
        allocs = client.get("/v1/job/web/allocations").json()
        return bool(allocs) and allocs[0]["ClientStatus"] == "running"

    wait_for(running)
    full: dict[str, Any] = client.get(f"/v1/allocation/{allocs[0]['ID']}").json()
    return full


@contextmanager
def no_strays() -> Iterator[None]:
    """Whatever happens, no task process of this test outlives it."""
    try:
        yield
    finally:
        for pid in markers():
            os.kill(pid, signal.SIGKILL)


def test_two_port_web_job_is_reachable_and_keeps_its_ports_across_an_agent_kill(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    with no_strays():
        with spawned_agent(data) as (agent, client):
            assert client.post("/v1/jobs", json=web_job()).status_code == 200
            alloc = running_alloc(client)
            ports = {p["Label"]: p["Value"] for p in
                     alloc["AllocatedResources"]["Shared"]["Ports"]}
            assert set(ports) == {"http", "admin"}
            assert ports["http"] != ports["admin"]
            assert all(20000 <= v <= 32000 for v in ports.values())
            wait_for(lambda: serves(ports["http"]) and serves(ports["admin"]))
            before = markers()
            agent.kill()  # SIGKILL: no shutdown at all
            agent.wait(timeout=10)
        # The tasks outlive the agent and keep serving.
        assert serves(ports["http"])
        assert serves(ports["admin"])
        with spawned_agent(data) as (_, client):
            again = running_alloc(client)
            assert again["ID"] == alloc["ID"]
            assert again["AllocatedResources"]["Shared"] == alloc["AllocatedResources"]["Shared"]
            assert markers() == before  # re-attached, nothing started twice
            assert serves(ports["http"])
            assert serves(ports["admin"])
            # The restarted agent still counts the port as taken.
            clash = {"Job": {"ID": "clash", "TaskGroups": [{
                "Name": "g", "Networks": [{"ReservedPorts": [
                    {"Label": "p", "Value": ports["http"]}]}],
                "Tasks": [{"Name": "t", "Driver": "raw_exec",
                           "Config": {"command": "/bin/true"}}]}]}}
            ev_id = client.post("/v1/jobs", json=clash).json()["EvalID"]
            ev = client.get(f"/v1/evaluation/{ev_id}").json()
            assert ev["FailedTGAllocs"]["g"]["DimensionExhausted"] == {
                f"network: reserved port collision p={ports['http']}": 1}
            assert client.delete("/v1/job/web").status_code == 200
            wait_for(lambda: not markers())
            assert not serves(ports["http"])
