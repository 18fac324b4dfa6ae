"""`AclSettings`: the agent's `acl` block (Nomad's agent configuration `acl { ... }`), as the
server, the API and the agent's start read it.

- `enabled`: ACLs on. `yurt agent` turns them on unless its config says `enabled = false`
  (runtime/cli/agent.py); a config built in code starts with them off.
- `bootstrap`: `auto` — the first start of a data dir bootstraps the ACL system itself and
  writes the management token to `<data dir>/server/bootstrap.token` (0600); `manual` —
  Nomad's flow: nobody is bootstrapped until `yurt acl bootstrap`.
- `token_ttl`, `policy_ttl`, `role_ttl`: how long a resolved token, policy or role is cached
  (Nomad's agent `acl.token_ttl` ...); a write through this process invalidates at once.
- `token_min_expiration_ttl`, `token_max_expiration_ttl`: the bounds on a token's
  `ExpirationTTL` (Nomad's server `acl` options of the same names).

Invariant: every duration is in seconds and positive; min ≤ max.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

BOOTSTRAP_AUTO: Final = "auto"
BOOTSTRAP_MANUAL: Final = "manual"
BOOTSTRAP_MODES: Final = (BOOTSTRAP_AUTO, BOOTSTRAP_MANUAL)
#: Where an `auto` bootstrap writes the management token, under the data dir.
BOOTSTRAP_TOKEN_FILE: Final = "server/bootstrap.token"


@dataclass(frozen=True)
class AclSettings:
    enabled: bool = False
    bootstrap: str = BOOTSTRAP_AUTO
    token_ttl: float = 30.0
    policy_ttl: float = 30.0
    role_ttl: float = 30.0
    token_min_expiration_ttl: float = 60.0
    token_max_expiration_ttl: float = 24 * 3600.0


def open_to_local_users(settings: AclSettings, token: str, drivers: Iterable[str], euid: int,
                        address: str) -> str | None:
    """The warning an agent that anyone on the machine may drive as root owes its operator:
    ACLs off, no token, running as root with raw_exec (which runs tasks as the agent's user).
    None when that is not so."""
    if settings.enabled or token or euid != 0 or "raw_exec" not in set(drivers):
        return None
    return (f"ACLs are disabled and raw_exec runs tasks as root: any local user (and any "
            f"program that can reach {address}) can run commands as root through this agent; "
            "remove `enabled = false` from the config's [acl] section")
