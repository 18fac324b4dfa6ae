"""Nomad's ACL core (Nomad's `acl/` package): policies and the ACL compiled from them.

`policy.py` reads a policy's text (HCL or JSON) into a validated, expanded `Policy`;
`acl.py` merges a token's policies into an `Acl` whose `allow_*` methods the HTTP layer asks.
Both are pure: no I/O, no Trio, no clock. Beside them: `validate.py` (Nomad's checks on
policies, tokens and roles), `state.py` (their tables, which both object stores run:
server/state/objects_sqlite.py, objects_etcd.py), `reset_file.py` (the operator's
`acl-bootstrap-reset`), `resolve.py` (a request's secret to its `Identity`, cached). The
`/v1/acl/*` endpoints (api/acl.py) and the per-route checks (api/authz.py) live in the API.
"""

from yurt.runtime.server.acl.acl import MANAGEMENT_ACL, Acl, AclClaim, compile_acl
from yurt.runtime.server.acl.policy import Policy, PolicyError, parse_policy

__all__ = ["MANAGEMENT_ACL", "Acl", "AclClaim", "Policy", "PolicyError", "compile_acl",
           "parse_policy"]
