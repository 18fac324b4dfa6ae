"""External dynamic host volume plugins: executables in the agent's `host_volume_plugin_dir`,
run as Nomad runs them (client/hostvolumemanager/host_volume_plugin.go
`HostVolumePluginExternal`).

The protocol, Nomad's: the executable is run with one argument, the operation
(`fingerprint`, `create`, `delete`), and an environment of `DHV_*` variables only (no PATH:
Nomad sets `cmd.Env` to exactly these); `fingerprint` prints `{"version": "…"}`, `create`
prints `{"path": "…", "bytes": N}`, and a failing run may print `{"error": "…"}`, which the
error carries. A plugin whose fingerprint fails, or that cannot even be started (no shebang,
a noexec mount), is not offered (logged once at the start); one that cannot be started at a
create or delete (removed since) fails that call with its name and the OS's error.

Each run is bounded by `PLUGIN_TIMEOUT` at the call site and, when it runs over or is
cancelled, killed with every process it started: a run is a session and process group of its
own, and the group gets SIGKILL (killing the child alone would leave a shell plugin's children
running, holding its stdout open). The plugin's stderr is never shown to API callers: only its
exit status and its own `error` text.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
from pathlib import Path
from typing import Final, final

import trio

from yurt.runtime.structs.hostvolume import HostVolume, HostVolumeNodeError

log = logging.getLogger("yurt.client.hostvolumes")

#: Seconds a plugin run may take (Nomad bounds fingerprints by 5 s and a create or delete
#: by its RPC's deadline).
FINGERPRINT_TIMEOUT: Final = 5.0
PLUGIN_TIMEOUT: Final = 60.0
#: The exit status of a run cut off at its deadline (killed).
KILLED: Final = -9


def _exit_text(code: int) -> str:
    """Go's `exec.ExitError` text."""
    return "signal: killed" if code == KILLED else f"exit status {code}"


async def _kill_group(process: trio.Process) -> None:
    """A run cut off: its whole process group, which `start_new_session` made the run's own
    (a shell plugin's children would otherwise outlive it, holding its stdout open)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    await trio.lowlevel.checkpoint()


@final
class ExternalPlugin:
    """One executable of the plugin directory; `version` once fingerprinted."""

    def __init__(self, plugin_id: str, plugin_dir: Path, volumes_dir: Path,
                 node_pool: str) -> None:
        self.id = plugin_id
        self.executable = plugin_dir / plugin_id
        self.plugin_dir = plugin_dir
        self.volumes_dir = volumes_dir
        self.node_pool = node_pool
        self.version = ""

    async def _run(self, op: str, env: dict[str, str]) -> tuple[int, bytes]:
        """The run's exit status and stdout; the caller's deadline kills it (`KILLED`).

        Raises:
            HostVolumeNodeError: the executable could not be started (no shebang, a noexec
                mount, removed since discovery: Go's `exec.Cmd.Start` error, which Nomad's
                host_volume_plugin.go `runPlugin` returns with the plugin's name).
        """
        try:
            done = await trio.run_process([str(self.executable), op], env=env,
                                          capture_stdout=True, capture_stderr=True,
                                          check=False, start_new_session=True,
                                          deliver_cancel=_kill_group)
        except OSError as e:
            log.warning("host volume plugin %s %s: not started: %s", self.id, op, e)
            raise HostVolumeNodeError(
                f'error running plugin "{self.id}" {op}: fork/exec {self.executable}: '
                f"{e.strerror or e}") from e
        if done.returncode != 0:
            log.warning("host volume plugin %s %s: %s: %s", self.id, op,
                        _exit_text(done.returncode), done.stderr.decode(errors="replace")[:500])
        return done.returncode, done.stdout

    async def fingerprint(self) -> str:
        """`Fingerprint`: the plugin's version.

        Raises:
            HostVolumeNodeError: the run failed or did not print a version.
        """
        code, out = KILLED, b""
        with trio.move_on_after(FINGERPRINT_TIMEOUT):
            code, out = await self._run("fingerprint", {"DHV_OPERATION": "fingerprint"})
        if code != 0:
            raise HostVolumeNodeError(f'error fingerprinting plugin "{self.id}": '
                                      f"{_exit_text(code)}")
        try:
            version = json.loads(out).get("version")
        except (ValueError, AttributeError):
            version = None
        if not isinstance(version, str) or not version:
            raise HostVolumeNodeError("error parsing fingerprint output as json")
        return version

    def _env(self, op: str, vol: HostVolume) -> dict[str, str]:
        return {"DHV_OPERATION": op, "DHV_VOLUMES_DIR": str(self.volumes_dir),
                "DHV_PLUGIN_DIR": str(self.plugin_dir), "DHV_NODE_POOL": self.node_pool,
                "DHV_NAMESPACE": vol.namespace, "DHV_VOLUME_NAME": vol.name,
                "DHV_VOLUME_ID": vol.id, "DHV_NODE_ID": vol.node_id,
                "DHV_PARAMETERS": json.dumps(vol.parameters, separators=(",", ":"))}

    def _failure(self, op: str, vol: HostVolume, code: int, out: bytes) -> HostVolumeNodeError:
        try:
            said = json.loads(out).get("error", "")
        except (ValueError, AttributeError):
            said = None
        verb = "creating" if op == "create" else "deleting"
        tail = f": {said}" if isinstance(said, str) else ""
        return HostVolumeNodeError(f'error {verb} volume "{vol.id}" with plugin "{self.id}": '
                                   f"{_exit_text(code)}{tail}")

    async def create(self, vol: HostVolume) -> tuple[str, int]:
        """`Create`: the path and size the plugin reports."""
        env = {**self._env("create", vol),
               "DHV_CAPACITY_MIN_BYTES": str(vol.requested_capacity_min_bytes),
               "DHV_CAPACITY_MAX_BYTES": str(vol.requested_capacity_max_bytes)}
        code, out = KILLED, b""
        with trio.move_on_after(PLUGIN_TIMEOUT):
            code, out = await self._run("create", env)
        if code != 0:
            raise self._failure("create", vol, code, out)
        try:
            reply = json.loads(out)
            path, size = reply["path"], int(reply.get("bytes") or 0)
        except (ValueError, KeyError, TypeError, AttributeError):
            raise HostVolumeNodeError(f'error creating volume "{vol.id}" with plugin '
                                      f'"{self.id}": its output is not {{"path", "bytes"}}'
                                      ) from None
        if not isinstance(path, str) or not path:
            raise HostVolumeNodeError(f'error creating volume "{vol.id}" with plugin '
                                      f'"{self.id}": no path in its output')
        return path, size

    async def delete(self, vol: HostVolume) -> None:
        """`Delete`."""
        code, out = KILLED, b""
        with trio.move_on_after(PLUGIN_TIMEOUT):
            code, out = await self._run("delete", {**self._env("delete", vol),
                                                   "DHV_CREATED_PATH": vol.host_path})
        if code != 0:
            raise self._failure("delete", vol, code, out)


async def discover(plugin_dir: Path, volumes_dir: Path, node_pool: str
                   ) -> dict[str, ExternalPlugin]:
    """The executables of `plugin_dir` whose fingerprint answers, by ID (file name);
    none when the directory does not exist."""

    def executables() -> list[str]:
        try:
            entries = sorted(os.scandir(plugin_dir), key=lambda e: e.name)
        except FileNotFoundError:
            return []
        except OSError as e:  # unreadable: no external plugins, the agent still starts
            log.warning("host volume plugin dir %s not read: %s", plugin_dir, e)
            return []
        return [e.name for e in entries
                if e.is_file() and os.access(e.path, os.X_OK) and not e.name.startswith(".")]

    found: dict[str, ExternalPlugin] = {}
    for name in await trio.to_thread.run_sync(executables):
        plugin = ExternalPlugin(name, plugin_dir, volumes_dir, node_pool)
        try:
            plugin.version = await plugin.fingerprint()
        except HostVolumeNodeError as e:
            log.warning("host volume plugin %s not offered: %s", name, e)
            continue
        found[name] = plugin
    return found
