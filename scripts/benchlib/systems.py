"""The systems the peer benchmark runs the same workloads against, behind one small interface.

Each is started as its own process group in a private temporary directory, asked for children
the way its users ask (yurt: a job through its HTTP API, with ACLs on as users run it, each
request carrying the management token its first start wrote, see agent_token.py; supervisord:
XML-RPC; circus: its ZeroMQ client; the floors: one line on stdin), and killed with its whole
group at the end.
Nothing here counts children: scripts/bench_peers.py does that from /proc, the same way for all.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import xmlrpc.client
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from benchlib import procs
from benchlib.agent_token import agent_env, headers, read_token

HERE = Path(__file__).resolve().parent
#: Every daemon started in this process, checked once more at the very end.
STARTED: list[subprocess.Popen[bytes]] = []


class Timeout(Exception):
    """A bounded wait ran out: the cell reports "timeout" and the benchmark goes on."""


@dataclass(frozen=True)
class Workload:
    count: int
    argv: list[str]
    marker: str


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate: Any, timeout: float, what: str, pause: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise Timeout(f"{what}: nothing after {timeout:.0f} s")
        time.sleep(pause)


class System:
    name = ""
    #: Whether "kill -9 the daemon, start it again" means anything (the floors keep no state).
    restartable = True

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.process: subprocess.Popen[bytes] | None = None
        self.pgids: list[int] = []
        self.workload: Workload | None = None
        self._log: IO[bytes] | None = None
        #: Markers of every workload given to this system, for the sweep after it.
        self.markers: list[str] = []

    @property
    def pid(self) -> int:
        if self.process is None:
            raise RuntimeError(f"{self.name} is not running")
        return self.process.pid

    def _popen(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        if self._log is None:
            self._log = open(self.workdir / "daemon.log", "ab")  # noqa: SIM115 (closed in cleanup)
        process = subprocess.Popen(argv, stdout=kwargs.pop("stdout", self._log),
                                   stderr=self._log, start_new_session=True,
                                   cwd=self.workdir, **kwargs)
        self.pgids.append(process.pid)
        STARTED.append(process)
        self.process = process
        return process

    # The lifecycle, in the order the benchmark uses it.
    def launch(self, workload: Workload, autostart: bool = False) -> None:
        """Start the daemon, idle and ready to be asked (or starting `workload` itself)."""
        raise NotImplementedError

    def request(self) -> None:
        """Ask the running daemon for the workload's children."""
        raise NotImplementedError

    def stop_all(self) -> None:
        raise NotImplementedError

    def relaunch(self) -> None:
        """Start the daemon again after a kill -9, the way it would come back after a crash."""
        raise NotImplementedError

    def api_ready(self) -> bool:
        return True

    def supervised(self, children: list[int]) -> int:
        """How many of the workload's live children this daemon runs as its own."""
        return sum(1 for pid in children if procs.descends_from(pid, self.pid))

    def kill_daemon(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        if self.process is not None:
            self.process.wait(timeout=10)

    def shutdown(self) -> None:
        """Best-effort graceful end; cleanup() then kills whatever is left."""

    def cleanup(self) -> None:
        for pgid in self.pgids:
            procs.killpg(pgid)
        if self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None


class Floor(System):
    """The posix_spawn and Trio floors: a script that spawns on one line of stdin."""

    restartable = False
    script = ""

    def launch(self, workload: Workload, autostart: bool = False) -> None:
        self.workload = workload
        process = self._popen([sys.executable, str(HERE / self.script)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        if process.stdout is None or process.stdout.readline().strip() != b"ready":
            raise Timeout(f"{self.name} did not start")
        if autostart:
            self.request()

    def request(self) -> None:
        if self.process is None or self.process.stdin is None or self.workload is None:
            raise RuntimeError("not launched")
        self.process.stdin.write(
            (json.dumps([self.workload.count, *self.workload.argv]) + "\n").encode())
        self.process.stdin.flush()

    def stop_all(self) -> None:
        os.kill(self.pid, signal.SIGTERM)


class PosixFloor(Floor):
    name = "posix"
    script = "posix_floor.py"


class TrioFloor(Floor):
    name = "trio"
    script = "trio_floor.py"


class _Timeout(xmlrpc.client.Transport):
    def make_connection(self, host: Any) -> Any:
        connection = super().make_connection(host)
        connection.timeout = 120
        return connection


class Supervisord(System):
    name = "supervisord"

    def _config(self, autostart: bool) -> Path:
        if self.workload is None:
            raise RuntimeError("no workload")
        self.port = free_port()
        path = self.workdir / "supervisord.conf"
        # minfds: three pipes per child and some room (supervisord refuses to start with
        # fewer); each child closes every descriptor below it before exec, so not more.
        path.write_text(f"""\
[supervisord]
nodaemon = true
logfile = {self.workdir}/supervisord.log
pidfile = {self.workdir}/supervisord.pid
childlogdir = {self.workdir}
minfds = {4 * self.workload.count + 256}
minprocs = {2 * self.workload.count + 256}
[inet_http_server]
port = 127.0.0.1:{self.port}
[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface
[program:w]
command = {shlex.join(self.workload.argv)}
numprocs = {self.workload.count}
process_name = %(program_name)s_%(process_num)d
autostart = {str(autostart).lower()}
autorestart = true
startsecs = 0
startretries = 1000000
stopsignal = TERM
stopwaitsecs = 10
stdout_logfile = NONE
stderr_logfile = NONE
""")
        return path

    def _start(self, autostart: bool) -> None:
        config = self._config(autostart)
        self._popen([str(Path(sys.executable).parent / "supervisord"), "-c", str(config)])
        self.rpc = xmlrpc.client.ServerProxy(f"http://127.0.0.1:{self.port}/RPC2",
                                             transport=_Timeout())

        def answers() -> bool:
            try:
                state: dict[str, Any] = self.rpc.supervisor.getState()  # type: ignore[assignment]
                return bool(state["statename"] == "RUNNING")
            except (OSError, xmlrpc.client.Error):
                return False
        wait_for(answers, 60, "supervisord's XML-RPC", pause=0.01)

    def launch(self, workload: Workload, autostart: bool = False) -> None:
        self.workload = workload
        self._start(autostart)

    def request(self) -> None:
        self.rpc.supervisor.startAllProcesses(False)

    def stop_all(self) -> None:  # what `supervisorctl stop all` calls
        self.rpc.supervisor.stopAllProcesses(False)

    def relaunch(self) -> None:
        self._start(autostart=True)

    def shutdown(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=15)


class Circus(System):
    name = "circus"

    def _config(self, autostart: bool) -> Path:
        if self.workload is None:
            raise RuntimeError("no workload")
        self.endpoint = f"ipc://{self.workdir}/control"
        path = self.workdir / "circus.ini"
        command, *args = self.workload.argv
        path.write_text(f"""\
[circus]
endpoint = {self.endpoint}
pubsub_endpoint = ipc://{self.workdir}/pubsub
stats_endpoint = ipc://{self.workdir}/stats
loglevel = warning
[watcher:w]
cmd = {command}
args = {shlex.join(args)}
numprocesses = {self.workload.count}
autostart = {str(autostart).lower()}
respawn = true
max_retry = -1
warmup_delay = 0
graceful_timeout = 10
stop_signal = TERM
""")
        return path

    def _call(self, command: str, **properties: Any) -> dict[str, Any]:
        from circus.client import CircusClient

        client = CircusClient(endpoint=self.endpoint, timeout=120)
        try:
            answer: dict[str, Any] = client.call({"command": command, "properties": properties})
        finally:
            client.stop()
        return answer

    def _start(self, autostart: bool) -> None:
        config = self._config(autostart)
        self._popen([str(Path(sys.executable).parent / "circusd"), str(config)])

        def answers() -> bool:
            from circus.client import CircusClient

            client = CircusClient(endpoint=self.endpoint, timeout=1)
            try:
                answer: dict[str, Any] = client.call({"command": "list", "properties": {}})
                return answer.get("status") == "ok"
            except Exception:
                return False
            finally:
                client.stop()
        wait_for(answers, 60, "circusd's endpoint", pause=0.05)

    def launch(self, workload: Workload, autostart: bool = False) -> None:
        self.workload = workload
        self._start(autostart)

    def request(self) -> None:
        self._call("start", name="w")

    def stop_all(self) -> None:  # what `circusctl stop` sends
        self._call("stop")

    def relaunch(self) -> None:
        self._start(autostart=True)

    def shutdown(self) -> None:
        if self.process is not None and self.process.poll() is None:
            try:
                self._call("quit")
                self.process.wait(timeout=15)
            except Exception:
                pass


JOB = """\
job "{job}" {{
  type = "service"
  group "g" {{
    count = {count}
    restart {{
      attempts = 1000000
      interval = "24h"
      delay    = "0s"
      mode     = "delay"
    }}
    task "t" {{
      driver       = "{driver}"
      kill_timeout = "10s"
      kill_signal  = "SIGTERM"
      config {{
        command = {command}
        args    = {args}
{extra}      }}
      resources {{
        cpu    = 1
        memory = 10
      }}
      logs {{
        disabled = true
      }}
    }}
  }}
}}
"""


class Yurt(System):
    name = "yurt"

    def __init__(self, workdir: Path, yurt_bin: Path, driver: str = "raw_exec",
                 config: Path | None = None) -> None:
        super().__init__(workdir)
        self.yurt_bin = yurt_bin
        #: The task driver of the benchmark's job, and the agent's config file (if any).
        self.driver, self.config = driver, config
        self.job_id = f"bench-{workdir.name[-8:]}".replace("_", "-")
        self.data_dir = workdir / "data"
        #: The management token of the data dir's first start ("" until it is written, and
        #: for an agent that admits anonymous requests).
        self.token = ""

    def http(self, method: str, path: str, body: object = None, timeout: float = 120) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data,
                                         method=method, headers=headers(self.token))
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return json.loads(answer.read())

    def api_ready(self) -> bool:
        """The API answers this script's requests: with ACLs on, once the first start wrote
        its token (until then the agent refuses a request without one)."""
        if not self.token:
            self.token = read_token(self.data_dir) or ""
        try:
            self.http("GET", "/v1/agent/self", timeout=1)
        except (OSError, urllib.error.URLError, ValueError):
            return False
        return True

    def _start(self) -> None:
        self.port = free_port()
        config = ["--config", str(self.config)] if self.config is not None else []
        self._popen([str(self.yurt_bin), "agent", "--data-dir", str(self.data_dir),
                     "--port", str(self.port), *config], env=agent_env())

    def start(self) -> None:
        """Start the agent with no workload and wait for its API (for a benchmark that posts
        jobs of its own through `http`)."""
        self._start()
        wait_for(self.api_ready, 60, "yurt's API")

    def launch(self, workload: Workload, autostart: bool = False) -> None:
        self.workload = workload
        self._start()
        wait_for(self.api_ready, 60, "yurt's API")
        command, *args = workload.argv
        hcl = JOB.format(job=self.job_id, count=workload.count, command=json.dumps(command),
                         args=json.dumps(args), driver=self.driver,
                         extra=self.job_config(workload))
        self.job = self.http("POST", "/v1/jobs/parse", {"JobHCL": hcl})
        if autostart:
            self.request()

    def job_config(self, workload: Workload) -> str:
        """Lines the task's `config` block gets beyond `command` and `args` (a driver's own)."""
        return ""

    def request(self) -> None:
        self.http("POST", "/v1/jobs", {"Job": self.job})

    def stop_all(self) -> None:  # what `yurt job stop` sends
        self.http("DELETE", f"/v1/job/{self.job_id}")

    def relaunch(self) -> None:
        self._start()

    def supervised(self, children: list[int]) -> int:
        """Allocations whose task the agent reports running (re-attached, not respawned)."""
        try:
            allocs = self.http("GET", f"/v1/job/{self.job_id}/allocations", timeout=5)
        except (OSError, urllib.error.URLError, ValueError):
            return 0
        return sum(1 for a in allocs if a.get("ClientStatus") == "running"
                   and (a.get("TaskStates") or {}).get("t", {}).get("State") == "running")

    def shims(self, children: list[int]) -> list[int]:
        """The processes between the agent and each task (none if the agent is the parent)."""
        parents = {procs.ppid(pid) for pid in children}
        return sorted(p for p in parents if p and p != self.pid and p > 1)

    def shutdown(self) -> None:
        """Stop the job (the agent leaves tasks running when it exits), then the agent."""
        if self.process is None or self.process.poll() is not None:
            return
        try:
            if self.workload is not None:
                marker = self.workload.marker
                self.http("DELETE", f"/v1/job/{self.job_id}", timeout=30)
                wait_for(lambda: not procs.carrying(marker), 60, "yurt's job stop", pause=0.1)
        except (OSError, urllib.error.URLError, ValueError, Timeout):
            pass
        self.process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=15)


SYSTEMS = ("posix", "trio", "supervisord", "circus", "yurt")


def make(name: str, workdir: Path, yurt_bin: Path) -> System:
    if name == "yurt":
        return Yurt(workdir, yurt_bin)
    kinds: dict[str, type[System]] = {"posix": PosixFloor, "trio": TrioFloor,
                                      "supervisord": Supervisord, "circus": Circus}
    return kinds[name](workdir)
