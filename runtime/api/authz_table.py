"""Every route's need, by path and method, as Nomad's API documentation states it ("ACL
Required" on each endpoint of website/content/api-docs/*.mdx) and its code checks it (the
`AllowNsOpAnyOf`, `AllowNodeRead`, ... of the RPC each route of command/agent/*_endpoint.go
calls, in nomad/*_endpoint.go and client/*_endpoint.go). One table for the whole API, so that
a route added without a declared need fails `build_app` (app.py) and the route walk
(tests/test_authz_routes.py).

Keys are Starlette route paths; values map a method (`*`: any the route takes) to a `Need`
(authz.py). Where Nomad checks what only the body says, the route says `IN_HANDLER` and the
handler checks (a job's namespace is the body's: jobs.py `register`; a variable's path:
variables.py; a search's contexts: search.py). What the state says is looked up by the need
(`alloc_op`, `deployment_op`: the object's namespace, not the request's), or re-checked by
the handler where Nomad checks both (an evaluation's: evaluations.py).

Deliberate differences from Nomad, in how a refusal is told, not in what is required:
- An allocation the token may not read is 403 `Permission denied`; Nomad's `Alloc.GetAlloc`
  answers it as an unknown allocation (500, from its RPC error).
- `/v1/event/stream` and yurt's own `/v1/event/ws` refuse a subscription as Nomad's
  `Event.stream` does (nomad/event_endpoint.go `validateNsOp`: a topic the token may not read
  in every namespace asked; all topics for management only), then leave out what the token
  may not read (events.py); the web UI asks for narrower topics when refused.
yurt's own routes (the event websocket, the node RPC of a yurt server) are declared here too:
the websocket as the event stream is, the node RPC as `PUBLIC` to the ACL (it authenticates
with the node's secret, noderpc.py).
"""

from __future__ import annotations

from typing import Final

from starlette.types import Scope

from yurt.runtime.api.authz import (
    FILTERED,
    IN_HANDLER,
    MANAGEMENT,
    PUBLIC,
    Need,
    Needs,
    ObjectNamespace,
    alloc_op,
    deployment_op,
    level,
    namespace_op,
    namespace_op_implied,
    namespace_op_or_all,
    namespace_op_unless,
    path_namespace,
)
from yurt.runtime.server.acl.acl import Acl

READ_JOB: Final = namespace_op("read-job")
SUBMIT_JOB: Final = namespace_op("submit-job")
ALLOC_READ: Final = alloc_op("read-job")
ALLOC_LIFECYCLE: Final = alloc_op("alloc-lifecycle")
#: client/alloc_endpoint.go `GarbageCollect`.
ALLOC_GC: Final = alloc_op("gc-allocation", "submit-job")
#: client/fs_endpoint.go `logs`: read-logs or read-fs; every other file route read-fs.
READ_LOGS: Final = alloc_op("read-logs", "read-fs", param="alloc_id")
READ_FS: Final = alloc_op("read-fs", param="alloc_id")
NODE_READ: Final = level("node", "read")


def _pool_op(op: str, *, node_read: bool = False) -> Need:
    """`op` (read, write, delete) on the node pool the path names (acl/acl.go
    `AllowNodePoolOperation`), and node:read too with `node_read`."""

    def check(acl: Acl, scope: Scope, _: ObjectNamespace) -> bool:
        pool = str(scope.get("path_params", {}).get("name", ""))
        return acl.allow_node_pool_operation(pool, op) and (
            not node_read or acl.allow_node_read())

    node = 'node { policy = "read" }\n' if node_read else ""
    below = {"read": "[]", "write": '["read", "delete"]', "delete": '["read", "write"]'}[op]
    text = f"node_pool:{op}" + (" and node:read" if node_read else "")
    return Need(text, check, f'node_pool "default" {{ capabilities = ["{op}"] }}\n' + node,
                f'node_pool "default" {{ capabilities = {below} }}\n'
                'node_pool "other" { policy = "write" }\n'
                'node { policy = "write" }\n')


POOL_READ: Final = _pool_op("read")
POOL_WRITE: Final = _pool_op("write")
NODE_WRITE: Final = level("node", "write")
AGENT_READ: Final = level("agent", "read")
AGENT_WRITE: Final = level("agent", "write")
OPERATOR_READ: Final = level("operator", "read")
OPERATOR_WRITE: Final = level("operator", "write")


def deployment_action(op: str) -> Need:
    """nomad/deployment_endpoint.go `Fail`, `Pause`, ...: `op` or submit-job in the
    deployment's namespace."""
    return deployment_op(op, "submit-job")


def _by_param(param: str, needs: dict[str, Need], text: str) -> Need:
    """The need of `needs[path parameter param]`; a value not in `needs` is refused."""

    def check(acl: Acl, scope: Scope, object_namespace: ObjectNamespace) -> bool:
        need = needs.get(str(scope.get("path_params", {}).get(param, "")))
        return need is not None and need.check is not None and need.check(
            acl, scope, object_namespace)

    return Need(text, check)


#: A yurt server's forwards to the node that runs the allocation (noderpc.py `to_node`):
#: the same needs as the node's own routes (client/fs_endpoint.go, alloc_endpoint.go).
FS_BY_OP: Final = {op: READ_LOGS if op == "logs" else READ_FS
                   for op in ("logs", "ls", "stat", "cat", "readat", "stream")}
ALLOC_BY_OP: Final = {"stats": ALLOC_READ, "checks": ALLOC_READ, "restart": ALLOC_LIFECYCLE,
                      "signal": ALLOC_LIFECYCLE, "gc": ALLOC_GC}

FS_FORWARD: Final = _by_param("op", FS_BY_OP, "namespace:read-fs, or read-logs for logs (the "
                                              "allocation's)")
ALLOC_FORWARD: Final = _by_param("op", ALLOC_BY_OP, "as the node's own route (the "
                                                    "allocation's)")

JOB: Final = "/v1/job/{job_id:path}"
#: acl/policy.go: the host-volume capabilities, some implying others (`host-volume-write`
#: every one), so a token refused one of them holds none.
HOST_VOLUME_CAPS: Final = ("host-volume-read", "host-volume-create", "host-volume-register",
                           "host-volume-write", "host-volume-delete")

#: Path → method → need. See the module header. Each row's Nomad RPC is named where the
#: need is not simply the documented one.
NEEDS: Final[dict[str, Needs]] = {
    # ---- jobs (api-docs/jobs.mdx; nomad/job_endpoint.go)
    # `List`: list-jobs only; with `*`, the namespaces the token may list (jobs.py).
    "/v1/jobs": {"GET": namespace_op("list-jobs"),
                 # `Register`: submit-job or register-job in the body's namespace (jobs.py)
                 "PUT": IN_HANDLER, "POST": IN_HANDLER},
    # command/agent/job_endpoint.go `JobsParseRequest`
    "/v1/jobs/parse": {"*": namespace_op("parse-job", "submit-job")},
    f"{JOB}/allocations": {"GET": READ_JOB},
    f"{JOB}/deployments": {"GET": READ_JOB},
    f"{JOB}/deployment": {"GET": READ_JOB},
    # nomad/periodic_endpoint.go `Force`
    f"{JOB}/periodic/force": {"*": namespace_op("force-periodic-job", "dispatch-job",
                                                "submit-job")},
    f"{JOB}/dispatch": {"*": namespace_op("dispatch-job")},
    f"{JOB}/evaluations": {"GET": READ_JOB},
    f"{JOB}/evaluate": {"*": namespace_op("evaluate-job", "submit-job")},
    f"{JOB}/versions": {"GET": READ_JOB},
    # `GetJobSubmission`: read-job in the request's namespace
    f"{JOB}/submission": {"GET": READ_JOB},
    f"{JOB}/revert": {"*": namespace_op("revert-job", "submit-job")},
    f"{JOB}/stable": {"*": namespace_op("stable-job", "submit-job")},
    f"{JOB}/summary": {"GET": READ_JOB},
    # `Plan`: submit-job or plan-job in the body's namespace (job_lifecycle.py)
    f"{JOB}/plan": {"*": IN_HANDLER},
    # `ScaleStatus`, `Scale`
    f"{JOB}/scale": {"GET": namespace_op("read-job-scaling", "read-job"),
                     "PUT": namespace_op("scale-job", "submit-job"),
                     "POST": namespace_op("scale-job", "submit-job")},
    # `GetActions`
    f"{JOB}/actions": {"GET": READ_JOB},
    # Nomad 1.7's job action: an exec (client/alloc_endpoint.go `execImpl`), alloc-exec in
    # the allocation's namespace, checked as exec's is (exec.py)
    f"{JOB}/action": {"*": IN_HANDLER},
    JOB: {"GET": READ_JOB, "PUT": IN_HANDLER, "POST": IN_HANDLER,
          # `Deregister`
          "DELETE": namespace_op_unless("purge", ("submit-job", "purge-job"),
                                        ("deregister-job",))},
    # `Validate`: read-job in the body's job's namespace (job_lifecycle.py)
    "/v1/validate/job": {"*": IN_HANDLER},
    # ---- allocations (api-docs/allocations.mdx, client.mdx)
    # nomad/alloc_endpoint.go `List`
    "/v1/allocations": {"GET": READ_JOB},
    "/v1/allocation/{id}": {"GET": ALLOC_READ},
    "/v1/allocation/{id}/stop": {"*": ALLOC_LIFECYCLE},
    "/v1/client/allocation/{id}/stats": {"GET": ALLOC_READ},
    "/v1/client/allocation/{id}/restart": {"*": ALLOC_LIFECYCLE},
    "/v1/client/allocation/{id}/signal": {"*": ALLOC_LIFECYCLE},
    "/v1/client/allocation/{id}/gc": {"*": ALLOC_GC},
    "/v1/client/allocation/{id}/checks": {"GET": ALLOC_READ},
    # client/alloc_endpoint.go `execImpl`: alloc-exec, and alloc-node-exec for a driver
    # that does not isolate the task (exec.py)
    "/v1/client/allocation/{id}/exec": {"*": IN_HANDLER},
    # client/alloc_endpoint.go `GarbageCollectAll`
    "/v1/client/gc": {"*": NODE_WRITE},
    "/v1/client/fs/logs/{alloc_id}": {"GET": READ_LOGS},
    "/v1/client/fs/ls/{alloc_id}": {"GET": READ_FS},
    "/v1/client/fs/stat/{alloc_id}": {"GET": READ_FS},
    "/v1/client/fs/cat/{alloc_id}": {"GET": READ_FS},
    "/v1/client/fs/readat/{alloc_id}": {"GET": READ_FS},
    "/v1/client/fs/stream/{alloc_id}": {"GET": READ_FS},
    "/v1/client/stats": {"GET": NODE_READ},
    # ---- nodes (api-docs/nodes.mdx; nomad/node_endpoint.go)
    "/v1/nodes": {"GET": NODE_READ},
    "/v1/node/{id}": {"GET": NODE_READ},
    # `GetAllocs`: node:read, then the allocations of namespaces with read-job (nodes.py)
    "/v1/node/{id}/allocations": {"GET": NODE_READ},
    "/v1/node/{id}/eligibility": {"*": NODE_WRITE},
    "/v1/node/{id}/drain": {"*": NODE_WRITE},
    "/v1/node/{id}/purge": {"*": NODE_WRITE},
    "/v1/node/{id}/evaluate": {"*": NODE_WRITE},
    # ---- node pools (nomad/node_pool_endpoint.go): `ListNodePools` shows the pools the
    # token may read; `UpsertNodePools` needs write on the body's pool (nodepools.py).
    "/v1/node/pools": {"GET": FILTERED, "PUT": IN_HANDLER, "POST": IN_HANDLER},
    "/v1/node/pool/{name}": {"GET": POOL_READ, "PUT": POOL_WRITE, "POST": POOL_WRITE,
                             "DELETE": _pool_op("delete")},
    # `ListJobs`: read on the pool, then the namespaces the token may list jobs in.
    "/v1/node/pool/{name}/jobs": {"GET": POOL_READ},
    # `ListNodes`: node:read and read on the pool.
    "/v1/node/pool/{name}/nodes": {"GET": _pool_op("read", node_read=True)},
    # ---- agent, status, regions (api-docs/agent.mdx, status.mdx, regions.mdx)
    "/v1/agent/self": {"GET": AGENT_READ},
    # nomad/status_endpoint.go `Members`
    "/v1/agent/members": {"GET": NODE_READ},
    "/v1/agent/servers": {"GET": AGENT_READ, "PUT": AGENT_WRITE, "POST": AGENT_WRITE},
    "/v1/agent/join": {"*": AGENT_WRITE},
    "/v1/agent/force-leave": {"*": AGENT_WRITE},
    "/v1/agent/health": {"GET": PUBLIC},
    # command/agent/agent_endpoint.go `AgentMonitor`: agent:read
    "/v1/agent/monitor": {"GET": AGENT_READ},
    # nomad/status_endpoint.go `Leader`, `Peers`; regions_endpoint.go `List`: no check
    "/v1/status/leader": {"GET": PUBLIC},
    "/v1/status/peers": {"GET": PUBLIC},
    "/v1/regions": {"GET": PUBLIC},
    "/v1/metrics": {"GET": PUBLIC},
    "/.well-known/jwks.json": {"GET": PUBLIC},
    # ---- operator, system, scaling (api-docs/operator/*.mdx, system.mdx, scaling-policies.mdx)
    # nomad/operator_endpoint.go `RaftGetConfiguration`: management, not operator:read
    "/v1/operator/raft/configuration": {"GET": MANAGEMENT},
    "/v1/operator/scheduler/configuration": {"GET": OPERATOR_READ, "PUT": OPERATOR_WRITE,
                                             "POST": OPERATOR_WRITE},
    # nomad/operator_endpoint.go `snapshotSave`, `snapshotRestore`: management
    "/v1/operator/snapshot": {"GET": MANAGEMENT, "PUT": MANAGEMENT},
    "/v1/system/gc": {"*": MANAGEMENT},
    "/v1/system/reconcile/summaries": {"*": MANAGEMENT},
    # nomad/scaling_endpoint.go `ListPolicies` (with `*`: `listAllNamespaces`), `GetPolicy`
    "/v1/scaling/policies": {"GET": namespace_op_or_all(
        "list-scaling-policies", ("list-jobs", "read-job"), wildcard_filters=True)},
    "/v1/scaling/policy/{id}": {"GET": namespace_op_or_all(
        "read-scaling-policy", ("list-jobs", "read-job"))},
    # ---- search (api-docs/search.mdx; nomad/search_endpoint.go): per context (search.py)
    "/v1/search": {"*": IN_HANDLER},
    "/v1/search/fuzzy": {"*": IN_HANDLER},
    # ---- evaluations, deployments (api-docs/evaluations.mdx, deployments.mdx)
    # nomad/eval_endpoint.go `List`, `GetEval`, `Allocations`: read-job in the request's
    # namespace, then in the evaluation's (evaluations.py)
    "/v1/evaluations": {"GET": READ_JOB,
                        # nomad/eval_endpoint.go `Delete`: a management token only
                        "DELETE": MANAGEMENT},
    "/v1/evaluation/{id}": {"GET": READ_JOB},
    "/v1/evaluation/{id}/allocations": {"GET": READ_JOB},
    # nomad/deployment_endpoint.go `List`, `GetDeployment`, `Allocations`: as evaluations
    "/v1/deployments": {"GET": READ_JOB},
    "/v1/deployment/{id}": {"GET": READ_JOB},
    "/v1/deployment/allocations/{id}": {"GET": READ_JOB},
    # `Fail`, `Pause`, `Promote`, `Unblock`, `SetAllocHealth`: the deployment's namespace
    "/v1/deployment/fail/{id}": {"*": deployment_action("fail-deployment")},
    "/v1/deployment/pause/{id}": {"*": deployment_action("pause-deployment")},
    "/v1/deployment/promote/{id}": {"*": deployment_action("promote-deployment")},
    "/v1/deployment/unblock/{id}": {"*": deployment_action("unblock-deployment")},
    "/v1/deployment/allocation-health/{id}": {
        "*": deployment_action("set-alloc-health-deployment")},
    # ---- events (api-docs/events.mdx): each event shown by its topic's rule (events.py)
    "/v1/event/stream": {"GET": IN_HANDLER},  # Nomad's subscription rule: events.py
    "/v1/event/ws": {"*": IN_HANDLER},
    # ---- namespaces (api-docs/namespaces.mdx; nomad/namespace_endpoint.go)
    "/v1/namespaces": {"GET": FILTERED},
    "/v1/namespace": {"*": MANAGEMENT},
    "/v1/namespace/{name}": {"GET": path_namespace("name"), "PUT": MANAGEMENT,
                             "POST": MANAGEMENT, "DELETE": MANAGEMENT},
    # ---- variables (api-docs/variables.mdx; nomad/variables_endpoint.go): per path
    "/v1/vars": {"GET": FILTERED},
    "/v1/var/{path:path}": {"*": IN_HANDLER},
    # ---- dynamic host volumes (api-docs/volumes.mdx; nomad/host_volume_endpoint.go): the
    # request's namespace here; a body naming another is checked there too (hostvolumes.py)
    "/v1/volumes": {"GET": namespace_op_implied(("host-volume-read", "csi-list-volume"),
                                                HOST_VOLUME_CAPS, wildcard_filters=True)},
    "/v1/volume/host/create": {"*": namespace_op_implied(("host-volume-create",),
                                                         HOST_VOLUME_CAPS)},
    "/v1/volume/host/register": {"*": namespace_op_implied(("host-volume-register",),
                                                           HOST_VOLUME_CAPS)},
    "/v1/volume/host/{id}": {
        "GET": namespace_op_implied(("host-volume-read",), HOST_VOLUME_CAPS),
        "DELETE": namespace_op_implied(("host-volume-delete",), HOST_VOLUME_CAPS)},
    # ---- services (api-docs/services.mdx; nomad/service_registration_endpoint.go)
    "/v1/services": {"GET": namespace_op("read-job", wildcard_filters=True)},
    # `GetService`; `DeleteByID`. Nomad answers any other method 405 before a token is
    # looked at (command/agent/service_registration_endpoint.go), and so does services.py.
    "/v1/service/{rest:path}": {"GET": READ_JOB, "PUT": PUBLIC, "POST": PUBLIC,
                                "DELETE": namespace_op("delete-service-registration",
                                                       "submit-job")},
    # ---- ACL (api-docs/acl/*.mdx): each endpoint's own rules, in acl.py
    "/v1/acl/bootstrap": {"*": PUBLIC},
    "/v1/acl/token/onetime/exchange": {"*": PUBLIC},
    # nomad/acl_endpoint.go: writes and the token list for management only; a client token
    # lists and reads the policies and roles it holds, reads its own token, and makes
    # one-time tokens for itself (never the anonymous one).
    "/v1/acl/token/onetime": {"*": IN_HANDLER},
    "/v1/acl/policies": {"GET": FILTERED},
    "/v1/acl/policy/{name}": {"GET": IN_HANDLER, "PUT": MANAGEMENT, "POST": MANAGEMENT,
                              "DELETE": MANAGEMENT},
    "/v1/acl/tokens": {"GET": MANAGEMENT},
    "/v1/acl/token": {"*": MANAGEMENT},
    "/v1/acl/token/self": {"GET": FILTERED},
    # Writes are management's too, checked by the handler after the 405 that `self` and
    # `onetime` answer every method they do not take (their exact routes in Nomad).
    "/v1/acl/token/{accessor}": {"*": IN_HANDLER},
    "/v1/acl/roles": {"GET": FILTERED},
    "/v1/acl/role": {"*": MANAGEMENT},
    "/v1/acl/role/name/{name}": {"GET": IN_HANDLER},
    "/v1/acl/role/{id}": {"GET": IN_HANDLER, "PUT": MANAGEMENT, "POST": MANAGEMENT,
                          "DELETE": MANAGEMENT},
    # ---- a yurt server's node RPC and forwards (noderpc.py)
    "/v1/internal/node/register": {"*": PUBLIC},
    "/v1/internal/node/{id}/heartbeat": {"*": PUBLIC},
    "/v1/internal/node/{id}/allocs": {"*": PUBLIC},
    "/v1/internal/node/{id}/allocs/update": {"*": PUBLIC},
    "/v1/internal/allocs": {"*": PUBLIC},
    "/v1/client/fs/{op}/{alloc_id}": {"GET": FS_FORWARD},
    "/v1/client/allocation/{id}/{op}": {"*": ALLOC_FORWARD},
    # noderpc.py `only_on_nodes`: a 501 saying where to ask, whatever the token
    "/v1/client/{rest:path}": {"*": PUBLIC},
    # ---- the web UI's page and assets: no data (ui.py)
    "/": {"*": PUBLIC},
    "/ui": {"*": PUBLIC},
    "/ui/": {"*": PUBLIC},
    "/ui/{rest:path}": {"*": PUBLIC},
}
