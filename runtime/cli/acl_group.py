"""`yurt acl`: the group (runtime/cli/acl.py, which the verb modules share) with its
bootstrap, policy, token and role verbs.

Loaded only when an `acl` command runs (runtime/cli/lazy.py).
"""

from __future__ import annotations

import click


def register(root: click.Group) -> None:
    """Add `acl` with every verb of its to `root`."""
    from yurt.runtime.cli import acl as cli_acl
    from yurt.runtime.cli import acl_policy, acl_role, acl_token

    for verbs in (acl_policy.policy_group, acl_token.token_group, acl_role.role_group):
        cli_acl.acl_group.add_command(verbs)
    root.add_command(cli_acl.acl_group)
