"""/v1/job/<id>/periodic/force and /v1/job/<id>/dispatch: launching children of template jobs.

`periodic/force` launches a periodic job's child now, whatever its schedule and
prohibit_overlap (Nomad's `Periodic.Force`): `{EvalID, EvalCreateIndex, Index}`; a force in
the second of an earlier launch finds that child unchanged and answers an empty `EvalID`.
`dispatch` runs a parameterized job with a payload (base64 in JSON) and meta (Nomad's
`Job.Dispatch`): `{DispatchedJobID, EvalID, EvalCreateIndex, JobCreateIndex, Index}`; a
dispatched child that is itself periodic gets no evaluation (empty `EvalID`), as in Nomad, and
a request repeating an `IdempotencyToken` answers the child that token already made.

Status codes: an unknown job is 404; a request Nomad refuses is 400 with Nomad's message
(Nomad answers these RPC errors with a 500; a client error is not a server fault here, and no
malformed input may produce a 5xx).
"""

from __future__ import annotations

import base64
import binascii
import time
from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import Response

from yurt.runtime.api.context import Context
from yurt.runtime.api.namespaces import job_in
from yurt.runtime.api.request import ApiError, body_field, body_json, json_response
from yurt.runtime.server.dispatch import DispatchError, check_dispatch, dispatched_child
from yurt.runtime.server.periodic_dispatcher import launch
from yurt.runtime.server.serial import serialized


async def periodic_force(ctx: Context, request: Request) -> Response:
    parent = job_in(ctx, request, request.path_params["job_id"])
    now = datetime.fromtimestamp(int(time.time()), UTC)
    try:
        result = await launch(ctx.server, parent, now)
    except DispatchError as e:
        raise ApiError(400, str(e)) from None
    if result.unchanged:
        # A second force in the same second names the child the first one made (Nomad's
        # child IDs have a one-second resolution). Nomad registers that child again with a
        # fresh evaluation; here nothing was evaluated, and no evaluation is named that
        # does not exist.
        return json_response({"EvalID": "", "EvalCreateIndex": 0, "Index": result.index})
    return json_response({"EvalID": result.eval_id, "EvalCreateIndex": result.index,
                          "Index": result.index})


def _payload(body: dict[str, object]) -> bytes:
    value = body_field(body, "Payload", str, "")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(400, '"Payload" must be base64 (standard alphabet, padded)') from None


async def dispatch(ctx: Context, request: Request) -> Response:
    job_id = request.path_params["job_id"]
    body = await body_json(request)
    body_id = body_field(body, "JobID", str, "")
    if body_id and body_id != job_id:
        raise ApiError(400, "Job ID does not match")
    payload = _payload(body)
    meta = body_field(body, "Meta", dict, {})
    if not all(isinstance(v, str) for v in meta.values()):
        raise ApiError(400, '"Meta" must be an object of strings')
    priority = body_field(body, "Priority", int, 0)
    token = body_field(body, "IdempotencyToken", str, "")
    prefix = body_field(body, "IdPrefixTemplate", str, "")
    if any(c.isspace() or c in "/\0" for c in prefix) or len(prefix) > 64:
        raise ApiError(400, '"IdPrefixTemplate" must be at most 64 characters, without "/" '
                            "or white space")
    server = ctx.server
    parent = server.jobs.get(job_id)
    if parent is None:
        raise ApiError(404, "parameterized job not found")
    try:
        check_dispatch(parent, payload, meta, priority or parent.priority)
    except DispatchError as e:
        raise ApiError(400, str(e)) from None
    # The token's lookup and the child's registration as one step: concurrent retries of
    # one request must find the child the first of them made, not each make their own.
    async with serialized(server, f"dispatch/{parent.namespace}/{parent.id}"):
        if token:
            # A retried request: the child this token made, while it is not purged (Nomad).
            for job in server.jobs.values():
                if job.parent_id == parent.id and job.dispatch_idempotency_token == token:
                    return json_response({
                        "DispatchedJobID": job.id, "EvalID": "", "EvalCreateIndex": 0,
                        "JobCreateIndex": job.create_index, "Index": job.modify_index})
        child = dispatched_child(parent, payload, meta, priority or parent.priority,
                                 time.time(), prefix)
        child.dispatch_idempotency_token = token
        result = await server.register_job(child)
    created = server.jobs[child.id].create_index
    periodic = child.periodic is not None
    return json_response({"DispatchedJobID": child.id,
                          "EvalID": "" if periodic else result.eval_id,
                          "EvalCreateIndex": 0 if periodic else result.index,
                          "JobCreateIndex": created, "Index": created})
