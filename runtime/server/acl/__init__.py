"""Nomad's ACL core (Nomad's `acl/` package): policies and the ACL compiled from them.

`policy.py` reads a policy's text (HCL or JSON) into a validated, expanded `Policy`;
`acl.py` merges a token's policies into an `Acl` whose `allow_*` methods the HTTP layer asks.
Both are pure: no I/O, no Trio, no clock. Storage of policies and tokens, the `/v1/acl/*`
endpoints and the per-route checks live elsewhere.
"""

from yurt.runtime.server.acl.acl import MANAGEMENT_ACL, Acl, AclClaim, compile_acl
from yurt.runtime.server.acl.policy import Policy, PolicyError, parse_policy

__all__ = ["MANAGEMENT_ACL", "Acl", "AclClaim", "Policy", "PolicyError", "compile_acl",
           "parse_policy"]
