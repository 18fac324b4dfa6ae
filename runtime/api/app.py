"""The app: the route table, the wrapper every handler runs in, the ACL guard, the server.

`_handler` gives every answer Nomad's shape around the resource modules' handlers: an
`ApiError` becomes Nomad's plain-text answer with its status, every answer carries Nomad's
query headers (`X-Nomad-Index` ...), a GET with `?index=N` is a blocking query, and a handler
that needs the agent's state waits until it is loaded. 405 for a wrong method is Starlette's
router: each route takes Nomad's methods for it, and HEAD only where no method writes
(`_without_head`); anything uncaught is a 500, a bug.

Before any of it, `CrossOriginMiddleware` (origin.py) refuses what a browser sends for a page
of another site: a `Host` that is not one of the agent's names (DNS rebinding), a cross-site
request, an `Origin` that is not the agent's.

Every route is behind its declared ACL need (authz_table.py, checked by authz.py `guard` once
the router has matched it): the request's token is resolved (the agent's `acl_resolver`) and
403 answers a token that may not. The UI's page and assets (ui.py) hold no data and need none.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Final

import hypercorn
import hypercorn.trio
import trio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.types import ASGIApp
from starlette.websockets import WebSocket

from yurt.runtime.api import agent as agent_api
from yurt.runtime.api import (
    allocations,
    client,
    deployments,
    evaluations,
    events,
    fs,
    job_lifecycle,
    jobs,
    logs,
    metrics,
    nodepools,
    nodes,
    operator,
    scaling,
    search,
    status,
    ui,
)
from yurt.runtime.api import exec as alloc_exec
from yurt.runtime.api import hostvolumes as host_volumes_api
from yurt.runtime.api import identity as identity_api
from yurt.runtime.api import namespaces as namespaces_api
from yurt.runtime.api import periodic as periodic_api
from yurt.runtime.api import services as services_api
from yurt.runtime.api import variables as variables_api
from yurt.runtime.api.acl import acl_routes
from yurt.runtime.api.authz import guard
from yurt.runtime.api.authz_table import NEEDS
from yurt.runtime.api.context import Context
from yurt.runtime.api.origin import AllowedHosts, CrossOriginMiddleware, own_hosts
from yurt.runtime.api.request import ApiError, query_duration, query_int
from yurt.runtime.api.stateguard import StateGuardMiddleware
from yurt.runtime.api.unreadbody import UnreadBodyMiddleware
from yurt.runtime.api.view import AgentView
from yurt.runtime.errors import Unavailable

log = logging.getLogger("yurt.api")

MAX_BLOCKING_WAIT: Final = 600.0
DEFAULT_BLOCKING_WAIT: Final = 300.0


def _handler(agent: AgentView, fn: Callable[[Request], Awaitable[Response]], *,
             blocking: bool = True, needs_state: bool = True
             ) -> Callable[[Request], Awaitable[Response]]:
    """Errors as Nomad's plain-text answers; Nomad's query headers on every answer; and
    Nomad's blocking queries (`?index=N&wait=5m`: answer once the state index passes N)."""

    async def handle(request: Request) -> Response:
        if needs_state and not agent.ready.is_set():
            await agent.ready.wait()  # the API is up before the agent's state is loaded
        try:
            if blocking and request.method == "GET" and "index" in request.query_params:
                index = query_int(request, "index")
                wait = min(query_duration(request, "wait", DEFAULT_BLOCKING_WAIT),
                           MAX_BLOCKING_WAIT)
                with trio.move_on_after(wait):
                    while agent.server.visible_index <= index:
                        await agent.server.changed.wait()
            response = await fn(request)
        except Unavailable as e:
            log.warning("%s %s: 503: %s", request.method, request.url.path, e)
            response = PlainTextResponse(f"service unavailable: {e}", status_code=503)
        except ApiError as e:
            response = PlainTextResponse(str(e), status_code=e.status)
            if e.status == 413:
                # What is left of a body past the drain bounds (read_body) is never read:
                # the connection must not be kept for another request.
                response.headers["Connection"] = "close"
        index = agent.server.visible_index if agent.ready.is_set() else 0
        response.headers["X-Nomad-Index"] = str(max(index, 1))
        response.headers["X-Nomad-LastContact"] = "0"
        response.headers["X-Nomad-KnownLeader"] = "true"
        return response

    return handle


#: A resource module's handler: the shared context, then the request.
Handler = Callable[[Context, Request], Awaitable[Response]]


@dataclass(frozen=True)
class FrontRoute:
    """A route matched before the agent's own (a yurt server's cluster answers)."""

    path: str
    endpoint: Callable[[Request], Awaitable[Response]]
    methods: tuple[str, ...]
    #: Whether `?index=` makes it a Nomad blocking query on the state index (the node RPC's
    #: allocation query blocks on its own index instead).
    blocking: bool = True
    #: Authenticated by something else than the token (the node RPC's SecretID).
    token_exempt: bool = False


#: What the agent puts around its routes, inside the token check: a client-only agent's
#: forward of the servers' routes (runtime/agent/clientmode.py `ClientModeMiddleware`).
Forward = Callable[[ASGIApp], ASGIApp]


def build_app(agent: AgentView, front: Sequence[FrontRoute] = (),
              forward: Forward | None = None, hosts: AllowedHosts | None = None) -> ASGIApp:
    """The API of `agent`: `front` routes first (a yurt server's, runtime/api/noderpc.py),
    then Nomad's; `forward` around them when given. Requests must name one of `hosts` (by
    default `localhost`, the loopback addresses and the bind address: origin.py)."""
    ctx = Context(agent)

    def h(fn: Handler) -> Callable[[Request], Awaitable[Response]]:
        return _handler(agent, partial(fn, ctx))

    def stream(fn: Handler) -> Callable[[Request], Awaitable[Response]]:
        # Not a blocking query: `index` means something else there.
        return _handler(agent, partial(fn, ctx), blocking=False)

    async def event_ws(websocket: WebSocket) -> None:
        # A plain function, so that Starlette calls it with the websocket (not as an ASGI app).
        await events.event_ws(ctx, websocket)

    JOB = "/v1/job/{job_id:path}"
    # Node pools before every /v1/node/{id}… (a yurt server's front routes have them too),
    # which would take "pools" and "pool" for node IDs.
    routes: list[BaseRoute] = [
        Route("/v1/node/pools", h(nodepools.pools), methods=["GET", "PUT", "POST"]),
        Route("/v1/node/pool/{name}", h(nodepools.pool_item),
              methods=["GET", "PUT", "POST", "DELETE"]),
        Route("/v1/node/pool/{name}/jobs", h(nodepools.pool_jobs), methods=["GET"]),
        Route("/v1/node/pool/{name}/nodes", h(nodepools.pool_nodes), methods=["GET"]),
    ]
    routes += [
        Route(f.path, _handler(agent, f.endpoint, blocking=f.blocking), methods=list(f.methods))
        for f in front]
    routes += [
        Route("/v1/jobs", h(jobs.jobs), methods=["GET", "PUT", "POST"]),
        Route("/v1/jobs/parse", h(jobs.parse), methods=["PUT", "POST"]),
        # A job ID may hold a `/` (a periodic or dispatched child: `<parent>/periodic-<unix>`):
        # the sub-resources first, the job itself last.
        Route(f"{JOB}/allocations", h(jobs.job_allocations), methods=["GET"]),
        Route(f"{JOB}/deployments", h(deployments.job_deployments), methods=["GET"]),
        Route(f"{JOB}/deployment", h(deployments.job_deployment), methods=["GET"]),
        Route(f"{JOB}/periodic/force", h(periodic_api.periodic_force), methods=["PUT", "POST"]),
        Route(f"{JOB}/dispatch", h(periodic_api.dispatch), methods=["PUT", "POST"]),
        Route(f"{JOB}/evaluations", h(evaluations.job_evaluations), methods=["GET"]),
        Route(f"{JOB}/evaluate", h(evaluations.job_evaluate), methods=["PUT", "POST"]),
        Route(f"{JOB}/versions", h(job_lifecycle.versions), methods=["GET"]),
        Route(f"{JOB}/submission", h(jobs.job_submission), methods=["GET"]),
        Route(f"{JOB}/revert", h(job_lifecycle.revert), methods=["PUT", "POST"]),
        Route(f"{JOB}/stable", h(job_lifecycle.stable), methods=["PUT", "POST"]),
        Route(f"{JOB}/summary", h(job_lifecycle.summary), methods=["GET"]),
        Route(f"{JOB}/plan", h(job_lifecycle.plan), methods=["PUT", "POST"]),
        Route(f"{JOB}/scale", h(job_lifecycle.scale), methods=["GET", "PUT", "POST"]),
        Route(f"{JOB}/actions", h(job_lifecycle.actions), methods=["GET"]),
        WebSocketRoute(f"{JOB}/action", partial(alloc_exec.job_action, ctx)),
        Route(f"{JOB}/action", h(alloc_exec.not_upgraded), methods=["GET"]),
        Route(JOB, h(jobs.job_item), methods=["GET", "PUT", "POST", "DELETE"]),
        Route("/v1/allocations", h(allocations.allocations), methods=["GET"]),
        Route("/v1/allocation/{id}", h(allocations.allocation), methods=["GET"]),
        Route("/v1/allocation/{id}/stop", h(allocations.allocation_stop), methods=["PUT", "POST"]),
        Route("/v1/client/allocation/{id}/stats", h(client.alloc_stats), methods=["GET"]),
        Route("/v1/client/allocation/{id}/restart", h(client.alloc_restart),
              methods=["PUT", "POST"]),
        Route("/v1/client/allocation/{id}/signal", h(client.alloc_signal),
              methods=["PUT", "POST"]),
        # GET changes state here: Nomad's handlers take any method (alloc_endpoint.go
        # `ClientGCRequest`, `allocGC`), and its api package and python-nomad send GET
        # (`client.gc_allocation`, `gc_all_allocations`). Browsers' cross-site GETs are
        # refused before (origin.py); HEAD is not taken (`_without_head`).
        Route("/v1/client/allocation/{id}/gc", h(client.alloc_gc), methods=["GET", "PUT"]),
        Route("/v1/client/gc", h(client.client_gc), methods=["GET", "PUT"]),
        Route("/v1/client/fs/logs/{alloc_id}", stream(logs.logs), methods=["GET"]),
        Route("/v1/client/fs/ls/{alloc_id}", stream(fs.fs_ls), methods=["GET"]),
        Route("/v1/client/fs/stat/{alloc_id}", stream(fs.fs_stat), methods=["GET"]),
        Route("/v1/client/fs/cat/{alloc_id}", stream(fs.fs_cat), methods=["GET"]),
        Route("/v1/client/fs/readat/{alloc_id}", stream(fs.fs_readat), methods=["GET"]),
        Route("/v1/client/fs/stream/{alloc_id}", stream(fs.fs_stream), methods=["GET"]),
        Route("/v1/client/stats", h(client.client_stats), methods=["GET"]),
        Route("/v1/nodes", h(nodes.nodes), methods=["GET"]),
        Route("/v1/node/{id}", h(nodes.node), methods=["GET"]),
        Route("/v1/node/{id}/allocations", h(nodes.node_allocations), methods=["GET"]),
        Route("/v1/node/{id}/eligibility", h(nodes.node_eligibility), methods=["PUT", "POST"]),
        Route("/v1/node/{id}/drain", h(nodes.node_drain), methods=["PUT", "POST"]),
        Route("/v1/node/{id}/purge", h(nodes.node_purge), methods=["PUT", "POST"]),
        Route("/v1/node/{id}/evaluate", h(nodes.node_evaluate), methods=["PUT", "POST"]),
        # The one answer that needs no loaded state: up as soon as the agent listens.
        Route("/v1/agent/self", _handler(agent, partial(agent_api.agent_self, ctx),
                                           needs_state=False),
              methods=["GET"]),
        Route("/v1/event/stream", stream(events.event_stream), methods=["GET"]),
        Route("/v1/status/leader", h(status.leader), methods=["GET"]),
        Route("/v1/status/peers", h(status.peers), methods=["GET"]),
        Route("/v1/regions", h(status.regions), methods=["GET"]),
        Route("/v1/agent/members", h(agent_api.agent_members), methods=["GET"]),
        # Up before the state is loaded, as `self`: the log of a start is worth following.
        Route("/v1/agent/monitor", _handler(agent, partial(agent_api.agent_monitor, ctx),
                                            blocking=False, needs_state=False),
              methods=["GET"]),
        Route("/v1/agent/servers", h(agent_api.agent_servers), methods=["GET", "PUT", "POST"]),
        Route("/v1/agent/join", h(agent_api.agent_join), methods=["PUT", "POST"]),
        Route("/v1/agent/force-leave", h(agent_api.agent_force_leave), methods=["PUT", "POST"]),
        Route("/v1/agent/health", _handler(agent, partial(agent_api.agent_health, ctx),
                                             needs_state=False), methods=["GET"]),
        Route("/v1/operator/raft/configuration", h(operator.raft_configuration),
              methods=["GET"]),
        Route("/v1/operator/scheduler/configuration", h(operator.scheduler_configuration),
              methods=["GET", "PUT", "POST"]),
        Route("/v1/operator/snapshot", h(operator.snapshot), methods=["GET", "PUT"]),
        Route("/v1/system/gc", h(operator.system_gc), methods=["PUT"]),
        Route("/v1/system/reconcile/summaries", h(operator.reconcile_summaries),
              methods=["PUT"]),
        Route("/v1/scaling/policies", h(scaling.scaling_policies), methods=["GET"]),
        Route("/v1/scaling/policy/{id}", h(scaling.scaling_policy), methods=["GET"]),
        Route("/v1/search", h(search.search), methods=["PUT", "POST"]),
        Route("/v1/search/fuzzy", h(search.fuzzy), methods=["PUT", "POST"]),
        Route("/v1/metrics", h(metrics.metrics), methods=["GET"]),
        Route("/v1/evaluations", h(evaluations.evaluations), methods=["GET", "DELETE"]),
        Route("/v1/deployments", h(deployments.deployments), methods=["GET"]),
        Route("/v1/deployment/allocations/{id}", h(deployments.deployment_allocations),
              methods=["GET"]),
        Route("/v1/deployment/fail/{id}", h(deployments.fail), methods=["PUT", "POST"]),
        Route("/v1/deployment/pause/{id}", h(deployments.pause), methods=["PUT", "POST"]),
        Route("/v1/deployment/promote/{id}", h(deployments.promote), methods=["PUT", "POST"]),
        Route("/v1/deployment/unblock/{id}", h(deployments.unblock), methods=["PUT", "POST"]),
        Route("/v1/deployment/allocation-health/{id}", h(deployments.allocation_health),
              methods=["PUT", "POST"]),
        Route("/v1/deployment/{id}", h(deployments.deployment), methods=["GET"]),
        Route("/v1/evaluation/{id}", h(evaluations.evaluation), methods=["GET"]),
        Route("/v1/evaluation/{id}/allocations", h(evaluations.evaluation_allocations),
              methods=["GET"]),
        Route("/v1/validate/job", h(job_lifecycle.validate), methods=["PUT", "POST"]),
        Route(identity_api.JWKS_PATH, h(identity_api.jwks), methods=["GET"]),
        WebSocketRoute("/v1/event/ws", event_ws),
        Route("/v1/namespaces", h(namespaces_api.namespaces), methods=["GET"]),
        Route("/v1/namespace", h(namespaces_api.namespace_create), methods=["PUT", "POST"]),
        Route("/v1/namespace/{name}", h(namespaces_api.namespace_item),
              methods=["GET", "PUT", "POST", "DELETE"]),
        Route("/v1/vars", h(variables_api.variables), methods=["GET"]),
        Route("/v1/volumes", h(host_volumes_api.volumes), methods=["GET"]),
        Route("/v1/volume/host/create", h(host_volumes_api.create), methods=["PUT", "POST"]),
        Route("/v1/volume/host/register", h(host_volumes_api.register),
              methods=["PUT", "POST"]),
        Route("/v1/volume/host/{id}", h(host_volumes_api.volume), methods=["GET", "DELETE"]),
        Route("/v1/services", h(services_api.services), methods=["GET"]),
        Route("/v1/service/{rest:path}", h(services_api.service),
              methods=["GET", "PUT", "POST", "DELETE"]),
        Route("/v1/client/allocation/{id}/checks", h(services_api.alloc_checks),
              methods=["GET"]),
        Route("/v1/var/{path:path}", h(variables_api.variable),
              methods=["GET", "PUT", "POST", "DELETE"]),
        WebSocketRoute("/v1/client/allocation/{id}/exec", partial(alloc_exec.alloc_exec, ctx)),
        Route("/v1/client/allocation/{id}/exec", h(alloc_exec.not_upgraded), methods=["GET"]),
    ]
    routes += acl_routes(h)
    _without_head(routes)
    routes += ui.ui_routes()
    _guard_routes(routes, agent, ctx)
    starlette = Starlette(routes=routes)
    starlette.router.redirect_slashes = False  # Nomad answers 404, never a redirect
    app: ASGIApp = StateGuardMiddleware(starlette, agent.state_failure)
    if forward is not None:
        app = forward(app)
    if hosts is None:
        hosts = AllowedHosts.of(agent.config.bind)
    return UnreadBodyMiddleware(CrossOriginMiddleware(app, hosts))


def _guard_routes(routes: Sequence[BaseRoute], agent: AgentView, ctx: Context) -> None:
    """Every route behind its declared need (authz_table.py); a route without one is a bug
    caught here, before the agent serves anything."""

    def object_namespace(kind: str, prefix: str) -> str | None:
        if kind == "deployment":
            found = deployments.find_deployment(agent.server_state, prefix) \
                if agent.server_state is not None else None
            return found.namespace if found is not None else None
        try:
            alloc_id = ctx.find_alloc_id(prefix)
        except ApiError:
            return None
        alloc = agent.server.allocs.get(alloc_id)
        if alloc is None:
            runner = ctx.runners().get(alloc_id)
            return runner.alloc.namespace if runner is not None else None
        return alloc.namespace

    for route in routes:
        if not isinstance(route, Route | WebSocketRoute):
            continue
        needs = NEEDS.get(route.path)
        if needs is None:
            raise RuntimeError(f"route {route.path} declares no ACL need "
                               "(runtime/api/authz_table.py)")
        route.app = guard(route.app, needs, agent.acl_resolver, object_namespace)


#: Methods that change state: a route taking one of them dispatches on the method.
CHANGING: Final = frozenset({"PUT", "POST", "DELETE", "PATCH"})
#: Routes whose GET changes state (Nomad's, see the route table).
CHANGING_GET: Final = frozenset({"/v1/client/allocation/{id}/gc", "/v1/client/gc"})


def _without_head(routes: Sequence[BaseRoute]) -> None:
    """No HEAD on a route that changes state: Starlette routes HEAD wherever GET is taken, and
    a handler that dispatches on the method (`if GET: read, else: write`) or changes state on
    GET would run a write for it. Nomad's method switches answer such a HEAD 405 (e.g.
    job_endpoint.go `JobsRequest`: GET, PUT/POST, else `ErrInvalidMethod`), and so does the
    router once HEAD is not among the route's methods; the GC routes, which take any method
    in Nomad, take their clients' GET and PUT only."""
    for route in routes:
        if isinstance(route, Route) and route.methods and (
                route.methods & CHANGING or route.path in CHANGING_GET):
            route.methods.discard("HEAD")


async def serve_api(agent: AgentView, stop: trio.Event, *, front: Sequence[FrontRoute] = (),
                    forward: Forward | None = None, allowed_hosts: Sequence[str] = (),
                    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve until `stop` is set; `task_status.started` gets `http://host:port`.
    `allowed_hosts`: names requests may carry in `Host` besides the agent's own
    (origin.py `own_hosts`): the config's, a cluster server's advertise address."""
    config = hypercorn.Config()
    config.bind = [f"{agent.config.bind}:{agent.config.port}"]
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = 5
    config.keep_alive_timeout = agent.config.http_idle_timeout
    # hypercorn closes a connection after 1,000 requests (saying so); Go's server, Nomad's,
    # never does, and polling clients would reconnect every few minutes for nothing.
    config.keep_alive_max_requests = 1 << 62

    async with trio.open_nursery() as nursery:
        hosts = await own_hosts(agent.config.bind, allowed_hosts)
        binds = await nursery.start(_serve, build_app(agent, front, forward, hosts), config,
                                    stop)
        task_status.started(binds[0])


async def _serve(app: ASGIApp, config: hypercorn.Config, stop: trio.Event, *,
                 task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
    await hypercorn.trio.serve(app, config, shutdown_trigger=stop.wait,  # type: ignore[arg-type]
                               task_status=task_status)
