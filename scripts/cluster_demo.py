"""A yurt cluster on this machine, on loopback: what it does when a node or a server dies.

Starts a 3-member etcd cluster, 2 `yurt server`s and 3 `yurt agent --servers` (each its own
data directory), runs a job of two `raw_exec` tasks on two different nodes, then:
1. kills one agent together with its tasks (SIGKILL to its process group): its node misses
   its heartbeats, is marked down, and its allocation is lost and placed on the third node;
2. kills the leading server (SIGKILL): the other server takes over and places the next job.
It prints what happened as it goes and a summary at the end, then stops everything it started
and removes its files (also on Ctrl-C or a failure).

Short heartbeat and leadership TTLs keep the demo under a minute; production defaults are
Nomad's (10 s heartbeats plus 10 s grace, a 5 s leader lease).

No token: a `yurt server` keeps no ACL state yet, so a cluster's servers and its client agents
admit every request (runtime/agent/agent.py `effective_acl`). Every process starts without the
token variables of the caller's environment (benchlib/agent_token.py `agent_env`), so that one
exported in the shell does not make them demand it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib.agent_token import agent_env
from benchlib.procs import carrying, kill_with_tasks

from yurt.runtime.server.cluster.etcd.process import start_etcd

YURT = str(Path(sys.executable).parent / "yurt")
LISTENING = re.compile(rb"listening on (http://\S+)")


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


class Demo:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.addresses: dict[str, str] = {}
        self.timeline: list[str] = []

    def note(self, text: str) -> None:
        self.timeline.append(text)
        say(text)

    def spawn(self, name: str, args: list[str]) -> str:
        log = self.root / f"{name}.log"
        with open(log, "wb") as out:
            process = subprocess.Popen([YURT, *args], stdout=out, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True,
                                       env=agent_env())
        self.processes[name] = process
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            found = LISTENING.search(log.read_bytes())
            if found:
                self.addresses[name] = found.group(1).decode()
                return self.addresses[name]
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited: {log.read_text()[-2000:]}")
            time.sleep(0.05)
        raise RuntimeError(f"{name} did not start in 30 s; see {log}")

    def kill(self, name: str) -> None:
        """SIGKILL a server, or an agent together with every task it runs (tasks outlive
        their agent by design: a restarted agent re-attaches to them)."""
        process = self.processes[name]
        kill_with_tasks(process.pid, str(self.root / name))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()

    def stop_all(self) -> None:
        for name in list(self.processes):
            self.kill(name)

    def get(self, server: str, path: str) -> Any:
        with urllib.request.urlopen(self.addresses[server] + path, timeout=10) as answer:
            return json.load(answer)

    def put(self, server: str, path: str, body: Any) -> Any:
        request = urllib.request.Request(self.addresses[server] + path, method="PUT",
                                         data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.load(answer)


def wait(what: str, check: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            result = check()
            if result:
                return result
        time.sleep(0.2)
    raise RuntimeError(f"timed out waiting for {what}")


def job(job_id: str, count: int) -> dict[str, Any]:
    return {"Job": {
        "ID": job_id, "Name": job_id, "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "web", "Count": count,
            "Constraints": [{"Operand": "distinct_hosts", "RTarget": "true"}],
            "ReschedulePolicy": {"Attempts": 0, "Unlimited": False},
            "Tasks": [{"Name": "sleep", "Driver": "raw_exec",
                       "Config": {"command": "/bin/sleep", "args": ["3600"]},
                       "Resources": {"CPU": 100, "MemoryMB": 32}}]}]}}


def placements(demo: Demo, server: str, job_id: str) -> dict[str, tuple[str, str, str]]:
    allocs = demo.get(server, f"/v1/job/{job_id}/allocations")
    nodes = {n["ID"]: n["Name"] for n in demo.get(server, "/v1/nodes")}
    return {a["ID"]: (nodes.get(a["NodeID"], a["NodeID"]), a["ClientStatus"],
                      a["DesiredStatus"]) for a in allocs}


def show(demo: Demo, server: str, job_id: str) -> None:
    for alloc_id, (node, client, desired) in sorted(placements(demo, server, job_id).items(),
                                                    key=lambda kv: kv[1]):
        say(f"    {alloc_id[:8]}  node {node:4}  client {client:8} desired {desired}")


def run(root: Path) -> None:
    demo = Demo(root)
    etcd = start_etcd(root / "etcd", members=3, name="demo")
    try:
        demo.note(f"etcd: 3 members at {', '.join(etcd.urls)}")
        ttl = ["--leader-ttl", "2", "--min-heartbeat-ttl", "2", "--heartbeat-grace", "2"]
        for name in ("s1", "s2"):
            address = demo.spawn(name, ["server", "--etcd", ",".join(etcd.urls), "--port", "0",
                                        "--name", name, "--data-dir", str(root / name), *ttl])
            demo.note(f"server {name} listening on {address}")
        servers = ",".join(demo.addresses[s] for s in ("s1", "s2"))
        for name in ("a1", "a2", "a3"):
            address = demo.spawn(name, ["agent", "--servers", servers, "--port", "0",
                                        "--node-name", name, "--data-dir", str(root / name)])
            demo.note(f"agent {name} (a client node) listening on {address}")
        wait("3 ready nodes", lambda: sum(n["Status"] == "ready"
                                         for n in demo.get("s1", "/v1/nodes")) == 3)
        leader = demo.get("s1", "/v1/status/leader")
        demo.note(f"3 nodes ready; the leader is {leader}")

        demo.put("s2", "/v1/jobs", job("web", 2))
        running = wait("2 running allocations", lambda: [
            a for a, (_, client, _) in placements(demo, "s1", "web").items()
            if client == "running"] if len([
                1 for _, client, _ in placements(demo, "s1", "web").values()
                if client == "running"]) == 2 else None)
        demo.note("job web: 2 allocations running on 2 different nodes")
        show(demo, "s1", "web")

        victim_alloc = sorted(running)[0]
        victim = placements(demo, "s1", "web")[victim_alloc][0]
        demo.kill(victim)
        demo.note(f"killed agent {victim} and its tasks (SIGKILL)")
        wait(f"{victim} down", lambda: any(n["Name"] == victim and n["Status"] == "down"
                                           for n in demo.get("s1", "/v1/nodes")))
        demo.note(f"node {victim} missed its heartbeat: marked down")
        wait("the replacement running", lambda: sum(
            1 for a, (node, client, _) in placements(demo, "s1", "web").items()
            if client == "running" and node != victim) == 2)
        demo.note(f"allocation {victim_alloc[:8]} is lost; its replacement runs on another node")
        show(demo, "s1", "web")

        leader = demo.get("s1", "/v1/status/leader")
        dead = next(s for s in ("s1", "s2") if demo.addresses[s] == leader)
        alive = "s2" if dead == "s1" else "s1"
        killed_at = time.monotonic()
        demo.kill(dead)
        demo.note(f"killed the leading server {dead} (SIGKILL)")
        wait(f"{alive} leading", lambda: demo.get(alive, "/v1/status/leader")
             == demo.addresses[alive])
        demo.note(f"server {alive} leads now, {time.monotonic() - killed_at:.1f} s later")
        demo.put(alive, "/v1/jobs", job("api", 1))
        wait("job api running", lambda: any(
            client == "running" for _, client, _ in placements(demo, alive, "api").values()))
        demo.note(f"job api registered after the failover: placed and running by {alive}")
        show(demo, alive, "api")
        print("\nwhat happened:")
        for line in demo.timeline:
            print(f"  - {line}")
    finally:
        demo.stop_all()
        etcd.stop()
        left = carrying(str(root))
        say(f"stopped every server, agent, task and etcd member ({len(left)} processes left)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", action="store_true",
                        help="keep the logs and data directories (printed at the end)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="yurt-cluster-demo-"))
    try:
        run(root)
    finally:
        if args.keep:
            say(f"logs and data kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
