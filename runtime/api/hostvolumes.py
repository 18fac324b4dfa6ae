"""/v1/volume/host/… and /v1/volumes?type=host: Nomad 1.10's dynamic host volumes
(command/agent/host_volume_endpoint.go, volumes_endpoint.go).

Shapes and statuses are Nomad's: a create or register answers `{"Volume", "Warnings",
"Index"}`; a read is the `HostVolume` with its `Allocations` (the live allocations whose group
asks for the volume by name, in its namespace), 404 `volume not found`; a delete answers
`{"Index"}` (`?force=true` drops a volume of another node from the book, as Nomad's for an
unknown node; the claims are counted under the book's lock); a list is
`HostVolumeStub`s, `?type=` absent answering `[]` and an unknown type 404. The server's
refusals keep Nomad's texts; their statuses are yurt's, as everywhere in its API (Nomad answers
every RPC error 500): 400 what the request is to blame for (a body that does not decode, an
invalid volume), 404 an unknown volume, 409 what the state refuses (no node can take it, in
use), 500 only a node or plugin failing (server/hostvolumes.py `VolumeRefused`). A
`DELETE /v1/volume/host/create` (or `register`) reaches the volume route and is 405, as the
router answers every other method those two paths do not take.

ACL (nomad/host_volume_endpoint.go): create needs host-volume-create, register
host-volume-register, in the volume's namespace (the body's, else `?namespace=`: the route
checks the request's, the handler the body's when it names another); read and list
host-volume-read, delete host-volume-delete, in the request's namespace. A list with `*`
shows the namespaces the token may read.

The volumes are the embedded server's (server/hostvolumes.py); a `yurt server` of a cluster
has none and answers 501.
"""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from yurt.runtime.api.allocations import alloc_stub
from yurt.runtime.api.authz import namespace_visible, require_namespace
from yurt.runtime.api.context import Context
from yurt.runtime.api.namespaces import request_namespace
from yurt.runtime.api.request import ApiError, body_json, json_response
from yurt.runtime.server.hostvolumes import HostVolumeBook, VolumeRefused
from yurt.runtime.server.namespaces import ALL_NAMESPACES
from yurt.runtime.structs import Allocation, is_client_terminal
from yurt.runtime.structs.hostvolume import HostVolume, stub
from yurt.runtime.structs.hostvolumes import alloc_suffix
from yurt.runtime.structs.volume import VOLUME_TYPE_HOST

NOT_FOUND = "Resource not found"  # command/agent/http.go `resourceNotFoundErr`
#: Go's strconv.ParseBool, which command/agent/host_volume_endpoint.go `deleteVolume` uses
#: for `?force=`.
_TRUE = frozenset(("1", "t", "T", "true", "TRUE", "True"))
_BOOLS = _TRUE | {"", "0", "f", "F", "false", "FALSE", "False"}


def _book(ctx: Context) -> HostVolumeBook:
    server = ctx.agent.server_state
    book = getattr(server, "host_volumes", None) if server is not None else None
    if not isinstance(book, HostVolumeBook):
        raise ApiError(501, "dynamic host volumes are kept by a yurt agent's embedded server; "
                            "a cluster of yurt servers has none")
    return book


def claims(vol: HostVolume, allocs: list[Allocation]) -> list[Allocation]:
    """The allocations on the volume's node and in its namespace, not client-terminal (one
    being stopped still has it mounted), whose group asks for it by name
    (nomad/state/state_store_host_volumes.go `HostVolumeByID` with its allocations;
    structs/host_volumes.go `MatchesRequestSource`, `per_alloc` included)."""
    found = []
    for alloc in allocs:
        if is_client_terminal(alloc.client_status) or alloc.node_id != vol.node_id \
                or alloc.namespace != vol.namespace or alloc.job is None:
            continue
        group = next((g for g in alloc.job.task_groups if g.name == alloc.task_group), None)
        for req in (group.volumes.values() if group is not None else ()):
            source = req.source + alloc_suffix(alloc.name) if req.per_alloc else req.source
            if req.type == VOLUME_TYPE_HOST and source == vol.name:
                found.append(alloc)
                break
    return found


def _decode(body: dict[str, Any]) -> HostVolume:
    raw = body.get("Volume")
    if raw is None:
        raise ApiError(400, "missing volume definition")
    try:
        return msgspec.convert(raw, HostVolume)
    except msgspec.ValidationError as e:
        raise ApiError(400, f"json: cannot unmarshal Volume: {e}") from e


async def _write(ctx: Context, request: Request, op: str) -> Response:
    book = _book(ctx)
    vol = _decode(await body_json(request))
    if not vol.namespace:
        vol = msgspec.structs.replace(vol, namespace=request_namespace(request))
    if vol.namespace == ALL_NAMESPACES:
        raise ApiError(400, 'can not target wildcard ("*")namespace')
    require_namespace(request, vol.namespace, op)
    write = book.create if op == "host-volume-create" else book.register
    try:
        stored = await write(vol)
    except VolumeRefused as e:
        raise ApiError(e.status, e.message) from e
    return json_response({"Volume": stored, "Warnings": "", "Index": stored.modify_index})


async def create(ctx: Context, request: Request) -> Response:
    return await _write(ctx, request, "host-volume-create")


async def register(ctx: Context, request: Request) -> Response:
    return await _write(ctx, request, "host-volume-register")


async def volume(ctx: Context, request: Request) -> Response:
    vol_id = request.path_params["id"]
    if vol_id in ("create", "register"):  # their own routes take PUT and POST only
        raise ApiError(405, "Method Not Allowed")
    book = _book(ctx)
    namespace = request_namespace(request)
    if request.method == "DELETE":
        force = request.query_params.get("force", "")
        if force not in _BOOLS:
            raise ApiError(400, "invalid force value")

        def claimed(vol: HostVolume) -> list[str]:  # asked under the book's lock
            return [a.id for a in claims(vol, list(ctx.agent.server.allocs.values()))]

        try:
            index = await book.delete(namespace, vol_id, claimed, force=force in _TRUE)
        except VolumeRefused as e:
            raise ApiError(e.status, e.message) from e
        return json_response({"Index": index})
    vol = book.get(namespace, vol_id)
    if vol is None:
        raise ApiError(404, "volume not found")
    live = claims(vol, list(ctx.agent.server.allocs.values()))
    shown = msgspec.to_builtins(vol)
    shown["Allocations"] = [alloc_stub(a) for a in live]
    return json_response(shown)


async def volumes(ctx: Context, request: Request) -> Response:
    kind = request.query_params.getlist("type")
    if not kind:
        return json_response([])
    if kind[0] == "csi":
        return json_response([])  # yurt has no CSI plugins, hence no CSI volumes
    if kind[0] != "host":
        raise ApiError(404, NOT_FOUND)
    book = _book(ctx)
    query = request.query_params
    listed = [stub(v) for v in book.matching(request_namespace(request),
                                             query.get("prefix", ""), query.get("node_id", ""),
                                             query.get("node_pool", ""))
              if namespace_visible(request, v.namespace, "host-volume-read")]
    return json_response(listed)
