"""/v1/services, /v1/service/<name>[/<id>] and /v1/client/allocation/<id>/checks: the
Nomad-provider service catalogue and an allocation's check results.

Shapes, statuses and texts are Nomad's (command/agent/service_registration_endpoint.go,
nomad/service_registration_endpoint.go): the list is `[{Namespace, Services: [{ServiceName,
Tags}]}]` (tags the union of the registrations'; `?namespace=*` for every namespace), a
service is its registrations ordered by ID (`[]` when none), `?choose=<n>|<key>` picks a
stable subset by rendezvous hashing (400 "failed to choose services: …" when malformed), a
delete of an unknown ID is the RPC error "service registration not found" (500, as Nomad's
agent answers RPC errors), a wrong method 405 "Invalid method", an empty name or ID 400.
`?tag=<t>` (repeatable) keeps registrations carrying every tag given: a yurt addition beside
Nomad's `?filter=`. A service's registrations take Nomad's `?filter=`, `?per_page=` and
`?next_token=` ("<namespace>.<ID>" tokens, api/paging.py); `?choose` picks within the page.

Reading takes read-job in the namespace (with `*`, the list keeps the namespaces the token
may read), a delete delete-service-registration or submit-job, and deletes only a registration
of the namespace asked (authz_table.py; Nomad's `DeleteByID` looks it up there).

Check results are Nomad's `map[checkID]QueryResult`, from the allocation's runner.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from yurt.runtime.api.authz import namespace_visible
from yurt.runtime.api.context import Context
from yurt.runtime.api.namespaces import request_namespace
from yurt.runtime.api.paging import NEXT_TOKEN_HEADER, by_namespace_id, page
from yurt.runtime.api.request import ApiError, json_response
from yurt.runtime.server.namespaces import ALL_NAMESPACES
from yurt.runtime.server.services import choose
from yurt.runtime.structs.checks import CheckQueryResult


async def services(ctx: Context, request: Request) -> Response:
    namespace = request_namespace(request)
    listing = ctx.server.services.listing(None if namespace == ALL_NAMESPACES else namespace)
    # nomad/service_registration_endpoint.go `listAllServiceRegistrations`: with `*`, the
    # namespaces the token may read jobs in (one namespace was checked by the route's need).
    return json_response([entry for entry in listing
                          if namespace_visible(request, str(entry["Namespace"]), "read-job")])


async def service(ctx: Context, request: Request) -> Response:
    parts = request.path_params["rest"].split("/")
    if len(parts) == 1:
        if request.method != "GET":
            raise ApiError(405, "Invalid method")
        if not parts[0]:
            raise ApiError(400, "missing service name")
        return _get(ctx, request, parts[0])
    if len(parts) == 2:
        if request.method != "DELETE":
            raise ApiError(405, "Invalid method")
        if not parts[1]:
            raise ApiError(400, "missing service id")
        # nomad/service_registration_endpoint.go `DeleteByID`: the registration of the
        # request's namespace (whose token the route's need checked), none of another.
        namespace = request_namespace(request)
        if not any(r.id == parts[1] for r in await ctx.server.services.query(namespace, None)):
            raise ApiError(500, "service registration not found")
        try:
            await ctx.server.services.delete(parts[1])
        except KeyError:
            raise ApiError(500, "service registration not found") from None
        return Response(b"null", media_type="application/json")
    raise ApiError(400, "invalid URI")


def _get(ctx: Context, request: Request, name: str) -> Response:
    regs = ctx.server.services.registrations(request_namespace(request), name)
    wanted = set(request.query_params.getlist("tag"))
    if wanted:
        regs = [r for r in regs if wanted <= set(r.tags)]
    # nomad/service_registration_endpoint.go `GetService`: a page ("<namespace>.<ID>"
    # tokens), then `?choose` picks among it.
    result = page(request, regs, by_namespace_id(lambda r: r.namespace, lambda r: r.id))
    regs = result.items
    parameter = request.query_params.get("choose", "")
    if parameter:
        try:
            regs = choose(regs, parameter)
        except ValueError as e:
            raise ApiError(400, f"failed to choose services: {e}") from None
    response = json_response(regs)
    if result.next_token:
        response.headers[NEXT_TOKEN_HEADER] = result.next_token
    return response


def result_json(r: CheckQueryResult) -> dict[str, object]:
    """Nomad's JSON of a result: every field, but `StatusCode` and `Task` only when set."""
    out: dict[str, object] = {"ID": r.id, "Mode": r.mode, "Status": r.status}
    if r.status_code:
        out["StatusCode"] = r.status_code
    out.update({"Output": r.output, "Timestamp": r.timestamp, "Group": r.group})
    if r.task:
        out["Task"] = r.task
    out.update({"Service": r.service, "Check": r.check})
    return out


async def alloc_checks(ctx: Context, request: Request) -> Response:
    runner = await ctx.restored_runner(ctx.find_alloc_id(request.path_params["id"]))
    return json_response({check_id: result_json(r)
                          for check_id, r in runner.check_results.results().items()})
