"""`identity`: give a task its workload identity tokens (Nomad's taskrunner `identity_hook`).

For each of the task's identities with `env` or `file` set, a JWT with Nomad's workload claims
(nomad/structs/workload_id.go: `nomad_namespace`, `nomad_job_id`, `nomad_allocation_id`,
`nomad_task`, `sub` = `<region>:<namespace>:<job>:<group>:<task>:<identity>`, `aud`, `iat`,
`nbf`, `exp` when the identity has a `ttl`, a random `jti`) is signed by the agent's server key
(runtime/server/workload_keys.py, verifiable at `/.well-known/jwks.json`). The default identity
becomes `NOMAD_TOKEN` and `secrets/nomad_token`; a named one `NOMAD_TOKEN_<name>` and
`secrets/nomad_<name>.jwt`; `filepath` (relative to the task directory) replaces the file name.

Runs once before the first start (`done`): restarts and an agent restart keep the persisted
env and the file already written, as Nomad keeps a default identity for the allocation's life.

Deliberate differences: Nomad's server signs the default identity at placement and stores it
in `Allocation.SignedIdentities`; here the agent signs it at prestart, and only for identities
that `env` or `file` expose (nothing else in yurt reads a token). Named identities with a
`ttl` are not renewed before they expire, so their `change_mode` never fires; and there is no
task API socket, so `NOMAD_UNIX_ADDR` is not set.

Invariant: a token file is created 0600 (owned by the task's user, when it has one) in the
directory a descriptor walk confined to the allocation directory reached, as a fresh file
renamed over the destination (runtime/client/confined_write.py). The task may own that directory and
plant anything in it first, so nothing there is opened for writing: a link in the token's
place is replaced, never followed (Nomad's os.WriteFile would follow it), and a FIFO is
replaced, never waited on.
"""

from __future__ import annotations

import os
import stat
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Final, final

import trio

from yurt.hooks.base import PrestartResponse, TaskHookContext, TaskPrestartHook
from yurt.runtime.client.allocfs import FsError, clean_parts, open_confined
from yurt.runtime.client.confined_write import replace_file_at
from yurt.runtime.structs import Allocation, Task
from yurt.runtime.structs.identity import DEFAULT_IDENTITY_NAME, WorkloadIdentity

#: Signs a claims mapping into a compact JWT.
Signer = Callable[[dict[str, Any]], str]

TOKEN_ENV: Final = "NOMAD_TOKEN"
TOKEN_FILE: Final = "nomad_token"


class IdentityError(Exception):
    """A token file cannot be written where the identity asks for it."""


def workload_claims(alloc: Allocation, task: Task, wid: WorkloadIdentity, now_ns: int,
                    jti: str) -> dict[str, Any]:
    """The JWT claims Nomad's WorkloadIdentityClaimsBuilder gives a task's identity."""
    job = alloc.job
    job_id = (job.parent_id or job.id) if job is not None else alloc.job_id
    region = job.region if job is not None else "global"
    namespace = job.namespace if job is not None else alloc.namespace
    now = now_ns // 1_000_000_000
    # go-jose writes a one-element audience as a bare string.
    aud: str | list[str] = wid.aud[0] if len(wid.aud) == 1 else list(wid.aud)
    claims: dict[str, Any] = {
        "nomad_namespace": alloc.namespace, "nomad_job_id": job_id,
        "nomad_allocation_id": alloc.id, "nomad_task": task.name,
        "sub": ":".join((region, namespace, job_id, alloc.task_group, task.name, wid.name)),
        "aud": aud, "nbf": now, "iat": now, "jti": jti}
    if wid.ttl > 0:
        claims["exp"] = (now_ns + wid.ttl) // 1_000_000_000
    return claims


def exposed_identities(task: Task) -> list[WorkloadIdentity]:
    """The task's identities that `env` or `file` expose: the only ones signed."""
    return [w for w in (task.default_identity, *task.identities)
            if w is not None and (w.env or w.file)]


def wants_token(task: Task) -> bool:
    """Whether any of the task's identities is exposed: only then does the task runner get
    this hook, so other tasks pay nothing for it."""
    return bool(exposed_identities(task))


def token_file(wid: WorkloadIdentity) -> str:
    """Where the token goes, relative to the task directory."""
    if wid.filepath:
        return wid.filepath
    name = TOKEN_FILE if wid.name == DEFAULT_IDENTITY_NAME else f"nomad_{wid.name}.jwt"
    return f"secrets/{name}"


def token_env(wid: WorkloadIdentity) -> str:
    return TOKEN_ENV if wid.name == DEFAULT_IDENTITY_NAME else f"{TOKEN_ENV}_{wid.name}"


def write_token(task_dir: Path, relative: str, token: str,
                owner: tuple[int, int] | None) -> None:
    """Write `token` to `<task_dir>/<relative>` (0600), its directory reached by the confined
    walk of the allocation directory; the directory must exist, as Nomad's os.WriteFile
    needs it to.

    Raises:
        IdentityError: the path leads outside, its directory is missing, or the write failed.
    """
    root = task_dir.parent.resolve()
    uid, gid = owner if owner is not None else (None, None)
    try:
        *dirs, name = clean_parts(f"{task_dir.name}/{relative}")
        where = open_confined(root, "/".join(dirs))
        try:
            if not stat.S_ISDIR(where.st.st_mode):
                raise FsError(400, f"{'/'.join(dirs)!r} is not a directory")
            replace_file_at(where.fd, name, token.encode(), 0o600, uid, gid)
        finally:
            os.close(where.fd)
    except (FsError, ValueError, OSError) as e:
        raise IdentityError(f"failed to write nomad token to {relative!r}: {e}") from None


@final
class IdentityHook(TaskPrestartHook):
    name: ClassVar[str] = "identity"

    def __init__(self, sign: Signer,
                 resolve_owner: Callable[[str], tuple[int, int] | None] = lambda user: None
                 ) -> None:
        self._sign = sign
        self._resolve_owner = resolve_owner

    async def prestart(self, ctx: TaskHookContext, previous: dict[str, str]) -> PrestartResponse:
        task = ctx.task
        wanted = exposed_identities(task)
        if not wanted:
            await trio.lowlevel.checkpoint()
            return PrestartResponse(done=True)
        now = ctx.unix_clock()
        task_dir = ctx.task_dir

        def issue() -> dict[str, str]:
            # The user lookup, RSA signatures and file writes: one worker-thread hop for all.
            owner = self._resolve_owner(task.user) if task.user else None
            env: dict[str, str] = {}
            for wid in wanted:
                token = self._sign(workload_claims(ctx.alloc, task, wid, now,
                                                   str(uuid.uuid4())))
                if wid.env:
                    env[token_env(wid)] = token
                if wid.file and task_dir is not None:
                    write_token(task_dir, token_file(wid), token, owner)
            return env

        return PrestartResponse(env=await trio.to_thread.run_sync(issue), done=True)
