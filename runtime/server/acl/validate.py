"""Nomad's checks on ACL objects before they are stored: policies, tokens, roles.

Each check returns the list of problems in Nomad's words (nomad/structs/acl.go
`ACLPolicy.Validate`, `ACLToken.Validate`, `ACLRole.Validate`), empty when the object may be
stored; `refusal` wraps them as Nomad's endpoint does (`"token 0 invalid: " + multierror`,
nomad/acl_endpoint.go `UpsertTokens`). `canonical_token` is `ACLToken.Canonicalize`: a new
token gets its IDs and its creation time, and an `ExpirationTTL` becomes an `ExpirationTime`.

What needs the stored state (does the token exist, do the roles and policies it names exist)
is checked by server/acl/state.py inside the write's transaction. Pure: the clock and the
limits are parameters; only `uuid4` draws randomness.
"""

from __future__ import annotations

import re
import uuid
from typing import Final

import msgspec

from yurt.runtime.errors import YurtError
from yurt.runtime.lib.durations import format_duration
from yurt.runtime.server.acl.policy import PolicyError, parse_policy
from yurt.runtime.server.namespaces import multierror
from yurt.runtime.structs.acl import (
    TOKEN_CLIENT,
    TOKEN_MANAGEMENT,
    AclPolicy,
    AclRole,
    AclToken,
)

#: nomad/structs/structs.go `ValidPolicyName`; nomad/structs/acl.go `ValidACLRoleName`.
VALID_NAME: Final = re.compile(r"[a-zA-Z0-9-]{1,128}")
#: nomad/structs/structs.go `maxPolicyDescriptionLength`, `maxTokenNameLength`;
#: nomad/structs/acl.go `maxACLRoleDescriptionLength`.
MAX_DESCRIPTION: Final = 256
MAX_TOKEN_NAME: Final = 256
#: nomad/config.go `DefaultConfig`: `ACLTokenMinExpirationTTL`, `ACLTokenMaxExpirationTTL`.
DEFAULT_MIN_TTL_NS: Final = 60 * 1_000_000_000
DEFAULT_MAX_TTL_NS: Final = 24 * 3600 * 1_000_000_000
#: helper/funcs.go `validUUID`.
_UUID: Final = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                          r"[0-9a-fA-F]{12}")


class AclRefused(YurtError):
    """A write the ACL state refuses: `message` in Nomad's words, `status` its HTTP status
    (400 for bad input, 403 for a secret that does not open anything, 404 for what is not
    there)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def is_uuid(text: str) -> bool:
    """helper/funcs.go `IsUUID`."""
    return len(text) == 36 and _UUID.fullmatch(text) is not None


def refusal(kind: str, problems: list[str]) -> AclRefused:
    """nomad/acl_endpoint.go's `"<kind> 0 invalid: <multierror>"` (one object per request)."""
    return AclRefused(f"{kind} 0 invalid: {multierror(problems)}")


def policy_problems(policy: AclPolicy) -> list[str]:
    """nomad/structs/acl.go `ACLPolicy.Validate`. Empty rules are valid (acl/policy.go `Parse`
    takes "" as a policy granting nothing: python-nomad's tests write one)."""
    problems = []
    if not VALID_NAME.fullmatch(policy.name):
        problems.append(f"invalid name '{policy.name}'")
    try:
        parse_policy(policy.rules, name=policy.name or "policy")
    except PolicyError as e:
        problems.append(f"failed to parse rules: {e}")
    if len(policy.description) > MAX_DESCRIPTION:
        problems.append(f"description longer than {MAX_DESCRIPTION}")
    job = policy.job_acl
    if job is not None:
        if job.get("JobID") and not job.get("Namespace"):
            problems.append("namespace must be set to set job ID")
        if job.get("Group") and not job.get("JobID"):
            problems.append("job ID must be set to set group")
        if job.get("Task") and not job.get("Group"):
            problems.append("group must be set to set task")
    return problems


def role_problems(role: AclRole) -> list[str]:
    """nomad/structs/acl.go `ACLRole.Validate` (what needs no state)."""
    problems = []
    if not VALID_NAME.fullmatch(role.name):
        problems.append(f"invalid name '{role.name}'")
    if len(role.description) > MAX_DESCRIPTION:
        problems.append(f"description longer than {MAX_DESCRIPTION}")
    if not role.policies:
        problems.append("at least one policy should be specified")
    return problems


def canonical_token(token: AclToken, now_ns: int) -> AclToken:
    """nomad/structs/acl.go `ACLToken.Canonicalize`: a token without an AccessorID is new and
    gets both IDs and `now` as its creation time; one without a creation time (an upload of a
    token with its IDs, or an update, whose stored time the write keeps) gets `now`. Either
    way an `ExpirationTTL` without an `ExpirationTime` sets it from the creation time."""
    if token.accessor_id and token.create_time:
        return token
    fresh: dict[str, object] = {"create_time": now_ns}
    if not token.accessor_id:
        fresh |= {"accessor_id": str(uuid.uuid4()), "secret_id": str(uuid.uuid4())}
    if token.expiration_time is None and token.expiration_ttl:
        fresh["expiration_time"] = now_ns + token.expiration_ttl
    return msgspec.structs.replace(token, **fresh)


def token_problems(token: AclToken, existing: AclToken | None, *, min_ttl_ns: int,
                   max_ttl_ns: int) -> list[str]:
    """nomad/structs/acl.go `ACLToken.Validate`, on a token `canonical_token` has seen;
    `existing` is the stored token an update replaces (None: a creation)."""
    problems = []
    if len(token.name) > MAX_TOKEN_NAME:
        problems.append("token name too long")
    if token.type == TOKEN_CLIENT:
        if not token.policies and not token.roles:
            problems.append("client token missing policies or roles")
    elif token.type == TOKEN_MANAGEMENT:
        if token.policies or token.roles:
            problems.append("management token cannot be associated with policies or roles")
    else:
        problems.append("token type must be client or management")
    if existing is None:
        if token.expiration_ttl < 0:
            problems.append(f"token expiration TTL '{format_duration(token.expiration_ttl)}' "
                            "should not be negative")
        if token.expiration_time is not None:
            if token.create_time > token.expiration_time:
                problems.append("expiration time cannot be before create time")
            expires_in = token.expiration_time - token.create_time
            if expires_in > max_ttl_ns:
                problems.append(f"expiration time cannot be more than "
                                f"{format_duration(max_ttl_ns)} in the future "
                                f"(was {format_duration(expires_in)})")
            elif expires_in < min_ttl_ns:
                problems.append(f"expiration time cannot be less than "
                                f"{format_duration(min_ttl_ns)} in the future "
                                f"(was {format_duration(expires_in)})")
    else:
        if existing.global_ != token.global_:
            problems.append("cannot toggle global mode")
        if existing.expiration_ttl != token.expiration_ttl:
            problems.append("cannot update expiration TTL")
        if token.expiration_time is not None and token.expiration_time != \
                existing.expiration_time:
            problems.append("cannot update expiration time")
    return problems
