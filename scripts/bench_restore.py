"""Benchmark: restart after a SIGKILL of the agent, with N raw_exec tasks of `sleep` running.

The agent is started the way users start it (`yurt agent`, ACLs on: every request carries the
management token its first start wrote, benchlib/agent_token.py), the job goes in through the
API, and everything is observed from outside: the API over loopback, the task processes in
/proc.
Steps: start the agent, run N allocations of one `sleep` task each, wait until all are
running, `kill -9` the agent (the tasks live on), start it again and measure, from the moment
the new agent process is spawned:

- until the API answers (`GET /v1/agent/self` with the token: the restarted agent loads its
  ACL state before it answers, as it does for every user);
- until every allocation is re-attached (the API lists N allocations `running`, none of them
  still restoring) — the "all running again" of the issue;
- the tasks counted in /proc: still exactly N, none started twice.

Then the job is stopped and purged and the agent stopped. A table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from benchlib.agent_token import agent_env, headers, wait_token
from benchlib.procs import children
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
YURT = ROOT / ".venv" / "bin" / "yurt"

JOB = """
job "restore" {
  group "g" {
    count = %(n)d
    task "sleep" {
      driver = "raw_exec"
      kill_timeout = "2s"
      config {
        command = "/bin/sleep"
        args    = ["%(marker)s"]
      }
      resources {
        cpu    = 1
        memory = 10
      }
      logs { disabled = true }
    }
  }
}
"""


def request(base: str, method: str, path: str, body: object | None = None,
            timeout: float = 30.0, token: str = "") -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method, headers=headers(token))
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read() or b"null")


def start_agent(data_dir: Path, port: int, pythonpath: str | None) -> subprocess.Popen[bytes]:
    env = agent_env()
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    with open(data_dir / "agent.log", "ab") as log:
        return subprocess.Popen([str(YURT), "agent", "--data-dir", str(data_dir),
                                 "--port", str(port)], stdout=subprocess.DEVNULL,
                                stderr=log, start_new_session=True, env=env)


def wait_api(base: str, data_dir: Path, deadline: float) -> str:
    """Once the agent of `data_dir` answers at `base`: the token to send it (the one its first
    start wrote; "" for an agent that admits anonymous requests)."""
    token = wait_token(base, data_dir, timeout=max(0.0, deadline - time.monotonic()))
    while True:
        try:
            request(base, "GET", "/v1/agent/self", timeout=1.0, token=token)
            return token
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.005)


def restored(base: str, n: int, token: str) -> bool:
    allocs = request(base, "GET", "/v1/allocations", token=token)
    running = [a for a in allocs if a["ClientStatus"] == "running"
               and "restoring" not in a["ClientDescription"].lower()]
    return len(running) >= n


def one_run(n: int, port: int, pythonpath: str | None = None) -> dict[str, float]:
    base = f"http://127.0.0.1:{port}"
    marker = f"3600.{os.getpid()}{port}"
    with tempfile.TemporaryDirectory(prefix="yurt-bench-restore-") as tmp:
        data_dir = Path(tmp)
        agent = start_agent(data_dir, port, pythonpath)
        token = ""
        try:
            token = wait_api(base, data_dir, time.monotonic() + 60)
            job = request(base, "POST", "/v1/jobs/parse",
                          {"JobHCL": JOB % {"n": n, "marker": marker}}, token=token)
            request(base, "POST", "/v1/jobs", {"Job": job}, token=token)
            deadline = time.monotonic() + 300
            while not restored(base, n, token):
                if time.monotonic() > deadline:
                    raise TimeoutError("the first start never had every task running")
                time.sleep(0.2)
            os.kill(agent.pid, signal.SIGKILL)
            agent.wait()
            before = len(children(marker))

            t0 = time.monotonic()
            agent = start_agent(data_dir, port, pythonpath)
            wait_api(base, data_dir, t0 + 60)
            api_at = time.monotonic() - t0
            while not restored(base, n, token):
                if time.monotonic() > t0 + 120:
                    raise TimeoutError("the restart never re-attached every task")
                time.sleep(0.01)
            all_at = time.monotonic() - t0
            after = len(children(marker))
            load = os.getloadavg()[0]
        finally:
            try:
                request(base, "DELETE", "/v1/job/restore?purge=true", token=token)
                end = time.monotonic() + 120
                while len(children(marker)) and time.monotonic() < end:
                    time.sleep(0.2)
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            agent.send_signal(signal.SIGTERM)
            try:
                agent.wait(timeout=60)
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.wait()
    return {"api_s": api_at, "all_running_s": all_at, "tasks_before": before,
            "tasks_after": after, "load1": load}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=1000, help="allocations (default 1000)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--port", type=int, default=14646)
    parser.add_argument("--pythonpath", help="run the agent with this PYTHONPATH (a directory "
                        "holding yurt/runtime, yurt/hooks, yurt/store of another checkout), "
                        "to compare before and after a change")
    args = parser.parse_args()
    runs = [one_run(args.n, args.port + i, args.pythonpath) for i in range(args.runs)]

    def median(key: str) -> float:
        return statistics.median(r[key] for r in runs)

    table = Table(title=f"restart after SIGKILL, N = {args.n}, {args.runs} runs")
    table.add_column("measure")
    table.add_column("median", justify="right")
    table.add_column("range", justify="right")
    for key, label in (("api_s", "API answering (s)"),
                       ("all_running_s", "all re-attached, from the API (s)"),
                       ("tasks_after", "tasks in /proc after"),
                       ("load1", "load average (1 min)")):
        values = [r[key] for r in runs]
        table.add_row(label, f"{median(key):.3f}", f"{min(values):.3f}–{max(values):.3f}")
    Console().print(table)
    print(json.dumps({"bench": "restore", "n": args.n, "runs": runs,
                      "api_s": median("api_s"), "all_running_s": median("all_running_s"),
                      "duplicates": max(r["tasks_after"] - args.n for r in runs)}))
    if any(r["tasks_after"] != args.n or r["tasks_before"] != args.n for r in runs):
        sys.exit("task count in /proc is not N: tasks were lost or duplicated")


if __name__ == "__main__":
    main()
