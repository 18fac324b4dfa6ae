"""Benchmark: event-stream fan-out, many subscribers at a steady event rate.

The agent is started the way users start it (`yurt agent`, ACLs on: every request and every
subscription carries the management token its first start wrote, benchlib/agent_token.py, so
each subscription passes the ACL check a user's does), and driven through its API: a job
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
  them, at the same event rate, and the subscriber processes' CPU over the same window.

The subscribers must not be the bottleneck, or the lag measures the bench. At 200 subscribers
the agent sends some 200–500 MB/s, so the readers are lean: one `selectors` loop per process
over raw sockets, an incremental parser for HTTP chunks or websocket frames that never copies
what it has already parsed, one clock read per `recv`, and a plain substring test per line.
They run in `--client-procs` processes (default 4, each with both kinds of subscriber), so no
single reader process is the limit. (Before, 100 trio tasks per process re-copied their whole
receive buffer per chunk and went through wsproto; that cost more CPU than the agent itself.)

`--yurt-bin` may be given several times (say this checkout's and main's): the builds then take
turns, run by run, and the table has a column per build. A table, then one JSON line.
"""

from __future__ import annotations

import argparse
import base64
import json
import multiprocessing
import os
import re
import resource
import selectors
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_restore import YURT, request, wait_api
from benchlib.agent_token import agent_env, header_line
from benchlib.procs import cpu_seconds

TIME = re.compile(rb'"Time":(\d+)')
LOST = re.compile(rb'"Lost":(\d+)\}$')
RECV = 1 << 18


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

    def line(self, line: bytes | bytearray, now: float) -> None:
        """One record, received at `now` (wall clock)."""
        if not (self.start <= now < self.end) or line == b"{}":
            return
        self.records += 1
        self.bytes += len(line)
        # `Lost` is the record's last field (see eventstream.with_lost): look at the tail only.
        if b'"Lost"' in line[-32:] and (m := LOST.search(line, len(line) - 32)):
            self.lost += int(m.group(1))
        if b'"Topic":"Task"' in line and (m := TIME.search(line)):
            self.lags.append(now - int(m.group(1)) / 1e9)


def _past_head(buf: bytearray, status: bytes) -> int:
    """Where the body starts after a response head with `status` (-1: the head is not all
    in yet); another status raises with the head as its message."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return -1
    if not buf.startswith(status):
        raise RuntimeError(bytes(buf[:end]).decode())
    return end + 4


class HttpReader:
    """`GET /v1/event/stream`: a chunked NDJSON body, parsed as it arrives."""

    def __init__(self, tally: Tally) -> None:
        self.tally = tally
        self.buf = bytearray()
        self.body = bytearray()  # chunk data not yet a whole line
        self.head = False
        self.left = 0  # bytes of the current chunk's data still to come

    @staticmethod
    def request(token: str = "") -> bytes:
        return (b"GET /v1/event/stream HTTP/1.1\r\nHost: localhost\r\n" + header_line(token)
                + b"\r\n")

    def feed(self, data: bytes, now: float) -> None:
        buf = self.buf
        buf += data
        pos = 0
        if not self.head:
            pos = _past_head(buf, b"HTTP/1.1 200")
            if pos < 0:
                return
            self.head = True
        while pos < len(buf):
            if self.left == 0:  # a chunk-size line, or the empty line ending a chunk's data
                nl = buf.find(b"\r\n", pos)
                if nl < 0:
                    break
                size_line, pos = buf[pos:nl], nl + 2
                if size_line:
                    self.left = int(size_line, 16)
            else:
                take = min(self.left, len(buf) - pos)
                self.body += buf[pos:pos + take]
                pos += take
                self.left -= take
        del buf[:pos]
        body, start = self.body, 0
        while (nl := body.find(b"\n", start)) >= 0:
            self.tally.line(body[start:nl], now)
            start = nl + 1
        del body[:start]


class WsReader:
    """`/v1/event/ws`: unmasked server frames, one text message per record."""

    def __init__(self, tally: Tally) -> None:
        self.tally = tally
        self.buf = bytearray()
        self.message = bytearray()
        self.head = False

    @staticmethod
    def request(token: str = "") -> bytes:
        key = base64.b64encode(os.urandom(16))
        return (b"GET /v1/event/ws HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n"
                b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                b"Sec-WebSocket-Key: " + key + b"\r\n" + header_line(token) + b"\r\n")

    def feed(self, data: bytes, now: float) -> None:
        buf = self.buf
        buf += data
        pos = 0
        if not self.head:
            pos = _past_head(buf, b"HTTP/1.1 101")
            if pos < 0:
                return
            self.head = True
        while len(buf) - pos >= 2:
            first, size, head = buf[pos], buf[pos + 1] & 0x7F, 2
            if size == 126:
                size, head = int.from_bytes(buf[pos + 2:pos + 4]), 4
            elif size == 127:
                size, head = int.from_bytes(buf[pos + 2:pos + 10]), 10
            if len(buf) - pos < head + size:
                break
            opcode = first & 0x0F
            if opcode == 8:
                raise EOFError("closed by the agent")
            if opcode in (0, 1, 2):
                self.message += buf[pos + head:pos + head + size]
                if first & 0x80:
                    self.tally.line(self.message, now)
                    self.message = bytearray()
            pos += head + size
        del buf[:pos]


def client(kinds: list[str], port: int, start: float, end: float,
           out: multiprocessing.Queue[dict[str, Any]], token: str = "") -> None:
    """Follow the stream with one subscriber per item of `kinds` until `end` (+0.5 s), each
    sending `token`."""
    tallies = {kind: Tally(start, end) for kind in set(kinds)}
    selector = selectors.DefaultSelector()
    for kind in kinds:
        reader = HttpReader(tallies[kind]) if kind == "http" else WsReader(tallies[kind])
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(reader.request(token))
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ, reader)
    cpu_start = cpu_end = 0.0
    until = end + 0.5
    while (now := time.time()) < until:
        if not cpu_start and now >= start:
            cpu_start = time.process_time()
        if not cpu_end and now >= end:
            cpu_end = time.process_time()
        for key, _ in selector.select(min(0.1, until - now)):
            sock = cast(socket.socket, key.fileobj)
            data = sock.recv(RECV)
            try:
                if not data:
                    raise EOFError("closed by the agent")
                key.data.feed(data, time.time())
            except EOFError:
                if now < end:
                    key.data.tally.dropped += 1
                selector.unregister(sock)
                sock.close()
    cpu_end = cpu_end or time.process_time()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out.put({"kinds": {kind: {"lags": t.lags, "records": t.records, "lost": t.lost,
                              "dropped": t.dropped, "bytes": t.bytes}
                       for kind, t in tallies.items()},
             "cpu_s": usage.ru_utime + usage.ru_stime, "window_cpu_s": cpu_end - cpu_start})


def quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def start_agent(yurt: str, data_dir: Path, port: int) -> subprocess.Popen[bytes]:
    with open(data_dir / "agent.log", "ab") as log:
        return subprocess.Popen([yurt, "agent", "--data-dir", str(data_dir), "--port",
                                 str(port)], stdout=subprocess.DEVNULL, stderr=log,
                                start_new_session=True, env=agent_env())


def split(args: argparse.Namespace) -> list[list[str]]:
    """The subscribers' kinds, dealt out to the client processes."""
    ws = round(args.subscribers * args.websocket_share)
    kinds = ["http"] * (args.subscribers - ws) + ["ws"] * ws
    procs = max(1, min(args.client_procs, len(kinds)))
    return [kinds[i::procs] for i in range(procs)]


def one_run(args: argparse.Namespace, yurt: str, port: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="yurt-bench-events-") as tmp:
        agent = start_agent(yurt, Path(tmp), port)
        try:
            base = f"http://127.0.0.1:{port}"
            token = wait_api(base, Path(tmp), time.monotonic() + 60)
            request(base, "POST", "/v1/jobs", job(args.allocs), token=token)
            time.sleep(args.warmup)  # the restart cycle reaches its steady rate
            c0, t0 = cpu_seconds(agent.pid), time.monotonic()
            time.sleep(args.seconds / 2)
            idle_cores = (cpu_seconds(agent.pid) - c0) / (time.monotonic() - t0)

            out: multiprocessing.Queue[dict[str, Any]] = multiprocessing.Queue()
            start = time.time() + args.warmup
            end = start + args.seconds
            procs = [multiprocessing.Process(target=client,
                                             args=(kinds, port, start, end, out, token))
                     for kinds in split(args) if kinds]
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
    tallies = [t for r in results for t in r["kinds"].values()]
    records = sum(t["records"] for t in tallies)
    run = {"events_per_s": records / args.subscribers / args.seconds,
           "lost": sum(t["lost"] for t in tallies),
           "dropped": sum(t["dropped"] for t in tallies), "agent_cores": cores,
           "record_bytes": sum(t["bytes"] for t in tallies) / max(1, records),
           "client_cores": sum(r["window_cpu_s"] for r in results) / args.seconds,
           "client_cpu_s": sum(r["cpu_s"] for r in results),
           "agent_cores_no_subscribers": idle_cores, "load1": load}
    for kind in ("", "http", "ws"):
        lags = [lag for r in results for k, t in r["kinds"].items() if kind in ("", k)
                for lag in t["lags"]]
        suffix = f"_{kind}" if kind else ""
        run[f"lag_p50_s{suffix}"] = quantile(lags, 0.5)
        run[f"lag_p95_s{suffix}"] = quantile(lags, 0.95)
    return run


LABELS = {"events_per_s": "records/s per subscriber", "lag_p50_s": "lag p50 (s)",
          "lag_p95_s": "lag p95 (s)",
          "lag_p50_s_http": "lag p50, HTTP stream (s)",
          "lag_p95_s_http": "lag p95, HTTP stream (s)",
          "lag_p50_s_ws": "lag p50, websocket (s)", "lag_p95_s_ws": "lag p95, websocket (s)",
          "lost": "records lost (all subscribers)",
          "dropped": "subscriptions ended early",
          "record_bytes": "mean record size (bytes)",
          "agent_cores": "agent CPU, subscribed (cores)",
          "agent_cores_no_subscribers": "agent CPU, no subscriber (cores)",
          "client_cores": "subscriber processes' CPU in the window (cores)",
          "client_cpu_s": "subscriber processes' CPU (s, whole run)",
          "load1": "load average (1 min)"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--allocs", type=int, default=100)
    parser.add_argument("--subscribers", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--websocket-share", type=float, default=0.5,
                        help="fraction of the subscribers on the websocket (default 0.5)")
    parser.add_argument("--client-procs", type=int, default=4,
                        help="processes the subscribers are spread over (default 4)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--port", type=int, default=14746)
    parser.add_argument("--yurt-bin", action="append",
                        help=f"the `yurt` to run; repeat to compare builds, run by run "
                             f"(default {YURT})")
    args = parser.parse_args()
    bins: list[str] = args.yurt_bin or [str(YURT)]
    runs: dict[str, list[dict[str, float]]] = {b: [] for b in bins}
    port = args.port
    for _ in range(args.runs):
        for yurt in bins:
            runs[yurt].append(one_run(args, yurt, port))
            port += 1

    table = Table(title=f"event fan-out: {args.subscribers} subscribers, {args.allocs} "
                        f"allocations restarting every second, {args.runs} runs: "
                        f"median (range)")
    table.add_column("measure")
    for yurt in bins:
        table.add_column(yurt, justify="right")
    summary: dict[str, dict[str, float]] = {b: {} for b in bins}
    for key, label in LABELS.items():
        cells = []
        for yurt in bins:
            values = [r[key] for r in runs[yurt]]
            summary[yurt][key] = statistics.median(values)
            cells.append(f"{summary[yurt][key]:.3f} ({min(values):.3f}–{max(values):.3f})")
        table.add_row(label, *cells)
    Console().print(table)
    print(json.dumps({"bench": "events", "allocs": args.allocs,
                      "subscribers": args.subscribers,
                      "builds": {b: {**summary[b], "runs": runs[b]} for b in bins}}))


if __name__ == "__main__":
    main()
