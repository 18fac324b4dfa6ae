"""`yurt node` (with `node pool` and `node status`), and the verbs node.py adds beside it
(`system`, `tasks`): built together because node.py registers them together.

Loaded only when one of those commands runs (runtime/cli/lazy.py).
"""

from __future__ import annotations

import click


@click.group("node")
def node_group() -> None:
    """Nodes: their status, eligibility, draining and pools."""


def register(root: click.Group) -> None:
    """Add `node`, `system` and `tasks` to `root`."""
    from yurt.runtime.cli import node as cli_node
    from yurt.runtime.cli import node_pool as cli_node_pool
    from yurt.runtime.cli.node_status import register as register_node_status

    root.add_command(node_group)
    cli_node.register(root, node_group)  # node eligibility/drain, system, tasks
    cli_node_pool.register(node_group)  # node pool apply/list/info/delete/jobs/nodes
    register_node_status(node_group)
