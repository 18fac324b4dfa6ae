"""`Identity`: who a request is, once its token is resolved (server/acl/resolve.py), and the
compiled ACL it acts under (server/acl/acl.py). The API's authorisation (api/authz.py) and
every handler that filters what it shows read it.

Invariants: `acl is None` only when ACLs are disabled (everything is allowed); an anonymous
request with ACLs enabled has `token is None` and the anonymous policy's ACL (nothing, unless
an operator wrote a policy named `anonymous`); a management token's ACL is `MANAGEMENT_ACL`.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Final, Protocol

from yurt.runtime.server.acl.acl import Acl
from yurt.runtime.structs.acl import AclToken


@dataclass(frozen=True)
class Identity:
    token: AclToken | None
    #: None: ACLs are disabled on this agent.
    acl: Acl | None

    @property
    def enabled(self) -> bool:
        return self.acl is not None

    def is_management(self) -> bool:
        return self.acl is None or self.acl.is_management()


#: Every request of an agent whose ACLs are disabled.
ACL_DISABLED: Final = Identity(token=None, acl=None)


class AclTokenError(Exception):
    """A token that cannot act: unknown (`ACL token not found`) or past its expiration
    (`ACL token expired`), the texts of nomad/structs/errors.go. The API answers 403 with it."""


class TokenResolver(Protocol):
    """What turns a request's secret into its identity (server/acl/resolve.py): "" is the
    anonymous token. Raises `AclTokenError` for a secret that cannot act."""

    async def resolve(self, secret: str) -> Identity: ...


class DisabledResolver:
    """ACLs disabled and no token configured: every request acts as `ACL_DISABLED`."""

    async def resolve(self, secret: str) -> Identity:
        return ACL_DISABLED


class StaticTokenResolver:
    """ACLs disabled, one token configured (the agent's `token`): a request carrying it may do
    everything, any other is refused (`Permission denied`, the text this agent answered before
    it had ACLs)."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()

    async def resolve(self, secret: str) -> Identity:
        if not hmac.compare_digest(secret.encode(), self._token):
            raise AclTokenError("Permission denied")
        return ACL_DISABLED
