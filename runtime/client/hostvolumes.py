"""The node's side of dynamic host volumes: the built-in `mkdir` plugin (external ones are
client/hostvolume_plugins.py's), the record of what this node made, and the node's
`HostVolumes` kept in step (Nomad's client/hostvolumemanager/).

What lives here: `HostVolumeManager`, which the agent owns and the server calls (in one
process: runtime/agent/agent.py hands it to server/hostvolumes.py as its `NodeVolumes`).
`create` runs the plugin, records the volume and tells the agent the node gained it;
`register` records a directory that exists already; `delete` runs the plugin's delete, drops
the record and tells the agent the node lost it; `restore`, at the agent's start, runs
the plugin's create again for every record (plugins are idempotent: mkdir leaves an
existing directory alone), so a restarted agent offers what it offered before (Nomad's
`restoreFromState`); `held` lists them for the server, which adopts any its book lacks.

Invariants:
- One volume per name on a node (`volLocker`): a create or register of a name held by
  another ID is refused with Nomad's "volume name already exists on this node".
- The record is written (0600, atomically and durably: a fresh temporary file synced and
  renamed, the directory synced) after the plugin succeeded and before the node is told;
  a record that cannot be written undoes a first create.
- A plugin is `mkdir` or one of the external plugins fingerprinted at the start; any other
  ID is Nomad's `no such plugin: "ID"` (placement refuses it first: the node has no
  `plugins.host_volume.<ID>.version` attribute).
- Files are touched in a worker thread behind a limiter of one: operations are rare and an
  operator's, and one at a time keeps name checks and records in order.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Final, final

import msgspec
import trio

from yurt.runtime.client.confined_write import replace_file_at
from yurt.runtime.client.hostvolume_plugins import PLUGIN_TIMEOUT, ExternalPlugin
from yurt.runtime.structs.hostvolume import (
    MKDIR_PLUGIN,
    HostVolume,
    HostVolumeNodeError,
)
from yurt.runtime.structs.node import ClientHostVolumeConfig

log = logging.getLogger("yurt.client.hostvolumes")

#: client/hostvolumemanager/host_volume_plugin.go `HostVolumePluginMkdirVersion`: the node's
#: `plugins.host_volume.mkdir.version` attribute, which placement requires.
MKDIR_VERSION: Final = "0.0.1"


class MkdirParams(msgspec.Struct, frozen=True):
    mode: int = 0o700
    uid: int = -1
    gid: int = -1


def mkdir_params(params: dict[str, str]) -> MkdirParams:
    """host_volume_plugin.go `decodeMkdirParams`: `mode` (octal), `uid`, `gid`.

    Raises:
        HostVolumeNodeError: an unknown parameter or a value that is not a number.
    """
    out = MkdirParams()
    for name, value in sorted(params.items()):
        try:
            if name == "mode":
                mode = int(value, 8)
                if not 0 <= mode < 1 << 32:
                    raise ValueError(value)
                out = msgspec.structs.replace(out, mode=mode)
            elif name in ("uid", "gid"):
                out = msgspec.structs.replace(out, **{name: int(value, 10)})
            else:
                raise HostVolumeNodeError(
                    f'invalid value for "{name}": unknown mkdir parameter: "{name}"', 400)
        except ValueError:
            raise HostVolumeNodeError(
                f'invalid value for "{name}": strconv.Parse: parsing "{value}": invalid syntax',
                400) from None
    return out


def _mkdir(path: Path, params: dict[str, str]) -> None:
    """host_volume_plugin.go `HostVolumePluginMkdir.Create`: an existing path is left as it
    is; a new one is made with `mode`, then chowned (and removed again if that fails)."""
    if path.exists():
        return
    decoded = mkdir_params(params)
    try:
        path.mkdir(mode=decoded.mode, parents=True)
        os.chmod(path, decoded.mode)  # mkdir's mode is masked by the umask
    except OSError as e:
        raise HostVolumeNodeError(f"error creating directory: {e}") from e
    try:
        os.chown(path, decoded.uid, decoded.gid)
    except OSError as e:
        shutil.rmtree(path, ignore_errors=True)
        raise HostVolumeNodeError(f"error changing owner/group: {e}") from e


class VolumeRecord(msgspec.Struct, frozen=True):
    """What the node keeps of a volume it made or registered (Nomad's
    `cstructs.HostVolumeState`)."""

    id: str
    name: str
    namespace: str
    plugin_id: str
    host_path: str
    parameters: dict[str, str] = msgspec.field(default_factory=dict)
    node_id: str = ""
    capacity_min: int = 0
    capacity_max: int = 0
    #: What the plugin reported (absent from records written before it was kept).
    capacity: int = 0

    def volume(self) -> HostVolume:
        """The volume as a plugin is handed it again (a restore's create), or as the server
        adopts it (server/hostvolumes.py `reconcile`)."""
        return HostVolume(id=self.id, name=self.name, namespace=self.namespace,
                          plugin_id=self.plugin_id, host_path=self.host_path,
                          parameters=dict(self.parameters), node_id=self.node_id,
                          requested_capacity_min_bytes=self.capacity_min,
                          requested_capacity_max_bytes=self.capacity_max,
                          capacity_bytes=self.capacity)


def record_of(vol: HostVolume, host_path: str, capacity: int = 0) -> VolumeRecord:
    return VolumeRecord(id=vol.id, name=vol.name, namespace=vol.namespace,
                        plugin_id=vol.plugin_id, host_path=host_path,
                        parameters=dict(vol.parameters), node_id=vol.node_id,
                        capacity_min=vol.requested_capacity_min_bytes,
                        capacity_max=vol.requested_capacity_max_bytes, capacity=capacity)


def node_volume(record: VolumeRecord) -> ClientHostVolumeConfig:
    """host_volumes.go `genVolConfig`: never read-only (capabilities decide)."""
    return ClientHostVolumeConfig(name=record.name, path=record.host_path, read_only=False,
                                  id=record.id)


@final
class HostVolumeManager:
    """See the module header. `on_change(name, config)`: the node gained (config) or lost
    (None) the volume `name`."""

    def __init__(self, volumes_dir: Path, state_dir: Path,
                 on_change: Callable[[str, ClientHostVolumeConfig | None], None],
                 external: dict[str, ExternalPlugin] | None = None) -> None:
        self.volumes_dir = volumes_dir
        self.state_dir = state_dir
        self._on_change = on_change
        self._external = dict(external or {})
        self._names: dict[str, str] = {}  # name → the ID holding it
        self._held: dict[str, VolumeRecord] = {}  # ID → the record of a volume offered
        self._limiter = trio.CapacityLimiter(1)

    @property
    def plugins(self) -> dict[str, str]:
        """Plugin ID → version, the node's `plugins.host_volume.<id>.version` attributes."""
        return {**{p.id: p.version for p in self._external.values()},
                MKDIR_PLUGIN: MKDIR_VERSION}

    def _lock_name(self, name: str, vol_id: str) -> bool:
        """host_volumes.go `volLocker.lock`: True when the name is new here."""
        holder = self._names.get(name)
        if holder is not None and holder != vol_id:
            raise HostVolumeNodeError("volume name already exists on this node", 409)
        self._names[name] = vol_id
        return holder is None

    def _record_path(self, vol_id: str) -> Path:
        return self.state_dir / f"{vol_id}.json"

    def _write_record(self, record: VolumeRecord) -> None:
        """The record, 0600, all or nothing and on disk before this returns: a temporary file
        of its own name, synced, renamed over the record, then the directory synced
        (client/confined_write.py `replace_file_at`), so a power loss leaves the old record
        or the new one, never an empty one."""
        self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        dir_fd = os.open(self.state_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            replace_file_at(dir_fd, self._record_path(record.id).name,
                            msgspec.json.encode(record), 0o600)
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    async def _thread(self, fn: Callable[[], None]) -> None:
        await trio.to_thread.run_sync(fn, limiter=self._limiter)

    async def _run_create(self, vol: HostVolume) -> tuple[str, int]:
        """The plugin's create: the built-in mkdir (`<volumes dir>/<ID>`, 0 bytes) or an
        external one (client/hostvolume_plugins.py); any other ID is Nomad's `getPlugin`
        refusal."""
        external = self._external.get(vol.plugin_id)
        if external is not None:
            return await external.create(vol)
        if vol.plugin_id != MKDIR_PLUGIN:
            raise HostVolumeNodeError(f'no such plugin: "{vol.plugin_id}"', 400)
        path = self.volumes_dir / vol.id
        await self._thread(partial(_mkdir, path, vol.parameters))
        return str(path), 0

    async def _run_delete(self, vol: HostVolume) -> None:
        external = self._external.get(vol.plugin_id)
        if external is not None:
            await external.delete(vol)
            return
        if vol.plugin_id != MKDIR_PLUGIN:
            raise HostVolumeNodeError(f'no such plugin: "{vol.plugin_id}"', 400)
        path = self.volumes_dir / vol.id
        try:
            await self._thread(lambda: shutil.rmtree(path) if path.exists() else None)
        except OSError as e:
            raise HostVolumeNodeError(str(e)) from e

    async def create(self, vol: HostVolume) -> tuple[str, int]:
        """Run the volume's plugin and record the volume: its host path and capacity (the
        mkdir plugin reports 0, as Nomad's).

        Raises:
            HostVolumeNodeError: an unknown plugin, a name taken, or the plugin failed.
        """
        if vol.plugin_id not in self.plugins:
            raise HostVolumeNodeError(f'no such plugin: "{vol.plugin_id}"', 400)
        first = self._lock_name(vol.name, vol.id)
        try:
            path, size = await self._run_create(vol)
            record = record_of(vol, path, size)
            try:
                await self._thread(lambda: self._write_record(record))
            except OSError as e:
                if first:  # never leave a volume yurt does not know of
                    with trio.move_on_after(PLUGIN_TIMEOUT, shield=True):
                        await self._run_delete(msgspec.structs.replace(vol, host_path=path))
                raise HostVolumeNodeError(f"failed to save volume in client state: {e}"
                                          ) from e
        except BaseException:  # a failure, an OSError or a cancellation: the name is free
            if first:
                self._names.pop(vol.name, None)
            raise
        self._held[vol.id] = record
        self._on_change(vol.name, node_volume(record))
        return path, size

    async def register(self, vol: HostVolume) -> None:
        """Record a volume whose directory exists already (`HostVolumeManager.Register`).

        Raises:
            HostVolumeNodeError: a name taken, or the path is not there.
        """
        first = self._lock_name(vol.name, vol.id)
        record = record_of(vol, vol.host_path)
        try:
            if not await trio.Path(vol.host_path).exists():
                raise HostVolumeNodeError(
                    f'could not verify host path for "{vol.name}": stat {vol.host_path}: '
                    "no such file or directory", 400)
            await self._thread(lambda: self._write_record(record))
        except BaseException:
            if first:
                self._names.pop(vol.name, None)
            raise
        self._held[vol.id] = record
        self._on_change(vol.name, node_volume(record))

    async def delete(self, vol: HostVolume) -> None:
        """Run the plugin's delete (a registered volume without a plugin keeps its
        directory), drop the record, free the name, and tell the node.

        Raises:
            HostVolumeNodeError: an unknown plugin or the directory could not go.
        """
        if vol.plugin_id:
            await self._run_delete(vol)
        await self._thread(lambda: self._record_path(vol.id).unlink(missing_ok=True))
        self._held.pop(vol.id, None)
        if self._names.get(vol.name) == vol.id:
            del self._names[vol.name]
            self._on_change(vol.name, None)

    def held(self) -> list[HostVolume]:
        """The volumes this node offers now, as its records have them (the server adopts
        those its book lacks: server/hostvolumes.py `reconcile`)."""
        return [record.volume() for record in self._held.values()]

    async def restore(self) -> list[VolumeRecord]:
        """Offer again every volume recorded here (`restoreFromState`): a created one's
        plugin runs its create again (mkdir makes the directory again if it went); a record
        that cannot be read, a plugin that fails, or a registered volume whose path is gone,
        is skipped (and kept, as Nomad keeps it)."""

        def read() -> list[VolumeRecord]:
            if not self.state_dir.is_dir():
                return []
            found = []
            for file in sorted(self.state_dir.glob("*.json")):
                try:
                    found.append(msgspec.json.decode(file.read_bytes(), type=VolumeRecord))
                except (OSError, msgspec.DecodeError) as e:
                    log.warning("host volume record %s unreadable: %s", file, e)
                    continue
            return found

        records = await trio.to_thread.run_sync(read, limiter=self._limiter)
        restored = []
        for record in records:
            try:
                if record.plugin_id:  # Nomad's restore runs the plugin's create again
                    path, _ = await self._run_create(record.volume())
                    record = msgspec.structs.replace(record, host_path=path)
                elif not await trio.Path(record.host_path).exists():
                    continue
            except HostVolumeNodeError as e:
                log.warning("host volume %s (%s) not restored: %s", record.name, record.id, e)
                continue
            self._names[record.name] = record.id
            self._held[record.id] = record
            self._on_change(record.name, node_volume(record))
            restored.append(record)
        return restored
