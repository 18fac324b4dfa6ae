"""`/v1/deployments`, `/v1/deployment/<id>`, `/v1/job/<id>/deployment[s]`: what yurt has.

yurt does not roll jobs out through deployments yet (the `update` stanza is refused by the
jobspec), so no job ever has one: the lists are empty, a job's latest deployment is `null`,
and a deployment ID is unknown, exactly as Nomad answers for jobs without an `update` block
(batch jobs, say). Clients that look for deployments (nomad-tools' job watcher, python-nomad)
then go on instead of taking a 404 for a missing job.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from yurt.runtime.api.context import Context
from yurt.runtime.api.request import ApiError, json_response


async def deployments(ctx: Context, request: Request) -> Response:
    return json_response([])


async def deployment(ctx: Context, request: Request) -> Response:
    raise ApiError(404, "deployment not found")


async def job_deployments(ctx: Context, request: Request) -> Response:
    # Nomad's Job.Deployments does not look the job up: any ID has none.
    return json_response([])


async def job_deployment(ctx: Context, request: Request) -> Response:
    return json_response(None)
