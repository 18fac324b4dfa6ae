"""`artifacts`: download a task's `artifact` blocks before it starts (Nomad's `artifact_hook`).

The hook emits `Downloading Artifacts`, then fetches the artifacts, at most three at a time as
Nomad does, each through the getter (`yurt.runtime.client.getter.get`, or a fake in tests). A failed
download is Nomad's hook error: the hook raises `ArtifactDownloadError`, which carries the
`Failed Artifact Download` event (its `DownloadError` reads `failed to download artifact
"<source>": <why>`) for the task runner to emit instead of the generic `Task hook failed`,
and which is recoverable, so the task's restart policy is the retry loop and its backoff
(there is no other). An exception from the getter that is not a `GetterError` (an error it
failed to translate, or a bug) is a failed download too, recoverable as Nomad treats every
getter error, with its traceback logged: left to escape, it cancelled the other downloads and
reached the task runner inside an ExceptionGroup, which carries no `recoverable`, so one
untranslated error failed the task for good. The source, options, headers and destination
are interpolated with the task's environment and the node's `${attr.*}`/`${node.*}`/
`${meta.*}` first.

State: the hook's data maps each finished artifact's hash (Nomad's `TaskArtifact.Hash`) to
"1", and a successful run answers `done`, which the task runner persists: a restart, or an
agent restart, does not download again. As in Nomad, a failed run persists nothing, so the
next try fetches every artifact of the task again.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import ClassVar, Final, final

import trio

from yurt.hooks.base import PrestartResponse, TaskHookContext, TaskPrestartHook
from yurt.runtime.client.getter.config import ArtifactConfig
from yurt.runtime.client.getter.get import ArtifactRequest, get, remove_stale_staging
from yurt.runtime.client.getter.source import GetterError
from yurt.runtime.client.taskenv import build_env, interpolate, node_values
from yurt.runtime.client.taskrunner import events
from yurt.runtime.structs import Node, TaskEvent
from yurt.runtime.structs.artifact import TaskArtifact

DOWNLOADING_ARTIFACTS: Final = "Downloading Artifacts"
ARTIFACT_DOWNLOAD_FAILED: Final = "Failed Artifact Download"
MAX_CONCURRENCY: Final = 3  # Nomad's artifact hook runs three downloads at a time

log = logging.getLogger("yurt.hooks.artifact")

Getter = Callable[[ArtifactRequest, ArtifactConfig], Awaitable[None]]


class ArtifactDownloadError(Exception):
    """A download failed: recoverable, with the event the task runner emits for it."""

    recoverable = True

    def __init__(self, message: str, task_event: TaskEvent) -> None:
        super().__init__(message)
        self.task_event = task_event


def artifact_hash(artifact: TaskArtifact) -> str:
    """Nomad's `TaskArtifact.Hash`: BLAKE2b-256 over the fields, unpadded base64."""
    h = hashlib.blake2b(digest_size=32)
    h.update(artifact.getter_source.encode())
    for mapping in (artifact.getter_options or {}, artifact.getter_headers or {}):
        for key in sorted(mapping):
            h.update(key.encode())
            h.update(mapping[key].encode())
    h.update(artifact.getter_mode.encode())
    h.update(b"true" if artifact.getter_insecure else b"false")
    h.update(artifact.relative_dest.encode())
    h.update(b"true" if artifact.chown else b"false")
    return base64.b64encode(h.digest()).decode().rstrip("=")


def download_failed_event(time: int, message: str) -> TaskEvent:
    event = events.new_event(ARTIFACT_DOWNLOAD_FAILED, time, display=message,
                             download_error=message)
    event.details["download_error"] = message
    return event


@final
class ArtifactHook(TaskPrestartHook):
    name: ClassVar[str] = "artifacts"
    #: A download may take minutes: a kill or an agent shutdown cancels it (Nomad's hooks
    #: run under the task's kill and shutdown contexts).
    interruptible: ClassVar[bool] = True

    def __init__(self, config: ArtifactConfig | None = None, *, node: Node | None = None,
                 getter: Getter = get,
                 resolve_owner: Callable[[str], tuple[int, int] | None] | None = None) -> None:
        self._config = config or ArtifactConfig()
        self._node = node
        self._getter = getter
        self._resolve_owner = resolve_owner

    def _request(self, ctx: TaskHookContext, artifact: TaskArtifact, lookup: dict[str, str],
                 owner: tuple[int, int] | None) -> ArtifactRequest:
        return ArtifactRequest(
            source=interpolate(artifact.getter_source, lookup),
            alloc_dir=ctx.task_dir.parent if ctx.task_dir is not None else None,
            task_dir=ctx.task_dir, destination=interpolate(artifact.relative_dest, lookup),
            mode=artifact.getter_mode, options=interpolate(artifact.getter_options or {}, lookup),
            headers=interpolate(artifact.getter_headers or {}, lookup),
            insecure=artifact.getter_insecure, owner=owner if artifact.chown else None,
            user=ctx.task.user)

    async def prestart(self, ctx: TaskHookContext, previous: dict[str, str]) -> PrestartResponse:
        artifacts = ctx.task.artifacts
        if not artifacts:
            await trio.lowlevel.checkpoint()
            return PrestartResponse(done=True)
        await ctx.emit_event(events.new_event(DOWNLOADING_ARTIFACTS, ctx.unix_clock(),
                                              display="Client is downloading artifacts"))
        user, resolve_owner = ctx.task.user, self._resolve_owner

        def prepare() -> tuple[int, int] | None:
            if ctx.task_dir is not None:  # what a crash mid-download left, before any new one
                remove_stale_staging(ctx.task_dir)
            if not user or resolve_owner is None or not any(a.chown for a in artifacts):
                return None
            return resolve_owner(user)

        owner = await trio.to_thread.run_sync(prepare)  # a user lookup may block (NSS)
        lookup = {**node_values(self._node),
                  **build_env(ctx.alloc, ctx.task, task_dir=ctx.task_dir, node=self._node)}
        done: dict[str, str] = {}
        failures: list[str] = []
        slots = trio.CapacityLimiter(MAX_CONCURRENCY)

        async def download(artifact: TaskArtifact, aid: str) -> None:
            async with slots:
                try:
                    await self._getter(self._request(ctx, artifact, lookup, owner),
                                       self._config)
                except GetterError as e:
                    source = json.dumps(artifact.getter_source, ensure_ascii=False)
                    failures.append(f"failed to download artifact {source}: {e}")
                except Exception as e:  # not Cancelled: a kill still ends the hook
                    source = json.dumps(artifact.getter_source, ensure_ascii=False)
                    log.exception("artifact %s: the getter raised an unexpected error", source)
                    failures.append(f"failed to download artifact {source}: "
                                    f"{type(e).__name__}: {e}")
                else:
                    done[aid] = "1"

        async with trio.open_nursery() as nursery:
            for artifact in artifacts:
                aid = artifact_hash(artifact)
                if previous.get(aid):
                    done[aid] = previous[aid]
                    continue
                nursery.start_soon(download, artifact, aid)
        if failures:
            message = failures[-1]  # Nomad reports the last error its workers sent
            raise ArtifactDownloadError(message, download_failed_event(ctx.unix_clock(),
                                                                       message))
        return PrestartResponse(data=done, done=True)
