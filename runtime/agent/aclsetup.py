"""How a process (an agent, a `yurt server`) decides who its API admits, and the ACL work its
start does.

The resolver its routes' guard asks (runtime/api/authz.py), made once on first use:
- ACLs disabled, no token configured: everyone may do everything (`DisabledResolver`).
- ACLs disabled, a token configured: the token may do everything, nothing else may
  (`StaticTokenResolver`: the agent's behaviour before it had ACLs).
- ACLs enabled: the ACL system (server/acl/resolve.py `AclResolver`) over the process's
  object store; a configured token is a management token stored nowhere.

At start, before the agent answers anything that needs its state (so before the bootstrap
endpoint can be reached: app.py waits for `ready`):
- `bootstrap = "auto"`: the first start of a data dir bootstraps the ACL system and writes the
  management token's secret to `<data dir>/server/bootstrap.token`, 0600, owned by the agent's
  user (written to a new file and renamed over, so no reader sees half of it). A start after a
  bootstrap finds it done and writes nothing (an operator's `acl-bootstrap-reset` file lets
  the next start bootstrap again, as Nomad's reset lets the next `acl bootstrap`).
- `--dev`: a fresh management token for this run ("dev session"), printed with a one-time UI
  login link; the session tokens of earlier runs of the data dir are deleted first, and this
  one when the agent stops.
"""

from __future__ import annotations

import logging
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import trio

from yurt.runtime.server.acl.identity import DisabledResolver, StaticTokenResolver, TokenResolver
from yurt.runtime.server.acl.settings import BOOTSTRAP_AUTO, BOOTSTRAP_TOKEN_FILE, AclSettings
from yurt.runtime.server.acl.validate import AclRefused
from yurt.runtime.server.state.objects_sqlite import AclObjects
from yurt.runtime.structs.acl import TOKEN_MANAGEMENT, AclToken

log = logging.getLogger("yurt.agent")

#: The name of `--dev`'s per-run management token; tokens of this name are the agent's own.
DEV_SESSION_TOKEN: Final = "yurt agent -dev session"


def make_resolver(settings: AclSettings, token: str, store: AclObjects | None
                  ) -> TokenResolver:
    """The resolver of a process (see the header); `store` is needed when ACLs are on."""
    if not settings.enabled:
        return StaticTokenResolver(token) if token else DisabledResolver()
    from yurt.runtime.server.acl.resolve import AclResolver

    assert store is not None
    return AclResolver(store, enabled=True, static_management=token,
                       token_ttl=settings.token_ttl, policy_ttl=settings.policy_ttl,
                       role_ttl=settings.role_ttl)


@dataclass
class AclStart:
    """What the start did that the operator should hear of, once (runtime/cli/agent.py)."""

    #: The file a bootstrap of this start wrote, None when none happened.
    bootstrap_file: Path | None = None
    #: `--dev`: this run's management token, and the one-time secret of its UI login link.
    session_secret: str = ""
    login_secret: str = ""


async def start_acl(settings: AclSettings, data_dir: Path, store: AclObjects, *,
                    dev_mode: bool) -> AclStart:
    """The ACL work of a start (see the header)."""
    done = AclStart()
    if not settings.enabled:
        await trio.lowlevel.checkpoint()
        return done
    if settings.bootstrap == BOOTSTRAP_AUTO:
        try:
            token = await store.acl_bootstrap()
        except AclRefused:  # done before: the file of that start holds its token
            pass
        else:
            path = data_dir / BOOTSTRAP_TOKEN_FILE
            await trio.to_thread.run_sync(write_secret_file, path, token.secret_id)
            log.info("ACL bootstrapped; the management token is in %s (readable by this "
                     "user only)", path)
            done.bootstrap_file = path
    if dev_mode:
        for old in await store.acl_tokens():
            if old.name == DEV_SESSION_TOKEN:
                await store.delete_acl_token(old.accessor_id)
        session = await store.put_acl_token(
            AclToken(name=DEV_SESSION_TOKEN, type=TOKEN_MANAGEMENT),
            min_ttl_ns=int(settings.token_min_expiration_ttl * 1e9),
            max_ttl_ns=int(settings.token_max_expiration_ttl * 1e9))
        done.session_secret = session.secret_id
        done.login_secret = (await store.create_one_time_token(
            session.accessor_id)).one_time_secret_id
    return done


async def end_dev_session(store: AclObjects, secret: str) -> None:
    """Delete `--dev`'s session token (a stop that cannot leaves it to the next start)."""
    token = await store.acl_token_by_secret(secret)
    if token is not None:
        await store.delete_acl_token(token.accessor_id)


def write_secret_file(path: Path, secret: str) -> None:
    """`secret` in `path`, 0600, replacing any earlier file whole. Blocking."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, (secret + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def login_url(address: str, one_time_secret: str) -> str:
    """The UI's address that signs in with a one-time token (command/ui.go `ott`)."""
    return f"{address}/ui/?ott={one_time_secret}"

