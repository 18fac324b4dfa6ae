"""Every route's need, by path and method, as Nomad's API documentation states it ("ACL
Required" on each endpoint of website/content/api-docs/*.mdx; the checks in nomad/*_endpoint.go
and client/*_endpoint.go). One table for the whole API, so that a route added without a
declared need fails `build_app` (app.py) and the route walk (tests/test_authz_routes.py).

Keys are Starlette route paths; values map a method (`*`: any the route takes) to a `Need`
(authz.py). Where Nomad checks what only the body or the state knows, the route says
`IN_HANDLER` and the handler checks (the job's namespace is the body's: jobs.py `register`;
the ACL endpoints' own rules: acl.py; the event stream's topics: events.py).

Deliberate differences from Nomad: none in what is required. yurt's own routes (the event
websocket, the node RPC of a yurt server) are declared here too: the websocket as the event
stream is, the node RPC as `PUBLIC` to the ACL (it authenticates with the node's secret,
noderpc.py).
"""

from __future__ import annotations

from typing import Final

from starlette.types import Scope

from yurt.runtime.api.authz import (
    IN_HANDLER,
    MANAGEMENT,
    PUBLIC,
    AllocNamespace,
    Need,
    Needs,
    alloc_op,
    level,
    namespace_op,
)
from yurt.runtime.server.acl.acl import Acl

READ_JOB: Final = namespace_op("read-job")
LIST_JOBS: Final = namespace_op("list-jobs", "read-job")
SUBMIT_JOB: Final = namespace_op("submit-job")
ALLOC_READ: Final = alloc_op("read-job")
ALLOC_LIFECYCLE: Final = alloc_op("alloc-lifecycle")
NODE_READ: Final = level("node", "read")
NODE_WRITE: Final = level("node", "write")
AGENT_READ: Final = level("agent", "read")
AGENT_WRITE: Final = level("agent", "write")
OPERATOR_READ: Final = level("operator", "read")
OPERATOR_WRITE: Final = level("operator", "write")

def _by_param(param: str, needs: dict[str, Need], text: str) -> Need:
    """The need of `needs[path parameter param]`; a value not in `needs` is refused."""

    def check(acl: Acl, scope: Scope, alloc_namespace: AllocNamespace) -> bool:
        need = needs.get(str(scope.get("path_params", {}).get(param, "")))
        return need is not None and need.check is not None and need.check(
            acl, scope, alloc_namespace)

    return Need(text, check)


#: A yurt server's forwards to the node that runs the allocation (noderpc.py `to_node`):
#: the same needs as the node's own routes (client/fs_endpoint.go, alloc_endpoint.go).
_FS: Final = {op: alloc_op("read-logs" if op == "logs" else "read-fs", param="alloc_id")
              for op in ("logs", "ls", "stat", "cat", "readat", "stream")}
_ALLOC: Final = {"stats": ALLOC_READ, "checks": ALLOC_READ, "restart": ALLOC_LIFECYCLE,
                 "signal": ALLOC_LIFECYCLE, "gc": alloc_op("submit-job")}

FS_FORWARD: Final = _by_param("op", _FS, "namespace:read-fs, or read-logs for logs (the "
                                        "allocation's)")
ALLOC_FORWARD: Final = _by_param("op", _ALLOC, "as the node's own route (the allocation's)")

JOB: Final = "/v1/job/{job_id:path}"

#: Path → method → need. See the module header.
NEEDS: Final[dict[str, Needs]] = {
    # ---- jobs (api-docs/jobs.mdx)
    "/v1/jobs": {"GET": LIST_JOBS, "PUT": IN_HANDLER, "POST": IN_HANDLER},
    "/v1/jobs/parse": {"*": namespace_op("parse-job", "submit-job")},
    f"{JOB}/allocations": {"GET": READ_JOB},
    f"{JOB}/deployments": {"GET": READ_JOB},
    f"{JOB}/deployment": {"GET": READ_JOB},
    f"{JOB}/periodic/force": {"*": SUBMIT_JOB},
    f"{JOB}/dispatch": {"*": namespace_op("dispatch-job")},
    f"{JOB}/evaluations": {"GET": READ_JOB},
    f"{JOB}/evaluate": {"*": SUBMIT_JOB},
    f"{JOB}/versions": {"GET": READ_JOB},
    f"{JOB}/revert": {"*": SUBMIT_JOB},
    f"{JOB}/stable": {"*": SUBMIT_JOB},
    f"{JOB}/summary": {"GET": READ_JOB},
    f"{JOB}/plan": {"*": IN_HANDLER},
    f"{JOB}/scale": {"GET": namespace_op("read-job-scaling", "read-job"),
                     "PUT": namespace_op("scale-job", "submit-job"),
                     "POST": namespace_op("scale-job", "submit-job")},
    JOB: {"GET": READ_JOB, "PUT": IN_HANDLER, "POST": IN_HANDLER, "DELETE": SUBMIT_JOB},
    "/v1/validate/job": {"*": namespace_op("read-job", "submit-job")},
    # ---- allocations (api-docs/allocations.mdx, client.mdx)
    "/v1/allocations": {"GET": READ_JOB},
    "/v1/allocation/{id}": {"GET": ALLOC_READ},
    "/v1/allocation/{id}/stop": {"*": ALLOC_LIFECYCLE},
    "/v1/client/allocation/{id}/stats": {"GET": ALLOC_READ},
    "/v1/client/allocation/{id}/restart": {"*": ALLOC_LIFECYCLE},
    "/v1/client/allocation/{id}/signal": {"*": ALLOC_LIFECYCLE},
    "/v1/client/allocation/{id}/gc": {"*": alloc_op("submit-job")},
    "/v1/client/allocation/{id}/checks": {"GET": ALLOC_READ},
    "/v1/client/allocation/{id}/exec": {"*": IN_HANDLER},
    "/v1/client/gc": {"*": NODE_WRITE},
    "/v1/client/fs/logs/{alloc_id}": {"GET": alloc_op("read-logs", param="alloc_id")},
    "/v1/client/fs/ls/{alloc_id}": {"GET": alloc_op("read-fs", param="alloc_id")},
    "/v1/client/fs/stat/{alloc_id}": {"GET": alloc_op("read-fs", param="alloc_id")},
    "/v1/client/fs/cat/{alloc_id}": {"GET": alloc_op("read-fs", param="alloc_id")},
    "/v1/client/fs/readat/{alloc_id}": {"GET": alloc_op("read-fs", param="alloc_id")},
    "/v1/client/fs/stream/{alloc_id}": {"GET": alloc_op("read-fs", param="alloc_id")},
    "/v1/client/stats": {"GET": NODE_READ},
    # ---- nodes (api-docs/nodes.mdx)
    "/v1/nodes": {"GET": NODE_READ},
    "/v1/node/{id}": {"GET": NODE_READ},
    "/v1/node/{id}/allocations": {"GET": NODE_READ},  # and filtered by namespace: nodes.py
    "/v1/node/{id}/eligibility": {"*": NODE_WRITE},
    "/v1/node/{id}/drain": {"*": NODE_WRITE},
    "/v1/node/{id}/purge": {"*": NODE_WRITE},
    "/v1/node/{id}/evaluate": {"*": NODE_WRITE},
    # ---- agent, status, regions (api-docs/agent.mdx, status.mdx, regions.mdx)
    "/v1/agent/self": {"GET": AGENT_READ},
    "/v1/agent/members": {"GET": NODE_READ},
    "/v1/agent/servers": {"GET": AGENT_READ, "PUT": AGENT_WRITE, "POST": AGENT_WRITE},
    "/v1/agent/join": {"*": AGENT_WRITE},
    "/v1/agent/force-leave": {"*": AGENT_WRITE},
    "/v1/agent/health": {"GET": PUBLIC},
    "/v1/status/leader": {"GET": PUBLIC},
    "/v1/status/peers": {"GET": PUBLIC},
    "/v1/regions": {"GET": PUBLIC},
    "/v1/metrics": {"GET": PUBLIC},
    "/.well-known/jwks.json": {"GET": PUBLIC},
    # ---- operator, system, scaling (api-docs/operator/*.mdx, system.mdx, scaling-policies.mdx)
    "/v1/operator/raft/configuration": {"GET": OPERATOR_READ},
    "/v1/operator/scheduler/configuration": {"GET": OPERATOR_READ, "PUT": OPERATOR_WRITE,
                                             "POST": OPERATOR_WRITE},
    "/v1/system/gc": {"*": MANAGEMENT},
    "/v1/system/reconcile/summaries": {"*": MANAGEMENT},
    "/v1/scaling/policies": {"GET": namespace_op("list-scaling-policies", "read-job")},
    "/v1/scaling/policy/{id}": {"GET": namespace_op("read-scaling-policy", "read-job")},
    # ---- search (api-docs/search.mdx): each context is filtered by what the token may read
    "/v1/search": {"*": IN_HANDLER},
    "/v1/search/fuzzy": {"*": IN_HANDLER},
    # ---- evaluations, deployments (api-docs/evaluations.mdx, deployments.mdx)
    "/v1/evaluations": {"GET": READ_JOB},
    "/v1/evaluation/{id}": {"GET": READ_JOB},
    "/v1/evaluation/{id}/allocations": {"GET": READ_JOB},
    "/v1/deployments": {"GET": READ_JOB},
    "/v1/deployment/{id}": {"GET": READ_JOB},
    "/v1/deployment/allocations/{id}": {"GET": READ_JOB},
    "/v1/deployment/fail/{id}": {"*": SUBMIT_JOB},
    "/v1/deployment/pause/{id}": {"*": SUBMIT_JOB},
    "/v1/deployment/promote/{id}": {"*": SUBMIT_JOB},
    "/v1/deployment/unblock/{id}": {"*": SUBMIT_JOB},
    "/v1/deployment/allocation-health/{id}": {"*": SUBMIT_JOB},
    # ---- events (api-docs/events.mdx): topics filtered per namespace and kind
    "/v1/event/stream": {"GET": IN_HANDLER},
    "/v1/event/ws": {"*": IN_HANDLER},
    # ---- namespaces (api-docs/namespaces.mdx)
    "/v1/namespaces": {"GET": IN_HANDLER},
    "/v1/namespace": {"*": MANAGEMENT},
    "/v1/namespace/{name}": {"GET": IN_HANDLER, "PUT": MANAGEMENT, "POST": MANAGEMENT,
                             "DELETE": MANAGEMENT},
    # ---- variables (api-docs/variables.mdx): per path, in the handler
    "/v1/vars": {"GET": IN_HANDLER},
    "/v1/var/{path:path}": {"*": IN_HANDLER},
    # ---- services (api-docs/services.mdx)
    "/v1/services": {"GET": READ_JOB},
    "/v1/service/{rest:path}": {"GET": READ_JOB, "PUT": SUBMIT_JOB, "POST": SUBMIT_JOB,
                                "DELETE": SUBMIT_JOB},
    # ---- ACL (api-docs/acl/*.mdx): each endpoint's own rules, in acl.py
    "/v1/acl/bootstrap": {"*": PUBLIC},
    "/v1/acl/token/onetime/exchange": {"*": PUBLIC},
    "/v1/acl/token/onetime": {"*": IN_HANDLER},
    "/v1/acl/policies": {"GET": IN_HANDLER},
    "/v1/acl/policy/{name}": {"*": IN_HANDLER},
    "/v1/acl/tokens": {"GET": IN_HANDLER},
    "/v1/acl/token": {"*": IN_HANDLER},
    "/v1/acl/token/self": {"GET": IN_HANDLER},
    "/v1/acl/token/{accessor}": {"*": IN_HANDLER},
    "/v1/acl/roles": {"GET": IN_HANDLER},
    "/v1/acl/role": {"*": IN_HANDLER},
    "/v1/acl/role/name/{name}": {"GET": IN_HANDLER},
    "/v1/acl/role/{id}": {"*": IN_HANDLER},
    # ---- a yurt server's node RPC and forwards (noderpc.py)
    "/v1/internal/node/register": {"*": PUBLIC},
    "/v1/internal/node/{id}/heartbeat": {"*": PUBLIC},
    "/v1/internal/node/{id}/allocs": {"*": PUBLIC},
    "/v1/internal/node/{id}/allocs/update": {"*": PUBLIC},
    "/v1/internal/allocs": {"*": PUBLIC},
    "/v1/client/fs/{op}/{alloc_id}": {"GET": FS_FORWARD},
    "/v1/client/allocation/{id}/{op}": {"*": ALLOC_FORWARD},
    "/v1/client/{rest:path}": {"*": IN_HANDLER},
    # ---- the web UI's page and assets: no data (ui.py)
    "/": {"*": PUBLIC},
    "/ui": {"*": PUBLIC},
    "/ui/": {"*": PUBLIC},
    "/ui/{rest:path}": {"*": PUBLIC},
}
