"""/v1/scaling/policies and /v1/scaling/policy/:id: the groups' `scaling` blocks, in Nomad's
shapes (nomad/scaling_endpoint.go `ListPolicies`, `GetPolicy`; structs.go `ScalingPolicy`,
`ScalingPolicyListStub`).

A policy is read from its job, not stored apart: its target is the job's namespace, ID and
group, and its ID a UUID derived from that target (uuid5), so it stays the same across the
job's versions, as Nomad keeps a policy's ID while its target lives. Its indexes are the job's.
A stopped job's policies stay listed, as Nomad's do until the job is purged.

Invariants: a list shows only the namespaces the token may list policies in
(list-scaling-policies, or list-jobs and read-job); a policy of another namespace than the
request's is a 404, as a missing one is.
"""

from __future__ import annotations

import uuid
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response

from yurt.runtime.api.authz import namespace_visible
from yurt.runtime.api.context import Context
from yurt.runtime.api.namespaces import in_namespace, request_namespace
from yurt.runtime.api.request import ApiError, json_response
from yurt.runtime.structs import Job, TaskGroup

#: The namespace every policy ID is derived in (a fixed, random UUID).
_POLICY_NAMESPACE: Final = uuid.UUID("6f1d7c1e-3b7a-4d2e-9a51-2c0f8e4b9d13")


def policy_id(job: Job, group: TaskGroup) -> str:
    """The ID of `group`'s policy: stable for its target."""
    return str(uuid.uuid5(_POLICY_NAMESPACE, f"{job.namespace}\0{job.id}\0{group.name}"))


def _target(job: Job, group: TaskGroup) -> dict[str, str]:
    return {"Namespace": job.namespace, "Job": job.id, "Group": group.name}


def _policies(ctx: Context) -> list[tuple[Job, TaskGroup]]:
    return [(job, group) for job in ctx.server.jobs.values() for group in job.task_groups
            if group.scaling is not None]


def _full(job: Job, group: TaskGroup) -> dict[str, Any]:
    policy = group.scaling
    assert policy is not None
    return {"ID": policy_id(job, group), "Type": policy.type, "Namespace": job.namespace,
            "Target": _target(job, group), "Policy": policy.policy, "Min": policy.min,
            "Max": policy.max, "Enabled": policy.enabled, "CreateIndex": job.create_index,
            "ModifyIndex": job.modify_index}


def _listable(request: Request, namespace: str) -> bool:
    return in_namespace(request, namespace, "list-scaling-policies") or (
        in_namespace(request, namespace, "list-jobs")
        and namespace_visible(request, namespace, "read-job"))


async def scaling_policies(ctx: Context, request: Request) -> Response:
    """`?job=` keeps one job's policies, `?type=` one type (Nomad's list filters)."""
    job_id = request.query_params.get("job", "")
    kind = request.query_params.get("type", "")
    stubs: list[dict[str, Any]] = []
    for job, group in _policies(ctx):
        assert group.scaling is not None
        if (job_id and job.id != job_id) or (kind and group.scaling.type != kind):
            continue
        if not _listable(request, job.namespace):
            continue
        stubs.append({"ID": policy_id(job, group), "Enabled": group.scaling.enabled,
                      "Type": group.scaling.type, "Target": _target(job, group),
                      "CreateIndex": job.create_index, "ModifyIndex": job.modify_index})
    stubs.sort(key=lambda s: str(s["ID"]))
    return json_response(stubs)


async def scaling_policy(ctx: Context, request: Request) -> Response:
    wanted = request.path_params["id"]
    for job, group in _policies(ctx):
        if policy_id(job, group) == wanted and job.namespace == request_namespace(request):
            return json_response(_full(job, group))
    raise ApiError(404, "policy not found")
