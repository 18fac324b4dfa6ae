"""Images: present, loaded or pulled before a start; removed once no task uses them.

Nomad's drivers/docker/coordinator.go `dockerCoordinator`, in two parts:

- `ensure_image`: the image's ID, from the daemon when present (unless `force_pull`), from
  `load` (a tarball in the task's `local/`, driver.go `loadImage`: refused when it resolves
  outside `local/`, streamed to the daemon, never read whole), or pulled. A pull is
  bounded by `image_pull_timeout` (the task's, else the plugin's) and, between two progress
  messages, by the plugin's `pull_activity_timeout`; it fails with Nomad's recoverable
  "Failed to pull `IMAGE`: …" carrying Docker's message (a registry that cannot be reached, an
  image that does not exist), so the restart policy retries it. Registry credentials (`auth`)
  go in the `X-Registry-Auth` header only: never in a log, an event or an argv.
- `ImageGC`: reference counts of image IDs by task (coordinator.go `IncrementImageReference`
  and `RemoveImage`). When the last task using an image is destroyed and the plugin's
  `gc.image` is on, the image is due for removal `gc.image_delay` later; `remove_due` removes
  what is due. The daemon refuses to remove an image a container still uses (409), which is
  logged and kept: a running container's image is never removed.

Invariant: `ImageGC` is pure bookkeeping with the time passed in; only `remove_due` does I/O.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import trio

from yurt.runtime.client.drivers.configs import DockerAuth, DockerTaskConfig
from yurt.runtime.client.drivers.docker.create import first
from yurt.runtime.client.drivers.docker.engine import DockerEngine, DockerError
from yurt.runtime.client.drivers.docker.plugin import DockerPluginConfig
from yurt.runtime.errors import DriverError

log = logging.getLogger("yurt.drivers.docker")
DEFAULT_TAG: Final = "latest"


def split_reference(image: str) -> tuple[str, str]:
    """(repository, tag or digest) of an image reference, the tag `latest` when none
    (driver.go `parseDockerImage`): `reg:5000/app` has no tag, `app@sha256:…` a digest."""
    if "@" in image:
        repo, digest = image.split("@", 1)
        return repo, digest
    last = image.rsplit("/", 1)[-1]
    if ":" in last:
        repo, tag = image.rsplit(":", 1)
        return repo, tag
    return image, DEFAULT_TAG


def registry_auth(auth: DockerAuth | None) -> str:
    """The `X-Registry-Auth` header value for `auth` ("" without credentials)."""
    if auth is None or not (auth.username or auth.password):
        return ""
    payload = {"username": auth.username, "password": auth.password, "email": auth.email,
               "serveraddress": auth.server_address}
    return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode()


async def _inspect_id(engine: DockerEngine, image: str) -> str | None:
    try:
        found = await engine.request("GET", f"/images/{image}/json")
    except DockerError as e:
        if e.status == 404:
            return None
        raise
    return str(found["Id"])


async def _pull(engine: DockerEngine, image: str, cfg: DockerTaskConfig,
                plugin: DockerPluginConfig) -> None:
    repo, tag = split_reference(image)
    headers = {}
    credentials = registry_auth(first(cfg.auth))
    if credentials:
        headers["X-Registry-Auth"] = credentials
    activity = plugin.seconds(plugin.pull_activity_timeout) or None
    params = {"fromImage": repo, "tag": tag}
    # The answer is the pull's progress, JSON lines, read to the end: the read timeout
    # between two bytes is the activity timeout. An error mid-pull is a line with "error".
    answer = await engine.request("POST", "/images/create", params=params, content=b"",
                                  headers=headers, read_timeout=activity)
    lines = answer.splitlines() if isinstance(answer, str) else [json.dumps(answer)]
    for line in lines:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if isinstance(message, dict) and message.get("error"):
            raise DockerError(500, str(message["error"]))


#: The size of each piece of a `load` archive sent to the daemon (never read whole).
LOAD_CHUNK: Final = 1 << 20


def load_archive(task_dir: Path, load: str) -> str:
    """The host path of a `load` archive: under the task's `local/` as driver.go `loadImage`
    joins it (`filepath.Join`: an absolute name is local's too), with its symlinks resolved
    (blocking: call it in a thread).

    Raises:
        DriverError: the resolved path leaves `local/` (helper/escapingfs
            `PathEscapesSandbox`: a link the task made, or `..`).
    """
    local = os.path.realpath(task_dir / "local")
    archive = os.path.realpath(os.path.join(local, load.lstrip("/")))
    if not Path(archive).is_relative_to(local):
        raise DriverError(f"Failed to load image {load!r}: the archive must be inside the "
                          "task's local/ directory")
    return archive


async def _chunks(read: Callable[[int], Awaitable[bytes]]) -> AsyncIterator[bytes]:
    while chunk := await read(LOAD_CHUNK):
        yield chunk


async def ensure_image(engine: DockerEngine, cfg: DockerTaskConfig,
                       plugin: DockerPluginConfig, task_dir: Path,
                       on_pull: Callable[[str], None] = lambda reference: None) -> str:
    """The ID of `cfg.image` on the daemon, loading or pulling it first when needed;
    `on_pull(reference)` is called as a pull begins (Nomad's "Downloading image" event).

    Raises:
        DriverError: recoverable "Failed to pull `IMAGE`: …" (Docker's message, or the
            timeout), or "Failed to load image …" for a bad `load` archive.
    """
    image = cfg.image
    if cfg.load:
        archive = await trio.to_thread.run_sync(load_archive, task_dir, cfg.load)
        try:
            async with await trio.open_file(archive, "rb") as f:
                await engine.request("POST", "/images/load", params={"quiet": "1"},
                                     content=_chunks(f.read),
                                     headers={"Content-Type": "application/x-tar"},
                                     read_timeout=None)
        except (OSError, DockerError) as e:
            raise DriverError(f"Failed to load image {cfg.load!r}: {e}") from None
    elif not cfg.force_pull:
        found = await _inspect_id(engine, image)
        if found is not None:
            return found
    if not cfg.load:
        timeout = (cfg.duration("image_pull_timeout") / 1e9
                   or plugin.seconds(plugin.image_pull_timeout))
        on_pull(":".join(split_reference(image)) if "@" not in image else image)
        try:
            with trio.fail_after(timeout or float("inf")):
                await _pull(engine, image, cfg, plugin)
        except trio.TooSlowError:
            raise DriverError(f"Failed to pull `{image}`: no image after {timeout:.0f}s "
                              "(image_pull_timeout)", recoverable=True) from None
        except DockerError as e:
            raise DriverError(f"Failed to pull `{image}`: {e}", recoverable=True) from None
    found = await _inspect_id(engine, image)
    if found is None:
        raise DriverError(f"Failed to pull `{image}`: the daemon does not have it after the "
                          "pull", recoverable=True)
    return found


@dataclass
class ImageGC:
    """Which tasks use which image IDs, and when unused ones are due for removal."""

    enabled: bool
    delay: float
    users: dict[str, set[str]] = field(default_factory=dict)
    due: dict[str, float] = field(default_factory=dict)

    def use(self, image_id: str, task_id: str) -> None:
        self.users.setdefault(image_id, set()).add(task_id)
        self.due.pop(image_id, None)

    def release(self, image_id: str, task_id: str, now: float) -> None:
        users = self.users.get(image_id)
        if users is None:
            return
        users.discard(task_id)
        if not users:
            del self.users[image_id]
            if self.enabled:
                self.due[image_id] = now + self.delay

    def next_due(self) -> float | None:
        return min(self.due.values(), default=None)

    def take_due(self, now: float) -> list[str]:
        ready = sorted(i for i, at in self.due.items() if at <= now and i not in self.users)
        for image_id in ready:
            del self.due[image_id]
        return ready


async def remove_images(engine: DockerEngine, image_ids: list[str]) -> list[str]:
    """Remove `image_ids` (never forced: one a container uses stays); those removed."""
    removed = []
    for image_id in image_ids:
        try:
            await engine.request("DELETE", f"/images/{image_id}")
        except DockerError as e:
            if e.status != 404:
                log.info("docker: image %s kept: %s", image_id, e)
                continue
        removed.append(image_id)
    return removed


def image_of(inspected: Mapping[str, Any]) -> str:
    """A container's image ID from its inspection."""
    return str(inspected.get("Image", ""))
