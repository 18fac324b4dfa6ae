"""Stage 4 rules for task `identity` blocks and the job's `ui` block: Nomad's
WorkloadIdentity.Validate and Task.Validate messages, then Task.Canonicalize's default identity.

Nomad's jobspec moves an identity without a name (or named "default") out of `Identities` into
`Task.Identity`, and the server gives every task a default identity when it has none. Here the
checks run before that move (stage 4 validates, then canonicalizes), so they judge each
identity by the name it will have: an unnamed one is "default".

Invariants: `check_job_identities` never changes the job; after `canonicalize_identities` every
task has `default_identity` (audience `nomadproject.io`), `identities` holds only named ones,
and change signals are upper case.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

import msgspec

from yurt.runtime.jobspec.fields import _At, _Problems
from yurt.runtime.structs import Job, Task, TaskGroup
from yurt.runtime.structs.identity import (
    DEFAULT_AUDIENCE,
    DEFAULT_IDENTITY_NAME,
    WorkloadIdentity,
    default_identity,
)

_VALID_NAME: Final = re.compile(r"^[a-zA-Z0-9-_]{1,128}$")
_UI_DESCRIPTION_MAX: Final = 1000


def _is_default(wid: WorkloadIdentity) -> bool:
    return wid.name in ("", DEFAULT_IDENTITY_NAME)


def identity_problems(wid: WorkloadIdentity) -> list[str]:
    """Nomad's WorkloadIdentity.Validate on the canonical identity, one message each."""
    name = wid.name or DEFAULT_IDENTITY_NAME
    out: list[str] = []
    if not _VALID_NAME.match(name):
        out.append(f'invalid name "{name}". Must match regex {_VALID_NAME.pattern}')
    if name != DEFAULT_IDENTITY_NAME:  # the default's audience is always Nomad's
        out += [f"an empty string is an invalid audience ({i + 1})"
                for i, aud in enumerate(wid.aud) if not aud]
    if wid.change_mode in ("", "noop", "restart"):
        if wid.change_signal:
            out.append(f'can only use change_signal="{wid.change_signal.upper()}" with '
                       'change_mode="signal"')
    elif wid.change_mode == "signal":
        if not wid.change_signal:
            out.append('change_signal must be specified when using change_mode="signal"')
    else:
        out.append(f"invalid change_mode: {wid.change_mode}")
    if wid.ttl > 0 and name == DEFAULT_IDENTITY_NAME:
        out.append("ttl for default identity not yet supported")
    if wid.ttl < 0:
        out.append("ttl must be >= 0")
    if wid.filepath and not wid.file:
        out.append("file parameter must be true in order to specify filepath")
    return [f'Identity "{name}" is invalid: {m}' for m in out]


def _check_task(task: Task, at: _At, problems: _Problems) -> None:
    if task.default_identity is not None:
        for message in identity_problems(task.default_identity):
            problems.add(at.field(Task, "default_identity"), message)
    defaults = 0
    for i, wid in enumerate(task.identities):
        wid_at = at.item(Task, "identities", i, wid.name or str(i))
        defaults += _is_default(wid)
        if _is_default(wid) and defaults > 1:
            problems.add(wid_at, "Duplicate default identities found")
        for message in identity_problems(wid):
            problems.add(wid_at, message)


def check_job_identities(job: Job, root: _At, group_at: Callable[[int], _At],
                         problems: _Problems) -> None:
    """Validate every task's identities and the job's `ui` block."""
    if job.ui is not None and len(job.ui.description.encode()) > _UI_DESCRIPTION_MAX:
        problems.add(root.field(Job, "ui"), "UI description must be under 1000 characters, "
                                            f"currently {len(job.ui.description.encode())}")
    for gi, group in enumerate(job.task_groups):
        g_at = group_at(gi)
        for ti, task in enumerate(group.tasks):
            _check_task(task, g_at.item(TaskGroup, "tasks", ti, task.name or str(ti)), problems)


def _canonical(wid: WorkloadIdentity) -> WorkloadIdentity:
    """Nomad's WorkloadIdentity.Canonicalize."""
    name = wid.name or DEFAULT_IDENTITY_NAME
    aud = [DEFAULT_AUDIENCE] if name == DEFAULT_IDENTITY_NAME else wid.aud
    return msgspec.structs.replace(wid, name=name, aud=aud,
                                   change_signal=wid.change_signal.upper())


def canonicalize_identities(job: Job) -> None:
    """Nomad's Task.Canonicalize for identities, in place: the default one in
    `default_identity` (made when missing), the named ones in `identities`."""
    for group in job.task_groups:
        for task in group.tasks:
            named = [_canonical(w) for w in task.identities if not _is_default(w)]
            defaults = [_canonical(w) for w in task.identities if _is_default(w)]
            if defaults:
                task.default_identity = defaults[-1]
            elif task.default_identity is None:
                task.default_identity = default_identity()
            else:
                task.default_identity = _canonical(task.default_identity)
            task.identities = named
