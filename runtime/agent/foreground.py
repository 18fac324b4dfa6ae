"""`yurt run`: one job, in the foreground, on an embedded agent and server.

Like `nomad agent -dev` plus `nomad job run`: the job is registered with an embedded local
server, its allocations run on an embedded client with a real SQLite state file, and what
happens is printed as it happens, for humans or, with `--json`, as NDJSON event-stream records
a program can follow. Humans also see every task's output as it comes, each line behind the
task's name (`docker compose up` style, runtime/agent/foreground_logs.py; `--quiet` hides it).

Where things are: in `--data-dir`, or else in a new temporary directory that is kept after
the run. The state file and the allocation directories are printed when the run starts and
again when it ends (to stdout for humans; to stderr with `--json`, which keeps stdout to
records). Keeping the directory is the point: the task logs and the state are there to read
after the run, and a run killed so hard that it could not stop its tasks (SIGKILL) leaves
them running in a directory that was named, which `--data-dir` resumes. Rejected: removing
the temporary directory on exit, which loses the logs and, after a SIGKILL, hides where the
remaining tasks run.

Every signal that ends a terminal session stops the tasks: SIGINT, SIGTERM and SIGHUP (a
closed terminal) all start the graceful stop below. A stdout that goes away (`| head`) does
not end the run: further output is dropped, the tasks run to their end.

Human output is in time order: each line carries the time since the start at which what it
reports happened, and a line never shows an earlier time than the line above it (an event
stamped before one printed earlier shows the earlier line's time).

Addresses: the node is this machine with loopback as its address, as `nomad agent -dev`'s
(command/agent/config.go `DevConfig`): task ports, `NOMAD_IP_*`, services and checks aim at
127.0.0.1, never at an interface other machines reach.

Workload identities: a task whose `identity` sets `env` or `file` gets its token as under the
agent (hooks/identity.py), signed by a key of the run's own (`<data dir>/identity`, made on
first use: only jobs that ask pay for an RSA key).

Resuming: on a data dir that holds unfinished allocations of the same job (an earlier `yurt
run` was killed), they are re-attached instead of placing new ones: running tasks keep their
processes, tasks that ended meanwhile report how they ended.

Ending: a batch job ends when every allocation has finished (exit 0 if all are `complete`,
else 1). A service job runs until SIGINT, SIGTERM or SIGHUP, then stops its allocations the way
a stop does (kill order, poststop tasks run) and exits 1 if one failed, else 130 after SIGINT
(Ctrl-C, as a shell reports it) and 0 after SIGTERM or SIGHUP; a batch job interrupted by any
of them exits 130. A second signal while stopping gives up at once (exit 130):
running tasks are SIGKILLed on the way out, never left behind.

Rollouts: a group with `update` gets its deployment as under the agent; the allocations'
health reaches it (health only, see `_report_health`) and its progress deadline fails it
(the server's deadline task runs here too).

Output goes through a non-blocking stream fed from the event broker's bounded buffer, so a
slow reader of stdout can never stall the allocations; if it falls behind, records are
dropped and the next one says how many (`"Lost": n`).

Every name and message printed for a person (allocation, group and task names, event
messages, the final table, the notes) is made printable first (runtime/lib/printable.py): the
job file and the tasks chose them, and a control character in them would be a command to the
operator's terminal. A task's own output is its own, shown raw as `yurt alloc logs` shows it;
`--json` records are the exact data.
"""

from __future__ import annotations

import io
import math
import os
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import msgspec
import trio
from rich.console import Console

from yurt.runtime.agent.foreground_logs import TaskFollower, TaskOutput
from yurt.runtime.client.allocdir import make_data_dir
from yurt.runtime.client.allocrunner.runner import AllocRunner, AllocRunnerConfig, real
from yurt.runtime.client.client import Client
from yurt.runtime.client.drivers.mock import MockDriver
from yurt.runtime.client.drivers.protocol import Driver, reconcile_drivers
from yurt.runtime.client.drivers.rawexec import RawExecDriver
from yurt.runtime.client.fingerprint import fingerprint_node
from yurt.runtime.client.taskrunner.events import datetime_of
from yurt.runtime.client.taskrunner.runner import TaskRunner
from yurt.runtime.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from yurt.runtime.eventstream import EventBroker, Record, Subscription, encode_record
from yurt.runtime.lib.printable import printable
from yurt.runtime.server import deploymentwatcher
from yurt.runtime.server.local import LocalServer
from yurt.runtime.structs import Allocation, DriverInfo, Job, Node, TaskEvent, is_client_terminal
from yurt.store import open_state_db
from yurt.store.protocol import SavedTask, StateDB

#: Signals that stop the run gracefully (a second one gives up at once).
STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: How long the task-output followers get to print the last lines once every task is done
#: (they need one reader poll; the rest is margin for a slow stdout).
OUTPUT_DRAIN: Final = 5.0
#: How long the event printer waits for a task's output to catch up before its event. A
#: caught-up follower answers within milliseconds; the bound is for one that has not reached
#: its log file yet, which on a loaded machine took longer than a quarter second.
CATCH_UP_BOUND: Final = 1.0
#: The padded columns of a human line (allocation, task, event type); the last one is free.
_WIDTHS: Final = (24, 14, 20)


@dataclass
class _Output:
    """Async stdout writes (a dup of fd 1, non-blocking while we run), one writer at a time
    (the event printer and the task-output followers share it). A reader that went away
    makes later writes no-ops: the run goes on without an audience."""

    stream: trio.lowlevel.FdStream
    lock: trio.Lock = field(default_factory=trio.Lock)
    gone: bool = False

    async def write(self, text: str) -> None:
        async with self.lock:
            if self.gone:
                return
            try:
                await self.stream.send_all(text.encode())
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                self.gone = True


@asynccontextmanager
async def _open_stdout() -> AsyncIterator[_Output]:
    fd = os.dup(1)
    stream = trio.lowlevel.FdStream(fd)
    try:
        yield _Output(stream)
    finally:
        await stream.aclose()
        os.set_blocking(1, True)  # the dup shared fd 1's flags; give it back as it was


@dataclass
class _HumanPrinter:
    """Live task events, one line each, then the status changes of allocations."""

    out: _Output
    started: float = field(default_factory=time.time)
    names: dict[str, str] = field(default_factory=dict)
    statuses: dict[str, str] = field(default_factory=dict)
    shown: float = 0.0  # the latest offset printed: lines never go back in time
    # Task output followers by (allocation ID, task): caught up before a task's event.
    followers: dict[tuple[str, str], TaskFollower] = field(default_factory=dict)

    def offset(self, unix_seconds: float) -> float:
        self.shown = max(self.shown, unix_seconds - self.started)
        return self.shown

    async def line(self, offset: float, *cells: str) -> None:
        """One line at `offset`: every cell made printable (the job file and the tasks chose
        them), each but the last padded to its column of `_WIDTHS`."""
        shown = [printable(cell) for cell in cells]
        padded = [cell.ljust(width) for cell, width in zip(shown[:-1], _WIDTHS, strict=False)]
        await self.out.write(f"{offset:8.3f}s  {' '.join([*padded, shown[-1]])}\n")

    async def print(self, record: Record) -> None:
        if record.lost:
            await self.out.write(f"… {record.lost} events not shown (output too slow)\n")
        for event in record.events:
            if event.topic == "Task":
                payload = event.payload
                ev: TaskEvent = payload["Event"]
                name = self.names.get(payload["AllocID"], payload["AllocID"][:8])
                follower = self.followers.get((payload["AllocID"], payload["Task"]))
                if follower is not None:  # its output up to now comes first
                    with trio.move_on_after(CATCH_UP_BOUND):
                        await follower.catch_up()
                        if ev.type == "Terminated":  # and its last words, still in the pump
                            await follower.ended.wait()
                await self.line(self.offset(ev.time / 1e9), name, payload["Task"], ev.type,
                                ev.display_message)
            elif event.topic == "Allocation":
                alloc: Allocation = event.payload["Allocation"]
                self.names[alloc.id] = alloc.name
                previous = self.statuses.get(alloc.id)
                if alloc.client_status != previous:
                    self.statuses[alloc.id] = alloc.client_status
                    # Seen now: the client does not stamp its status changes.
                    await self.line(self.offset(time.time()), alloc.name,
                                    f"allocation is {alloc.client_status}: "
                                    f"{alloc.client_description}")


@dataclass
class _JsonPrinter:
    out: _Output

    async def print(self, record: Record) -> None:
        await self.out.write(encode_record(record).decode() + "\n")


def _final_table(allocs: list[Allocation]) -> str:
    """The closing table: drawn at a terminal, plain columns (never cut) into a pipe; every
    cell made printable either way (runtime/cli/output.py's `format_list` and `rich_table`)."""
    from yurt.runtime.cli.output import format_list, rich_table, stdout_is_terminal

    header = ("allocation", "id", "status", "task", "state", "failed", "restarts",
              "last event")
    rows = []
    for alloc in allocs:
        for i, (task, state) in enumerate(sorted(alloc.task_states.items())):
            last = state.events[-1] if state.events else None
            rows.append([alloc.name if i == 0 else "", alloc.id[:8] if i == 0 else "",
                         alloc.client_status if i == 0 else "", task, state.state,
                         "yes" if state.failed else "no", str(state.restarts),
                         f"{last.type}: {last.display_message}" if last else ""])
    if not stdout_is_terminal():
        return "final state\n" + format_list([list(header), *rows]) + "\n"
    buffer = io.StringIO()
    Console(file=buffer, width=140, highlight=False).print(
        rich_table(header, rows, title="final state", id_columns=(1,)))
    return buffer.getvalue()


#: The node's address in the foreground (see the module header).
LOOPBACK: Final = "127.0.0.1"


def local_node(data_dir: Path, drivers: list[str]) -> Node:
    """This machine, at the loopback address, as a node that has `drivers`, detected and
    healthy."""
    now = datetime_of(time.time_ns())
    node = fingerprint_node(data_dir, ip_address=LOOPBACK)
    node.drivers = {d: DriverInfo(detected=True, healthy=True, health_description="Healthy",
                                  update_time=now) for d in drivers}
    return node


async def _print_records(subscription: Subscription, printer: _HumanPrinter | _JsonPrinter
                         ) -> None:
    async for record in subscription:
        await printer.print(record)


def state_file(root: Path) -> Path:
    """Where `open_state_db(root / "state")` keeps the state."""
    return root / "state" / "state.db"


def where_note(root: Path, *, temporary: bool, allocs: list[Allocation], end: bool) -> str:
    """The lines that say where the run keeps its state and its allocations. Pure."""
    lines = [f"==> state file: {state_file(root)}"]
    alloc_root = root / "alloc"
    if allocs:
        lines += [f"==> allocation {a.name} ({a.id[:8]}): {alloc_root / a.id} "
                  "(task logs in alloc/logs)" for a in allocs]
    else:
        lines.append(f"==> allocation directories: {alloc_root}")
    if temporary:
        lines.append(f"==> {root} is a new temporary directory, kept after the run"
                     if not end else
                     f"==> {root} is kept (state and task logs): `yurt run JOBFILE "
                     f"--data-dir {root}` reuses it, `rm -rf {root}` removes it")
    return "".join(f"{line}\n" for line in lines)


async def run_job(job: Job, *, data_dir: Path | None, json_output: bool,
                  quiet: bool = False) -> int:
    """Run `job` to its end (see the module docstring) and return the exit status."""
    temporary = data_dir is None
    root = (Path(tempfile.mkdtemp(prefix="yurt-run-")) if data_dir is None
            else data_dir).absolute()
    if data_dir is not None:  # a new temporary one is 0700 already
        await trio.to_thread.run_sync(make_data_dir, root)
    async with open_state_db(root / "state") as db, _open_stdout() as out:

        async def note(text: str) -> None:
            text = printable(text, lines=True)  # names from the job file among the words
            if json_output:  # stdout carries records only
                sys.stderr.write(text)
                sys.stderr.flush()
            else:
                await out.write(text)

        async def announce(placed: list[Allocation]) -> None:
            await note(where_note(root, temporary=temporary, allocs=placed, end=False))

        status, allocs = await _run(job, db=db, alloc_root=root / "alloc", out=out,
                                    json_output=json_output, quiet=quiet, note=note,
                                    announce=announce)
        await note(where_note(root, temporary=temporary, allocs=allocs, end=True))
        return status


async def _resumable(db: StateDB, job: Job
                     ) -> tuple[list[Allocation], Mapping[str, Mapping[str, SavedTask]]]:
    """Allocations of `job` an earlier `yurt run` on this data dir left unfinished: those
    whose tasks may still run, a stop that a crash cut short included (resumed, it finishes);
    and the saved state of every allocation's tasks, read with them in one transaction, as
    the agent's restore does."""
    snapshot = await db.get_all_state()
    return [a for a in snapshot.allocations
            if a.job_id == job.id and not is_client_terminal(a.client_status)], snapshot.tasks


def _health_forwarder(send: trio.MemorySendChannel[Allocation]
                      ) -> Callable[[Allocation], None]:
    """The client's update callback: an allocation of a deployment whose health is set or
    changed goes to `_report_health` (unbounded: at most a few per allocation)."""
    known: dict[str, bool | None] = {}

    def forward(alloc: Allocation) -> None:
        status = alloc.deployment_status
        if not alloc.deployment_id or status is None or status.healthy is None:
            return
        if known.get(alloc.id) != status.healthy:
            known[alloc.id] = status.healthy
            send.send_nowait(alloc)

    return forward


async def _report_health(server: LocalServer,
                         receive: trio.MemoryReceiveChannel[Allocation]) -> None:
    """Hand allocations' health to the server's deployments (the agent's alloc sync does it
    there). Health only: the server's copy keeps its own status, so a failure reported here
    never makes the server place a replacement that nothing in `yurt run` would start; the
    progress deadline judges a rollout that does not become healthy."""
    async for alloc in receive:
        current = server.allocs.get(alloc.id)
        if current is None:
            continue
        await server.update_allocs([msgspec.structs.replace(
            current, deployment_status=alloc.deployment_status)])


async def _signer(job: Job, root: Path) -> Callable[[dict[str, Any]], str] | None:
    """What signs the job's workload identities (the agent's is its server's key: runtime/
    agent/agent.py), or None when no task exposes one (hooks/identity.py `wants_token`):
    without it the identity hook is never added and `NOMAD_TOKEN` stays empty."""
    from yurt.hooks.identity import wants_token
    from yurt.runtime.server import workload_keys

    if not any(wants_token(task) for group in job.task_groups for task in group.tasks):
        await trio.lowlevel.checkpoint()
        return None
    signer = await trio.to_thread.run_sync(workload_keys.load_or_create, root / "identity")
    return signer.sign


async def _run(job: Job, *, db: StateDB, alloc_root: Path, out: _Output, json_output: bool,
               quiet: bool, note: Callable[[str], Awaitable[None]],
               announce: Callable[[list[Allocation]], Awaitable[None]]
               ) -> tuple[int, list[Allocation]]:
    broker = EventBroker()
    subscription = broker.subscribe()
    printer: _HumanPrinter | _JsonPrinter = (_JsonPrinter(out) if json_output
                                             else _HumanPrinter(out))
    unix_clock = time.time_ns
    raw_exec = RawExecDriver()
    drivers: dict[str, Driver] = {"mock_driver": MockDriver(unix_clock), "raw_exec": raw_exec}
    node = local_node(alloc_root.parent, list(drivers))
    server = LocalServer(node, broker)
    health_send, health_receive = trio.open_memory_channel[Allocation](math.inf)
    client = Client(AllocRunnerConfig(state_db=db, drivers=drivers, unix_clock=unix_clock,
                                      alloc_root=alloc_root, node=node,
                                      sign_identity=await _signer(job, alloc_root.parent)),
                    broker, on_alloc_update=_health_forwarder(health_send))
    interrupted = False
    by_sigint = False
    forced = False
    finished = False
    unplaced = False

    async with trio.open_nursery() as nursery:
        await nursery.start(client.run)
        # A rollout (a group with `update`) as the agent runs it: allocations' health reaches
        # the deployment, and its progress deadline fails it.
        nursery.start_soon(_report_health, server, health_receive)
        await nursery.start(deploymentwatcher.run_deadlines, server)
        printing = trio.Event()

        async def print_all() -> None:
            try:
                await _print_records(subscription, printer)
            finally:
                printing.set()

        nursery.start_soon(print_all)
        broker.node_registered(node)
        resumed, saved = await _resumable(db, job)
        if resumed:
            assert resumed[0].job is not None
            server.adopt(resumed[0].job, resumed)
            placed = resumed
        else:
            registration = await server.register_job(job)
            placed = registration.placed
            for group, why in registration.failed.items():
                await note(f"group {group!r} not placed: {why}\n")
                unplaced = True
        # Where everything is, before any task starts: a run killed from here on leaves its
        # tasks in a directory that was named.
        await announce(placed)
        for alloc in placed:
            if isinstance(printer, _HumanPrinter):
                printer.names[alloc.id] = alloc.name
            if resumed:
                await client.restore_alloc(alloc, saved.get(alloc.id, {}))
            else:
                client.add_alloc(alloc)
        if resumed:
            # A start that the crash cut off before its handle was saved: only in this job's
            # allocations (other jobs' tasks in this data dir are not this run's to judge).
            await reconcile_drivers(drivers.values(), alloc_root, [a.id for a in resumed])

        # Task output: the followers end by themselves once their task's output is complete,
        # so after the tasks they get a bounded while to print the last lines.
        followers, followed = trio.CancelScope(), trio.Event()
        outputs = [] if json_output or quiet else _task_outputs(client, placed, bool(resumed))
        tails = [TaskFollower(output) for output in outputs]
        if isinstance(printer, _HumanPrinter):
            printer.followers = {(t.source.alloc_id, t.source.task): t for t in tails}
        nursery.start_soon(_follow_outputs, followers, followed, tails, out.write)

        with trio.open_signal_receiver(*STOP_SIGNALS) as signals:
            async with trio.open_nursery() as waiting:

                async def finish() -> None:
                    nonlocal finished
                    await client.wait_all()
                    finished = True
                    waiting.cancel_scope.cancel()

                async def on_signals() -> None:
                    nonlocal interrupted, forced, by_sigint
                    async for signum in signals:
                        if interrupted:
                            forced = True
                            waiting.cancel_scope.cancel()
                            return
                        interrupted = True
                        by_sigint = signum == signal.SIGINT
                        for alloc in await server.stop_job(job.id):
                            client.update_alloc(alloc)
                        # One deadline for the whole stop: past it, give up as on a second
                        # signal (a driver that never reports an exit cannot hold `run`).
                        waiting.cancel_scope.deadline = (trio.current_time()
                                                         + client.stop_bound())

                waiting.start_soon(finish)
                waiting.start_soon(on_signals)
            if interrupted and not finished:
                forced = True

        if forced:
            followers.cancel()
        else:
            followers.deadline = trio.current_time() + OUTPUT_DRAIN
            await followed.wait()
        final = [runner.client_alloc() for runner in client.runners.values()]
        if not forced:
            broker.close()
            await printing.wait()
        nursery.cancel_scope.cancel()

    if not json_output and not forced:
        await out.write(_final_table(final))
    if forced:
        # Giving up must not leave orphans behind: kill what runs, at once.
        killed = raw_exec.kill_all()
        if killed:
            await note(f"killed {killed} task(s) without waiting\n")
        return EXIT_INTERRUPTED, final
    if unplaced or any(a.client_status == "failed" for a in final):
        return EXIT_FAILED, final
    # Ctrl-C is 130 as a shell reports it, a service job included; a stop asked for by
    # SIGTERM or SIGHUP (a supervisor, a closed terminal) ends a service job as planned.
    if interrupted and (by_sigint or job.type != "service"):
        return EXIT_INTERRUPTED, final
    return EXIT_OK, final


def _task_outputs(client: Client, placed: list[Allocation], resumed: bool) -> list[TaskOutput]:
    """What to follow: every task of every placed allocation, labelled by the task's name
    (prefixed with its allocation's group and index when there are several)."""
    outputs = []
    for alloc in placed:
        runner = real(client.runners.get(alloc.id))
        if runner is None or runner.alloc_dir is None:
            continue
        for name, tr in runner.task_runners.items():
            label = printable(name if len(placed) == 1
                              else f"{alloc.name.partition('.')[2]}/{name}")

            def finished(tr: TaskRunner = tr, runner: AllocRunner = runner) -> bool:
                return tr.done.is_set() or runner.wait_done.is_set()

            outputs.append(TaskOutput(label, alloc.id, runner.alloc_dir.logs, name, finished,
                                      origin="end" if resumed else "start"))
    return outputs


async def _follow_outputs(scope: trio.CancelScope, followed: trio.Event,
                          tails: list[TaskFollower],
                          write: Callable[[str], Awaitable[None]]) -> None:
    """Follow every task's output under `scope` (the caller bounds or cancels it); set
    `followed` once all of it is printed or given up."""
    width = max((len(t.source.label) for t in tails), default=0)
    try:
        with scope:
            async with trio.open_nursery() as nursery:
                for tail in tails:
                    nursery.start_soon(tail.run, width, write)
    finally:
        followed.set()
