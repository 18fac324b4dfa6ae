"""raw_exec: real processes, one small shim each, that outlive the agent.

Theory of operation. A task is started through `shim.sh`, a POSIX `sh` script
(≈1.7 MB RSS, mostly shared pages, instead of ≈10 MB for a Python interpreter per task). The
agent spawns the shim with `os.posix_spawn` on the event loop (`spawn.py`) as a
session leader; the shim holds the log FIFOs open so the task never gets SIGPIPE, and runs the
task in the foreground through `setsid`, so that the task has its own session and process
group (pgid = pid) and Nomad's default kill signal, SIGINT, at its default. The task itself,
before its command is exec'd, writes its pid and start time to the state dir and reports them
on a pipe: once the agent has read that line the task is on its own, with no polling. When the
task ends, the shim writes the exit status to `<state>/exit` and exits. Per start: sh, setsid,
sh, the command: four programs, one fork.

The agent is the shim's parent until the agent exits (then init is), and reaps it through its
pidfd once it has exited (through the pidfd: no other process can be reaped by mistake). It
identifies both processes by pid *and* process start time (from `/proc/<pid>/stat`), so a pid
reused by another program is never signalled (Nomad issue #23969). It learns about the exit
from the shim's status line on the report pipe (sent as soon as the shim has reaped the task,
with a cgroup) or else through the pidfd on the shim: readable once the shim has exited, which
it does right after writing the status durably. The same code path serves a task
started a second ago and one re-attached after an agent restart. Between the spawn and the
wake-up that ends a task, the agent makes one worker-thread hop per start (user lookup,
command resolution, state dir, cgroup: `starts.py`), none for a restart of a task
without a user (`starts.prepare_restart`), and none per exit.

Crash safety. The handle is persisted by the task runner only after `start_task` returns, so
a start records its intent first: its state dir (`<task dir>/.shim/<invocation>`), made before
the spawn, where the shim writes its own pid and then the task writes its own. A start that no
handle accounts for (the agent died in between, or the start was cancelled) is stopped: at
once when cancelled, at the next start of the same task, and by `reconcile` after a restore
for the rest (orphans.py). The task ignores SIGPIPE while it reports, so an agent
that died before reading the report does not take the task's start along.

Stop: `kill_signal` (default SIGINT) to the process group, up to `kill_timeout` for the shim to
report the exit, then SIGKILL to the group, which also removes grandchildren. `begin_stop` sends
that signal synchronously, so a job stop signals every task in the scheduler pass that
persisted it (before any exit is processed, while the event loop still has the CPU to itself:
once tasks die, hundreds of shims doing their exit work compete with it); `stop_task` then
only waits out the same deadline. One run gets its stop signal once, whichever comes first.
A task killed by signal N reports exit code 128+N and signal N, as Nomad does (the shell cannot
tell that apart from a task that itself exits with 128+N; such a task is reported as signalled).

Whole trees: a process group does not hold a `setsid` daemon, so each task also gets a cgroup
(`cgroups.py`) that it joins before its command runs, or, where none can be made,
a subreaper shim (`reaper.py`). When the task ends, is stopped or destroyed, or
is found ended on re-attach, everything left in its tree is killed, as Nomad's executor does.
A task with `user` runs as that user (`users.py`); a task's environment inherits
only the allow-listed variables of the agent's (client/taskenv.py `inherited_env`).

Resource limits only where the plugin config sets `enforce_resource_limits` (limits.py): each
start's memory and cpu cgroups (named `<alloc id>.<start id>`, in the handle as `limits`) are
joined with its tree's cgroup before the command runs (taskstart.sh), read for an OOM kill
when the task exits, removed on destroy, and swept by `reconcile` when no handle names them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import shutil
import signal as signals
import sys
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Final

import msgspec
import trio

from yurt.runtime.client.drivers import cgroups, execstream, limits, orphans, reaper, starts
from yurt.runtime.client.drivers.configs import RawExecTaskConfig
from yurt.runtime.client.drivers.orphans import StartKey
from yurt.runtime.client.drivers.protocol import (
    ExecInput,
    ExecOutput,
    ExecRequest,
    ExitResult,
    Fingerprint,
    TaskConfig,
)
from yurt.runtime.client.drivers.spawn import spawn_shim
from yurt.runtime.client.taskenv import DEFAULT_ENV_ALLOW, inherited_env
from yurt.runtime.errors import DriverError, TaskNotFoundError
from yurt.runtime.lib import procfs
from yurt.runtime.lib.signames import parse_signal_name
from yurt.runtime.structs import TaskHandle

NAME: Final = "raw_exec"
SHIM: Final = Path(__file__).with_name("shim.sh")
REAPER: Final = Path(reaper.__file__)
STARTUP_TIMEOUT: Final = 10.0
CLEANUP_TIMEOUT: Final = 5.0
#: How long a destroy waits for a shim's last write (`<state>/exit`: a file, sync, rename).
SHIM_FINISH_TIMEOUT: Final = 2.0
FINGERPRINT_PERIOD: Final = 30.0
#: The report is "TASK_PID START_TIME\n": two numbers.
REPORT_MAX: Final = 64
MAX_SIGNAL: Final = 64


class RawExecPluginConfig(msgspec.Struct, forbid_unknown_fields=True):
    """raw_exec's plugin options (`[drivers.config.raw_exec]` in the agent config)."""

    enabled: bool = True
    #: How a task's whole process tree is tracked: "auto" (a cgroup v2, else a v1 freezer
    #: cgroup, else the subreaper shim), or one of them by name ("cgroup2", "cgroup1",
    #: "subreaper"); a cgroup version named but not usable is an error.
    tree_tracking: str = "auto"
    #: The agent's environment variables a task inherits (shell patterns such as `LC_*`).
    env_allow: list[str] = msgspec.field(default_factory=lambda: list(DEFAULT_ENV_ALLOW))
    #: Enforce the tasks' `resources` (memory, memory_max, cpu) through cgroups and report
    #: OOM kills (limits.py). Off by default: Nomad 1.7 enforcing them on raw_exec silently
    #: broke users (hashicorp/nomad#19588); Nomad's raw_exec has no such option.
    enforce_resource_limits: bool = False

    def __post_init__(self) -> None:
        if self.tree_tracking not in cgroups.TRACKING_MODES:
            raise ValueError(f"tree_tracking must be one of "
                             f"{', '.join(cgroups.TRACKING_MODES)}, got {self.tree_tracking!r}")


def plugin_config(config: dict[str, Any]) -> RawExecPluginConfig:
    """The raw_exec options in `config`, checked; unknown keys and wrong types are errors."""
    try:
        return msgspec.convert(config, RawExecPluginConfig)
    except msgspec.ValidationError as e:
        raise DriverError(f"invalid raw_exec plugin config: {e}") from None


#: Fault injection for the crash tests: an agent with this variable set to a task's name
#: SIGKILLs itself right after that task's spawn, before its handle can be persisted.
CRASH_AFTER_SPAWN: Final = "YURT_TEST_CRASH_AFTER_SPAWN"


def same_process(pid: int, start_time: int) -> bool:
    return pid > 0 and procfs.start_time(pid) == start_time


def signal_number(name: str) -> int:
    """The number of a signal name as Nomad takes it (`lib/signames.py`)."""
    try:
        return int(signals.Signals[parse_signal_name(name)])
    except ValueError as e:
        raise DriverError(str(e)) from None


def exit_result(status_text: str | None) -> ExitResult:
    """The shim's recorded `$?` as Nomad's exit result."""
    if status_text is None or not status_text.strip().isdigit():
        return ExitResult(exit_code=-1, err="task exit status unknown: its shim exited "
                                            "without recording one")
    status = int(status_text)
    if 128 < status <= 128 + MAX_SIGNAL:
        return ExitResult(exit_code=status, signal=status - 128)
    return ExitResult(exit_code=status)


@dataclass
class _RawTask:
    task_id: str
    pid: int
    start_time: int
    shim_pid: int
    shim_start_time: int
    state_dir: Path
    pidfd: int | None  # on the shim; None once it exited
    cgroup: Path | None  # None: the shim is the tree's subreaper
    result: ExitResult | None = None
    #: The start's limit cgroups' name (limits.py), "" without limits.
    limits: str = ""
    #: The shim's report pipe, kept open for its exit status line (tasks this driver
    #: started, until that line or EOF), and what was read from it past the last line.
    report: trio.lowlevel.FdStream | None = None
    unread: bytes = b""
    lock: trio.Lock = field(default_factory=trio.Lock)
    #: When (trio time) a stop under way SIGKILLs the group; None: no stop signal sent yet.
    force_at: float | None = None

    def handle_state(self) -> dict[str, object]:
        return {"pid": self.pid, "pgid": self.pid, "start_time": self.start_time,
                "shim_pid": self.shim_pid, "shim_start_time": self.shim_start_time,
                "state_dir": str(self.state_dir), "cgroup": str(self.cgroup or ""),
                "limits": self.limits}

    def task_alive(self) -> bool:
        return self.result is None and same_process(self.pid, self.start_time)


def _read_exit(state_dir: Path) -> str | None:
    """The shim's recorded status: a few bytes it has just written, so in the page cache;
    read on the event loop (a thread hop would cost more)."""
    try:
        return (state_dir / "exit").read_text()
    except FileNotFoundError:
        return None


async def _read_line(stream: trio.lowlevel.FdStream, unread: bytes) -> tuple[bytes, bytes]:
    """The next line from `stream` after `unread` (without its newline; what came before EOF
    if there is no newline), and what was read past it."""
    while b"\n" not in unread:
        chunk = await stream.receive_some(REPORT_MAX)
        if not chunk:
            return unread, b""
        unread += chunk
    line, _, rest = unread.partition(b"\n")
    return line, rest


def _missing_tools() -> list[str]:
    return [tool for tool in ("sh", "setsid") if shutil.which(tool) is None]


def _kill_tree_now(task: _RawTask) -> None:
    """SIGKILL whatever is left of the task's tree, now, without waiting."""
    if task.cgroup is not None:
        cgroups.kill(task.cgroup)
    elif same_process(task.shim_pid, task.shim_start_time):
        reaper.kill_descendants(task.shim_pid, rounds=1)


async def _kill_tree(task: _RawTask) -> None:
    """`_kill_tree_now`: a cgroup's few files on the loop; the subreaper's walk of every
    /proc entry in a worker thread (tens of ms on a busy host)."""
    if task.cgroup is not None:
        _kill_tree_now(task)
        await trio.lowlevel.checkpoint()
    else:
        await trio.to_thread.run_sync(_kill_tree_now, task)


class _AgentStarts:
    """What every driver of this family in this process knows (the latest instance of each
    name: an agent has one), for an orphan sweep: raw_exec and exec share the `.shim` state
    dirs and the limit cgroups' naming, so each one's `reconcile` must keep the other's
    starts (`_mine`) and limit cgroups (`_limited`), not take them for orphans."""

    def __init__(self, attribute: str) -> None:
        self._attribute = attribute

    def __contains__(self, item: object) -> bool:
        return any(item in getattr(driver, self._attribute) for driver in _CURRENT.values())


#: The latest driver of each name (`RawExecDriver.__init__`).
_CURRENT: Final[dict[str, RawExecDriver]] = {}


class RawExecDriver:
    """The raw_exec driver; `fingerprint` is healthy where `sh` and `setsid` exist.

    The exec driver (execdriver.py) is this supervision with its task wrapped in namespaces:
    it overrides `DRIVER_NAME`, `TASK_CONFIG` and `_task_argv`, and nothing else of a start.
    """

    DRIVER_NAME: ClassVar[str] = NAME
    TASK_CONFIG: ClassVar[type[RawExecTaskConfig]] = RawExecTaskConfig

    def __init__(self, config: RawExecPluginConfig | None = None) -> None:
        self.config = config or RawExecPluginConfig()
        self._tasks: dict[str, _RawTask] = {}
        #: Where the tasks' cgroups go; None: the subreaper fallback.
        self.cgroup_root = cgroups.select_root(self.config.tree_tracking)
        #: The resource limits' cgroups, where the plugin config opts in (limits.py).
        self.limits: limits.LimitCgroups | None = None
        if self.config.enforce_resource_limits:
            self.limits = limits.select_limits()
            if self.limits is None:
                raise DriverError("enforce_resource_limits = true, but the agent cannot create "
                                  "memory and cpu cgroups here (neither the v1 hierarchies "
                                  "nor a v2 tree with both controllers, or not root)")
        #: Names of the limit cgroups of this driver's starts, made or being made: what an
        #: orphan sweep must keep (added before the cgroup is made, as `_mine`).
        self._limited: set[str] = set()
        # Every start this driver made or recovered whose state dir still exists. A state dir
        # on disk and not in here is an orphan start (orphans.py). Worker threads
        # test membership while the event loop adds to it, which is safe: a start is added
        # before its state dir is made.
        self._mine: set[StartKey] = set()
        #: Pidfds of this agent's child shims that may not have exited yet (`_reap_exited`).
        self._exiting: list[int] = []
        #: The agent's variables its tasks inherit, filtered at the first start: the agent's
        #: environment does not change while it runs, and filtering it (every variable
        #: decoded, matched) was a tenth of a start's CPU, paid again by every restart.
        self._inherited: dict[str, str] | None = None
        _CURRENT[self.DRIVER_NAME] = self

    @property
    def name(self) -> str:
        return self.DRIVER_NAME

    def _task_argv(self, config: TaskConfig, cfg: RawExecTaskConfig, state_dir: Path,
                   prefix: list[str], command: str) -> tuple[str, list[str]]:
        """The directory the shim enters and the task's words (taskstart.sh execs them)."""
        assert config.task_dir is not None
        return cfg.work_dir or str(config.task_dir), [*prefix, command, *cfg.args]

    def _task(self, task_id: str) -> _RawTask:
        try:
            return self._tasks[task_id]
        except KeyError:
            raise TaskNotFoundError(f"task {task_id} not found") from None

    # ------------------------------------------------------------------ start

    async def start_task(self, config: TaskConfig) -> TaskHandle:
        if config.id in self._tasks:
            raise DriverError(f"task {config.id} is already started")
        try:
            cfg = msgspec.convert(config.driver_config, self.TASK_CONFIG)
        except msgspec.ValidationError as e:
            raise DriverError(f"invalid {self.DRIVER_NAME} config: {e}") from None
        if config.task_dir is None:
            raise DriverError(f"{self.DRIVER_NAME} needs a task directory")
        if self._inherited is None:
            self._inherited = inherited_env(os.environ, self.config.env_allow)
        env = dict(self._inherited)
        # One state dir per start, so nothing an earlier start left can be misread.
        start_id = config.id.rsplit("/", 1)[-1]
        state_dir = config.task_dir / orphans.STATE_DIRS / start_id
        cgroup = (self.cgroup_root.task_cgroup(config.alloc_id, start_id)
                  if self.cgroup_root is not None else None)
        key = orphans.start_key(state_dir)
        self._mine.add(key)  # before its state dir exists (see __init__)
        self._reap_exited()
        path = config.env.get("PATH", env.get("PATH", os.defpath))
        try:
            # A restart of a task without a user: on the event loop (starts.prepare_restart).
            resolved = None if config.user else starts.prepare_restart(
                cfg.command, config.task_dir, path, state_dir, self._mine, cgroup)
            prefix: list[str] = []
            home: dict[str, str] = {}
            if resolved is not None:
                command = resolved
            else:
                prefix, home, command = await trio.to_thread.run_sync(
                    starts.prepare_start, config.user, cfg.command, config.task_dir, path,
                    state_dir, self._mine, self.cgroup_root, cgroup)
        except BaseException:
            self._mine.discard(key)  # no process of it can exist: a leftover dir is inert
            raise
        env.update(home)
        env.update(config.env)
        env.setdefault("PATH", path)
        stdout = config.stdout_path or "/dev/null"
        stderr = config.stderr_path or "/dev/null"
        work_dir, task_argv = self._task_argv(config, cfg, state_dir, prefix, command)
        argv = ["/bin/sh", str(SHIM), str(state_dir), stdout, stderr, work_dir,
                str(cgroup or ""), *task_argv]
        limit_name = ""
        if self.limits is not None:
            limit_name = f"{config.alloc_id}.{start_id}"
            self._limited.add(limit_name)
            try:
                joins = self.limits.create(limit_name, limits.limits_for(
                    config.memory_mb, config.memory_max_mb, config.cpu_shares,
                    config.reserved_cores))
            except BaseException:
                self._limited.discard(limit_name)
                raise
            # The task joins them with its freezer cgroup, before its command (taskstart.sh).
            argv[6] = ":".join([str(c) for c in ([cgroup] if cgroup else []) + joins])
        if cgroup is None:  # the subreaper fallback: the shim starts through reaper.py
            argv = [sys.executable, "-I", "-S", str(REAPER), "exec", *argv]
            env.update(YURT_REAPER=str(REAPER), YURT_REAPER_PY=sys.executable)
        try:
            task = await self._launch(config, argv, env, state_dir, cgroup, work_dir)
        except BaseException:
            self._drop_limits(limit_name)  # its processes were stopped by `_launch`
            raise
        self._tasks[config.id].limits = limit_name
        task.driver_state["limits"] = limit_name
        return task

    def _drop_limits(self, name: str) -> None:
        """Remove a start's limit cgroups (empty once its processes are gone)."""
        if self.limits is not None and name:
            with contextlib.suppress(DriverError):
                self.limits.remove(name)
            self._limited.discard(name)

    def _with_oom(self, task: _RawTask, result: ExitResult) -> ExitResult:
        """`result`, marked OOM-killed if the start's memory cgroup recorded a kill: as Nomad's
        taskrunner reports `ExitResult.OOMKilled` (the `Terminated` event's `oom_killed`), with
        the docker driver's exit message (drivers/docker/handle.go `run`)."""
        if self.limits is None or not task.limits or not self.limits.oom_killed(task.limits):
            return result
        return dataclasses.replace(result, oom_killed=True, err=result.err or "OOM Killed")

    async def _launch(self, config: TaskConfig, argv: list[str], env: dict[str, str],
                      state_dir: Path, cgroup: Path | None, work_dir: str) -> TaskHandle:
        try:
            shim_pid, report = spawn_shim(argv, env)
        except OSError as e:  # out of fds or processes passes: let the restart policy retry
            if cgroup is not None:  # nothing started and no handle will name it
                cgroups.kill(cgroup)
                with contextlib.suppress(DriverError):  # never mask the start's error
                    cgroups.remove(cgroup)
            raise DriverError(f"failed to start task shim: {e}", recoverable=e.errno in (
                errno.EMFILE, errno.ENFILE, errno.EAGAIN, errno.ENOMEM)) from e
        pidfd: int | None = None
        stream = trio.lowlevel.FdStream(report)  # owns `report` from here on
        try:
            pidfd = os.pidfd_open(shim_pid)
            task = await self._handshake(config.id, shim_pid, pidfd, stream, state_dir,
                                         work_dir, cgroup)
        except BaseException:
            stream.close()
            # Cancelled or failed after the spawn: whatever started, its cgroup included
            # (`starts.stop_start`), must not outlive the start as a task nobody knows
            # (shielded, bounded).
            with trio.CancelScope(shield=True) as cleanup:
                cleanup.deadline = trio.current_time() + CLEANUP_TIMEOUT
                await self._abandon(shim_pid, pidfd, state_dir)
            raise
        if os.environ.get(CRASH_AFTER_SPAWN) == config.name:
            os.kill(os.getpid(), signals.SIGKILL)  # see CRASH_AFTER_SPAWN
        self._tasks[config.id] = task
        return TaskHandle(driver=self.DRIVER_NAME, task_id=config.id, state="running",
                          driver_state=task.handle_state())

    async def _abandon(self, shim_pid: int, pidfd: int | None, state_dir: Path) -> None:
        """Stop the shim this start spawned and whatever it started, and reap it."""
        await trio.to_thread.run_sync(starts.stop_start, shim_pid, state_dir, self.cgroup_root)
        self._mine.discard(orphans.start_key(state_dir))
        if pidfd is None:  # no pidfd (out of fds): a thread that the deadline may abandon
            with contextlib.suppress(ChildProcessError):
                await trio.to_thread.run_sync(os.waitpid, shim_pid, 0, abandon_on_cancel=True)
            return
        try:
            await trio.lowlevel.wait_readable(pidfd)
        finally:  # reaped now, or (the deadline passed) by a later `_reap_exited`
            self._exiting.append(pidfd)
            self._reap_exited()

    async def _handshake(self, task_id: str, shim_pid: int, pidfd: int,
                         report: trio.lowlevel.FdStream, state_dir: Path, work_dir: str,
                         cgroup: Path | None) -> _RawTask:
        """Read the task's "TASK_PID START_TIME" from the shim's report pipe.

        The task writes it itself, after setsid and before its command: once it is read, the
        task leads its own process group with SIGINT at its default, so a stop reaches it.
        """
        try:
            with trio.fail_after(STARTUP_TIMEOUT):
                line, rest = await _read_line(report, b"")
        except trio.TooSlowError:
            raise DriverError("task shim did not report within "
                              f"{STARTUP_TIMEOUT:.0f}s", recoverable=True) from None
        try:
            pid, task_start = map(int, line.split())
        except ValueError:
            raise DriverError(f"task shim failed to start: {line!r}", recoverable=True) from None
        if pid == 0:
            raise DriverError(f"failed to start task: cannot enter work dir {work_dir}")
        # The shim is this agent's child, not yet reaped: its pid cannot have been reused.
        return _RawTask(task_id=task_id, pid=pid, start_time=task_start, shim_pid=shim_pid,
                        shim_start_time=procfs.start_time(shim_pid) or 0,
                        state_dir=state_dir, pidfd=pidfd, cgroup=cgroup, report=report,
                        unread=rest)

    @staticmethod
    def _open_pidfd(pid: int, start_time: int | None) -> int | None:
        """A pidfd for `pid` if it is still the process that started at `start_time`."""
        if start_time is None:
            return None
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return None
        if procfs.start_time(pid) != start_time:  # reused between the check and the open
            os.close(fd)
            return None
        return fd

    # ------------------------------------------------------------------ wait, stop

    async def _wait_exit(self, task: _RawTask) -> ExitResult:
        """Wait for the shim to exit and record how the task ended.

        Cancellable at every await without losing anything: the pidfd stays open (and
        readable, once the shim is gone) until the result is recorded, so a cancel that lands
        together with the wake-up leaves the task exactly as it was and the next wait
        finishes the job.
        """
        async with task.lock:
            if task.result is None:
                try:
                    status = await self._exit_status(task)
                except trio.ClosedResourceError:  # destroy_task gave up waiting
                    raise TaskNotFoundError(f"task {task.task_id} was destroyed") from None
                if status is None and self._kill_group(task, signals.SIGKILL):
                    # The shim died and left the task behind: never leave an orphan that a
                    # restart would then duplicate.
                    task.result = ExitResult(exit_code=-1, err="the task's shim died; the "
                                                               "task was killed")
                else:
                    task.result = self._with_oom(task, exit_result(status))
                # What the task left behind (a daemon it forked) ends with it, as in Nomad.
                # The pidfd stays: `destroy_task` waits on it for the shim's last write.
                await _kill_tree(task)
            return task.result

    @staticmethod
    async def _exit_status(task: _RawTask) -> str | None:
        """The task's `$?`: from the report pipe when the shim writes it there (it does so
        as soon as it has reaped the task, before its durable write of `<state>/exit` and its
        own exit, which costs a program), else, once the shim is gone, from that file.
        Nothing read is lost to a cancel: a line is taken synchronously once it is in."""
        if task.report is not None:
            line, task.unread = await _read_line(task.report, task.unread)
            task.report.close()
            task.report = None
            if line.strip().isdigit():
                return line.decode()
        if task.pidfd is not None:
            await trio.lowlevel.wait_readable(task.pidfd)
        return _read_exit(task.state_dir)

    @staticmethod
    async def _shim_finished(task: _RawTask) -> None:
        """Wait (bounded) for the shim to exit: with the status on the pipe, it still writes
        `<state>/exit` after the task ended, and removing the state dir meanwhile would leave
        what it writes behind (and the alloc dir with it)."""
        with trio.move_on_after(SHIM_FINISH_TIMEOUT):
            async with task.lock:  # no other waiter on the pidfd (`_wait_exit`)
                if task.pidfd is not None:
                    await trio.lowlevel.wait_readable(task.pidfd)

    def _let_go(self, task: _RawTask) -> None:
        """Close what this driver holds of the task's shim (its report pipe, its pidfd: the
        shim is reaped later if it is still finishing), and reap the shims that finished."""
        if task.report is not None:
            task.report.close()
            task.report = None
        if task.pidfd is not None:
            trio.lowlevel.notify_closing(task.pidfd)
            self._exiting.append(task.pidfd)
            task.pidfd = None
        self._reap_exited()

    def _reap_exited(self) -> None:
        """Reap the shims that reported their task's exit and were still finishing (their
        durable write) when their pidfds were let go: each is this agent's child, so an
        unreaped one would stay a zombie. Checked at every start, exit and destroy, and by
        the fingerprint loop: a shim finishes within milliseconds, so the list stays short.
        A pidfd of a shim that is not this agent's child (after a restart, init reaps it) is
        closed at once."""
        still = []
        for pidfd in self._exiting:
            try:
                if os.waitid(os.P_PIDFD, pidfd, os.WEXITED | os.WNOHANG) is None:
                    still.append(pidfd)
                    continue
            except ChildProcessError:
                pass
            os.close(pidfd)
        self._exiting = still

    async def wait_task(self, task_id: str) -> ExitResult:
        return await self._wait_exit(self._task(task_id))

    @staticmethod
    def _kill_group(task: _RawTask, signum: int) -> bool:
        """Signal the task's process group, unless its id now belongs to someone else.

        Linux keeps a pid number reserved while any process still uses it as a process group
        id, so while our group exists (even with the leader gone and grandchildren left), the
        number is ours. If `/proc/<pid>` shows a process with another start time, the number
        was reused: our group is gone, and the group of that id is not ours to signal.
        """
        current = procfs.start_time(task.pid)
        if current is not None and current != task.start_time:
            return False
        try:
            os.killpg(task.pid, signum)
        except ProcessLookupError:
            if current is None:
                return False
            try:  # the task has not made its group yet: signal the process itself
                os.kill(task.pid, signum)
            except ProcessLookupError:
                return False
        return True

    def begin_stop(self, task_id: str, kill_timeout: int, signal: str) -> bool:
        """Send the stop's signal now, without a checkpoint; the next `stop_task` of this
        run does not send it again and SIGKILLs `kill_timeout` after it (a `kill_timeout` of
        0 SIGKILLs now). True when a stop is under way (sent now or before); False when there
        is no running task to signal.

        Raises:
            DriverError: `signal` is no signal name.
        """
        task = self._tasks.get(task_id)
        if task is None or task.result is not None:
            return False
        if task.force_at is None:
            signum = signal_number(signal or "SIGINT") if kill_timeout > 0 else signals.SIGKILL
            if not self._kill_group(task, signum):
                return False
            task.force_at = trio.current_time() + max(kill_timeout, 0) / 1e9
        return True

    async def stop_task(self, task_id: str, kill_timeout: int, signal: str) -> None:
        task = self._task(task_id)
        signum = signal_number(signal or "SIGINT")
        if task.force_at is None and kill_timeout > 0 and self._kill_group(task, signum):
            task.force_at = trio.current_time() + kill_timeout / 1e9
        if task.force_at is not None:  # signalled here or by `begin_stop`: wait it out
            with trio.move_on_at(task.force_at):
                await self._wait_exit(task)
        self._kill_group(task, signals.SIGKILL)
        await _kill_tree(task)
        await trio.lowlevel.checkpoint()

    async def destroy_task(self, task_id: str, *, force: bool) -> None:
        task = self._task(task_id)
        await trio.lowlevel.checkpoint()
        if task.result is None and task.pidfd is not None:
            if not force:
                raise DriverError("cannot destroy running task")
            self._kill_group(task, signals.SIGKILL)
            with trio.move_on_after(STARTUP_TIMEOUT):
                await self._wait_exit(task)
        # Whatever the task left in its process group (background children) goes with it,
        # as Nomad's DestroyTask does.
        self._kill_group(task, signals.SIGKILL)
        await _kill_tree(task)  # now: a cancel may yet land before the hop below
        await self._shim_finished(task)
        self._let_go(task)
        del self._tasks[task_id]
        await trio.to_thread.run_sync(starts.remove_start, task.cgroup, task.state_dir)
        self._drop_limits(task.limits)  # emptied with its freezer cgroup just above
        self._mine.discard(orphans.start_key(task.state_dir))
        self._reap_exited()  # its shim has likely finished meanwhile

    async def signal_task(self, task_id: str, signal: str) -> None:
        task = self._task(task_id)
        await trio.lowlevel.checkpoint()
        try:
            signum = signal_number(signal)
        except DriverError:
            signum = int(signals.SIGINT)  # Nomad: unknown names become SIGINT
        if not task.task_alive():
            raise DriverError("task is not running")
        os.kill(task.pid, signum)

    async def exec_task(self, task_id: str, request: ExecRequest,
                        inputs: trio.abc.ReceiveChannel[ExecInput],
                        outputs: trio.abc.SendChannel[ExecOutput]) -> int:
        """`alloc exec`: the command in the task's environment, working directory, user and
        cgroup (execstream.py)."""
        task = self._task(task_id)
        if not task.task_alive():
            raise DriverError("task is not running")
        return await execstream.exec_beside(request, env_allow=self.config.env_allow,
                                            cgroup=task.cgroup, inputs=inputs, outputs=outputs)

    async def fingerprint(self) -> AsyncIterator[Fingerprint]:
        """Healthy where the shim's tools are (sh, setsid); checked every 30 s."""
        while True:
            self._reap_exited()  # a zombie shim lives at most this long without starts
            missing = await trio.to_thread.run_sync(_missing_tools)
            if missing:
                yield Fingerprint("unhealthy", f"missing {', '.join(missing)}")
            else:
                yield Fingerprint("healthy", "Healthy", {"driver.raw_exec": "true"})
            await trio.sleep(FINGERPRINT_PERIOD)

    def kill_all(self) -> int:
        """SIGKILL every task's process group now, without waiting (for a forced exit)."""
        killed = 0
        for task in self._tasks.values():
            if task.result is None and self._kill_group(task, signals.SIGKILL):
                killed += 1
            _kill_tree_now(task)
        return killed

    # ------------------------------------------------------------------ recover

    async def reconcile(self, alloc_root: Path,
                        alloc_ids: Collection[str] | None = None) -> int:
        """Stop every start under `alloc_root` (in the allocations `alloc_ids`, if given)
        that neither this driver nor its sibling (exec, `_AgentStarts`) made or recovered (an
        agent killed between spawning a task and persisting its handle leaves one), and remove
        its state dir; return how many had processes. Call after the restore: starts made
        meanwhile are known, so they are safe (orphans.py)."""
        reaped = await trio.to_thread.run_sync(orphans.reap_alloc_root, alloc_root,
                                               _AgentStarts("_mine"),
                                               self.cgroup_root, alloc_ids)
        if self.limits is not None:  # the orphans' limit cgroups, emptied just above
            await trio.to_thread.run_sync(self._sweep_limits, alloc_root, alloc_ids)
        return reaped

    def _sweep_limits(self, alloc_root: Path, alloc_ids: Collection[str] | None) -> None:
        """Remove the empty limit cgroups of starts of the allocations under `alloc_root`
        that this driver does not know; other agents' on this host are left alone."""
        assert self.limits is not None
        with contextlib.suppress(OSError):
            allocs = {p.name for p in alloc_root.iterdir()
                      if alloc_ids is None or p.name in alloc_ids}
            self.limits.sweep(_AgentStarts("_limited"), allocs)

    async def recover_task(self, handle: TaskHandle) -> None:
        if handle.task_id in self._tasks:
            await trio.lowlevel.checkpoint()
            return
        state = handle.driver_state
        try:
            pid, start_time = int(state["pid"]), int(state["start_time"])
            shim_pid, shim_start = int(state["shim_pid"]), int(state["shim_start_time"])
            state_dir = Path(str(state["state_dir"]))
            cgroup = str(state.get("cgroup") or "")  # absent in handles of older versions
        except (KeyError, TypeError, ValueError):
            raise DriverError("task handle is missing raw_exec state") from None
        task = _RawTask(task_id=handle.task_id, pid=pid, start_time=start_time,
                        shim_pid=shim_pid, shim_start_time=shim_start, state_dir=state_dir,
                        pidfd=self._open_pidfd(shim_pid, shim_start),
                        cgroup=Path(cgroup) if cgroup else None,
                        limits=str(state.get("limits") or ""))
        if task.limits:
            self._limited.add(task.limits)
        if task.pidfd is None:
            status = _read_exit(state_dir)
            if status is None:
                killed = self._kill_group(task, signals.SIGKILL)
                await _kill_tree(task)
                raise DriverError(f"task {handle.task_id} lost its shim"
                                  + ("; the task was killed" if killed else " and is gone"))
            task.result = self._with_oom(task, exit_result(status))
            await _kill_tree(task)  # it ended while the agent was away: so does its tree
        else:
            await trio.lowlevel.checkpoint()
        self._mine.add(orphans.start_key(state_dir))
        self._tasks[handle.task_id] = task


def plugin(config: dict[str, Any]) -> RawExecDriver:
    """Entry point (`yurt.drivers`). Unlike Nomad, enabled unless `enabled = false`: a
    single-node agent exists to run local processes."""
    options = plugin_config(config)
    if not options.enabled:
        raise DriverError("raw_exec is disabled")
    return RawExecDriver(options)
