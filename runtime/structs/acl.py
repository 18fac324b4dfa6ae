"""Nomad's ACL objects as data: policies, tokens, roles and one-time tokens, with Nomad's JSON
names (`AccessorID`, `SecretID`, `ExpirationTime`, ...; nomad/structs/acl.go and api/acl.go).

The server stores them (server/acl/); the API answers with them (api/acl.py); the CLI prints
them (cli/acl.py). Nothing here does I/O.

Invariants: a token's `type` is `client` or `management`; a management token names no policy
and no role; `expiration_time` (Unix nanoseconds) is None for a token that never expires.
"""

from __future__ import annotations

from typing import Final

import msgspec

TOKEN_CLIENT: Final = "client"
TOKEN_MANAGEMENT: Final = "management"
#: nomad/structs/acl.go `AnonymousACLToken`: what a request without a token is.
ANONYMOUS_ACCESSOR: Final = "anonymous"
ANONYMOUS_POLICY: Final = "anonymous"


class AclPolicy(msgspec.Struct, rename="pascal", kw_only=True):
    """Nomad's `ACLPolicy`: `rules` is the policy text (HCL or JSON, server/acl/policy.py)."""

    name: str
    description: str = ""
    rules: str = ""
    job_acl: dict[str, str] | None = msgspec.field(default=None, name="JobACL")
    create_index: int = 0
    modify_index: int = 0


class AclRoleLink(msgspec.Struct, rename="pascal", kw_only=True):
    """A token's link to a role (`ACLTokenRoleLink`): by ID or by name."""

    id: str = msgspec.field(default="", name="ID")
    name: str = ""


class AclPolicyLink(msgspec.Struct, rename="pascal", kw_only=True):
    """A role's link to a policy (`ACLRolePolicyLink`)."""

    name: str


class AclRole(msgspec.Struct, rename="pascal", kw_only=True):
    """Nomad's `ACLRole`: a named set of policies tokens may link to."""

    id: str = msgspec.field(default="", name="ID")
    name: str
    description: str = ""
    policies: list[AclPolicyLink] = msgspec.field(default_factory=list)
    create_index: int = 0
    modify_index: int = 0


class AclToken(msgspec.Struct, rename="pascal", kw_only=True):
    """Nomad's `ACLToken`. Times are Unix nanoseconds here; the API writes them as RFC 3339
    (api/acl.py), as Nomad's JSON does."""

    accessor_id: str = msgspec.field(default="", name="AccessorID")
    secret_id: str = msgspec.field(default="", name="SecretID")
    name: str = ""
    type: str = TOKEN_CLIENT
    policies: list[str] = msgspec.field(default_factory=list)
    roles: list[AclRoleLink] = msgspec.field(default_factory=list)
    global_: bool = msgspec.field(default=False, name="Global")
    create_time: int = 0
    expiration_time: int | None = None
    #: The TTL asked for at creation (nanoseconds), as Nomad keeps `ExpirationTTL`.
    expiration_ttl: int = msgspec.field(default=0, name="ExpirationTTL")
    create_index: int = 0
    modify_index: int = 0

    def is_management(self) -> bool:
        return self.type == TOKEN_MANAGEMENT

    def is_expired(self, now_ns: int) -> bool:
        """nomad/structs/acl.go `ACLToken.IsExpired`."""
        return self.expiration_time is not None and self.expiration_time <= now_ns


class OneTimeToken(msgspec.Struct, rename="pascal", kw_only=True):
    """Nomad's `OneTimeToken`: exchanged once for the token it points at, before it expires."""

    one_time_secret_id: str = msgspec.field(name="OneTimeSecretID")
    accessor_id: str = msgspec.field(name="AccessorID")
    expires_at: int  # Unix nanoseconds
    create_index: int = 0
    modify_index: int = 0
