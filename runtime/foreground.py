"""`yurt run`: one job, in the foreground, on an embedded agent and server.

Like `nomad agent -dev` plus `nomad job run`: the job is registered with an embedded local
server, its allocations run on an embedded client with a real SQLite state file (in
`--data-dir`, or a temporary directory removed on exit), and what happens is printed as it
happens, for humans or, with `--json`, as NDJSON event-stream records a program can follow.

Resuming: on a data dir that holds unfinished allocations of the same job (an earlier `yurt
run` was killed), they are re-attached instead of placing new ones: running tasks keep their
processes, tasks that ended meanwhile report how they ended.

Ending: a batch job ends when every allocation has finished (exit 0 if all are `complete`,
else 1). A service job runs until SIGINT or SIGTERM, then stops its allocations the way a stop
does (kill order, poststop tasks run) and exits 0 if none failed, else 1; a batch job
interrupted that way exits 130. A second signal while stopping gives up at once (exit 130):
running tasks are SIGKILLed on the way out, never left behind.

Rollouts: a group with `update` gets its deployment as under the agent; the allocations'
health reaches it (health only, see `_report_health`) and its progress deadline fails it
(the server's deadline task runs here too).

Output goes through a non-blocking stream fed from the event broker's bounded buffer, so a
slow reader of stdout can never stall the allocations; if it falls behind, records are
dropped and the next one says how many (`"Lost": n`).
"""

from __future__ import annotations

import io
import math
import os
import signal
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import trio
from rich.console import Console
from rich.table import Table

from yurt.runtime.allocrunner.runner import AllocRunnerConfig
from yurt.runtime.client import Client
from yurt.runtime.drivers.mock import MockDriver
from yurt.runtime.drivers.protocol import Driver, reconcile_drivers
from yurt.runtime.drivers.rawexec import RawExecDriver
from yurt.runtime.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from yurt.runtime.eventstream import EventBroker, Record, Subscription, encode_record
from yurt.runtime.fingerprint import fingerprint_node
from yurt.runtime.server import deploymentwatcher
from yurt.runtime.server.local import LocalServer
from yurt.runtime.structs import Allocation, DriverInfo, Job, Node, TaskEvent, is_client_terminal
from yurt.runtime.taskrunner.events import datetime_of
from yurt.store import open_state_db
from yurt.store.protocol import SavedTask, StateDB


@dataclass
class _Output:
    """Async stdout writes (a dup of fd 1, non-blocking while we run)."""

    stream: trio.lowlevel.FdStream

    async def write(self, text: str) -> None:
        await self.stream.send_all(text.encode())


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

    async def print(self, record: Record) -> None:
        if record.lost:
            await self.out.write(f"… {record.lost} events not shown (output too slow)\n")
        for event in record.events:
            if event.topic == "Task":
                payload = event.payload
                ev: TaskEvent = payload["Event"]
                name = self.names.get(payload["AllocID"], payload["AllocID"][:8])
                offset = ev.time / 1e9 - self.started
                await self.out.write(f"{offset:8.3f}s  {name:<24} {payload['Task']:<14} "
                                     f"{ev.type:<20} {ev.display_message}\n")
            elif event.topic == "Allocation":
                alloc: Allocation = event.payload["Allocation"]
                self.names[alloc.id] = alloc.name
                previous = self.statuses.get(alloc.id)
                if alloc.client_status != previous:
                    self.statuses[alloc.id] = alloc.client_status
                    offset = time.time() - self.started
                    await self.out.write(f"{offset:8.3f}s  {alloc.name:<24} allocation is "
                                         f"{alloc.client_status}: {alloc.client_description}\n")


@dataclass
class _JsonPrinter:
    out: _Output

    async def print(self, record: Record) -> None:
        await self.out.write(encode_record(record).decode() + "\n")


def _final_table(allocs: list[Allocation]) -> str:
    table = Table(title="final state", title_justify="left")
    for column in ("allocation", "id", "status", "task", "state", "failed", "restarts",
                   "last event"):
        table.add_column(column)
    for alloc in allocs:
        for i, (task, state) in enumerate(sorted(alloc.task_states.items())):
            last = state.events[-1] if state.events else None
            table.add_row(alloc.name if i == 0 else "", alloc.id[:8] if i == 0 else "",
                          alloc.client_status if i == 0 else "", task, state.state,
                          "yes" if state.failed else "no", str(state.restarts),
                          f"{last.type}: {last.display_message}" if last else "")
    buffer = io.StringIO()
    Console(file=buffer, width=140, highlight=False).print(table)
    return buffer.getvalue()


def local_node(data_dir: Path, drivers: list[str]) -> Node:
    """This machine as a node that has `drivers`, detected and healthy."""
    now = datetime_of(time.time_ns())
    node = fingerprint_node(data_dir)
    node.drivers = {d: DriverInfo(detected=True, healthy=True, health_description="Healthy",
                                  update_time=now) for d in drivers}
    return node


async def _print_records(subscription: Subscription, printer: _HumanPrinter | _JsonPrinter
                         ) -> None:
    async for record in subscription:
        await printer.print(record)


async def run_job(job: Job, *, data_dir: Path | None, json_output: bool) -> int:
    """Run `job` to its end (see the module docstring) and return the exit status."""
    with tempfile.TemporaryDirectory(prefix="yurt-run-") as tmp:
        root = data_dir if data_dir is not None else Path(tmp)
        async with open_state_db(root / "state") as db, _open_stdout() as out:
            return await _run(job, db=db, alloc_root=root / "alloc", out=out,
                              json_output=json_output)


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


async def _run(job: Job, *, db: StateDB, alloc_root: Path, out: _Output,
               json_output: bool) -> int:
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
                                      alloc_root=alloc_root, node=node), broker,
                    on_alloc_update=_health_forwarder(health_send))
    interrupted = False
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
                await out.write(f"group {group!r} not placed: {why}\n")
                unplaced = True
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

        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as waiting:

                async def finish() -> None:
                    nonlocal finished
                    await client.wait_all()
                    finished = True
                    waiting.cancel_scope.cancel()

                async def on_signals() -> None:
                    nonlocal interrupted, forced
                    async for _ in signals:
                        if interrupted:
                            forced = True
                            waiting.cancel_scope.cancel()
                            return
                        interrupted = True
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
            await out.write(f"killed {killed} task(s) without waiting\n")
        return EXIT_INTERRUPTED
    if unplaced or any(a.client_status == "failed" for a in final):
        return EXIT_FAILED
    if interrupted and job.type != "service":
        return EXIT_INTERRUPTED
    return EXIT_OK
