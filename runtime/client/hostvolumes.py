"""The node's side of dynamic host volumes: the `mkdir` plugin, the record of what this node
made, and the node's `HostVolumes` kept in step (Nomad's client/hostvolumemanager/).

What lives here: `HostVolumeManager`, which the agent owns and the server calls (in one
process: runtime/agent/agent.py hands it to server/hostvolumes.py as its `NodeVolumes`).
`create` runs the plugin, records the volume and tells the agent the node gained it;
`register` records a directory that exists already; `delete` runs the plugin's delete, drops
the record and tells the agent the node lost it; `restore`, at the agent's start, runs
`create` again for every record (the mkdir plugin leaves an existing directory alone), so a
restarted agent offers what it offered before (Nomad's `restoreFromState`).

Invariants:
- One volume per name on a node (`volLocker`): a create or register of a name held by
  another ID is refused with Nomad's "volume name already exists on this node".
- The record is written (atomically: a temporary file renamed) after the plugin succeeded
  and before the node is told; a record that cannot be written undoes a first create.
- Only the built-in `mkdir` plugin runs. Nomad also runs executables from the
  `host_volume_plugin_dir`; yurt has none yet, so any other ID is Nomad's
  `no such plugin: "ID"`.
- Files are touched in a worker thread behind a limiter of one: operations are rare and an
  operator's, and one at a time keeps name checks and records in order.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Final, final

import msgspec
import trio

from yurt.runtime.structs.hostvolume import (
    DEFAULT_PLUGIN,
    MKDIR_PLUGIN,
    HostVolume,
    HostVolumeNodeError,
)
from yurt.runtime.structs.node import ClientHostVolumeConfig

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
                    f'invalid value for "{name}": unknown mkdir parameter: "{name}"')
        except ValueError:
            raise HostVolumeNodeError(
                f'invalid value for "{name}": strconv.Parse: parsing "{value}": invalid syntax'
            ) from None
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


def node_volume(record: VolumeRecord) -> ClientHostVolumeConfig:
    """host_volumes.go `genVolConfig`: never read-only (capabilities decide)."""
    return ClientHostVolumeConfig(name=record.name, path=record.host_path, read_only=False,
                                  id=record.id)


@final
class HostVolumeManager:
    """See the module header. `on_change(name, config)`: the node gained (config) or lost
    (None) the volume `name`."""

    def __init__(self, volumes_dir: Path, state_dir: Path,
                 on_change: Callable[[str, ClientHostVolumeConfig | None], None]) -> None:
        self.volumes_dir = volumes_dir
        self.state_dir = state_dir
        self._on_change = on_change
        self._names: dict[str, str] = {}  # name → the ID holding it
        self._limiter = trio.CapacityLimiter(1)

    @property
    def plugins(self) -> dict[str, str]:
        """Plugin ID → version, the node's `plugins.host_volume.<id>.version` attributes."""
        return {MKDIR_PLUGIN: MKDIR_VERSION}

    def _lock_name(self, name: str, vol_id: str) -> bool:
        """host_volumes.go `volLocker.lock`: True when the name is new here."""
        holder = self._names.get(name)
        if holder is not None and holder != vol_id:
            raise HostVolumeNodeError("volume name already exists on this node")
        self._names[name] = vol_id
        return holder is None

    def _record_path(self, vol_id: str) -> Path:
        return self.state_dir / f"{vol_id}.json"

    def _write_record(self, record: VolumeRecord) -> None:
        self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        final_path = self._record_path(record.id)
        tmp = final_path.with_suffix(".tmp")
        tmp.write_bytes(msgspec.json.encode(record))
        os.replace(tmp, final_path)

    async def _thread(self, fn: Callable[[], None]) -> None:
        await trio.to_thread.run_sync(fn, limiter=self._limiter)

    def _plugin_path(self, plugin_id: str, vol_id: str) -> Path:
        if plugin_id not in (MKDIR_PLUGIN, DEFAULT_PLUGIN):
            raise HostVolumeNodeError(f'no such plugin: "{plugin_id}"')
        return self.volumes_dir / vol_id

    async def create(self, vol: HostVolume) -> tuple[str, int]:
        """Run the volume's plugin and record the volume: its host path and capacity (the
        mkdir plugin reports 0, as Nomad's).

        Raises:
            HostVolumeNodeError: an unknown plugin, a name taken, or the plugin failed.
        """
        path = self._plugin_path(vol.plugin_id, vol.id)
        first = self._lock_name(vol.name, vol.id)
        record = VolumeRecord(id=vol.id, name=vol.name, namespace=vol.namespace,
                              plugin_id=vol.plugin_id, host_path=str(path),
                              parameters=dict(vol.parameters))
        try:
            await self._thread(lambda: _mkdir(path, vol.parameters))
            try:
                await self._thread(lambda: self._write_record(record))
            except OSError as e:
                if first:  # never leave a directory yurt does not know of
                    await self._thread(lambda: shutil.rmtree(path, ignore_errors=True))
                raise HostVolumeNodeError(f"failed to save volume in client state: {e}"
                                            ) from e
        except HostVolumeNodeError:
            if first:
                self._names.pop(vol.name, None)
            raise
        self._on_change(vol.name, node_volume(record))
        return str(path), 0

    async def register(self, vol: HostVolume) -> None:
        """Record a volume whose directory exists already (`HostVolumeManager.Register`).

        Raises:
            HostVolumeNodeError: a name taken, or the path is not there.
        """
        first = self._lock_name(vol.name, vol.id)
        record = VolumeRecord(id=vol.id, name=vol.name, namespace=vol.namespace,
                              plugin_id=vol.plugin_id, host_path=vol.host_path,
                              parameters=dict(vol.parameters))
        try:
            if not await trio.Path(vol.host_path).exists():
                raise HostVolumeNodeError(
                    f'could not verify host path for "{vol.name}": stat {vol.host_path}: '
                    "no such file or directory")
            await self._thread(lambda: self._write_record(record))
        except BaseException:
            if first:
                self._names.pop(vol.name, None)
            raise
        self._on_change(vol.name, node_volume(record))

    async def delete(self, vol: HostVolume) -> None:
        """Run the plugin's delete (a registered volume without a plugin keeps its
        directory), drop the record, free the name, and tell the node.

        Raises:
            HostVolumeNodeError: an unknown plugin or the directory could not go.
        """
        if vol.plugin_id:
            path = self._plugin_path(vol.plugin_id, vol.id)
            try:
                await self._thread(lambda: shutil.rmtree(path) if path.exists() else None)
            except OSError as e:
                raise HostVolumeNodeError(str(e)) from e
        await self._thread(lambda: self._record_path(vol.id).unlink(missing_ok=True))
        if self._names.get(vol.name) == vol.id:
            del self._names[vol.name]
            self._on_change(vol.name, None)

    async def restore(self) -> list[VolumeRecord]:
        """Offer again every volume recorded here (`restoreFromState`): a created one's
        directory is made again if it went; a record that cannot be read, or a registered
        volume whose path is gone, is skipped (and kept, as Nomad keeps it)."""

        def read() -> list[VolumeRecord]:
            if not self.state_dir.is_dir():
                return []
            found = []
            for file in sorted(self.state_dir.glob("*.json")):
                try:
                    found.append(msgspec.json.decode(file.read_bytes(), type=VolumeRecord))
                except (OSError, msgspec.DecodeError):
                    continue
            return found

        records = await trio.to_thread.run_sync(read, limiter=self._limiter)
        restored = []
        for record in records:
            try:
                if record.plugin_id in (MKDIR_PLUGIN, DEFAULT_PLUGIN):
                    await self._thread(partial(_mkdir, Path(record.host_path),
                                               record.parameters))
                elif not await trio.Path(record.host_path).exists():
                    continue
            except HostVolumeNodeError:
                continue
            self._names[record.name] = record.id
            self._on_change(record.name, node_volume(record))
            restored.append(record)
        return restored
