"""Benchmark: event-stream fan-out, many subscribers at a steady event rate.

The agent is started the way users start it (`yurt agent`), and driven through its API: a job
of `--allocs` allocations (default 100) of a mock-driver task that exits after a second and is
restarted at once, so every allocation produces a steady stream of task events (Terminated,
Restarting, Started) and allocation updates. Then, on loopback, `--subscribers` subscribers
(default 200: half `GET /v1/event/stream`, half the websocket `/v1/event/ws`) follow the
stream for `--seconds`.

Reported, over the measuring window (after a warm-up):
- the event rate (records a subscriber receives per second);
- the lag of every task event at every subscriber: receive time minus the event's own `Time`
  (both wall clock, same machine), p50 and p95;
- records lost to full buffers (`Lost` counts);
- the agent's CPU (utime + stime from /proc, in cores) with no subscriber and with all of
  them, at the same event rate.

The subscribers run in two client processes (HTTP, websocket) so the reader is not the
bottleneck on a 2-core machine. A table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import resource
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_restore import request, start_agent, wait_api
from benchlib.procs import cpu_seconds

TIME = re.compile(rb'"Time":(\d+)')
LOST = re.compile(rb'"Lost":(\d+)')


def job(allocs: int) -> dict[str, Any]:
    return {"Job": {"ID": "events", "Type": "service", "TaskGroups": [{
        "Name": "g", "Count": allocs,
        "RestartPolicy": {"Attempts": 100_000, "Interval": 24 * 3600 * 10**9, "Delay": 0,
                          "Mode": "delay"},
        "Tasks": [{"Name": "t", "Driver": "mock_driver", "Config": {"run_for": "1s"},
                   "Resources": {"CPU": 1, "MemoryMB": 10}}]}]}}


class Tally:
    def __init__(self, start: float, end: float) -> None:
        self.start, self.end = start, end
        self.lags: list[float] = []
        self.records = 0
        self.lost = 0
        self.bytes = 0
        self.dropped = 0  # subscriptions the agent ended before the measuring window did

    def line(self, line: bytes) -> None:
        now = time.time()
        if not (self.start <= now < self.end) or line == b"{}":
            return
        self.records += 1
        self.bytes += len(line)
        if m := LOST.search(line):
            self.lost += int(m.group(1))
        if b'"Topic":"Task"' in line and (m := TIME.search(line)):
            self.lags.append(now - int(m.group(1)) / 1e9)


async def follow_http(port: int, tally: Tally, until: float) -> None:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(b"GET /v1/event/stream HTTP/1.1\r\nHost: bench\r\n\r\n")
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += await stream.receive_some(65536)
        buf = buf.partition(b"\r\n\r\n")[2]
        pending = b""  # body bytes, chunk framing removed, not yet a whole line
        with trio.move_on_after(until - time.time()):  # `until` is wall-clock time
            while True:
                while True:  # take every whole chunk in `buf`
                    size_line, sep, rest = buf.partition(b"\r\n")
                    if not sep:
                        break
                    size = int(size_line, 16)
                    if len(rest) < size + 2:
                        break
                    pending += rest[:size]
                    buf = rest[size + 2:]
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    tally.line(line)
                data = await stream.receive_some(65536)
                if not data:
                    tally.dropped += 1
                    return
                buf += data


async def follow_ws(port: int, tally: Tally, until: float) -> None:
    from trio_websocket import ConnectionClosed, open_websocket_url

    # The deadline outside: leaving it cancels the closing handshake as well.
    with trio.move_on_after(until - time.time()):  # `until` is wall-clock time
        try:
            async with open_websocket_url(f"ws://127.0.0.1:{port}/v1/event/ws") as ws:
                while True:
                    message = await ws.get_message()
                    tally.line(message if isinstance(message, bytes) else message.encode())
        except ConnectionClosed:
            tally.dropped += 1


def client(kind: str, port: int, count: int, start: float, end: float,
           out: multiprocessing.Queue[dict[str, Any]]) -> None:
    tally = Tally(start, end)
    follow = follow_http if kind == "http" else follow_ws

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(count):
                nursery.start_soon(follow, port, tally, end + 0.5)

    trio.run(main)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out.put({"lags": tally.lags, "records": tally.records, "lost": tally.lost,
             "dropped": tally.dropped, "cpu_s": usage.ru_utime + usage.ru_stime,
             "bytes": tally.bytes})


def quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def one_run(args: argparse.Namespace, port: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="yurt-bench-events-") as tmp:
        agent = start_agent(Path(tmp), port, args.pythonpath)
        try:
            base = f"http://127.0.0.1:{port}"
            wait_api(base, time.monotonic() + 60)
            request(base, "POST", "/v1/jobs", job(args.allocs))
            time.sleep(args.warmup)  # the restart cycle reaches its steady rate
            c0, t0 = cpu_seconds(agent.pid), time.monotonic()
            time.sleep(args.seconds / 2)
            idle_cores = (cpu_seconds(agent.pid) - c0) / (time.monotonic() - t0)

            out: multiprocessing.Queue[dict[str, Any]] = multiprocessing.Queue()
            start = time.time() + args.warmup
            end = start + args.seconds
            half = round(args.subscribers * args.websocket_share)
            procs = [multiprocessing.Process(target=client, args=(kind, port, n, start, end,
                                                                  out))
                     for kind, n in (("http", args.subscribers - half), ("ws", half)) if n]
            for p in procs:
                p.start()
            time.sleep(max(0.0, start - time.time()))
            c0, t0 = cpu_seconds(agent.pid), time.monotonic()
            time.sleep(max(0.0, end - time.time()))
            cores = (cpu_seconds(agent.pid) - c0) / (time.monotonic() - t0)
            load = os.getloadavg()[0]
            results = [out.get(timeout=120) for _ in procs]
            for p in procs:
                p.join(timeout=30)
        finally:
            agent.send_signal(signal.SIGINT)
            agent.wait(timeout=60)
    lags = [lag for r in results for lag in r["lags"]]
    records = sum(r["records"] for r in results)
    return {"events_per_s": records / args.subscribers / args.seconds,
            "lag_p50_s": quantile(lags, 0.5), "lag_p95_s": quantile(lags, 0.95),
            "lost": sum(r["lost"] for r in results),
            "dropped": sum(r["dropped"] for r in results), "agent_cores": cores,
            "record_bytes": sum(r["bytes"] for r in results) / max(1, records),
            "client_cpu_s": sum(r["cpu_s"] for r in results),
            "agent_cores_no_subscribers": idle_cores, "load1": load}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--allocs", type=int, default=100)
    parser.add_argument("--subscribers", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--websocket-share", type=float, default=0.5,
                        help="fraction of the subscribers on the websocket (default 0.5)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--port", type=int, default=14746)
    parser.add_argument("--pythonpath", help="run the agent with this PYTHONPATH (another "
                        "checkout's yurt/runtime, yurt/hooks, yurt/store), to compare")
    args = parser.parse_args()
    runs = [one_run(args, args.port + i) for i in range(args.runs)]

    table = Table(title=f"event fan-out: {args.subscribers} subscribers, {args.allocs} "
                        f"allocations restarting every second, {args.runs} runs")
    table.add_column("measure")
    table.add_column("median", justify="right")
    table.add_column("range", justify="right")
    labels = {"events_per_s": "records/s per subscriber", "lag_p50_s": "lag p50 (s)",
              "lag_p95_s": "lag p95 (s)", "lost": "records lost (all subscribers)",
              "dropped": "subscriptions ended early",
              "record_bytes": "mean record size (bytes)",
              "client_cpu_s": "subscriber processes' CPU (s, whole run)",
              "agent_cores": "agent CPU, subscribed (cores)",
              "agent_cores_no_subscribers": "agent CPU, no subscriber (cores)",
              "load1": "load average (1 min)"}
    summary = {}
    for key, label in labels.items():
        values = [r[key] for r in runs]
        summary[key] = statistics.median(values)
        table.add_row(label, f"{summary[key]:.3f}", f"{min(values):.3f}–{max(values):.3f}")
    Console().print(table)
    print(json.dumps({"bench": "events", "allocs": args.allocs,
                      "subscribers": args.subscribers, **summary, "runs": runs}))


if __name__ == "__main__":
    main()
