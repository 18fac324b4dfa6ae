"""Benchmark: how long the `yurt` command takes to answer, against a bare Python start.

Measured as users run it: a new process each time, wall time from spawn to exit, `--runs`
(default 20) of each, interleaved (one of each command per round, so load from other work on
the machine falls on all of them alike), the median kept:

- `python -c pass` with the venv's interpreter: the floor every command pays;
- `yurt --help` and `yurt --version`: the command tree alone (click, no client);
- `yurt job status` and `yurt alloc status ID`: remote verbs over loopback HTTP, against a
  real `yurt agent` this script starts on a free port with a data dir in /tmp (one mock-driver
  job placed, so the listing and the allocation are real), stopped and removed afterwards.
  ACLs are on, as users run the agent: each command reads the management token from the file
  the agent's first start wrote (`YURT_TOKEN_FILE`, benchlib/agent_token.py) and the agent
  checks it, so both are in the remote verbs' times.

Each command's median is reported with its difference from bare Python and its ratio to it,
and checked against the targets: --help/--version ≤ 0.10 s above bare Python, the remote
verbs ≤ 0.15 s above it. A table, then one JSON line; exit 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_restore import request, wait_api
from benchlib.agent_token import agent_env, cli_env

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / ".venv" / "bin" / "python"
YURT = ROOT / ".venv" / "bin" / "yurt"

#: Seconds above bare Python each command may take (the targets of the start-up work).
TARGETS = {"--help": 0.10, "--version": 0.10, "job status": 0.15, "alloc status ID": 0.15}

JOB = {"Job": {"ID": "bench-cli", "Type": "service", "TaskGroups": [{
    "Name": "g", "Tasks": [{"Name": "t", "Driver": "mock_driver", "Config": {"run_for": "1h"},
                            "Resources": {"CPU": 1, "MemoryMB": 10}}]}]}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def timed(argv: list[str], env: dict[str, str]) -> float:
    """Seconds from spawn to exit of one run; a failing command stops the benchmark."""
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          check=False)
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode()}")
    return elapsed


def first_alloc(base: str, token: str, deadline: float) -> str:
    while True:
        allocs = request(base, "GET", "/v1/job/bench-cli/allocations", token=token)
        if allocs:
            return str(allocs[0]["ID"])
        if time.monotonic() > deadline:
            raise TimeoutError("the job's allocation never appeared")
        time.sleep(0.05)


def measure(runs: int) -> dict[str, list[float]]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="yurt-bench-cli-") as tmp:
        env = {**cli_env(Path(tmp)), "YURT_ADDR": base}
        with open(Path(tmp) / "agent.log", "wb") as log:
            agent = subprocess.Popen([str(YURT), "agent", "--data-dir", tmp, "--port",
                                      str(port)], stdout=subprocess.DEVNULL, stderr=log,
                                     start_new_session=True, env=agent_env())
        try:
            token = wait_api(base, Path(tmp), time.monotonic() + 60)
            request(base, "POST", "/v1/jobs", JOB, token=token)
            alloc = first_alloc(base, token, time.monotonic() + 60)
            commands = {"python -c pass": [str(PYTHON), "-c", "pass"],
                        "--help": [str(YURT), "--help"],
                        "--version": [str(YURT), "--version"],
                        "job status": [str(YURT), "job", "status"],
                        "alloc status ID": [str(YURT), "alloc", "status", alloc]}
            for argv in commands.values():  # warm the page cache and the bytecode
                timed(argv, env)
            times: dict[str, list[float]] = {name: [] for name in commands}
            for _ in range(runs):
                for name, argv in commands.items():
                    times[name].append(timed(argv, env))
        finally:
            agent.send_signal(signal.SIGTERM)
            try:
                agent.wait(timeout=60)
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.wait()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs of each command (20)")
    args = parser.parse_args()
    times = measure(args.runs)
    medians = {name: statistics.median(values) for name, values in times.items()}
    floor = medians["python -c pass"]
    table = Table(title=f"yurt start-up, median of {args.runs} runs "
                        f"(load {os.getloadavg()[0]:.2f})")
    for column in ("command", "median (s)", "range (s)", "above python (s)", "× python",
                   "target above", "ok"):
        table.add_column(column, justify="left" if column == "command" else "right")
    result: dict[str, Any] = {"bench": "cli", "runs": args.runs, "load1": os.getloadavg()[0],
                              "python_s": floor, "commands": {}}
    missed = []
    for name, values in times.items():
        above = medians[name] - floor
        target = TARGETS.get(name)
        ok = target is None or above <= target
        if not ok:
            missed.append(name)
        table.add_row(f"yurt {name}" if name in TARGETS else name, f"{medians[name]:.3f}",
                      f"{min(values):.3f}–{max(values):.3f}", f"{above:+.3f}",
                      f"{medians[name] / floor:.1f}", "" if target is None else f"≤ {target:.2f}",
                      "" if target is None else ("yes" if ok else "NO"))
        if target is not None:
            result["commands"][name] = {"median_s": medians[name], "above_python_s": above,
                                        "ratio": medians[name] / floor, "target_above_s": target,
                                        "ok": ok}
    Console(width=max(Console().width, 110)).print(table)
    result["ok"] = not missed
    print(json.dumps(result))
    if missed:
        sys.exit(f"missed the target: {', '.join(missed)}")


if __name__ == "__main__":
    main()
