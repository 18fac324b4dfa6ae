"""Child jobs of periodic and parameterized jobs: how they are named, built and checked.

A periodic or parameterized job is a template (Nomad): it is stored, its Status is `running`
while it is not stopped, and it is never placed; its children are ordinary jobs registered
through `LocalServer.register_job`:

- a periodic launch is `<id>/periodic-<unix launch time>` (`Periodic` cleared);
- a dispatch is `<id>/dispatch-<unix>-<8 hex>` with `Dispatched`, the request's `Meta` merged
  over the parent's and its `Payload` (at most 16 KiB, Nomad's `DispatchPayloadSizeLimit`).

Both carry `ParentID`. Invariants: the checks of a dispatch request are Nomad's
(`validateDispatchRequest`), in its order and with its messages; a child is a deep copy, never
sharing a mutable part with its parent; nothing here does I/O or reads a clock.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Final

import msgspec

from yurt.runtime.server.scheduler.periodic import periodic_child_id
from yurt.runtime.structs import Job

#: Nomad's `DispatchPayloadSizeLimit`.
DISPATCH_PAYLOAD_SIZE_LIMIT: Final = 16 * 1024
DISPATCH_LAUNCH_SUFFIX: Final = "/dispatch-"


class DispatchError(ValueError):
    """A dispatch (or forced launch) Nomad would refuse; the message is Nomad's."""


def is_parameterized(job: Job) -> bool:
    """Nomad's `IsParameterized`: a template for dispatches (a dispatched child is not)."""
    return job.parameterized is not None and not job.dispatched


def is_periodic_active(job: Job) -> bool:
    """Nomad's `IsPeriodicActive`: the periodic dispatcher launches this job's children."""
    return (job.periodic is not None and job.periodic.enabled and not job.stop
            and not is_parameterized(job))


def is_template(job: Job) -> bool:
    """Stored but never placed: a periodic or parameterized parent (even when disabled)."""
    return job.periodic is not None or is_parameterized(job)


def _copy(job: Job) -> Job:
    return msgspec.json.decode(msgspec.json.encode(job), type=Job)


def _child(parent: Job, child_id: str) -> Job:
    child = _copy(parent)
    child.id = child.name = child_id
    child.parent_id = parent.id
    child.status = child.status_description = ""
    child.stop = False
    return child


def periodic_child(parent: Job, launch: datetime) -> Job:
    """Nomad's `deriveJob`: the child a periodic launch at `launch` registers."""
    child = _child(parent, periodic_child_id(parent.id, launch))
    child.periodic = None
    return child


def dispatched_id(parent_id: str, now: float, prefix_template: str = "") -> str:
    """Nomad's `DispatchedID`: `<id>/dispatch-[<template>-]<unix>-<first 8 hex of a UUID>`."""
    template = f"{prefix_template}-" if prefix_template else ""
    return f"{parent_id}{DISPATCH_LAUNCH_SUFFIX}{template}{int(now)}-{uuid.uuid4().hex[:8]}"


def _go_list(keys: set[str]) -> str:
    """A key set as Go's `%v` prints a `[]string`."""
    return "[" + " ".join(sorted(keys)) + "]"


def check_dispatch(parent: Job, payload: bytes, meta: dict[str, str], priority: int) -> None:
    """Nomad's checks of a dispatch request against its parent, in Nomad's order."""
    if not is_parameterized(parent) or parent.parameterized is None:
        raise DispatchError(f'Specified job "{parent.id}" is not a parameterized job')
    if parent.stop:
        raise DispatchError(f'Specified job "{parent.id}" is stopped')
    mode = parent.parameterized.payload
    if mode == "required" and not payload:
        raise DispatchError("Payload is not provided but required by parameterized job")
    if mode == "forbidden" and payload:
        raise DispatchError("Payload provided but forbidden by parameterized job")
    if len(payload) > DISPATCH_PAYLOAD_SIZE_LIMIT:
        raise DispatchError(f"Payload exceeds maximum size; {len(payload)} > "
                            f"{DISPATCH_PAYLOAD_SIZE_LIMIT}")
    allowed = set(parent.parameterized.meta_required) | set(parent.parameterized.meta_optional)
    unpermitted = set(meta) - allowed
    if unpermitted:
        raise DispatchError("Dispatch request included unpermitted metadata keys: "
                            + _go_list(unpermitted))
    missing = set(parent.parameterized.meta_required) - set(meta)
    if missing:
        raise DispatchError("Dispatch did not provide required meta keys: " + _go_list(missing))
    if not 1 <= priority <= 100:
        raise DispatchError("dispatch job priority must be between [1, 100]")


def dispatched_child(parent: Job, payload: bytes, meta: dict[str, str], priority: int,
                     now: float, prefix_template: str = "") -> Job:
    """The child a checked dispatch registers (Nomad's `Job.Dispatch`)."""
    child = _child(parent, dispatched_id(parent.id, now, prefix_template))
    child.dispatched = True
    child.priority = priority
    child.meta = {**child.meta, **meta}
    child.payload = payload or None
    return child
