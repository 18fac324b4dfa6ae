"""Benchmark: what a real `yurt agent` costs while N raw_exec `sleep` tasks just run.

The agent is started the way users start it (`yurt agent` on a temporary data dir and a free
loopback port, ACLs on: this script's requests carry the management token its first start
wrote, benchlib/agent_token.py; nobody asks anything in the measured window, so the ACLs cost
nothing there), one job of N allocations × one `sleep 3600` task goes in through the HTTP API,
and once every allocation is running and the start burst has settled, the agent is measured
from outside through /proc, as the peers are:

- idle CPU: utime + stime of the agent's process over `--window` seconds, as % of one core;
- memory: USS (Private_Clean + Private_Dirty of /proc/PID/smaps_rollup) and RSS.

Then the job is stopped through the API and the agent is sent SIGTERM. A table, then one
JSON line (`{"bench": "runtime_idle", …}`). Run each size in turn; on this shared machine,
compare before/after runs taken in the same minute.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchlib.agent_token import agent_env, headers, wait_token
from benchlib.procs import cpu_seconds, memory
from benchlib.systems import free_port, wait_for

JOB = """
job "idle" {
  group "g" {
    count = %d
    task "sleep" {
      driver = "raw_exec"
      kill_timeout = "2s"
      config {
        command = "/bin/sleep"
        args    = ["3600"]
      }
      resources {
        cpu    = 1
        memory = 10
      }
    }
  }
}
"""


def call(base: str, token: str, method: str, path: str, body: bytes | None = None) -> Any:
    req = urllib.request.Request(base + path, data=body, method=method,
                                 headers={"Content-Type": "application/json", **headers(token)})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read() or b"null")


def running(base: str, token: str, n: int) -> bool:
    try:
        allocs = call(base, token, "GET", "/v1/job/idle/allocations")
    except OSError:
        return False
    return sum(a["ClientStatus"] == "running" for a in allocs) >= n


def measure(n: int, yurt_bin: str, settle: float, window: float) -> dict[str, Any]:
    from yurt.runtime.jobspec import encode_job, parse_job

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="yurt-idle-") as data:
        agent = subprocess.Popen([yurt_bin, "agent", "--data-dir", data, "--port", str(port)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 start_new_session=True, env=agent_env())
        try:
            token = wait_token(base, Path(data), 60, exited=agent.poll)
            wait_for(lambda: _answers(base, token), 60, "the API", pause=0.5)
            call(base, token, "POST", "/v1/jobs", encode_job(parse_job(JOB % n)))
            wait_for(lambda: running(base, token, n), 600, f"{n} running allocations",
                     pause=0.5)
            time.sleep(settle)
            before, t0 = cpu_seconds(agent.pid), time.monotonic()
            time.sleep(window)
            after, t1 = cpu_seconds(agent.pid), time.monotonic()
            used = memory(agent.pid)
            row: dict[str, Any] = {
                "tasks": n, "idle_cpu_pct": round(100 * (after - before) / (t1 - t0), 2),
                "uss_kib": used.uss // 1024, "rss_kib": used.rss // 1024,
                "pss_kib": used.pss // 1024, "loadavg": os.getloadavg()[0]}
            call(base, token, "DELETE", "/v1/job/idle")
            wait_for(lambda: all(a["ClientStatus"] != "running"
                                 for a in call(base, token, "GET", "/v1/job/idle/allocations")),
                     120, "the stop", pause=0.5)
            return row
        finally:
            agent.send_signal(signal.SIGTERM)
            try:
                agent.wait(60)
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.wait()


def _answers(base: str, token: str) -> bool:
    try:
        call(base, token, "GET", "/v1/agent/self")
    except OSError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("sizes", nargs="*", type=int, default=[500])
    parser.add_argument("--yurt-bin", default=str(Path(sys.executable).parent / "yurt"))
    parser.add_argument("--settle", type=float, default=10.0,
                        help="seconds between the last start and the measurement")
    parser.add_argument("--window", type=float, default=30.0, help="seconds of CPU measured")
    args = parser.parse_args()
    rows = [measure(n, args.yurt_bin, args.settle, args.window) for n in args.sizes]
    print(f"{'tasks':>6} {'idle CPU %':>10} {'USS MiB':>8} {'RSS MiB':>8} {'load':>5}")
    for r in rows:
        print(f"{r['tasks']:>6} {r['idle_cpu_pct']:>10} {r['uss_kib'] / 1024:>8.1f} "
              f"{r['rss_kib'] / 1024:>8.1f} {r['loadavg']:>5.2f}")
    print(json.dumps({"bench": "runtime_idle", "rows": rows}))


if __name__ == "__main__":
    main()
