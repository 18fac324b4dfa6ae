"""The container calls the driver makes, each one Engine API exchange and its errors' meaning.

driver.py keeps the task table and the order of things; here is what a call means: a remove
that finds the container gone has done its job, one the daemon refuses is logged with
Docker's message and left to the next `reconcile` (the labels stay); a kill answered 404
or 409 (gone, not running) means "nothing to signal"; a wait survives the daemon going
away (the container may well outlive it) and reads the exit as Nomad's docker handle does
(handle.go `run`: the exit code, and `OOMKilled` as the "OOM Killed" error); containers are
found by the labels create.py puts on them.

Invariant: nothing here raises for a container that is already gone, except where that is
the answer (`exit_of`: an error result; `find_leftover`: None).
"""

from __future__ import annotations

import contextlib
import json
import logging
from typing import Final

import trio

from yurt.runtime.client.drivers.docker import create
from yurt.runtime.client.drivers.docker.engine import DockerEngine, DockerError, DockerUnreachable
from yurt.runtime.client.drivers.protocol import ExitResult
from yurt.runtime.errors import DriverError

log = logging.getLogger("yurt.drivers.docker")

#: How long `remove` waits for a removal another request began (a reconcile beside a start).
REMOVAL_TIMEOUT: Final = 30.0


async def remove(engine: DockerEngine, cid: str) -> bool:
    """Remove the container (forced: running or not) and its anonymous volumes; True once it
    is gone, also when another request's removal of it was under way (Docker answers that
    one 409 at once, while the name is still taken) or it was gone already (404). Any other
    answer, or a daemon that cannot be reached, is logged with Docker's message and False:
    the container keeps its labels, so the next `reconcile` finds it again."""
    try:
        await engine.request("DELETE", f"/containers/{cid}", params={"force": "1", "v": "1"})
    except DockerError as e:
        if e.status == 404:
            return True
        if e.status != 409:
            log.warning("docker: cannot remove container %s: %s", cid, e)
            return False
        with trio.move_on_after(REMOVAL_TIMEOUT), contextlib.suppress(DockerError):
            await engine.request("POST", f"/containers/{cid}/wait",
                                 params={"condition": "removed"}, read_timeout=None)
    return True


async def kill(engine: DockerEngine, cid: str, signal: str) -> bool:
    """Send `signal` (a name); False when the container is not running or gone.

    Raises:
        DriverError: the daemon refused otherwise, or cannot be reached.
    """
    try:
        await engine.request("POST", f"/containers/{cid}/kill", params={"signal": signal})
    except DockerError as e:
        if e.status in (404, 409):
            return False
        raise DriverError(f"cannot signal container {cid}: {e}",
                          recoverable=e.recoverable) from None
    return True


async def stop(engine: DockerEngine, cid: str, seconds: float) -> None:
    """Docker's stop: the image's stop signal (SIGTERM unless it names another), SIGKILL
    after `seconds`; a container not running or gone needs none.

    Raises:
        DriverError: the daemon refused otherwise, or cannot be reached.
    """
    try:
        await engine.request("POST", f"/containers/{cid}/stop",
                             params={"t": str(int(seconds))}, read_timeout=None)
    except DockerError as e:
        if e.status not in (304, 404, 409):
            raise DriverError(f"cannot stop container {cid}: {e}",
                              recoverable=e.recoverable) from None


async def running(engine: DockerEngine, cid: str) -> bool:
    """Whether the container runs (False when it is gone).

    Raises:
        DriverError: the daemon cannot be reached or refused.
    """
    try:
        inspected = await engine.request("GET", f"/containers/{cid}/json")
    except DockerError as e:
        if e.status == 404:
            return False
        raise DriverError(f"cannot inspect container {cid}: {e}",
                          recoverable=e.recoverable) from None
    return bool((inspected.get("State") or {}).get("Running"))


async def exit_of(engine: DockerEngine, cid: str, retry_period: float) -> ExitResult:
    """Wait until the container exits, through a daemon that may go away meanwhile (asked
    again every `retry_period` s), and say how it ended."""
    while True:
        try:
            await engine.request("POST", f"/containers/{cid}/wait", read_timeout=None)
            inspected = await engine.request("GET", f"/containers/{cid}/json")
            break
        except DockerUnreachable:
            await trio.sleep(retry_period)
        except DockerError as e:
            return ExitResult(exit_code=-1, err=f"failed to wait for container {cid}: {e}")
    state = inspected.get("State") or {}
    code = int(state.get("ExitCode") or 0)
    if state.get("OOMKilled"):
        return ExitResult(exit_code=code, oom_killed=True, err="OOM Killed")
    return ExitResult(exit_code=code)


async def find_leftover(engine: DockerEngine, name: str, alloc_id: str) -> str | None:
    """The ID of the container named `name` if it belongs to allocation `alloc_id` (an
    earlier start of the same task); None when there is none or it is someone else's."""
    try:
        found = await engine.request("GET", f"/containers/{name}/json")
    except DockerError as e:
        if e.status == 404:
            return None
        raise
    labels = (found.get("Config") or {}).get("Labels") or {}
    return str(found["Id"]) if labels.get(create.LABEL_ALLOC_ID) == alloc_id else None


async def of_alloc_root(engine: DockerEngine, alloc_root: str) -> list[tuple[str, str, str]]:
    """(container ID, alloc ID, task start ID) of every container, running or not, that an
    agent with this alloc root created."""
    filters = json.dumps({"label": [f"{create.LABEL_ALLOC_ROOT}={alloc_root}"]})
    found = await engine.request("GET", "/containers/json",
                                 params={"all": "1", "filters": filters})
    labelled = [(str(c["Id"]), c.get("Labels") or {}) for c in found or []]
    return [(cid, str(labels.get(create.LABEL_ALLOC_ID, "")),
             str(labels.get(create.LABEL_TASK_ID, ""))) for cid, labels in labelled]
