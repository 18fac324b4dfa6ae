"""docker: tasks as containers of a Docker daemon, which outlive the agent.

Nomad's drivers/docker (driver.go `StartTask`, `RecoverTask`, `WaitTask`, `StopTask`,
`DestroyTask`; handle.go `run`, `Kill`), speaking the Engine API through `engine.py`.

Start: the image is made present (images.py), any container left under the task's name by
an earlier start of it is removed, the container is created (create.py: Nomad's labels plus
yurt's `io.yurt.alloc_root` and `io.yurt.task_id`) and started, its `State.Pid` read, and the
log copier (logs.py) started on its output. A failure after the create removes the
container again. The handle's `driver_state` holds `container_id`, `image` (ID),
`image_name`, `logs` (the copier's identity), `stdout_path`, `stderr_path`, `state_dir`
(`<task dir>/.docker/<start id>`, the copier's cursor) and `pid`.

Wait: the Engine API's container `wait`, then an inspect for the real exit code and
`OOMKilled` (handle.go `run`: "OOM Killed"); Docker reports no signal, nor does Nomad. A
daemon that goes away mid-wait is waited for (the container may well survive it); one that
says the container is gone ends the wait with the error.

Stop (handle.go `Kill`): with no `kill_signal`, Docker's stop (the image's stop signal,
then SIGKILL after `kill_timeout`); with one, that signal, up to `kill_timeout` for the exit,
then SIGKILL. Destroy: the container is removed (forced when running, and only when the
plugin's `gc.container`), the copier stopped after draining, the image released to the GC.

Crash safety: containers outlive the agent. `recover_task` finds the container by its ID
(gone: `TaskNotFoundError`), so the task runner waits on it again and one that exited while
the agent was away reports its real exit code; a start the agent died in (created, no handle
persisted) is removed by the next start of the task (same name) or by `reconcile`, which
removes this agent's containers (its alloc root's label) that no handle accounts for.

Fingerprint every 30 s (fingerprint.go), and every 5 s while a daemon seen before is away,
so one that returns is seen soon; due image removals run on the same loop, which wakes
early for them.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal as signals
import time
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Final

import msgspec
import trio

from yurt.runtime.client.drivers import capabilities
from yurt.runtime.client.drivers.configs import DockerTaskConfig
from yurt.runtime.client.drivers.docker import (
    containers,
    create,
    execsession,
    images,
    logs,
    stats,
)
from yurt.runtime.client.drivers.docker.engine import (
    DockerEngine,
    DockerError,
    endpoint_from,
)
from yurt.runtime.client.drivers.docker.fingerprint import probe
from yurt.runtime.client.drivers.docker.plugin import DockerPluginConfig, plugin_config
from yurt.runtime.client.drivers.protocol import (
    ExecInput,
    ExecOutput,
    ExecRequest,
    ExitResult,
    Fingerprint,
    TaskConfig,
    TaskUsage,
)
from yurt.runtime.client.drivers.rawexec import CRASH_AFTER_SPAWN
from yurt.runtime.client.fingerprint import _cpu_mhz
from yurt.runtime.client.pluginmanager.drivers import DriverTaskEvent
from yurt.runtime.errors import DriverError, TaskNotFoundError
from yurt.runtime.lib.signames import parse_signal_name
from yurt.runtime.structs import TaskHandle

NAME: Final = "docker"
STATE_DIRS: Final = ".docker"
FINGERPRINT_PERIOD: Final = 30.0
RETRY_PERIOD: Final = 5.0
#: Bound of the cleanup calls a failed start or a destroy makes (shielded).
CLEANUP_TIMEOUT: Final = 30.0
EVENT_BUFFER: Final = 64
log = logging.getLogger("yurt.drivers.docker")


@dataclass
class _Container:
    task_id: str
    container_id: str
    state: dict[str, Any]
    result: ExitResult | None = None

    @property
    def image(self) -> str:
        return str(self.state.get("image", ""))


class DockerDriver:
    """The docker driver; one per agent, one `DockerEngine` to its daemon."""

    DRIVER_NAME: ClassVar[str] = NAME
    #: Host volume mounts become bind mounts (protocol.py `supports_mounts`).
    supports_mounts: ClassVar[bool] = True
    #: A task without `kill_signal` gets Docker's stop (taskrunner/stopping.py
    #: `default_kill_signal`), as in Nomad, whose task runner passes the empty signal on.
    default_kill_signal: ClassVar[str] = ""
    fingerprint_period: float = FINGERPRINT_PERIOD
    retry_period: float = RETRY_PERIOD

    def __init__(self, config: DockerPluginConfig | None = None) -> None:
        self.config = config or DockerPluginConfig()
        self.engine = DockerEngine(endpoint_from(self.config.endpoint))
        self._tasks: dict[str, _Container] = {}
        self.gc = images.ImageGC(enabled=self.config.gc.image,
                                 delay=self.config.seconds(self.config.gc.image_delay))
        self._gc_changed = trio.Event()
        #: From the last good probe; before the first, asked for on the first start.
        self._default_network = ""
        self._seen = False
        #: Starts under way (invocation IDs): their containers are not in `_tasks` yet,
        #: and `reconcile` must not take them for a crash's leftovers.
        self._starting: set[str] = set()
        #: Task events for the driver manager (`task_events`); dropped when it lags behind.
        self._events_out, self._events_in = trio.open_memory_channel[DriverTaskEvent](
            EVENT_BUFFER)
        #: The node's `cpu.totalcompute` (client/fingerprint.py), for `cpu_hard_limit`.
        self.total_compute_mhz = (os.cpu_count() or 1) * _cpu_mhz()
        #: The kernel's capabilities (capabilities.py `supported`), for `cap_add`/`cap_drop`.
        self._system_caps = capabilities.supported()

    @property
    def name(self) -> str:
        return NAME

    def _task(self, task_id: str) -> _Container:
        try:
            return self._tasks[task_id]
        except KeyError:
            raise TaskNotFoundError(f"task {task_id} not found") from None

    def _container_ids(self) -> set[str]:
        return {t.container_id for t in self._tasks.values()}

    def _emit(self, config: TaskConfig, message: str, annotations: dict[str, str]) -> None:
        event = DriverTaskEvent(alloc_id=config.alloc_id, task=config.name, message=message,
                                timestamp=time.time_ns(), annotations=annotations)
        with contextlib.suppress(trio.WouldBlock):
            self._events_out.send_nowait(event)

    async def task_events(self) -> AsyncIterator[DriverTaskEvent]:
        """Events about tasks (Nomad's `TaskEvents`): "Downloading image" as a pull begins."""
        async for event in self._events_in:
            yield event

    @property
    def _log_endpoint(self) -> str:
        return self.engine.socket_path or self.engine.endpoint

    # ------------------------------------------------------------------ start

    async def start_task(self, config: TaskConfig) -> TaskHandle:
        if config.id in self._tasks or config.id in self._starting:
            raise DriverError(f"task {config.id} is already started")
        try:
            cfg = msgspec.convert(config.driver_config, DockerTaskConfig)
        except (msgspec.ValidationError, ValueError) as e:
            raise DriverError(f"invalid docker config: {e}") from None
        if config.task_dir is None or config.alloc_dir is None:
            raise DriverError("docker needs a task directory and an alloc directory")
        if not self._default_network:
            found = await probe(self.engine, self.config, seen_before=self._seen)
            if not found.default_network:
                raise DriverError(found.fingerprint.description, recoverable=True)
            self._default_network = found.default_network
        image_id = await images.ensure_image(
            self.engine, cfg, self.config, config.task_dir,
            on_pull=lambda ref: self._emit(config, "Downloading image", {"image": ref}))
        try:
            # In a thread: bind sources are resolved with their symlinks on the host
            # (create.py `Resolver`), so a link the task made cannot lead out of its alloc dir.
            body = await trio.to_thread.run_sync(functools.partial(
                create.create_body, config, cfg, self.config, image=image_id,
                default_network=self._default_network,
                total_compute_mhz=self.total_compute_mhz, resolve=os.path.realpath,
                system_caps=self._system_caps))
        except DriverError as e:
            raise DriverError(f"Failed to create container configuration for image "
                              f"{cfg.image!r} ({image_id!r}): {e}") from None
        self._starting.add(config.id)
        try:
            return await self._start(config, cfg, body, image_id)
        finally:
            self._starting.discard(config.id)

    async def _purge_leftover(self, cid: str) -> None:
        """Remove the container holding the task's name before a new one is created: a start
        a crash left behind, or the task's previous run, exited but not yet destroyed (a
        restart with no delay, or `gc.container = false`), as Nomad's `createContainer`
        purges an existing container that is not running. A running one is left, and the
        create fails with Docker's conflict."""
        previous = next((t for t in self._tasks.values() if t.container_id == cid), None)
        if previous is not None:
            if await containers.running(self.engine, cid):
                return
            identity = previous.state.get("logs")
            if identity:  # its last lines reach the log before the container goes
                await logs.stop_log_copier(identity, drain=True)
        await containers.remove(self.engine, cid)

    async def _start(self, config: TaskConfig, cfg: DockerTaskConfig, body: dict[str, Any],
                     image_id: str) -> TaskHandle:
        name = create.container_name(config)
        leftover = await containers.find_leftover(self.engine, name, config.alloc_id)
        if leftover is not None:
            await self._purge_leftover(leftover)
        try:
            created = await self.engine.request("POST", "/containers/create",
                                                params={"name": name}, body=body)
        except DockerError as e:
            raise DriverError(f"Failed to create container: {e}",
                              recoverable=e.recoverable or e.status >= 500) from None
        cid = str(created["Id"])
        self.gc.use(image_id, config.id)
        ok = False
        try:
            state = await self._run_container(config, cid, image_id, cfg.image)
            ok = True
        finally:
            if not ok:
                self.gc.release(image_id, config.id, trio.current_time())
                with trio.CancelScope(shield=True), trio.move_on_after(CLEANUP_TIMEOUT):
                    await containers.remove(self.engine, cid)
        if os.environ.get(CRASH_AFTER_SPAWN) == config.name:
            os.kill(os.getpid(), signals.SIGKILL)  # fault injection: see rawexec.py
        self._tasks[config.id] = _Container(config.id, cid, state)
        return TaskHandle(driver=NAME, task_id=config.id, state="running",
                          driver_state=dict(state))

    async def _run_container(self, config: TaskConfig, cid: str, image_id: str,
                             image_name: str) -> dict[str, Any]:
        assert config.task_dir is not None
        try:
            await self.engine.request("POST", f"/containers/{cid}/start")
        except DockerError as e:
            raise DriverError(f"Failed to start container {cid}: {e}", recoverable=True) from None
        try:
            inspected = await self.engine.request("GET", f"/containers/{cid}/json")
        except DockerError as e:
            raise DriverError(f"failed to inspect started container {cid}: {e}",
                              recoverable=True) from None
        start_id = config.id.rsplit("/", 1)[-1]
        state_dir = config.task_dir / STATE_DIRS / start_id
        state: dict[str, Any] = {
            "container_id": cid, "image": image_id, "image_name": image_name,
            "pid": int((inspected.get("State") or {}).get("Pid") or 0),
            "stdout_path": config.stdout_path or "", "stderr_path": config.stderr_path or "",
            "state_dir": str(state_dir), "logs": None}
        if config.stdout_path and config.stderr_path and not self.config.disable_log_collection:
            try:
                state["logs"] = await logs.start_log_copier(
                    self._log_endpoint, cid, config.stdout_path, config.stderr_path,
                    state_dir)
            except DockerError as e:
                # The task runs without collected logs, as Nomad's does when its docker
                # logger cannot read them (driver.go `StartTask`: the error is only logged),
                # e.g. `logging { type = "none" }`; no re-attach tries again.
                log.warning("docker: task %s runs without log collection: %s", config.id, e)
                state["stdout_path"] = state["stderr_path"] = ""
        return state

    # ------------------------------------------------------------------ wait

    async def wait_task(self, task_id: str) -> ExitResult:
        task = self._task(task_id)
        if task.result is None:
            result = await containers.exit_of(self.engine, task.container_id,
                                              self.retry_period)
            if task.result is None:
                task.result = result
        return task.result

    # ------------------------------------------------------------------ stop

    async def stop_task(self, task_id: str, kill_timeout: int, signal: str) -> None:
        task = self._task(task_id)
        seconds = max(kill_timeout, 0) / 1e9
        if not signal:
            with trio.move_on_after(seconds + CLEANUP_TIMEOUT):
                await containers.stop(self.engine, task.container_id, seconds)
            return
        try:
            name = parse_signal_name(signal)
        except ValueError as e:
            raise DriverError(str(e)) from None
        if seconds > 0 and await containers.kill(self.engine, task.container_id, name):
            with trio.move_on_after(seconds):
                await self.wait_task(task_id)
        await containers.kill(self.engine, task.container_id, "SIGKILL")

    async def signal_task(self, task_id: str, signal: str) -> None:
        task = self._task(task_id)
        try:
            name = parse_signal_name(signal)
        except ValueError:
            name = "SIGINT"  # Nomad: unknown names become SIGINT
        if not await containers.kill(self.engine, task.container_id, name):
            raise DriverError("task is not running")

    async def destroy_task(self, task_id: str, *, force: bool) -> None:
        task = self._task(task_id)
        running = task.result is None and await containers.running(self.engine,
                                                                   task.container_id)
        if running and not force:
            raise DriverError("must call StopTask for the given task before Destroy "
                              "or set force to true")
        with trio.CancelScope(shield=True), trio.move_on_after(CLEANUP_TIMEOUT):
            if running:
                await containers.kill(self.engine, task.container_id, "SIGKILL")
            identity = task.state.get("logs")
            if identity:
                await logs.stop_log_copier(identity, drain=True)
            if self.config.gc.container:
                # A container the daemon would not remove is logged there and forgotten
                # here: unaccounted for, the next `reconcile` removes it.
                await containers.remove(self.engine, task.container_id)
        del self._tasks[task_id]
        if task.image:
            self.gc.release(task.image, task_id, trio.current_time())
            self._gc_changed.set()

    # ------------------------------------------------------------------ recover

    async def recover_task(self, handle: TaskHandle) -> None:
        if handle.task_id in self._tasks:
            await trio.lowlevel.checkpoint()
            return
        state = dict(handle.driver_state)
        cid = str(state.get("container_id") or "")
        if not cid:
            raise DriverError("task handle is missing docker state")
        try:
            inspected = await self.engine.request("GET", f"/containers/{cid}/json")
        except DockerError as e:
            if e.status == 404:
                raise TaskNotFoundError(f"container {cid} of task {handle.task_id} is gone "
                                        "") from None
            raise DriverError(f"failed to inspect container for id {cid!r}: {e}",
                              recoverable=e.recoverable) from None
        task = _Container(handle.task_id, cid, state)
        if state.get("stdout_path") and state.get("stderr_path"):
            try:
                task.state["logs"] = await logs.ensure_log_copier(
                    self._log_endpoint, cid, str(state["stdout_path"]),
                    str(state["stderr_path"]), Path(str(state["state_dir"])), state.get("logs"))
            except DockerError as e:  # the container is still ours to supervise
                log.warning("docker: re-attached task %s without log collection: %s",
                            handle.task_id, e)
        self._tasks[handle.task_id] = task
        self.gc.use(task.image or images.image_of(inspected), handle.task_id)

    async def reconcile(self, alloc_root: Path,
                        alloc_ids: Collection[str] | None = None) -> int:
        """Remove this agent's containers (labelled with `alloc_root`) in `alloc_ids` (all
        when None) that no task here accounts for: starts the agent died in."""
        try:
            found = await containers.of_alloc_root(self.engine, str(alloc_root))
        except DockerError as e:
            log.warning("docker: cannot list containers to reconcile: %s", e)
            return 0
        known = self._container_ids()
        removed = 0
        for cid, alloc, start in found:
            if (cid in known or start in self._starting
                    or (alloc_ids is not None and alloc not in alloc_ids)):
                continue
            removed += await containers.remove(self.engine, cid)
        return removed

    # ------------------------------------------------------------------ the rest

    async def exec_task(self, task_id: str, request: ExecRequest,
                        inputs: trio.abc.ReceiveChannel[ExecInput],
                        outputs: trio.abc.SendChannel[ExecOutput]) -> int:
        task = self._task(task_id)
        if task.result is not None:
            raise DriverError("task is not running")
        return await execsession.exec_in_container(self.engine, task.container_id, request,
                                                   inputs, outputs)

    async def task_usage(self, task_id: str) -> TaskUsage | None:
        task = self._tasks.get(task_id)
        if task is None or task.result is not None:
            return None
        return await stats.container_usage(self.engine, task.container_id)

    async def fingerprint(self) -> AsyncIterator[Fingerprint]:
        """The daemon's health and attributes (fingerprint.py), and the image GC's removals,
        which wake this loop early when one is due."""
        while True:
            found = await probe(self.engine, self.config, seen_before=self._seen)
            healthy = found.fingerprint.health == "healthy"
            if healthy:
                self._seen = True
                self._default_network = found.default_network
                due = self.gc.take_due(trio.current_time())
                if due:
                    await images.remove_images(self.engine, due)
            yield found.fingerprint
            # A daemon seen before and gone is asked for again soon: it is likely coming
            # back (a restart), and its tasks wait on it. Never seen: Nomad's period.
            lost = self._seen and not healthy
            next_probe = trio.current_time() + (self.retry_period if lost
                                                else self.fingerprint_period)
            while trio.current_time() < next_probe:
                self._gc_changed = trio.Event()
                wake = min(next_probe, self.gc.next_due() or next_probe)
                with trio.move_on_at(wake):
                    await self._gc_changed.wait()
                due = self.gc.take_due(trio.current_time())
                if due:
                    with contextlib.suppress(DockerError):
                        await images.remove_images(self.engine, due)


def plugin(config: dict[str, Any]) -> DockerDriver:
    """Entry point (`yurt.drivers`)."""
    options = plugin_config(config)
    if not options.enabled:
        raise DriverError("docker is disabled")
    if options.endpoint == "" and not os.environ.get("DOCKER_HOST"):
        log.debug("docker: no endpoint configured, using the default socket")
    return DockerDriver(options)
