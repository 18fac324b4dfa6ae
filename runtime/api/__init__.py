"""The HTTP API: Nomad's paths and JSON shapes, served by hypercorn's trio worker.

Starlette routes requests to small handlers that call the parts of the process they answer for
(view.py `AgentView`: its server, its client side, the event broker, the object store); that
process is `yurt agent` (runtime/agent/agent.py) or `yurt server` (runtime/agent/serverproc.py),
which build this API and hand it what only they know; nothing here imports them (the layers:
tests/test_layers.py). Every body is encoded with msgspec in Nomad's field names, so
Nomad API clients (python-nomad, `curl` recipes) work unchanged. Errors are plain text with
Nomad's status codes: 400 bad parameter, 403 missing/wrong token, 404 unknown job/alloc/node,
405 wrong method (Starlette's router), 413 body too large, 500 anything else (a bug).

One module per resource family, each a set of handlers `(ctx, request) -> Response`:

    view.py         AgentView: what the handlers reach of the process (protocols)
    request.py      ApiError, json_response; body reading and its limits; query parsing
    context.py      Context: the view, the parse limiter, job/alloc/runner lookups
    jobs.py         /v1/jobs, /v1/jobs/parse, /v1/job/<id>[/allocations]
    job_lifecycle.py /v1/job/<id>/{versions,revert,stable,summary,plan,scale}, /v1/validate/job
    evaluations.py  /v1/evaluations, /v1/evaluation/<id>[/allocations],
                    /v1/job/<id>/{evaluations,evaluate}
    periodic.py     /v1/job/<id>/{periodic/force,dispatch}
    deployments.py  /v1/deployments, /v1/deployment/<id>, /v1/job/<id>/deployment[s] (none yet)
    allocations.py  /v1/allocations, /v1/allocation/<id>[/stop]
    client.py       /v1/client/allocation/<id>/{stats,restart,signal,gc}, /v1/client/{gc,stats}
    logs.py         /v1/client/fs/logs/<alloc> (FramedLogResponse)
    nodes.py        /v1/nodes, /v1/node/<id>[/allocations|/eligibility|/drain|/purge|
                    /evaluate]
    agent.py        /v1/agent/{self,members,servers,join,force-leave,health}
    status.py       /v1/status/{leader,peers}, /v1/regions
    operator.py     /v1/operator/{raft,scheduler}/configuration, /v1/system/{gc,reconcile/
                    summaries}, /v1/scaling/policies
    search.py       /v1/search, /v1/search/fuzzy
    metrics.py      /v1/metrics (Nomad's JSON, or Prometheus text)
    fs.py           /v1/client/fs/{ls,stat,cat,readat,stream}/<alloc> (runtime/client/allocfs.py)
    exec.py         /v1/client/allocation/<id>/exec (websocket)
    namespaces.py   /v1/namespaces, /v1/namespace/<name>; ?namespace= scoping
    variables.py    /v1/vars, /v1/var/<path>
    events.py       /v1/event/stream, /v1/event/ws
    noderpc.py      a yurt server's own routes: the node RPC (/v1/internal/...), the cluster's
                    nodes, status and members, node-local routes forwarded to the node
    app.py          the route table, the handler wrapper (errors, Nomad's headers, blocking
                    queries), the token middleware, serve_api; `front` routes (noderpc.py) and
                    a `forward` around the routes (client mode's) are handed in by the caller
    unreadbody.py   a body answered unread is dropped (or the connection closed, said so)

Streams never block the agent (events.py, logs.py); every request body is untrusted and bounded
before it costs anything (request.py). The server listens on 127.0.0.1 by default; with a token
configured, it is checked before any handler runs and only from the `X-Nomad-Token` header
(app.py).

The agent binds this API before it loads its runners, stores and drivers, so that a restarted
agent answers at once: nothing here imports them at module level (the alloc runner is a type
only; its errors and the log reader are imported inside the handlers that use them), and
tests/test_import_weight.py holds that.
"""

from yurt.runtime.api.app import build_app, serve_api
from yurt.runtime.api.logs import FramedLogResponse
from yurt.runtime.api.request import ApiError, json_response

__all__ = ["ApiError", "FramedLogResponse", "build_app", "json_response",
           "serve_api"]
