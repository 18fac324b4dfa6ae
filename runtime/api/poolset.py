"""The node pools a process knows, for every route that looks one up: the pools its object
store holds, the built-in `default` and `all`, and those its known nodes registered in (as
Nomad's node registration creates a pool it names).

Its own module so that the namespaces (a job's pool is checked at register,
namespaces.py `admit_node_pool`), the pool routes (nodepools.py) and search (search.py) share
it without importing each other. Reads only; nothing here writes.
"""

from __future__ import annotations

from yurt.runtime.api.context import Context
from yurt.runtime.server.nodepools import NodePool, with_node_pools
from yurt.runtime.structs import Node


def known_nodes(ctx: Context) -> list[Node]:
    """The nodes the server knows: an agent's own, a cluster server's every client
    (server/cluster/server.py `nodes`)."""
    return [n for n in ctx.server.nodes() if n.id]


async def all_pools(ctx: Context) -> list[NodePool]:
    """Every pool: stored, built in, and those the known nodes registered in."""
    store = await ctx.agent.object_store()
    return with_node_pools(await store.node_pools(), (n.node_pool for n in known_nodes(ctx)))


async def find_pool(ctx: Context, name: str) -> NodePool | None:
    return next((p for p in await all_pools(ctx) if p.name == name), None)
