"""`DriverManager`: finds the task drivers, runs their fingerprint and event loops.

Drivers are plugins: any installed distribution can add one under the entry-point group
`yurt.drivers` (name → a factory taking the driver's plugin config and returning a driver).
The agent's configuration decides which run (`allow`: only these, `block`: never these) and
with what plugin config.

For each enabled driver the manager owns two loops (Nomad's
`client/pluginmanager/drivermanager/instance.go` `instanceManager`):

- *fingerprint*: every fingerprint the driver streams becomes the node's `DriverInfo` for it
  (`Detected` unless undetected, `Healthy` only when healthy, the description, the
  attributes); a fingerprint that raises reports the driver unhealthy ("failed to fingerprint
  driver"); a stream that ends means the plugin died, and it is re-dispensed after a backoff
  of 5 s doubling up to 2 min, reported unhealthy meanwhile.
- *task events*: every event the driver streams is routed to the task runner of its
  allocation and task, which records it as a `Driver` task event.

Fingerprinting happens here only. Drivers without these streams are taken as always healthy
and eventless. In-process drivers keep their instance across a re-dispense (their tasks live
in it); what a driver asks to keep for re-attachment is persisted as driver plugin state.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Final, Protocol, final, runtime_checkable

import trio

from yurt.runtime.client.drivers.protocol import Driver, Fingerprint
from yurt.runtime.client.taskrunner.events import datetime_of
from yurt.runtime.lib.logfields import fields
from yurt.runtime.structs import DriverInfo, PluginState
from yurt.store.protocol import StateDB

log = logging.getLogger("yurt.drivers")

ENTRY_POINT_GROUP: Final = "yurt.drivers"
BACKOFF_BASE: Final = 5.0
BACKOFF_LIMIT: Final = 120.0

@dataclass(frozen=True)
class DriverTaskEvent:
    """Something a driver says about one of its tasks."""

    alloc_id: str
    task: str
    message: str
    timestamp: int  # unix ns
    annotations: dict[str, str] = field(default_factory=dict)


@runtime_checkable
class Fingerprinting(Protocol):
    def fingerprint(self) -> AsyncIterator[Fingerprint]: ...


@runtime_checkable
class EventEmitting(Protocol):
    def task_events(self) -> AsyncIterator[DriverTaskEvent]: ...


DriverFactory = Callable[[dict[str, Any]], Driver]


def discover() -> dict[str, DriverFactory]:
    """Every driver installed under the `yurt.drivers` entry-point group."""
    found: dict[str, DriverFactory] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            found[ep.name] = ep.load()
        except Exception as e:  # a broken third-party plugin must not stop the agent
            log.error("driver plugin %s cannot be loaded: %s", ep.name, e)
    return found


def enabled(names: list[str], allow: tuple[str, ...], block: tuple[str, ...]) -> list[str]:
    return [n for n in names if (not allow or n in allow) and n not in block]


@final
class DriverManager:
    def __init__(self, factories: dict[str, DriverFactory], *, state_db: StateDB,
                 unix_clock: Callable[[], int],
                 on_info: Callable[[str, DriverInfo], None] = lambda name, info: None,
                 route_event: Callable[[DriverTaskEvent], Awaitable[None]] | None = None,
                 allow: tuple[str, ...] = (), block: tuple[str, ...] = (),
                 plugin_config: dict[str, dict[str, Any]] | None = None) -> None:
        self._factories = {n: factories[n] for n in enabled(sorted(factories), allow, block)}
        self._db = state_db
        self._unix_clock = unix_clock
        self._on_info = on_info
        self._route = route_event
        self._config = plugin_config or {}
        self.drivers: dict[str, Driver] = {}
        self.infos: dict[str, DriverInfo] = {}
        self.dispensed: dict[str, int] = {}  # how many times each was dispensed
        self.first_fingerprints = trio.Event()
        self._pending_first = set(self._factories)

    def dispense(self, name: str) -> Driver:
        """The running instance of driver `name` (created on first use)."""
        if name not in self._factories:
            raise KeyError(f"driver not found: {name}")
        driver = self.drivers.get(name)
        if driver is None:
            driver = self.drivers[name] = self._factories[name](self._config.get(name, {}))
        self.dispensed[name] = self.dispensed.get(name, 0) + 1
        return driver

    def _report(self, name: str, info: DriverInfo) -> None:
        previous = self.infos.get(name)
        if previous is None or (previous.detected, previous.healthy) != (info.detected,
                                                                         info.healthy):
            # One structured line per change (runtime/agent/log.py); losing health is a warning.
            worse = previous is not None and previous.healthy and not info.healthy
            log.log(logging.WARNING if worse else logging.INFO, "driver state changed",
                    extra=fields(driver=name, detected=info.detected, healthy=info.healthy,
                                 health=info.health_description or
                                 ("healthy" if info.healthy else "unhealthy")))
        self.infos[name] = info
        self._on_info(name, info)
        self._pending_first.discard(name)
        if not self._pending_first:
            self.first_fingerprints.set()

    def _info(self, fp: Fingerprint) -> DriverInfo:
        return DriverInfo(detected=fp.health != "undetected", healthy=fp.health == "healthy",
                          health_description=fp.description, attributes=dict(fp.attributes),
                          update_time=datetime_of(self._unix_clock()))

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        saved = await self._db.get_driver_plugin_state()
        async with trio.open_nursery() as nursery:
            for name in list(self._factories):
                try:
                    driver = self.dispense(name)
                except Exception as e:  # disabled by its config, or broken
                    del self._factories[name]
                    self._report(name, self._info(Fingerprint("undetected", str(e))))
                    continue
                restore = getattr(driver, "restore_plugin_state", None)
                if saved is not None and name in saved.internal_state and restore is not None:
                    restore(saved.internal_state[name])
                nursery.start_soon(self._fingerprint_loop, name)
                nursery.start_soon(self._event_loop, name)
            await self._persist()
            if not self._factories:
                self.first_fingerprints.set()
            task_status.started()

    async def _persist(self) -> None:
        state = {n: d.plugin_state() for n, d in self.drivers.items()
                 if hasattr(d, "plugin_state")}
        await self._db.put_driver_plugin_state(PluginState(internal_state=state))

    async def _fingerprint_loop(self, name: str) -> None:
        retry = 0
        while True:
            driver = self.drivers[name]
            if not isinstance(driver, Fingerprinting):
                self._report(name, self._info(Fingerprint("healthy", "Healthy")))
                return
            try:
                async for fp in driver.fingerprint():
                    retry = 0
                    self._report(name, self._info(fp))
                why = "driver plugin exited"
            except Exception as e:
                why = f"failed to fingerprint driver: {e}"
            self._report(name, self._info(Fingerprint("unhealthy", why)))
            delay = min(BACKOFF_BASE * 2**retry, BACKOFF_LIMIT)
            retry += 1
            await trio.sleep(delay)
            self.dispense(name)  # re-dispense: the loops start over
            await self._persist()

    async def _event_loop(self, name: str) -> None:
        retry = 0
        while True:
            driver = self.drivers[name]
            if not isinstance(driver, EventEmitting):
                await trio.lowlevel.checkpoint()
                return
            try:
                async for event in driver.task_events():
                    retry = 0
                    if self._route is None:
                        continue
                    try:
                        await self._route(event)
                    except Exception:  # one event that cannot be routed loses only itself
                        log.exception("routing a task event of driver %s failed", name)
            except Exception as e:
                log.warning("task events of driver %s failed: %s", name, e)
            await trio.sleep(min(BACKOFF_BASE * 2**retry, BACKOFF_LIMIT))
            retry += 1
