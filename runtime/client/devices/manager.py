"""`DeviceManager`: runs every device plugin and keeps the node's view of devices honest.

One task per plugin, all in the manager's nursery (`run`). Each consumes its plugin's
fingerprint stream, validates every snapshot (`protocol.validate`) and publishes the groups;
the node's devices are the concatenation of every healthy plugin's latest snapshot.

A plugin that raises, sends something invalid, or does not deliver its first fingerprint within
`first_fingerprint_timeout` is cut off: its devices disappear from the node (listeners are
told), the error is kept for `errors`, and every other plugin carries on.

Stats are read when asked, not polled: `refresh_stats` (the API calls it before it reports
device stats) asks each plugin whose cached stats are older than `stats_interval`, all plugins
at once, each bounded by `STATS_TIMEOUT`; `stats` is the cache. Nomad polls every plugin every
second whether anyone looks or not, which on an idle node is a wake-up (and, for NVML, a
thread hop) per plugin per second for nothing. A plugin whose stats call fails keeps its last
stats and is not asked again before a growing backoff has passed (5 s doubling, capped at
30 min, as Nomad's poll backs off).

`reserve(vendor/type/name, ids)` goes to the plugin that owns the group and *all* the IDs.

Everything known of one plugin (its snapshot, its error, its cached stats and their backoff)
is one `_Plugin` record, so cutting a plugin off or caching its stats is one place to change,
not several dicts by name to keep in step.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, final

import trio

from yurt.runtime.client.devices.protocol import (
    DeviceGroup,
    DevicePlugin,
    DevicePluginError,
    InstanceStats,
    Reservation,
    validate,
)

log = logging.getLogger("yurt.devices")

RESERVE_TIMEOUT: Final = 30.0
STATS_BACKOFF_BASE: Final = 5.0
STATS_BACKOFF_LIMIT: Final = 30 * 60.0
#: A plugin's stats call that takes longer counts as failed (the API request must not hang).
STATS_TIMEOUT: Final = 5.0


@final
@dataclass(eq=False)
class _Plugin:
    """One plugin and what the manager knows of it."""

    plugin: DevicePlugin
    #: The latest valid snapshot; None before the first one and once the plugin is cut off.
    groups: list[DeviceGroup] | None = None
    #: Why the plugin was cut off, for `DeviceManager.errors`.
    error: str | None = None
    stats: dict[str, InstanceStats] = field(default_factory=dict)
    stats_read_at: float = -math.inf  # trio time of `stats`
    stats_failures: int = 0  # in a row, for the backoff
    stats_retry_at: float = -math.inf  # not asked for stats again before

    def stats_due(self, now: float, interval: float) -> bool:
        """Whether a refresh should ask this plugin: it has devices, its stats are older than
        `interval` and it is not backing off."""
        return (bool(self.groups)  # a plugin without devices has no stats to give
                and now - self.stats_read_at >= interval and now >= self.stats_retry_at)


@final
class DeviceManager:
    def __init__(self, plugins: list[DevicePlugin], *,
                 on_change: Callable[[list[DeviceGroup]], None] = lambda groups: None,
                 first_fingerprint_timeout: float = 30.0, stats_interval: float = 1.0) -> None:
        self._plugins = {p.name: _Plugin(p) for p in plugins}
        if len(self._plugins) != len(plugins):
            raise ValueError("device plugins must have distinct names")
        self._on_change = on_change
        self._first_timeout = first_fingerprint_timeout
        self._stats_interval = stats_interval
        self._stats_lock = trio.Lock()  # one refresh at a time; the next finds it fresh
        self.first_fingerprints = trio.Event()
        self._pending_first = set(self._plugins)

    # ------------------------------------------------------------------ views

    @property
    def errors(self) -> dict[str, str]:
        """Why each cut-off plugin was cut off, by plugin name."""
        return {name: p.error for name, p in self._plugins.items() if p.error is not None}

    def all_groups(self) -> list[DeviceGroup]:
        return [g for name in sorted(self._plugins)
                for g in self._plugins[name].groups or ()]

    def stats(self, ids: set[str] | None = None) -> dict[str, InstanceStats]:
        """Cached stats by instance ID (only `ids`, when given)."""
        merged = {k: v for p in self._plugins.values() for k, v in p.stats.items()}
        return merged if ids is None else {k: v for k, v in merged.items() if k in ids}

    def _publish(self) -> None:
        self._on_change(self.all_groups())

    def _first_done(self, name: str) -> None:
        self._pending_first.discard(name)
        if not self._pending_first:
            self.first_fingerprints.set()

    def _fail(self, name: str, why: str) -> None:
        log.error("device plugin %s failed: %s", name, why)
        state = self._plugins[name]
        state.error = why
        state.stats, state.stats_read_at = {}, -math.inf
        if state.groups is not None:
            state.groups = None
            self._publish()
        self._first_done(name)

    # ------------------------------------------------------------------ run

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        async with trio.open_nursery() as nursery:
            for name in self._plugins:
                nursery.start_soon(self._run_plugin, name)
            if not self._plugins:
                self.first_fingerprints.set()
            task_status.started()

    async def _run_plugin(self, name: str) -> None:
        plugin = self._plugins[name].plugin
        try:
            stream = plugin.fingerprint()
            with trio.fail_after(self._first_timeout):
                first = await stream.__anext__()
            await self._accept(name, first)
            async for groups in stream:
                await self._accept(name, groups)
            self._fail(name, "fingerprint stream ended")
        except trio.TooSlowError:
            self._fail(name, f"no fingerprint within {self._first_timeout:.0f}s")
        except StopAsyncIteration:
            self._fail(name, "fingerprint stream ended")
        except Exception as e:  # a plugin is third-party code: contain whatever it raises
            self._fail(name, f"{type(e).__name__}: {e}")

    async def _accept(self, name: str, groups: list[DeviceGroup]) -> None:
        await trio.lowlevel.checkpoint()
        validate(groups)
        state = self._plugins[name]
        state.groups, state.error = groups, None
        self._first_done(name)
        self._publish()

    async def refresh_stats(self) -> None:
        """Bring the cached stats of every healthy plugin up to date (at most
        `stats_interval` old), asking the plugins that need it concurrently. Never raises
        for a plugin's failure: that plugin keeps its last stats and backs off."""
        async with self._stats_lock:
            now = trio.current_time()
            due = [name for name, state in self._plugins.items()
                   if state.stats_due(now, self._stats_interval)]
            async with trio.open_nursery() as nursery:
                for name in due:
                    nursery.start_soon(self._read_stats, name)

    async def _read_stats(self, name: str) -> None:
        state = self._plugins[name]
        try:
            with trio.fail_after(STATS_TIMEOUT):
                stats = await state.plugin.stats()
        except Exception as e:  # a plugin is third-party code: contain whatever it raises
            state.stats_failures += 1
            delay = min(STATS_BACKOFF_BASE * 2 ** (state.stats_failures - 1),
                        STATS_BACKOFF_LIMIT)
            state.stats_retry_at = trio.current_time() + delay
            why = f"no answer within {STATS_TIMEOUT:.0f}s" if isinstance(
                e, trio.TooSlowError) else str(e)
            log.warning("stats of device plugin %s failed (%s); not asked again for %.0fs",
                        name, why, delay)
            return
        state.stats_failures, state.stats_retry_at = 0, -math.inf
        if state.groups is not None:  # not cut off meanwhile
            state.stats, state.stats_read_at = stats, trio.current_time()

    # ------------------------------------------------------------------ reserve

    async def reserve(self, group_id: str, ids: list[str]) -> Reservation:
        """Reserve instances `ids` of group `vendor/type/name` for a task."""
        for name, state in self._plugins.items():
            for group in state.groups or ():
                owned = {i.id for i in group.instances}
                if group.id == group_id and set(ids) <= owned:
                    try:
                        with trio.fail_after(RESERVE_TIMEOUT):
                            return await state.plugin.reserve(list(ids))
                    except trio.TooSlowError:
                        raise DevicePluginError(
                            f"failed to reserve devices {ids}: plugin {name!r} did not answer "
                            f"within {RESERVE_TIMEOUT:.0f}s") from None
                    except Exception as e:
                        raise DevicePluginError(f"failed to reserve devices {ids}: {e}") from e
        await trio.lowlevel.checkpoint()
        raise DevicePluginError(f"failed to reserve devices {ids}: no plugin has device "
                                f"group {group_id!r} with all those IDs")
