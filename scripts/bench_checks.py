"""Benchmark: what a real `yurt agent` costs running N http service checks.

The agent is started as users start it (`yurt agent` on a temporary data dir and a free
loopback port, ACLs on: this script's requests carry the management token its first start
wrote, benchlib/systems.py; the probes are the agent's own and no request is made during the
measured window, so the ACLs add nothing to it). A local HTTP server (a trio process of its
own, so its CPU is not counted) answers the checks. One job goes in through the HTTP API: one
group, one raw_exec `sleep 3600` task, and N group services, each with one http check every
`--interval` seconds against that server. Once every check has passed, and after `--settle`
seconds, the agent's CPU (utime + stime of its process, from the kernel's per-process clock or
/proc/<pid>/stat) is measured over `--window` seconds, as % of one core, with the probes the
server saw meanwhile. The same is measured for the job without services (the baseline: an agent
idling with one task).

A table, then one JSON line (`{"bench": "checks", …}`). The target is well under 1 % of a
core for 1,000 checks at 10 s (100 probes a second). Measured on the 2-core development VM:
idle 0.007 %, 100 checks 0.09 %, 1,000 checks 0.57-0.63 % (it was 5.0 % with every probe
through httpx2; see runtime/client/checks/http1.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchlib.procs import cpu_seconds, memory
from benchlib.systems import Yurt, free_port, wait_for

SECOND = 1_000_000_000


def job(n: int, server_port: int, interval: float) -> dict[str, Any]:
    services = [{"Name": f"s{i}", "PortLabel": str(server_port), "Address": "127.0.0.1",
                 "Checks": [{"Name": f"ok{i}", "Type": "http", "Path": "/ok",
                             "Interval": int(interval * SECOND), "Timeout": 2 * SECOND}]}
                for i in range(n)]
    task = {"Name": "sleep", "Driver": "raw_exec", "KillTimeout": 2 * SECOND,
            "Config": {"command": "/bin/sleep", "args": ["3600"]},
            "Resources": {"CPU": 1, "MemoryMB": 10}}
    return {"Job": {"ID": "checks", "Type": "service", "TaskGroups": [
        {"Name": "g", "Tasks": [task], "Services": services}]}}


def hits(server: str) -> int:
    """The `/ok` requests the check server answered so far."""
    with urllib.request.urlopen(f"{server}/count", timeout=30) as resp:
        return int(resp.read())


def _server_answers(server: str) -> bool:
    try:
        hits(server)
    except OSError:
        return False
    return True


def passing(agent: Yurt, n: int) -> bool:
    allocs = agent.http("GET", "/v1/job/checks/allocations")
    running = [a for a in allocs if a["ClientStatus"] == "running"]
    if not running:
        return False
    if n == 0:
        return True
    results = agent.http("GET", f"/v1/client/allocation/{running[0]['ID']}/checks")
    return sum(r["Status"] == "success" for r in results.values()) >= n


def measure(n: int, yurt_bin: str, server: str, interval: float, settle: float,
            window: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="yurt-checks-") as workdir:
        agent = Yurt(Path(workdir), Path(yurt_bin))
        try:
            agent.start()
            server_port = int(server.rsplit(":", 1)[1])
            agent.http("POST", "/v1/jobs", job(n, server_port, interval))
            wait_for(lambda: passing(agent, n), 300, f"{n} passing checks", pause=0.5)
            time.sleep(settle)
            hits0 = hits(server)
            before, t0 = cpu_seconds(agent.pid), time.monotonic()
            time.sleep(window)
            after, t1 = cpu_seconds(agent.pid), time.monotonic()
            hits1 = hits(server)
            used = memory(agent.pid)
            row: dict[str, Any] = {
                "checks": n, "interval_s": interval, "window_s": round(t1 - t0, 1),
                "probes": hits1 - hits0,
                "cpu_pct": round(100 * (after - before) / (t1 - t0), 3),
                "rss_kib": used.rss // 1024, "loadavg": os.getloadavg()[0]}
            return row
        finally:
            # The agent leaves tasks running when it exits: stop the job's first.
            try:
                agent.http("DELETE", "/v1/job/checks")
                wait_for(lambda: not any(a["ClientStatus"] == "running" for a in agent.http(
                    "GET", "/v1/job/checks/allocations")), 60, "the job's stop", pause=0.5)
            finally:
                agent.shutdown()
                agent.cleanup()


# --------------------------------------------------------------------------- the server


def serve(port: int) -> None:
    """`/ok` answers 200 (keep-alive), `/count` the number of `/ok` requests so far."""
    import trio

    hits = 0

    async def handle(stream: trio.SocketStream) -> None:
        nonlocal hits
        buffer = b""
        try:
            while True:
                while b"\r\n\r\n" not in buffer:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    buffer += data
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                path = head.split(b" ", 2)[1]
                if path == b"/count":
                    body = str(hits).encode()
                else:
                    hits += 1
                    body = b"ok"
                await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s"
                                      % (len(body), body))
        except trio.BrokenResourceError:
            return

    trio.run(trio.serve_tcp, handle, port)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("sizes", nargs="*", type=int, default=[0, 100, 1000])
    parser.add_argument("--yurt-bin", default=str(Path(sys.executable).parent / "yurt"))
    parser.add_argument("--interval", type=float, default=10.0, help="check interval (s)")
    parser.add_argument("--settle", type=float, default=15.0,
                        help="seconds between every check passing and the measurement")
    parser.add_argument("--window", type=float, default=60.0, help="seconds of CPU measured")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    server_port = free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(server_port)],
                              start_new_session=True)
    try:
        base = f"http://127.0.0.1:{server_port}"
        wait_for(lambda: _server_answers(base), 30, "the check server", pause=0.2)
        rows = [measure(n, args.yurt_bin, base, args.interval, args.settle, args.window)
                for n in args.sizes]
    finally:
        server.terminate()
        server.wait(10)
    print(f"{'checks':>7} {'interval':>8} {'probes':>7} {'agent CPU %':>11} {'RSS MiB':>8} "
          f"{'load':>5}")
    for r in rows:
        print(f"{r['checks']:>7} {r['interval_s']:>7}s {r['probes']:>7} {r['cpu_pct']:>11} "
              f"{r['rss_kib'] / 1024:>8.1f} {r['loadavg']:>5.2f}")
    print(json.dumps({"bench": "checks", "rows": rows}))


if __name__ == "__main__":
    main()
