"""Crash torture: SIGKILL a real `yurt agent` at random points under load, check invariants.

Why this exists: unit tests prove each recovery path in isolation, but only killing the real
agent at arbitrary instants (while it starts, stops, restarts or replaces tasks) shows whether
its state and the processes on the machine agree after every crash. A seeded `random.Random`
picks the operations (register service/batch jobs, update env, scale, stop, purge, restart or
stop an allocation) and the moment of each kill, so a failing seed can be replayed (timing
still varies, so a replay is likely, not certain, to hit the same window).

The agent runs as users run it, ACLs on: its first start writes the management token to
`DATA/server/bootstrap.token` and every request of the torture carries it (a restart after a
kill finds the bootstrap done and the file as it was; benchlib/agent_token.py).

After each kill the three databases (the client's, the server's and its object store, which
holds the ACL state every start loads) get `PRAGMA integrity_check` (read-only, while no agent
runs),
the agent is started again, and once it serves the API and has *settled* the processes are
compared with what the API says. Settled means: for `SETTLE_QUIET` seconds in a row no
allocation that should run is `pending`, no task is `pending`, and no allocation the server
wants stopped is still `running` on the client; a restart that does not serve the API within
`API_DEADLINE` or settle within `SETTLE_DEADLINE` is a failed restart (its invariants are still
checked and reported).

Task processes are found in /proc, not through the agent: every task of this run carries the
env var `YURT_TORTURE=<run id>`; among the processes with it, the shims (`shim.sh` in their
command line) are set aside and the task is the process whose parent does not carry the
variable (its shim, or pid 1 when the shim is gone: an orphan). A child of a shim is a task
only if it leads its own session, as the shim starts each task with setsid: the programs the
shim runs itself once its task ended (the exit status's dd, the subreaper's kill) are not.
Children of a task inherit the variable and are skipped because their parent has it.

Counts (each problem once: an orphan is keyed by its pid, a duplicate by its set of pids, so
one that persists over many rounds is not counted again; the round and the operations the kill
followed are printed with it, and the allocations involved, task events included, are appended
to DATA/torture-failures.jsonl):
- duplicates: more than one task process for one (allocation, task);
- orphans: a task process whose allocation is unknown, terminal or wanted stopped, or whose
  parent is pid 1; and at the end anything of this run still alive after every job stopped;
- wrong_statuses: the API says a task is running and no process exists, or a process exists
  and the API says the task is dead/pending;
- failed_restarts: the agent did not serve the API or did not settle in time, or a DB failed
  its integrity check.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib.agent_token import HEADER, agent_env, read_token

API_DEADLINE = 30.0  # a loaded 2-core machine can take several seconds to start Python
# Below the 15 s restart delay on purpose: a task that waits that delay after a crash (instead
# of resuming a user restart at once) must show up as a failed restart, not pass as slow.
SETTLE_DEADLINE = 10.0
SETTLE_QUIET = 0.6
RECHECK_AFTER = 1.0
WIND_DOWN_DEADLINE = 15.0  # every kill timeout is 2 s: far more than a clean stop needs
POLL = 0.1
MAX_SERVICE_JOBS = 5
TERMINAL = {"complete", "failed", "lost"}

# A service task never exits on its own; a batch task exits 0 soon; a prestart task runs briefly.
SERVICE_SCRIPT = "while :; do sleep 1; done"
BATCH_SCRIPT = "sleep 0.4; exit 0"
PRESTART_SCRIPT = "sleep 0.2"


def default_yurt() -> str:
    return str(Path(sys.executable).parent / "yurt")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ----------------------------------------------------------------------------- processes

@dataclass(frozen=True)
class TaskProcess:
    pid: int
    ppid: int
    alloc_id: str
    task: str


def _read_environ(pid: str) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def _stat(pid: str) -> tuple[str, int, int]:
    """(state letter, ppid, session id) from /proc/PID/stat; the command name may contain
    spaces."""
    text = Path(f"/proc/{pid}/stat").read_text()
    rest = text[text.rindex(")") + 2:].split()
    return rest[0], int(rest[1]), int(rest[3])


def scan_run(run_id: str) -> tuple[list[TaskProcess], list[int]]:
    """Task processes and every live pid (shims and children included) of this torture run."""
    marked: dict[int, tuple[int, int, dict[str, str], bytes]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            env = _read_environ(entry)
            if env.get("YURT_TORTURE") != run_id:
                continue
            state, ppid, session = _stat(entry)
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue  # gone while we looked
        if state in ("Z", "X"):
            continue
        marked[int(entry)] = (ppid, session, env, cmdline)
    tasks = []
    for pid, (ppid, session, env, cmdline) in marked.items():
        if b"shim.sh" in cmdline:
            continue
        parent = marked.get(ppid)
        if parent is not None:
            if b"shim.sh" not in parent[3]:
                continue  # a child of a task
            if session != pid:
                continue  # the shim's own helper (its end-of-task dd, reaper, flock)
        tasks.append(TaskProcess(pid, ppid, env.get("NOMAD_ALLOC_ID", "?"),
                                 env.get("NOMAD_TASK_NAME", "?")))
    return tasks, sorted(marked)


# ----------------------------------------------------------------------------- checks

@dataclass
class Findings:
    """Problems keyed by what identifies them, so one that persists is counted once."""
    duplicates: dict[str, str] = field(default_factory=dict)
    orphans: dict[str, str] = field(default_factory=dict)
    wrong_statuses: dict[str, str] = field(default_factory=dict)
    alloc_ids: set[str] = field(default_factory=set)  # allocations involved, for the dump


def check_invariants(allocs: list[dict[str, Any]], procs: list[TaskProcess]) -> Findings:
    """Compare the API's allocations (full views) with the task processes found in /proc."""
    found = Findings()
    by_id = {a["ID"]: a for a in allocs}
    per_task = Counter((p.alloc_id, p.task) for p in procs)
    def job(alloc_id: str) -> str:
        return str(by_id[alloc_id]["JobID"]) if alloc_id in by_id else "?"

    for (alloc_id, task), n in per_task.items():
        if n > 1:
            pids = sorted(p.pid for p in procs if (p.alloc_id, p.task) == (alloc_id, task))
            found.duplicates[f"dup {pids}"] = (
                f"{n} processes {pids} for alloc {alloc_id[:8]} ({job(alloc_id)}) task {task}")
            found.alloc_ids.add(alloc_id)
    for p in procs:
        alloc = by_id.get(p.alloc_id)
        where = f"pid {p.pid} (alloc {p.alloc_id[:8]} ({job(p.alloc_id)}) task {p.task})"
        key = f"pid {p.pid}"
        if p.ppid == 1:
            found.orphans[key] = f"{where} hangs off pid 1 without its shim"
        elif alloc is None:
            found.orphans[key] = f"{where}: allocation unknown to the API"
        elif alloc["DesiredStatus"] != "run":
            found.orphans[key] = (f"{where}: server wants it {alloc['DesiredStatus']} "
                                  f"(client says {alloc['ClientStatus']})")
        elif alloc["ClientStatus"] in TERMINAL:
            found.orphans[key] = f"{where}: allocation is {alloc['ClientStatus']}"
        else:
            state = (alloc.get("TaskStates") or {}).get(p.task)
            if state is None or state["State"] != "running":
                found.wrong_statuses[f"{key} not running"] = (
                    f"{where}: process runs but API task state is "
                    f"{state['State'] if state else 'missing'}")
            continue
        found.alloc_ids.add(p.alloc_id)
    for alloc in allocs:
        for task, state in (alloc.get("TaskStates") or {}).items():
            if state["State"] == "running" and per_task[(alloc["ID"], task)] == 0:
                found.wrong_statuses[f"{alloc['ID']} {task} no process"] = (
                    f"alloc {alloc['ID'][:8]} ({alloc['JobID']}) task {task}: API says running "
                    f"(alloc {alloc['DesiredStatus']}/{alloc['ClientStatus']}) but no process")
                found.alloc_ids.add(alloc["ID"])
    return found


def unsettled(allocs: list[dict[str, Any]]) -> list[str]:
    """Why the client is not settled yet (empty when it is)."""
    why = []
    for a in allocs:
        name = f"alloc {a['ID'][:8]} ({a['JobID']})"
        if a.get("JobType") == "batch" and a["ClientStatus"] == "running":
            why.append(f"{name} batch still running")  # it ends by itself in a moment
        if a["DesiredStatus"] == "run" and a["ClientStatus"] == "pending":
            why.append(f"{name} pending")
        if a["DesiredStatus"] != "run" and a["ClientStatus"] in ("running", "pending"):
            why.append(f"{name} {a['DesiredStatus']} but {a['ClientStatus']}")
        if a["ClientStatus"] not in TERMINAL:
            for task, state in (a.get("TaskStates") or {}).items():
                if state["State"] == "pending" and a["DesiredStatus"] == "run":
                    why.append(f"{name} task {task} pending")
    return why


def integrity(path: Path) -> str:
    """'ok', or what is wrong with the SQLite DB at `path` (absent is ok: not created yet)."""
    if not path.exists():
        return "ok"
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            rows = db.execute("PRAGMA integrity_check").fetchall()
        finally:
            db.close()
    except sqlite3.Error as e:
        return f"cannot check: {e}"
    result = "; ".join(str(r[0]) for r in rows)
    return "ok" if result == "ok" else result


# ----------------------------------------------------------------------------- workload

def _task(name: str, script: str, run_id: str, env: dict[str, str],
          hook: str | None = None, docker_image: str = "") -> dict[str, Any]:
    """A raw_exec task, or with `docker_image` a docker task running the same script in a
    container of that image (its `sh`, the container's pid 1, is then the task process)."""
    config: dict[str, Any] = {"command": "/bin/sh",
                              "args": ["-c", script, f"torture-{run_id}"]}
    if docker_image:
        config["image"] = docker_image
    task: dict[str, Any] = {
        "Name": name, "Driver": "docker" if docker_image else "raw_exec",
        "Config": config,
        "Env": {"YURT_TORTURE": run_id, **env},
        "Resources": {"CPU": 10, "MemoryMB": 10},
        "KillTimeout": 2_000_000_000}
    if hook:
        task["Lifecycle"] = {"Hook": hook, "Sidecar": False}
    return task


@dataclass
class JobModel:
    id: str
    type: str
    count: int
    prestart: bool
    version: int = 0

    def body(self, run_id: str, docker_image: str = "") -> dict[str, Any]:
        env = {"VERSION": str(self.version)}
        script = SERVICE_SCRIPT if self.type == "service" else BATCH_SCRIPT
        tasks = [_task("main", script, run_id, env, docker_image=docker_image)]
        if self.prestart:
            tasks.insert(0, _task("init", PRESTART_SCRIPT, run_id, env, hook="prestart",
                                  docker_image=docker_image))
        return {"Job": {"ID": self.id, "Type": self.type,
                        "TaskGroups": [{"Name": "g", "Count": self.count, "Tasks": tasks}]}}


class Workload:
    """Chooses and sends the next operation; the server stays the source of truth."""

    def __init__(self, rng: random.Random, run_id: str, docker_image: str = "") -> None:
        self.rng = rng
        self.run_id = run_id
        self.docker_image = docker_image
        self.known: dict[str, JobModel] = {}  # every service job ever sent
        self.jobs: dict[str, JobModel] = {}  # service jobs registered and not stopped
        self.stopped: list[str] = []
        self.serial = 0

    def sync(self, jobs: list[dict[str, Any]]) -> None:
        """Follow the server: a kill may have landed before an operation was received."""
        self.jobs = {j["ID"]: self.known[j["ID"]] for j in jobs
                     if j["ID"] in self.known and not j["Stop"]}
        self.stopped = [j["ID"] for j in jobs if j["Stop"]]

    def _new_id(self, kind: str) -> str:
        self.serial += 1
        return f"{kind}-{self.serial}"

    def choose(self, allocs: list[dict[str, Any]]) -> tuple[str, Callable[
            [httpx2.AsyncClient], Any]]:
        """(description, coroutine function) of one operation."""
        rng = self.rng
        services = [j for j in self.jobs.values() if j.type == "service"]
        running = [a for a in allocs if a["DesiredStatus"] == "run"
                   and a["ClientStatus"] == "running"]
        choices: list[str] = []
        if len(services) < MAX_SERVICE_JOBS:
            choices += ["register_service"] * 3
        choices += ["register_batch"]
        if services:
            choices += ["update", "update", "scale", "scale", "stop_job"]
        if len(services) >= MAX_SERVICE_JOBS:
            choices += ["stop_job"] * 2
        if running:
            choices += ["restart_alloc", "restart_alloc", "stop_alloc"]
        if self.stopped:
            choices += ["purge"]
        op = rng.choice(choices)
        if op in ("register_service", "register_batch"):
            kind = "svc" if op == "register_service" else "batch"
            job = JobModel(self._new_id(kind), "service" if kind == "svc" else "batch",
                           rng.randint(1, 3) if kind == "svc" else rng.randint(1, 2),
                           rng.random() < 0.4)
            if job.type == "service":
                self.jobs[job.id] = self.known[job.id] = job
            return f"{op} {job.id} count={job.count} prestart={job.prestart}", \
                self._register(job)
        if op == "update":
            job = rng.choice(services)
            job.version += 1
            return f"update {job.id} -> v{job.version}", self._register(job)
        if op == "scale":
            job = rng.choice(services)
            job.count = rng.choice([c for c in (1, 2, 3) if c != job.count])
            return f"scale {job.id} -> {job.count}", self._register(job)
        if op == "stop_job":
            job = rng.choice(services)
            del self.jobs[job.id]
            self.stopped.append(job.id)
            return f"stop_job {job.id}", self._call("DELETE", f"/v1/job/{job.id}")
        if op == "purge":
            job_id = self.stopped.pop(rng.randrange(len(self.stopped)))
            return f"purge {job_id}", self._call("DELETE", f"/v1/job/{job_id}?purge=true")
        alloc = rng.choice(running)
        if op == "restart_alloc":
            return (f"restart_alloc {alloc['ID'][:8]} ({alloc['JobID']})",
                    self._call("POST", f"/v1/client/allocation/{alloc['ID']}/restart", {}))
        return (f"stop_alloc {alloc['ID'][:8]} ({alloc['JobID']})",
                self._call("POST", f"/v1/allocation/{alloc['ID']}/stop", {}))

    def _register(self, job: JobModel) -> Callable[[httpx2.AsyncClient], Any]:
        return self._call("POST", "/v1/jobs", job.body(self.run_id, self.docker_image))

    @staticmethod
    def _call(method: str, url: str, body: Any = None) -> Callable[[httpx2.AsyncClient], Any]:
        async def send(client: httpx2.AsyncClient) -> Any:
            response = await client.request(method, url, json=body)
            return response.status_code
        return send


# ----------------------------------------------------------------------------- the agent

@dataclass
class Result:
    kills: int = 0
    duplicates: int = 0
    orphans: int = 0
    wrong_statuses: int = 0
    failed_restarts: int = 0
    seconds: float = 0.0
    integrity_failures: int = 0  # also counted in failed_restarts
    slowest_settle: float = 0.0  # seconds from serving the API to settled, worst round
    details: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.duplicates or self.orphans or self.wrong_statuses
                    or self.failed_restarts)

    def summary(self, seed: int) -> dict[str, Any]:
        return {"torture": {"seed": seed, "ok": self.ok}, "kills": self.kills,
                "duplicates": self.duplicates, "orphans": self.orphans,
                "wrong_statuses": self.wrong_statuses,
                "failed_restarts": self.failed_restarts,
                "integrity_failures": self.integrity_failures,
                "seconds": round(self.seconds, 1),
                "slowest_settle": round(self.slowest_settle, 1)}


class AgentProcess:
    """One `yurt agent` child at a time; its output appended to DATA/torture-agent.log."""

    def __init__(self, yurt: str, data_dir: Path, port: int,
                 env: dict[str, str] | None = None) -> None:
        self.yurt = yurt
        self.data_dir = data_dir
        self.port = port
        self.env = env or {}
        self.process: trio.Process | None = None

    async def start(self) -> None:
        log = self._open_log()
        try:
            # A session of its own: a Ctrl-C at the terminal reaches us, not the agent.
            self.process = await trio.lowlevel.open_process(
                [self.yurt, "agent", "--data-dir", str(self.data_dir), "--port", str(self.port)],
                stdin=None, stdout=log, stderr=log, start_new_session=True,
                env={**agent_env(), **self.env})
        finally:
            os.close(log)

    def _open_log(self) -> int:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        return os.open(self.data_dir / "torture-agent.log",
                       os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    async def kill(self) -> None:
        """SIGKILL and reap (bounded, shielded: it must happen even when we are cancelled)."""
        process, self.process = self.process, None
        if process is None:
            return
        with trio.CancelScope(shield=True), trio.move_on_after(10):
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()

    async def terminate(self) -> None:
        """SIGTERM (tasks keep running, by design), then SIGKILL if it lingers."""
        process = self.process
        if process is None:
            return
        with trio.CancelScope(shield=True):
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
            with trio.move_on_after(10):
                await process.wait()
                self.process = None
                return
        await self.kill()

    def exited(self) -> int | None:
        return None if self.process is None else self.process.returncode


async def get_allocs(client: httpx2.AsyncClient) -> list[dict[str, Any]]:
    """Every allocation (the stubs carry the client's live status and task states)."""
    allocs: list[dict[str, Any]] = (await client.get("/v1/allocations")).json()
    return allocs


async def wait_api(client: httpx2.AsyncClient, agent: AgentProcess) -> str | None:
    """None once the agent answers, else why not (by API_DEADLINE). The client sends the
    token of the agent's first start from the moment it is written."""
    with trio.move_on_after(API_DEADLINE):
        while True:
            if agent.exited() is not None:
                return f"agent exited with {agent.exited()} (see torture-agent.log)"
            if HEADER not in client.headers and (
                    token := await trio.to_thread.run_sync(read_token, agent.data_dir)):
                client.headers[HEADER] = token
            with contextlib.suppress(httpx2.HTTPError):
                if (await client.get("/v1/agent/self")).status_code == 200:
                    return None
            await trio.sleep(POLL)
    return f"agent did not serve the API within {API_DEADLINE:.0f}s"


async def wait_settled(client: httpx2.AsyncClient, stuck: set[str]
                       ) -> tuple[list[dict[str, Any]], list[str]]:
    """(allocations, reasons it is not settled); reasons empty once settled.

    `stuck` holds reasons already reported in an earlier round: a state that never converges
    is one finding, not one per later round, and must not make every later round wait.
    """
    quiet_since: float | None = None
    allocs: list[dict[str, Any]] = []
    why: list[str] = ["no answer"]
    with trio.move_on_after(SETTLE_DEADLINE):
        while True:
            try:
                allocs = await get_allocs(client)
                why = [w for w in unsettled(allocs) if w not in stuck]
            except httpx2.HTTPError as e:
                why = [f"API error {e!r}"]
            now = trio.current_time()
            if why:
                quiet_since = None
            elif quiet_since is None:
                quiet_since = now
            elif now - quiet_since >= SETTLE_QUIET:
                return allocs, []
            await trio.sleep(POLL)
    return allocs, why


# ----------------------------------------------------------------------------- the run

Reporter = Callable[[str], None]


async def torture(*, kills: int, seed: int, data_dir: Path, yurt: str | None = None,
                  report: Reporter = print, docker_host: str = "",
                  docker_image: str = "") -> Result:
    """Run the workload, SIGKILL the agent `kills` times, return the counts. With
    `docker_host` and `docker_image`, every task is a docker task of that daemon (the
    agent's `DOCKER_HOST`) and image, which must hold `sh` and `sleep`.

    Everything this run starts is stopped before returning, also when cancelled.
    """
    rng = random.Random(seed)
    run_id = f"{seed}-{os.getpid()}-{rng.randrange(1 << 30):x}"
    result = Result()
    started = time.monotonic()
    agent = AgentProcess(yurt or default_yurt(), data_dir, free_port(),
                         {"DOCKER_HOST": docker_host} if docker_host else None)
    workload = Workload(rng, run_id, docker_image if docker_host else "")
    address = f"http://127.0.0.1:{agent.port}"

    seen: set[str] = set()  # keys of the problems already counted
    stuck: set[str] = set()  # reasons for not settling already counted

    def fail(kind: str, round_no: int, last_op: str, message: str) -> None:
        line = f"FAIL [{kind}] round {round_no} after '{last_op}': {message}"
        result.details.append(line)
        report(line)

    async with httpx2.AsyncClient(base_url=address, timeout=10) as client:
        try:
            await agent.start()
            if (why := await wait_api(client, agent)) is not None:
                raise RuntimeError(f"the first agent start failed: {why}")
            last_op = "(start)"
            for round_no in range(1, kills + 1):
                last_op = await _operate_then_kill(client, agent, workload, rng)
                result.kills += 1
                for db in ("client/state.db", "server/server.db", "server/objects.db"):
                    verdict = integrity(data_dir / db)
                    if verdict != "ok":
                        result.failed_restarts += 1
                        result.integrity_failures += 1
                        fail("integrity", round_no, last_op, f"{db}: {verdict}")
                await agent.start()
                if (why := await wait_api(client, agent)) is not None:
                    result.failed_restarts += 1
                    fail("restart", round_no, last_op, why)
                    await agent.kill()
                    await agent.start()  # a fresh try so the run can go on
                    if (why := await wait_api(client, agent)) is not None:
                        raise RuntimeError(f"the agent does not come back: {why}")
                    continue
                settle_began = trio.current_time()
                allocs, why_not = await wait_settled(client, stuck)
                settled_in = trio.current_time() - settle_began
                result.slowest_settle = max(result.slowest_settle, settled_in)
                stuck &= set(unsettled(allocs))  # resolved: a recurrence counts again
                if why_not:
                    stuck.update(why_not)
                    result.failed_restarts += 1
                    fail("unsettled", round_no, last_op,
                         f"not settled within {SETTLE_DEADLINE:.0f}s: {'; '.join(why_not[:4])}")
                allocs, procs, found = await _check(client, run_id, allocs)
                new = 0
                for kind, items in (("duplicate", found.duplicates),
                                    ("orphan", found.orphans),
                                    ("wrong status", found.wrong_statuses)):
                    for key, item in items.items():
                        if key in seen:
                            continue  # still there from an earlier round: counted then
                        seen.add(key)
                        new += 1
                        fail(kind, round_no, last_op, item)
                        if kind == "duplicate":
                            result.duplicates += 1
                        elif kind == "orphan":
                            result.orphans += 1
                        else:
                            result.wrong_statuses += 1
                if new or why_not:
                    _dump(data_dir, round_no, last_op, allocs, procs,
                          found.alloc_ids | {a["ID"] for a in allocs if why_not})
                report(f"round {round_no}/{kills}: killed after '{last_op}'; "
                       f"settled in {settled_in:.1f}s; "
                       f"{len(allocs)} allocs, {len(procs)} tasks running; "
                       f"dup={result.duplicates} orphans={result.orphans} "
                       f"wrong={result.wrong_statuses} failed={result.failed_restarts}")
            leftovers = await _wind_down(client, agent, run_id)
            for key, item in leftovers.items():
                if key not in seen:  # an orphan seen earlier was counted then
                    fail("orphan", kills, "final stop of every job", item)
                    result.orphans += 1
        finally:
            with trio.CancelScope(shield=True):
                await agent.terminate()
                _kill_run(run_id)
                if docker_host:
                    _remove_containers(docker_host, data_dir)
    result.seconds = time.monotonic() - started
    return result


async def _check(client: httpx2.AsyncClient, run_id: str, allocs: list[dict[str, Any]]
                 ) -> tuple[list[dict[str, Any]], list[TaskProcess], Findings]:
    """Compare /proc with the API; a problem counts only if a second look a moment later
    still shows it, so a process caught between exiting and being reported is no finding."""
    procs, _ = scan_run(run_id)
    # Read the API after the scan so a process is never judged against an older view.
    with contextlib.suppress(httpx2.HTTPError):
        allocs = await get_allocs(client)
    found = check_invariants(allocs, procs)
    if not (found.duplicates or found.orphans or found.wrong_statuses):
        return allocs, procs, found
    await trio.sleep(RECHECK_AFTER)
    procs, _ = scan_run(run_id)
    with contextlib.suppress(httpx2.HTTPError):
        allocs = await get_allocs(client)
    again = check_invariants(allocs, procs)
    for first, second in ((found.duplicates, again.duplicates), (found.orphans, again.orphans),
                          (found.wrong_statuses, again.wrong_statuses)):
        for key in set(first) - set(second):
            del first[key]
    return allocs, procs, found


def _dump(data_dir: Path, round_no: int, last_op: str, allocs: list[dict[str, Any]],
          procs: list[TaskProcess], alloc_ids: set[str]) -> None:
    """The allocations involved in a failure, events included, for whoever fixes it."""
    record = {"round": round_no, "after": last_op,
              "processes": [vars(p) for p in procs],
              "allocs": [a for a in allocs if a["ID"] in alloc_ids]}
    with open(data_dir / "torture-failures.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")


async def _operate_then_kill(client: httpx2.AsyncClient, agent: AgentProcess,
                             workload: Workload, rng: random.Random) -> str:
    """1–3 operations, the SIGKILL landing at a random instant after the last one began."""
    ops = []
    with contextlib.suppress(httpx2.HTTPError):
        workload.sync((await client.get("/v1/jobs")).json())
    for _ in range(rng.randint(1, 3)):
        try:
            allocs = await get_allocs(client)
        except httpx2.HTTPError:
            allocs = []
        ops.append(workload.choose(allocs))
    delay = rng.choice([0.0, rng.uniform(0, 0.05), rng.uniform(0, 0.5), rng.uniform(0.3, 1.5)])

    last_began = trio.Event()

    async def send_all() -> None:
        for i, (_, send) in enumerate(ops):
            if i == len(ops) - 1:
                last_began.set()
            with contextlib.suppress(httpx2.HTTPError):
                await send(client)
        await trio.sleep_forever()  # the kill ends the round, not the last answer

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send_all)
        await last_began.wait()
        await trio.sleep(delay)
        nursery.cancel_scope.cancel(reason="torture kill")
    await agent.kill()
    return " + ".join(d for d, _ in ops) + f" (+{delay:.2f}s)"


async def _wind_down(client: httpx2.AsyncClient, agent: AgentProcess,
                     run_id: str) -> dict[str, str]:
    """Stop every job, wait for the processes to go; what is still alive is an orphan."""
    with contextlib.suppress(httpx2.HTTPError):
        jobs = (await client.get("/v1/jobs")).json()
        for job in jobs:
            await client.delete(f"/v1/job/{job['ID']}")
    # Until every process of the run is gone, shims included: an agent stopped while its
    # stops are still under way would leave them unreported.
    with trio.move_on_after(WIND_DOWN_DEADLINE):
        while True:  # /proc offers nothing to wait on: poll, bounded
            if not scan_run(run_id)[1]:
                break
            await trio.sleep(POLL)
    procs, _ = scan_run(run_id)
    await agent.terminate()
    return {f"pid {p.pid}": f"pid {p.pid} (alloc {p.alloc_id[:8]} task {p.task}) still running "
            f"after its job stopped" for p in procs}


def _kill_run(run_id: str) -> int:
    """SIGKILL every process of this run (tasks, their children, shims); how many there were."""
    _, pids = scan_run(run_id)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return len(pids)


def _remove_containers(docker_host: str, data_dir: Path) -> None:
    """Remove the containers of this run's agent (their label names its alloc root; the
    docker driver's drivers/docker/create.py `LABEL_ALLOC_ROOT`), killed or not."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        found = subprocess.run(
            ["docker", "-H", docker_host, "ps", "-aq", "--filter",
             f"label=io.yurt.alloc_root={data_dir / 'alloc'}"],
            capture_output=True, text=True, timeout=30, check=False).stdout.split()
        if found:
            subprocess.run(["docker", "-H", docker_host, "rm", "-f", *found],
                           capture_output=True, timeout=60, check=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=200)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the data dir")
    parser.add_argument("--docker-host", default="",
                        help="run docker tasks on this daemon (unix:///PATH) instead of raw_exec")
    parser.add_argument("--docker-image", default="",
                        help="the image of the docker tasks (with sh and sleep)")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="yurt-torture-"))
    print(f"torture: seed {seed}, {args.kills} kills, data dir {data_dir}", flush=True)

    def report(line: str) -> None:
        print(line, flush=True)

    async def run() -> Result | None:
        # SIGTERM or SIGINT cancels the run, so its cleanup (stop the agent, kill every
        # process of this run) happens; a shell starts background jobs with SIGINT ignored.
        outcome: list[Result] = []
        async with trio.open_nursery() as nursery:
            async def work() -> None:
                outcome.append(await torture(kills=args.kills, seed=seed, data_dir=data_dir,
                                             report=report, docker_host=args.docker_host,
                                             docker_image=args.docker_image))
                nursery.cancel_scope.cancel(reason="torture done")

            async def watch_signals() -> None:
                with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    async for signum in signals:
                        print(f"torture: signal {signum}, cleaning up", flush=True)
                        nursery.cancel_scope.cancel(reason="signal")
                        return

            nursery.start_soon(watch_signals)
            nursery.start_soon(work)
        return outcome[0] if outcome else None

    try:
        done = trio.run(run)
    finally:
        if not args.keep:
            shutil.rmtree(data_dir, ignore_errors=True)
    if done is None:
        print("torture: interrupted", flush=True)
        return 2
    result = done
    rows = [("kills", result.kills), ("duplicates", result.duplicates),
            ("orphans", result.orphans), ("wrong statuses", result.wrong_statuses),
            ("failed restarts", result.failed_restarts),
            ("  of which DB", result.integrity_failures),
            ("seconds", f"{result.seconds:.1f}"),
            ("slowest settle", f"{result.slowest_settle:.1f}")]
    for name, value in rows:
        print(f"  {name:<16} {value:>8}")
    print(json.dumps(result.summary(seed)), flush=True)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
