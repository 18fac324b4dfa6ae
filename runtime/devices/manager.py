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
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final, final

import trio

from yurt.runtime.devices.protocol import (
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
class DeviceManager:
    def __init__(self, plugins: list[DevicePlugin], *,
                 on_change: Callable[[list[DeviceGroup]], None] = lambda groups: None,
                 first_fingerprint_timeout: float = 30.0, stats_interval: float = 1.0) -> None:
        self.plugins = {p.name: p for p in plugins}
        if len(self.plugins) != len(plugins):
            raise ValueError("device plugins must have distinct names")
        self._on_change = on_change
        self._first_timeout = first_fingerprint_timeout
        self._stats_interval = stats_interval
        self.groups: dict[str, list[DeviceGroup]] = {}  # plugin → latest valid snapshot
        self.errors: dict[str, str] = {}
        self._stats: dict[str, dict[str, InstanceStats]] = {}
        self._stats_read_at: dict[str, float] = {}  # plugin → trio time of its cached stats
        self._stats_failures: dict[str, int] = {}
        self._stats_retry_at: dict[str, float] = {}  # plugin → not asked again before
        self._stats_lock = trio.Lock()  # one refresh at a time; the next finds it fresh
        self.first_fingerprints = trio.Event()
        self._pending_first = set(self.plugins)

    # ------------------------------------------------------------------ views

    def all_groups(self) -> list[DeviceGroup]:
        return [g for name in sorted(self.groups) for g in self.groups[name]]

    def stats(self, ids: set[str] | None = None) -> dict[str, InstanceStats]:
        """Cached stats by instance ID (only `ids`, when given)."""
        merged = {k: v for per in self._stats.values() for k, v in per.items()}
        return merged if ids is None else {k: v for k, v in merged.items() if k in ids}

    def _publish(self) -> None:
        self._on_change(self.all_groups())

    def _first_done(self, name: str) -> None:
        self._pending_first.discard(name)
        if not self._pending_first:
            self.first_fingerprints.set()

    def _fail(self, name: str, why: str) -> None:
        log.error("device plugin %s failed: %s", name, why)
        self.errors[name] = why
        if self.groups.pop(name, None) is not None:
            self._publish()
        self._stats.pop(name, None)
        self._stats_read_at.pop(name, None)
        self._first_done(name)

    # ------------------------------------------------------------------ run

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        async with trio.open_nursery() as nursery:
            for name in self.plugins:
                nursery.start_soon(self._run_plugin, name)
            if not self.plugins:
                self.first_fingerprints.set()
            task_status.started()

    async def _run_plugin(self, name: str) -> None:
        plugin = self.plugins[name]
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
        self.groups[name] = groups
        self.errors.pop(name, None)
        self._first_done(name)
        self._publish()

    async def refresh_stats(self) -> None:
        """Bring the cached stats of every healthy plugin up to date (at most
        `stats_interval` old), asking the plugins that need it concurrently. Never raises
        for a plugin's failure: that plugin keeps its last stats and backs off."""
        async with self._stats_lock:
            now = trio.current_time()
            due = [name for name, groups in self.groups.items()
                   if groups  # a plugin without devices has no stats to give
                   and now - self._stats_read_at.get(name, -float("inf")) >= self._stats_interval
                   and now >= self._stats_retry_at.get(name, -float("inf"))]
            async with trio.open_nursery() as nursery:
                for name in due:
                    nursery.start_soon(self._read_stats, name)

    async def _read_stats(self, name: str) -> None:
        try:
            with trio.fail_after(STATS_TIMEOUT):
                stats = await self.plugins[name].stats()
        except Exception as e:  # a plugin is third-party code: contain whatever it raises
            failures = self._stats_failures[name] = self._stats_failures.get(name, 0) + 1
            delay = min(STATS_BACKOFF_BASE * 2 ** (failures - 1), STATS_BACKOFF_LIMIT)
            self._stats_retry_at[name] = trio.current_time() + delay
            why = f"no answer within {STATS_TIMEOUT:.0f}s" if isinstance(
                e, trio.TooSlowError) else str(e)
            log.warning("stats of device plugin %s failed (%s); not asked again for %.0fs",
                        name, why, delay)
            return
        self._stats_failures.pop(name, None)
        self._stats_retry_at.pop(name, None)
        if name in self.groups:  # not cut off meanwhile
            self._stats[name] = stats
            self._stats_read_at[name] = trio.current_time()

    # ------------------------------------------------------------------ reserve

    async def reserve(self, group_id: str, ids: list[str]) -> Reservation:
        """Reserve instances `ids` of group `vendor/type/name` for a task."""
        for name, groups in self.groups.items():
            for group in groups:
                owned = {i.id for i in group.instances}
                if group.id == group_id and set(ids) <= owned:
                    try:
                        with trio.fail_after(RESERVE_TIMEOUT):
                            return await self.plugins[name].reserve(list(ids))
                    except trio.TooSlowError:
                        raise DevicePluginError(
                            f"failed to reserve devices {ids}: plugin {name!r} did not answer "
                            f"within {RESERVE_TIMEOUT:.0f}s") from None
                    except Exception as e:
                        raise DevicePluginError(f"failed to reserve devices {ids}: {e}") from e
        await trio.lowlevel.checkpoint()
        raise DevicePluginError(f"failed to reserve devices {ids}: no plugin has device "
                                f"group {group_id!r} with all those IDs")
