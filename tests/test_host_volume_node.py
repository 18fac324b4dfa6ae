"""The node's side of dynamic host volumes with real plugin processes and real files
(layer 2): client/hostvolumes.py `HostVolumeManager` and client/hostvolume_plugins.py
`ExternalPlugin`, without an agent. A cancelled create frees the volume's name; records are
replaced whole."""

from __future__ import annotations

import json
import os
import signal
import stat
from pathlib import Path

import trio

from yurt.runtime.client.hostvolume_plugins import ExternalPlugin, discover
from yurt.runtime.client.hostvolumes import HostVolumeManager
from yurt.runtime.structs.hostvolume import HostVolume
from yurt.runtime.structs.node import ClientHostVolumeConfig

#: create marks that it started, then never answers.
HANGS = """#!/bin/sh
case "$1" in
fingerprint) echo '{"version": "1"}' ;;
create) : >"$DHV_VOLUMES_DIR/started"; exec /bin/sleep 60 ;;
esac
"""


async def _plugins(tmp_path: Path, **scripts: str) -> Path:
    plugin_dir = trio.Path(tmp_path / "plugins")
    await plugin_dir.mkdir()
    for name, text in scripts.items():
        await (plugin_dir / name).write_text(text)
        await (plugin_dir / name).chmod(0o755)
    return Path(plugin_dir)


async def _until_exists(path: Path) -> None:
    """A file the plugin process makes: polled, it has no other way to tell."""
    while not await trio.Path(path).exists():  # noqa: ASYNC110 - another process's file
        await trio.sleep(0.02)


def _manager(tmp_path: Path, plugins: dict[str, ExternalPlugin] | None = None
             ) -> tuple[HostVolumeManager, dict[str, ClientHostVolumeConfig | None]]:
    offered: dict[str, ClientHostVolumeConfig | None] = {}
    manager = HostVolumeManager(tmp_path / "volumes", tmp_path / "state",
                                offered.__setitem__, plugins)
    return manager, offered


async def test_a_cancelled_create_frees_the_name(tmp_path: Path) -> None:
    volumes = tmp_path / "volumes"
    volumes.mkdir()
    with trio.fail_after(20):
        plugins = await discover(await _plugins(tmp_path, hangs=HANGS), volumes, "default")
        manager, offered = _manager(tmp_path, plugins)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(manager.create, HostVolume(
                id="11111111-1111-1111-1111-111111111111", name="data", namespace="default",
                plugin_id="hangs"))
            await _until_exists(volumes / "started")
            nursery.cancel_scope.cancel()
        path, _ = await manager.create(HostVolume(
            id="22222222-2222-2222-2222-222222222222", name="data", namespace="default",
            plugin_id="mkdir"))
        assert path == str(volumes / "22222222-2222-2222-2222-222222222222")
        assert offered["data"] is not None
        assert offered["data"].id == "22222222-2222-2222-2222-222222222222"


async def test_records_are_private_whole_files(tmp_path: Path) -> None:
    with trio.fail_after(20):
        manager, _ = _manager(tmp_path)
        vol = HostVolume(id="33333333-3333-3333-3333-333333333333", name="data",
                         namespace="default", plugin_id="mkdir",
                         parameters={"mode": "0750"})
        old = os.umask(0o022)
        try:
            await manager.create(vol)
            await manager.create(vol)  # again: the record is replaced, not appended to
        finally:
            os.umask(old)
        state = tmp_path / "state"
        assert sorted(p.name for p in state.iterdir()) == [f"{vol.id}.json"]
        record = state / f"{vol.id}.json"
        assert stat.S_IMODE(record.stat().st_mode) == 0o600
        assert json.loads(record.read_bytes())["parameters"] == {"mode": "0750"}
        # A restarted node reads it back.
        again, offered = _manager(tmp_path)
        assert [r.id for r in await again.restore()] == [vol.id]
        assert offered["data"] is not None


#: create starts a child that would run for a minute, says its PID, and waits for it.
FORKS = """#!/bin/sh
case "$1" in
fingerprint) echo '{"version": "1"}' ;;
create)
  /bin/sleep 60 &
  echo $! >"$DHV_VOLUMES_DIR/child.tmp"
  /bin/mv "$DHV_VOLUMES_DIR/child.tmp" "$DHV_VOLUMES_DIR/child"
  wait ;;
esac
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


async def test_a_cut_off_run_kills_the_plugins_children(tmp_path: Path) -> None:
    volumes = tmp_path / "volumes"
    volumes.mkdir()
    with trio.fail_after(20):
        plugins = await discover(await _plugins(tmp_path, forks=FORKS), volumes, "default")
        vol = HostVolume(id="44444444-4444-4444-4444-444444444444", name="data",
                         namespace="default", plugin_id="forks")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(plugins["forks"].create, vol)
            await _until_exists(volumes / "child")
            nursery.cancel_scope.cancel()
    child = int((volumes / "child").read_text())
    try:
        with trio.fail_after(5):
            while _alive(child):  # noqa: ASYNC110 - the kernel's process table
                await trio.sleep(0.02)
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)
