"""`alloc exec` for drivers that run real processes: a command beside a running task.

Theory of operation. The command gets what its task got (Nomad's executor does the same for
raw_exec): the task's environment, rebuilt as its start built it (the agent's allow-listed
variables, the user's HOME/USER/LOGNAME, the task's `NOMAD_*` and `env`), the task's working
directory, its user, and its cgroup where it has one, so that the command is part of the
task's tree (and dies with it, as a task's leftovers do). Unlike a task, it does not outlive
the agent: it gets SIGKILL when the agent dies (`setpriv --pdeathsig`), as nothing would
ever read its output or reap it again. It is spawned like a task's shim
(`spawn.py`: `os.posix_spawn` on the event loop, a new session, signal
dispositions at their defaults, no fd of the agent inherited) through a few lines of `sh`
that enter the working directory and the cgroup, then exec the command, prefixed with the
user switch (`users.py`) when the task has a user.

Without a tty the command's stdin, stdout and stderr are three pipes. With a tty it gets a
pseudo-terminal (`os.openpty`): the spawn opens the slave by its path *after* `setsid`, which
makes it the new session's controlling terminal (what a login does); an exec task's own pty
(`open_task_ptmx`) is reached through fds only and its slave handed over as an fd, for the
command to take as its terminal (`setsid --ctty`). The window size is
set on the master with TIOCSWINSZ (the kernel sends SIGWINCH to the foreground group). Every
fd is a non-blocking `trio.lowlevel.FdStream`; the exit is watched through a pidfd: nothing
here blocks the event loop or holds a thread while the command runs.

The end, as Nomad's exec helper orders it: the command exits; what it wrote is read to the
end; each output stream's `close` is sent; the exit code is returned (128+N for a signal N).
What the session left in its process group is killed once the command exits, or the pipes it
holds would never report their end; a process that left the group (`setsid`) is waited for
at most DRAIN_TIMEOUT. However the session ends (the client went away, the agent stops), the
group is SIGKILLed and the command reaped in a shielded, bounded cleanup: an exec never
outlives its session.

Rejected: `subprocess`/`trio.run_process` (no way to make the slave the controlling terminal
without `preexec_fn`, unsafe with threads); a thread per stream (the agent's concurrency is
Trio's).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import struct
import termios
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

import msgspec
import trio

from yurt.runtime.client.drivers import starts
from yurt.runtime.client.drivers.configs import RawExecTaskConfig
from yurt.runtime.client.drivers.protocol import ExecInput, ExecOutput, ExecRequest, ExecResize
from yurt.runtime.client.drivers.ptys import open_pty
from yurt.runtime.client.drivers.spawn import DEFAULT_SIGNALS, cloexec_all_fds
from yurt.runtime.client.drivers.users import SETPRIV, switch_prefix, user_env
from yurt.runtime.client.taskenv import inherited_env
from yurt.runtime.errors import DriverError

SHELL: Final = "/bin/sh"
#: Enters the task's working directory ($1) and cgroup ($2, "" for none), then execs the rest.
#: Builtins only: the shell's pid is the command's, so the cgroup joined is the command's.
ENTER: Final = ('cd "$1" || exit 126\n'
                '[ -z "$2" ] || echo 0 >"$2/cgroup.procs" || exit 125\n'
                'shift 2\n'
                'exec "$@"\n')
CHUNK: Final = 4096
#: After the command exits, how long output from a process that left its group is waited for.
DRAIN_TIMEOUT: Final = 2.0
#: The bound of the cleanup's kill and reap.
CLEANUP_TIMEOUT: Final = 5.0
#: What a terminal reads as end of input: the pty's stdin cannot be closed (that would hang
#: the terminal up), so a client's stdin close is typed as ^D, as a user would.
EOF_CHAR: Final = b"\x04"
MAX_SIZE: Final = 0xFFFF


def set_window_size(fd: int, height: int, width: int) -> None:
    """Set the terminal size (rows, columns) of the pty whose master or slave is `fd`."""
    rows, cols = max(0, min(height, MAX_SIZE)), max(0, min(width, MAX_SIZE))
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def exit_code(si_code: int, si_status: int) -> int:
    """A `waitid` result as Nomad's exec reports it: the status, or 128+N for signal N."""
    if si_code == os.CLD_EXITED:
        return si_status
    return 128 + si_status


def _collect(pidfd: int, *, reap: bool) -> os.waitid_result | None:
    """The exit of the child behind `pidfd`, which has exited (its pidfd is readable), so
    this never blocks; reaped only if `reap`."""
    flags = os.WEXITED | os.WNOHANG | (0 if reap else os.WNOWAIT)
    return os.waitid(os.P_PIDFD, pidfd, flags)


@dataclass
class _Process:
    """A spawned exec command: its pid (a session and group leader, this agent's child until
    reaped), a pidfd on it, and the parent's ends of its stdio."""

    pid: int
    pidfd: int
    #: Pipes: stdin, stdout, stderr. A tty: one stream, the master, for stdin and stdout.
    stdin: trio.lowlevel.FdStream
    stdout: trio.lowlevel.FdStream
    stderr: trio.lowlevel.FdStream | None
    reaped: bool = False

    @property
    def tty(self) -> bool:
        return self.stderr is None

    async def wait(self) -> int:
        """The exit code, once the command has exited (not reaped yet: its pid, and so its
        process group id, stay its own until `reap`)."""
        await trio.lowlevel.wait_readable(self.pidfd)
        info = _collect(self.pidfd, reap=False)
        if info is None:  # readable means exited: cannot happen, but never spin on it
            return -1
        return exit_code(info.si_code, info.si_status)

    def kill_group(self) -> None:
        """SIGKILL what is left of the command's process group (before the reap, when the
        group id surely is still the command's)."""
        if not self.reaped:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)

    async def kill_and_reap(self) -> None:
        self.kill_group()
        if self.reaped:
            await trio.lowlevel.checkpoint()
            return
        await trio.lowlevel.wait_readable(self.pidfd)
        with contextlib.suppress(ChildProcessError):
            _collect(self.pidfd, reap=True)
        self.reaped = True

    def close(self) -> None:
        for stream in {id(s): s for s in (self.stdin, self.stdout, self.stderr)
                       if s is not None}.values():
            stream.close()
        trio.lowlevel.notify_closing(self.pidfd)
        os.close(self.pidfd)


def spawn(argv: Sequence[str], env: dict[str, str], *, tty: bool,
          task_root: str | None = None) -> _Process:
    """Start `argv` (argv[0] an absolute path) as a session leader with pipes or a pty
    (from the devpts of the task whose root is `task_root` when given, see `open_pty`: the
    slave is then the command's stdio by fd, and the command must take it as its controlling
    terminal itself, as `setsid --ctty`).

    Raises:
        OSError: out of fds or processes, no pty.
    """
    cloexec_all_fds()  # see spawn.py: nothing of the agent's leaks to it
    if tty:
        master, slave, slave_path = open_pty(task_root)
        try:
            actions: list[tuple[int, int, int] | tuple[int, int, str, int, int]] = [
                (os.POSIX_SPAWN_OPEN, 0, slave_path, os.O_RDWR, 0) if slave_path is not None
                else (os.POSIX_SPAWN_DUP2, slave, 0),
                (os.POSIX_SPAWN_DUP2, 0, 1), (os.POSIX_SPAWN_DUP2, 0, 2)]
            pid = os.posix_spawn(argv[0], list(argv), env, file_actions=actions, setsid=True,
                                 setsigdef=DEFAULT_SIGNALS, setsigmask=())
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)
        ends = [master]
    else:
        pipes = [os.pipe2(os.O_CLOEXEC) for _ in range(3)]
        ours = [pipes[0][1], pipes[1][0], pipes[2][0]]
        theirs = [pipes[0][0], pipes[1][1], pipes[2][1]]
        try:
            pid = os.posix_spawn(argv[0], list(argv), env, setsid=True,
                                 setsigdef=DEFAULT_SIGNALS, setsigmask=(), file_actions=[
                                     (os.POSIX_SPAWN_DUP2, fd, n) for n, fd in enumerate(theirs)])
        except BaseException:
            for fd in ours:
                os.close(fd)
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        ends = ours
    try:
        pidfd = os.pidfd_open(pid)  # our unreaped child: the pid is surely it
    except OSError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        os.waitpid(pid, 0)  # SIGKILLed: returns at once
        for fd in ends:
            os.close(fd)
        raise
    streams = [trio.lowlevel.FdStream(fd) for fd in ends]
    if tty:
        return _Process(pid, pidfd, streams[0], streams[0], None)
    return _Process(pid, pidfd, streams[0], streams[1], streams[2])


async def _feed(process: _Process, inputs: trio.abc.ReceiveChannel[ExecInput]) -> None:
    """The client's input to the command, in order: stdin bytes, its end, window sizes."""
    writable = True
    async for item in inputs:
        if isinstance(item, ExecResize):
            if process.tty:
                with contextlib.suppress(OSError):  # the pty is gone with the command
                    set_window_size(process.stdout.fileno(), item.height, item.width)
            continue
        data = item.data + (EOF_CHAR if item.close and process.tty else b"")
        if data and writable:
            try:
                await process.stdin.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                writable = False  # the command closed its stdin, or exited: input is dropped
        if item.close and not process.tty and writable:
            await process.stdin.aclose()
            writable = False


async def _pump(stream: trio.lowlevel.FdStream, name: Literal["stdout", "stderr"],
                outputs: trio.abc.SendChannel[ExecOutput]) -> None:
    while True:
        try:
            chunk = await stream.receive_some(CHUNK)
        except trio.BrokenResourceError:  # a pty master reads EIO once no slave is open
            return
        if not chunk:
            return
        try:
            await outputs.send(ExecOutput(name, chunk))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return  # nobody reads any more: the session is ending


async def run_session(argv: Sequence[str], env: dict[str, str], *, tty: bool,
                      inputs: trio.abc.ReceiveChannel[ExecInput],
                      outputs: trio.abc.SendChannel[ExecOutput],
                      task_root: str | None = None) -> int:
    """Spawn `argv` and serve it until it exits (see the module's docstring); return its
    exit code.

    Raises:
        DriverError: it cannot be spawned.
    """
    try:
        process = spawn(argv, env, tty=tty, task_root=task_root)
    except OSError as e:
        raise DriverError(f"failed to start command: {e}") from None
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_feed, process, inputs)
            async with trio.open_nursery() as pumps:
                pumps.start_soon(_pump, process.stdout, "stdout", outputs)
                if process.stderr is not None:
                    pumps.start_soon(_pump, process.stderr, "stderr", outputs)
                code = await process.wait()
                process.kill_group()  # its leftovers would hold the output open
                pumps.cancel_scope.deadline = trio.current_time() + DRAIN_TIMEOUT
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await outputs.send(ExecOutput("stdout", close=True))
                if not tty:
                    await outputs.send(ExecOutput("stderr", close=True))
            nursery.cancel_scope.cancel()  # no more input for a command that is gone
        return code
    finally:
        with trio.CancelScope(shield=True) as cleanup:
            cleanup.deadline = trio.current_time() + CLEANUP_TIMEOUT
            await process.kill_and_reap()
        process.close()


def _with_parent_death_kill(prefix: list[str]) -> list[str]:
    """`prefix` (the user switch, or nothing) extended so that the command gets SIGKILL if
    the agent dies (PR_SET_PDEATHSIG, set by setpriv after its switch of user): an exec
    session ends with its agent, even one killed with -9, instead of running on unseen.
    Without setpriv, as before."""
    if prefix:
        return [prefix[0], "--pdeathsig=KILL", *prefix[1:]]
    setpriv = shutil.which(SETPRIV)
    return [setpriv, "--pdeathsig=KILL", "--"] if setpriv else []


def _prepare(request: ExecRequest, env_allow: Sequence[str]
             ) -> tuple[list[str], dict[str, str], str]:
    """The user switch prefix, the environment and the working directory of the command,
    as `RawExecDriver.start_task` gave them to the task; the command resolved on the task's
    PATH. Blocking (a passwd lookup, stats): for a worker thread."""
    config = request.task
    try:
        driver_config = msgspec.convert(config.driver_config, RawExecTaskConfig)
    except msgspec.ValidationError as e:
        raise DriverError(f"invalid raw_exec config: {e}") from None
    task_dir = config.task_dir or Path("/")
    env = inherited_env(os.environ, env_allow)
    path = config.env.get("PATH", env.get("PATH", os.defpath))
    prefix, home = (switch_prefix(config.user), user_env(config.user)) if config.user \
        else ([], {})
    prefix = _with_parent_death_kill(prefix)
    env.update(home)
    env.update(config.env)
    env.setdefault("PATH", path)
    command = request.command[0]
    resolved = starts.resolve_command(command, task_dir, path)
    if resolved is None:
        raise DriverError(f'failed to start command: exec: "{command}": executable file '
                          "not found in $PATH")
    return [*prefix, resolved], env, driver_config.work_dir or str(task_dir)


async def exec_beside(request: ExecRequest, *, env_allow: Sequence[str], cgroup: Path | None,
                      inputs: trio.abc.ReceiveChannel[ExecInput],
                      outputs: trio.abc.SendChannel[ExecOutput],
                      enter: Callable[[list[str], str], tuple[list[str], str]] | None = None,
                      task_root: str | None = None) -> int:
    """raw_exec's `exec_task`: `request.command` in its task's environment, working directory,
    user and `cgroup` (None: none). `enter`, given the command's words (user switch and
    resolved command) and working directory, returns those to run instead (the exec driver's
    way into the task's namespaces; `task_root`, its `/proc/PID/root`, where its terminals
    are). Returns the exit code. Raises
    DriverError."""
    if not request.command:
        raise DriverError("command is not present")
    words, env, work_dir = await trio.to_thread.run_sync(_prepare, request, env_allow)
    if enter is not None:
        words, work_dir = enter(words, work_dir)
    argv = [SHELL, "-c", ENTER, "yurt-exec", work_dir, str(cgroup or ""), *words,
            *request.command[1:]]
    return await run_session(argv, env, tty=request.tty, inputs=inputs, outputs=outputs,
                             task_root=task_root)
