"""The docker driver's log copier: one small process per container that copies the
container's log stream into the task's two log FIFOs (Nomad's `docker_logger`,
drivers/docker/docklog).

Work in progress: the signatures below are the seam with `driver.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


async def start_log_copier(socket_path: str, container_id: str, stdout_path: str,
                           stderr_path: str, state_dir: Path) -> dict[str, Any]:
    """Spawn the copier for a started container; its identity (JSON-able) for the task
    handle's `driver_state["logs"]`."""
    raise NotImplementedError


async def ensure_log_copier(socket_path: str, container_id: str, stdout_path: str,
                            stderr_path: str, state_dir: Path,
                            previous: Mapping[str, Any] | None) -> dict[str, Any]:
    """On re-attach: keep the copier `previous` names if it lives, else start one that
    resumes where the last stopped."""
    raise NotImplementedError


async def stop_log_copier(identity: Mapping[str, Any], *, drain: bool) -> None:
    """When the task is destroyed: stop the copier (`drain`: after it copied what the
    container wrote last)."""
    raise NotImplementedError
