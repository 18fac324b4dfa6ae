"""How a process (an agent, a `yurt server`) decides who its API admits: the resolver its
routes' guard asks (runtime/api/authz.py), made once on first use.

- ACLs disabled, no token configured: everyone may do everything (`DisabledResolver`).
- ACLs disabled, a token configured: the token may do everything, nothing else may
  (`StaticTokenResolver`: the agent's behaviour before it had ACLs).
"""

from __future__ import annotations

from yurt.runtime.server.acl.identity import DisabledResolver, StaticTokenResolver, TokenResolver


def open_resolver(token: str) -> TokenResolver:
    """The resolver of a process whose ACLs are disabled (see the header)."""
    return StaticTokenResolver(token) if token else DisabledResolver()
