"""/v1/agent/self: the agent's configuration, member and stats.

The one answer that needs no loaded state (app.py routes it with `needs_state=False`): it is up
as soon as the agent listens, and says `state_loaded: "false"` until the state is loaded.
"""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import Response

from yurt.runtime import __version__
from yurt.runtime.api.context import Context
from yurt.runtime.api.request import json_response


async def agent_self(ctx: Context, request: Request) -> Response:
    cfg = ctx.agent.config
    loaded = ctx.agent.ready.is_set()
    return json_response({
        "config": {"Version": {"Version": __version__}, "DataDir": str(cfg.data_dir),
                   "Datacenter": cfg.datacenter, "NodeName": ctx.agent.node.name,
                   "Addresses": {"HTTP": cfg.bind}, "Ports": {"HTTP": cfg.port},
                   "ACL": {"Enabled": bool(cfg.token)}},
        "member": {"Name": ctx.agent.node.name, "Addr": cfg.bind,
                   "Tags": {"build": __version__}},
        "stats": {"client": {"known_servers": "embedded", "node_id": ctx.agent.node.id,
                             "num_allocations": str(len(ctx.agent.client.runners)
                                                    if loaded else 0),
                             "restoring_allocations": str(len(
                                 ctx.agent.restoring.pending)),
                             # "false" while the state still loads after a start
                             "state_loaded": str(loaded).lower()},
                  "runtime": {"version": __version__,
                              "uptime_seconds": str(int(time.time()
                                                        - ctx.agent.started_at))}}})
