"""Group networks over a real socket (layer 2: a real agent, raw_exec processes): the
allocation's `AllocatedResources.Shared.Ports`/`Networks` in Nomad's shape, the port
variables the task sees (and `${NOMAD_PORT_…}` in its args), a static port two jobs want
failing the second one's placement with Nomad's reason (on the evaluation and in
`yurt job run`), and that port freed for it once the first job stops."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from tests.agent_support import running_agent, wait_status, yurt_cli
from tests.runtime_support import eventually
from yurt.runtime.agent.agent import Agent, AgentConfig

pytestmark = pytest.mark.slow

STATIC = 47123
SCRIPT = 'env > "$NOMAD_TASK_DIR/env"; echo "$1" > "$NOMAD_TASK_DIR/arg"; exec sleep 1000'


def web(job_id: str = "web") -> dict[str, Any]:
    task = {"Name": "t", "Driver": "raw_exec",
            "Config": {"command": "/bin/sh",
                       "args": ["-c", SCRIPT, "sh", "listen=${NOMAD_PORT_http}"]}}
    return {"Job": {"ID": job_id, "TaskGroups": [{
        "Name": "g", "Tasks": [task],
        "Networks": [{"Mode": "", "ReservedPorts": [
            {"Label": "db", "Value": STATIC, "To": 6379, "HostNetwork": ""}],
            "DynamicPorts": [{"Label": "http", "Value": 0, "To": 0}]}]}]}}


def env_file(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


async def test_ports_on_the_allocation_and_in_the_task_env(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path / "data") as a:
            c = a.client
            ip = a.agent.node.attributes["unique.network.ip-address"]
            assert (await c.post("/v1/jobs", json=web())).status_code == 200
            alloc_id = (await wait_status(c, "web", "running"))["ID"]
            full = (await c.get(f"/v1/allocation/{alloc_id}")).json()
            shared = full["AllocatedResources"]["Shared"]
            ports = {p["Label"]: p for p in shared["Ports"]}
            http = ports["http"]["Value"]
            assert 20000 <= http <= 32000
            assert ports == {
                "db": {"Label": "db", "Value": STATIC, "To": 6379, "HostIP": ip,
                       "IgnoreCollision": False},
                "http": {"Label": "http", "Value": http, "To": 0, "HostIP": ip,
                         "IgnoreCollision": False}}
            assert shared["Networks"] == [{
                "Mode": "host", "Device": "", "CIDR": "", "IP": ip, "MBits": 0, "DNS": None,
                "ReservedPorts": [{"Label": "db", "Value": STATIC, "To": 6379,
                                   "HostNetwork": "default", "IgnoreCollision": False}],
                "DynamicPorts": [{"Label": "http", "Value": http, "To": 0,
                                  "HostNetwork": "default", "IgnoreCollision": False}],
                "CNI": None}]
            assert full["AllocatedResources"]["Tasks"]["t"]["Networks"] is None
            assert "AllocatedShared" not in full
            listed = (await c.get("/v1/allocations", params={"resources": "true"})).json()
            assert listed[0]["AllocatedResources"]["Shared"]["Ports"] == shared["Ports"]

            task_dir = tmp_path / "data" / "alloc" / alloc_id / "t" / "local"
            await eventually(lambda: (task_dir / "arg").exists())
            env = env_file(task_dir / "env")
            assert {k: v for k, v in env.items() if "_db" in k or "_http" in k} == {
                "NOMAD_PORT_db": "6379", "NOMAD_ALLOC_PORT_db": "6379",
                "NOMAD_HOST_PORT_db": str(STATIC), "NOMAD_IP_db": ip, "NOMAD_HOST_IP_db": ip,
                "NOMAD_ADDR_db": f"{ip}:{STATIC}", "NOMAD_HOST_ADDR_db": f"{ip}:{STATIC}",
                "NOMAD_PORT_http": str(http), "NOMAD_ALLOC_PORT_http": str(http),
                "NOMAD_HOST_PORT_http": str(http), "NOMAD_IP_http": ip,
                "NOMAD_HOST_IP_http": ip, "NOMAD_ADDR_http": f"{ip}:{http}",
                "NOMAD_HOST_ADDR_http": f"{ip}:{http}"}
            assert (task_dir / "arg").read_text() == f"listen={http}\n"


async def test_a_static_port_conflict_fails_placement_until_the_holder_stops(
        tmp_path: Path) -> None:
    with trio.fail_after(40):
        async with running_agent(tmp_path / "data") as a:
            c = a.client
            await c.post("/v1/jobs", json=web())
            await wait_status(c, "web", "running")
            clash = tmp_path / "clash.nomad"
            clash.write_text(f'''job "clash" {{
  group "g" {{
    network {{
      port "db" {{
        static = {STATIC}
      }}
    }}
    task "t" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sleep"
        args    = ["1000"]
      }}
    }}
  }}
}}''')
            out = await yurt_cli(a.address, "job", "run", str(clash))
            assert out.exit_code == 2, out.output
            assert 'Task Group "g" (failed to place 1 allocation)' in out.output
            assert (f'Dimension "network: reserved port collision db={STATIC}" exhausted on '
                    "1 nodes") in out.output
            evals = (await c.get("/v1/job/clash/evaluations")).json()
            first = min(evals, key=lambda e: e["CreateIndex"])
            assert first["FailedTGAllocs"]["g"]["DimensionExhausted"] == {
                f"network: reserved port collision db={STATIC}": 1}
            assert (await c.get("/v1/job/clash/allocations")).json() == []

            # The holder stops: its port is free, and the blocked evaluation places it.
            assert (await c.delete("/v1/job/web")).status_code == 200
            placed = await wait_status(c, "clash", "running")
            full = (await c.get(f"/v1/allocation/{placed['ID']}")).json()
            assert full["AllocatedResources"]["Shared"]["Ports"][0]["Value"] == STATIC


async def test_the_clients_port_range_and_reserved_ports_bound_placement(
        tmp_path: Path) -> None:
    agent = Agent(AgentConfig(data_dir=tmp_path / "data", port=0, dev_mode=True,
                              min_dynamic_port=20500, max_dynamic_port=20502,
                              reserved_ports="20501"))
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            address = await nursery.start(agent.run)
            try:
                async with httpx2.AsyncClient(base_url=address, timeout=20) as c:
                    node = (await c.get(f"/v1/node/{agent.node.id}")).json()
                    assert (node["NodeResources"]["MinDynamicPort"],
                            node["NodeResources"]["MaxDynamicPort"]) == (20500, 20502)
                    assert node["ReservedResources"]["Networks"] == {
                        "ReservedHostPorts": "20501"}
                    body = web("three")
                    group = body["Job"]["TaskGroups"][0]
                    group["Count"] = 3
                    group["Networks"][0]["ReservedPorts"] = []
                    ev_id = (await c.post("/v1/jobs", json=body)).json()["EvalID"]
                    ev = (await c.get(f"/v1/evaluation/{ev_id}")).json()
                    assert ev["FailedTGAllocs"]["g"]["DimensionExhausted"] == {
                        "network: dynamic port selection failed": 1}
                    allocs = (await c.get("/v1/job/three/allocations")).json()
                    held = set()
                    for alloc in allocs:
                        full = (await c.get(f"/v1/allocation/{alloc['ID']}")).json()
                        held |= {p["Value"] for p in full["AllocatedResources"]["Shared"]["Ports"]}
                    assert held == {20500, 20502}
            finally:
                agent.stop()


async def test_a_bridge_network_is_accepted_and_left_unplaced(tmp_path: Path) -> None:
    """Valid as in Nomad's `TaskGroup.Validate`; placement needs CNI plugins no yurt node has,
    so the evaluation reports Nomad's `NetworkChecker` reason, "missing network"."""
    with trio.fail_after(30):
        async with running_agent(tmp_path / "data") as a:
            body = web("bridged")
            body["Job"]["TaskGroups"][0]["Networks"][0]["Mode"] = "bridge"
            answer = await a.client.post("/v1/jobs", json=body)
            assert answer.status_code == 200, answer.text
            ev = (await a.client.get(f"/v1/evaluation/{answer.json()['EvalID']}")).json()
            metric = ev["FailedTGAllocs"]["g"]
            assert metric["ConstraintFiltered"] == {"missing network": 1}
            assert (await a.client.get("/v1/job/bridged/allocations")).json() == []
