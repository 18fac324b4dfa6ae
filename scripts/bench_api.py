"""Benchmark: the HTTP API under load, on loopback, against `yurt agent` as users start it.

As users start it means ACLs on: every request (the load's, the blocking queries', the
subscribers') carries the management token the agent's first start wrote
(benchlib/agent_token.py), so each one pays the ACL check (token lookup, cached) and the
numbers include it.

Measured, in this order, on one agent holding `--allocs` (default 1,000) running allocations of
mock-driver tasks (10 jobs; a mock task costs no process, so the load is the API's own):
- `GET /v1/jobs` and `GET /v1/allocations`: requests/s and latency p50/p99, once with one
  connection (latency without queueing) and once with `--conns` keep-alive connections spread
  over `--procs` load processes (throughput);
- blocking-query wake-up: `GET /v1/jobs?index=N` is parked, then a job is updated; the time
  from sending the update to receiving the blocking answer, `--wakeups` times (a query that
  answers before the update was sent woke for another change: counted, not timed);
- event-stream fan-out: `--subscribers` (default 100) `GET /v1/event/stream` subscribers
  while a job of 20 mock tasks exits and restarts every second; the lag of every task event at
  every subscriber (receive time minus the event's own `Time`), p50/p95, and records lost.

The load generator must not be what is measured: each load process runs one `selectors` loop
over raw keep-alive sockets, sends the next request as soon as a response is complete, and
parses only the response head (Content-Length) — no HTTP library, no JSON decoding. The
subscribers are bench_events' lean readers (same module, reused). The load average is printed
with the results, as this machine is shared.

A table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import select
import selectors
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_events import client as subscriber_client
from bench_events import job as restarting_job
from bench_events import quantile
from bench_restore import YURT, request, wait_api
from benchlib.agent_token import agent_env, header_line
from benchlib.procs import stop_agent

JOBS = 10
RECV = 1 << 18


def mock_job(job_id: str, count: int, meta: dict[str, str] | None = None) -> dict[str, Any]:
    task = {"Name": "t", "Driver": "mock_driver", "Config": {"run_for": "24h"},
            "Resources": {"CPU": 1, "MemoryMB": 10}}
    return {"Job": {"ID": job_id, "Type": "service", "Meta": meta or {},
                    "TaskGroups": [{"Name": "g", "Count": count, "Tasks": [task]}]}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Exchange:
    """One keep-alive connection: parse a response head, skip `Content-Length` bytes."""

    def __init__(self, port: int, raw_request: bytes) -> None:
        self.port = port
        self.sock = self.connect()
        self.raw = raw_request
        self.buf = bytearray()
        self.need = -1  # bytes of the whole response once its head is in; -1: head not yet
        self.sent = 0.0
        self.status = b""
        self.headers = b""

    def connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def closing(self) -> bool:
        """The agent said it closes this connection after the response (hypercorn does so
        after `keep_alive_max_requests`, 1,000 by default)."""
        return self.header(b"connection") == b"close"

    def send(self) -> None:
        self.buf.clear()
        self.need = -1
        self.sent = time.perf_counter()
        self.sock.sendall(self.raw)

    def feed(self, data: bytes) -> bool:
        """True once the whole response is in."""
        self.buf += data
        if self.need < 0:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return False
            head = bytes(self.buf[:end]).lower()
            self.status = head[9:12]
            self.headers = head
            at = head.find(b"content-length:")
            if at < 0:
                raise RuntimeError(f"no Content-Length in {head[:200]!r}")
            stop = head.find(b"\r\n", at)
            self.need = end + 4 + int(head[at + 15:stop if stop >= 0 else len(head)])
        return len(self.buf) >= self.need

    def header(self, name: bytes) -> bytes:
        at = self.headers.find(b"\r\n" + name + b":")
        if at < 0:
            return b""
        end = self.headers.find(b"\r\n", at + 2)
        return self.headers[at + len(name) + 3:end if end > 0 else None].strip()


def load(port: int, path: str, conns: int, seconds: float,
         out: multiprocessing.Queue[dict[str, Any]], token: str = "") -> None:
    """Closed loop over `conns` connections for `seconds`: every latency, and errors."""
    raw = (f"GET {path} HTTP/1.1\r\nHost: localhost\r\n".encode() + header_line(token)
           + b"\r\n")
    selector = selectors.DefaultSelector()
    exchanges = [Exchange(port, raw) for _ in range(conns)]
    end = time.perf_counter() + seconds
    for ex in exchanges:
        selector.register(ex.sock, selectors.EVENT_READ, ex)
        ex.send()
    latencies: list[float] = []
    errors = reconnects = 0
    open_ = len(exchanges)
    while open_:
        for key, _ in selector.select(1.0):
            ex = cast(Exchange, key.data)
            data = ex.sock.recv(RECV)
            if not data:
                raise RuntimeError("connection closed by the agent")
            if ex.feed(data):
                now = time.perf_counter()
                latencies.append(now - ex.sent)
                errors += ex.status != b"200"
                if now < end:
                    if ex.closing():
                        selector.unregister(ex.sock)
                        ex.sock.close()
                        ex.sock = ex.connect()
                        selector.register(ex.sock, selectors.EVENT_READ, ex)
                        reconnects += 1
                    ex.send()
                else:
                    selector.unregister(ex.sock)
                    ex.sock.close()
                    open_ -= 1
    out.put({"latencies": latencies, "errors": errors, "reconnects": reconnects})


def throughput(port: int, path: str, conns: int, procs: int, seconds: float,
               token: str = "") -> dict[str, float]:
    out: multiprocessing.Queue[dict[str, Any]] = multiprocessing.Queue()
    shares = [conns // procs + (i < conns % procs) for i in range(procs)]
    workers = [multiprocessing.Process(target=load, args=(port, path, n, seconds, out, token))
               for n in shares if n]
    start = time.perf_counter()
    for w in workers:
        w.start()
    results = [out.get(timeout=seconds + 120) for _ in workers]
    elapsed = time.perf_counter() - start
    for w in workers:
        w.join(timeout=30)
    lat = [x for r in results for x in r["latencies"]]
    return {"rps": len(lat) / elapsed, "p50_ms": quantile(lat, 0.5) * 1e3,
            "p99_ms": quantile(lat, 0.99) * 1e3, "requests": len(lat),
            "errors": sum(r["errors"] for r in results),
            "reconnects": sum(r["reconnects"] for r in results)}


def wakeups(port: int, n: int, token: str = "") -> dict[str, float]:
    """Park `GET /v1/jobs?index=N`, update a job, time until the parked query answers."""
    auth = header_line(token)
    update = Exchange(port, b"")
    probe = Exchange(port, b"GET /v1/jobs HTTP/1.1\r\nHost: localhost\r\n" + auth + b"\r\n")
    lat: list[float] = []
    early = 0
    for i in range(n):
        probe.send()
        while not probe.feed(probe.sock.recv(RECV)):
            pass
        index = int(probe.header(b"x-nomad-index"))
        parked = Exchange(port, f"GET /v1/jobs?index={index}&wait=60s HTTP/1.1\r\n"
                                f"Host: localhost\r\n".encode() + auth + b"\r\n")
        parked.send()
        # Give the query time to reach the agent and park; one that answers meanwhile woke
        # for a change that is not ours.
        ready, _, _ = select.select([parked.sock], [], [], 0.05)
        if ready:
            early += 1
            parked.sock.close()
            continue
        body = json.dumps(mock_job("wake", 1, {"i": str(i)})).encode()
        update.raw = (b"PUT /v1/jobs HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json"
                      b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n" + auth
                      + b"\r\n" + body)
        update.send()
        sent = update.sent
        while not parked.feed(parked.sock.recv(RECV)):
            pass
        lat.append(time.perf_counter() - sent)
        if int(parked.header(b"x-nomad-index")) <= index:
            raise RuntimeError("the blocking query answered without a newer index")
        parked.sock.close()
        while not update.feed(update.sock.recv(RECV)):
            pass
        if update.status != b"200":
            raise RuntimeError(f"job update answered {update.status!r}")
    return {"wake_p50_ms": quantile(lat, 0.5) * 1e3, "wake_p99_ms": quantile(lat, 0.99) * 1e3,
            "wake_max_ms": max(lat) * 1e3 if lat else float("nan"), "wake_early": early,
            "wake_n": len(lat)}


def fanout(port: int, subscribers: int, procs: int, seconds: float,
           warmup: float, token: str = "") -> dict[str, float]:
    out: multiprocessing.Queue[dict[str, Any]] = multiprocessing.Queue()
    start = time.time() + warmup
    end = start + seconds
    kinds = ["http"] * subscribers
    workers = [multiprocessing.Process(target=subscriber_client,
                                       args=(kinds[i::procs], port, start, end, out, token))
               for i in range(procs) if kinds[i::procs]]
    for w in workers:
        w.start()
    results = [out.get(timeout=seconds + warmup + 120) for _ in workers]
    for w in workers:
        w.join(timeout=30)
    tallies = [t for r in results for t in r["kinds"].values()]
    lags = [lag for t in tallies for lag in t["lags"]]
    return {"fanout_lag_p50_ms": quantile(lags, 0.5) * 1e3,
            "fanout_lag_p95_ms": quantile(lags, 0.95) * 1e3,
            "fanout_events_per_s": sum(t["records"] for t in tallies) / subscribers / seconds,
            "fanout_lost": sum(t["lost"] for t in tallies),
            "fanout_dropped": sum(t["dropped"] for t in tallies)}


def running(base: str, token: str) -> int:
    return sum(a["ClientStatus"] == "running"
               for a in request(base, "GET", "/v1/allocations", token=token))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--allocs", type=int, default=1000)
    p.add_argument("--seconds", type=float, default=10.0, help="per throughput measurement")
    p.add_argument("--conns", type=int, default=8)
    p.add_argument("--procs", type=int, default=2, help="load processes")
    p.add_argument("--wakeups", type=int, default=50)
    p.add_argument("--subscribers", type=int, default=100)
    p.add_argument("--subscriber-procs", type=int, default=4)
    p.add_argument("--yurt-bin", default=str(YURT))
    args = p.parse_args()

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    results: dict[str, Any] = {"allocs": args.allocs, "load1_start": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="yurt-bench-api-") as tmp:
        with open(Path(tmp) / "agent.log", "ab") as log:
            agent = subprocess.Popen([args.yurt_bin, "agent", "--data-dir", f"{tmp}/data",
                                      "--port", str(port)], stdout=subprocess.DEVNULL,
                                     stderr=log, start_new_session=True, env=agent_env())
        try:
            token = wait_api(base, Path(tmp) / "data", time.monotonic() + 60)
            per_job = [args.allocs // JOBS + (i < args.allocs % JOBS) for i in range(JOBS)]
            for i, count in enumerate(per_job):
                request(base, "PUT", "/v1/jobs", mock_job(f"load-{i}", count), token=token)
            deadline = time.monotonic() + 600
            while (n := running(base, token)) < args.allocs:
                if time.monotonic() > deadline:
                    raise SystemExit(f"only {n} of {args.allocs} allocations running")
                time.sleep(0.5)
            rows: dict[str, dict[str, float]] = {}
            for path in ("/v1/jobs", "/v1/allocations"):
                rows[f"GET {path}, 1 connection"] = throughput(port, path, 1, 1, args.seconds,
                                                               token)
                rows[f"GET {path}, {args.conns} connections"] = throughput(
                    port, path, args.conns, args.procs, args.seconds, token)
            results["load1_gets"] = os.getloadavg()[0]
            results.update(wakeups(port, args.wakeups, token))
            request(base, "PUT", "/v1/jobs", restarting_job(20), token=token)
            results.update(fanout(port, args.subscribers, args.subscriber_procs, args.seconds,
                                  warmup=3.0, token=token))
            results["load1_end"] = os.getloadavg()[0]
        finally:
            stop_agent(agent)

    table = Table(title=f"yurt API on loopback, {args.allocs} allocations "
                        f"(load average {results['load1_start']:.2f} at start, "
                        f"{results['load1_end']:.2f} at end, 2 CPUs shared)")
    for col in ("measure", "requests/s", "p50 (ms)", "p99/p95 (ms)", "notes"):
        table.add_column(col)
    for name, r in rows.items():
        table.add_row(name, f"{r['rps']:.0f}", f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}",
                      f"{r['requests']} requests, {r['errors']} non-200, "
                      f"{r['reconnects']} reconnects")
        key = name.replace("GET /v1/", "").replace(", ", "_").replace(" ", "")
        results.update({f"{key}_{k}": round(v, 3) for k, v in r.items()})
    table.add_row("blocking query wake-up (index=N)", "", f"{results['wake_p50_ms']:.2f}",
                  f"{results['wake_p99_ms']:.2f} (p99)",
                  f"{results['wake_n']} timed, {results['wake_early']} woke early")
    table.add_row(f"event stream fan-out, {args.subscribers} subscribers", "",
                  f"{results['fanout_lag_p50_ms']:.2f}",
                  f"{results['fanout_lag_p95_ms']:.2f} (p95)",
                  f"{results['fanout_events_per_s']:.0f} records/s each, "
                  f"{results['fanout_lost']} lost, {results['fanout_dropped']} dropped")
    Console(width=120).print(table)
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v
                      for k, v in results.items()}))


if __name__ == "__main__":
    main()
