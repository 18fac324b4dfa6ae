"""/v1/operator/raft/configuration, /v1/operator/scheduler/configuration, /v1/system/gc,
/v1/system/reconcile/summaries: operator endpoints, in Nomad's shapes.

- Raft: one voter, this agent, the leader (the embedded server has no peers).
- Scheduler configuration: GET answers `{SchedulerConfig, Index, …}`; PUT/POST takes Nomad's
  `SchedulerConfiguration` body, where an absent field is Go's zero value (so an absent
  preemption switch is off, as with Nomad), `?cas=N` applies it only if N is the current
  `ModifyIndex`, and answers `{Updated, Index}`. Stored (runtime/server/schedconfig.py) before
  it is answered, and read by placement from `LocalServer.scheduler_config`.
- System GC (PUT only, as Nomad): jobs that are over (stopped, or batch jobs whose allocations
  all finished) and whose allocations are all client-terminal are purged with their
  allocations. Reconcile summaries (PUT only): summaries are computed from the allocations
  when read, so there is nothing to reconcile; 200, as Nomad.
- Snapshot (`GET /v1/operator/snapshot`, management): the embedded server's state as one
  archive (runtime/lib/snapshot.py), taken under the server's change lock so the job state and
  the objects (variables, namespaces, ACL) are of one index; `?redact` leaves the root key out.
  `PUT` (Nomad's live restore, through raft) answers 405 (only GET is offered here): a
  running agent's state lives in its memory as much as in the files, so yurt restores
  offline, with the agent stopped (`yurt operator snapshot restore`,
  runtime/cli/operator_snapshot.py). A cluster's servers
  keep their state in etcd: 501 there too (etcd has its own snapshots).
- Scaling policies live in runtime/api/scaling.py.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import msgspec
import trio
from starlette.requests import Request
from starlette.responses import Response

from yurt.runtime.api.context import Context
from yurt.runtime.api.request import ApiError, body_json, json_response, query_cas
from yurt.runtime.api.status import server_address
from yurt.runtime.lib import snapshot as snapshot_archive
from yurt.runtime.server import schedconfig
from yurt.runtime.server.serial import serialized
from yurt.runtime.server.state.objects_sqlite import ObjectStore
from yurt.runtime.structs import is_client_terminal


async def raft_configuration(ctx: Context, request: Request) -> Response:
    address = server_address(ctx)
    return json_response({"Servers": [{
        "ID": ctx.agent.node.id, "Node": f"{ctx.agent.node.name}.global", "Address": address,
        "Leader": True, "Voter": True, "RaftProtocol": "3"}],
        "Index": ctx.server.visible_index})


def _config_path(ctx: Context) -> Path:
    return ctx.agent.config.data_dir / "server" / schedconfig.FILE_NAME


async def scheduler_configuration(ctx: Context, request: Request) -> Response:
    server = ctx.server
    if request.method == "GET":
        return json_response({"SchedulerConfig": server.scheduler_config,
                              "Index": server.scheduler_config.modify_index,
                              "LastContact": 0, "KnownLeader": True, "NextToken": ""})
    cas = query_cas(request, "Error parsing cas value", empty_is_absent=False)
    body = await body_json(request)
    zero: dict[str, Any] = {  # Go's zero values for what the body leaves out
        "SchedulerAlgorithm": "", "MemoryOversubscriptionEnabled": False,
        "RejectJobRegistration": False, "PauseEvalBroker": False}
    preemption = body.get("PreemptionConfig") or {}
    if not isinstance(preemption, dict):
        raise ApiError(400, "Error parsing scheduler config: PreemptionConfig must be an "
                            "object")
    fields = {**zero, **{k: v for k, v in body.items() if k in zero and v is not None},
              "PreemptionConfig": {
                  "SystemSchedulerEnabled": False, "SysBatchSchedulerEnabled": False,
                  "BatchSchedulerEnabled": False, "ServiceSchedulerEnabled": False,
                  **{k: v for k, v in preemption.items() if v is not None}}}
    try:
        config = msgspec.convert(fields, schedconfig.SchedulerConfiguration)
    except msgspec.ValidationError as e:
        raise ApiError(400, f"Error parsing scheduler config: {e}") from None
    config.scheduler_algorithm = config.scheduler_algorithm or "binpack"
    if why := schedconfig.validate(config):
        raise ApiError(400, why)
    set_in_cluster = getattr(server, "set_scheduler_config", None)
    if set_in_cluster is not None:  # a cluster server's: in etcd (runtime/server/cluster/server.py)
        updated, index = await set_in_cluster(config, cas)
        return json_response({"Updated": updated, "Index": index})
    # Check, save and assign as one step: another PUT saving meanwhile would pass the same
    # check-and-set (Nomad's state store applies one write at a time).
    async with serialized(server, "scheduler-config"):
        current = server.scheduler_config
        if cas is not None and cas != current.modify_index:
            return json_response({"Updated": False, "Index": server.visible_index})
        # Preemption switched on may let a blocked evaluation place: retried after.
        async with server.change(capacity=True) as index:
            config.create_index = current.create_index or index
            config.modify_index = index
            await schedconfig.save(_config_path(ctx), config)
            server.scheduler_config = config
    return json_response({"Updated": True, "Index": index})


async def system_gc(ctx: Context, request: Request) -> Response:
    server = ctx.server
    for job_id, job in list(server.jobs.items()):
        allocs = server.job_allocs(job_id)
        over = job.stop or (job.type == "batch" and bool(allocs) and all(
            is_client_terminal(a.client_status) for a in allocs))
        if over and all(is_client_terminal(a.client_status) or (a.client_status == "pending"
                        and a.is_desired_stopped()) for a in allocs):
            with contextlib.suppress(KeyError):  # another collection was quicker
                await server.stop_job(job_id, purge=True)
    return Response(status_code=200)


async def reconcile_summaries(ctx: Context, request: Request) -> Response:
    return Response(status_code=200)


async def snapshot(ctx: Context, request: Request) -> Response:
    if request.method != "GET":
        raise ApiError(405, "a live restore is not offered: stop the agent, then run "
                            "`yurt operator snapshot restore -data-dir DIR FILE`")
    if not isinstance(await ctx.agent.object_store(), ObjectStore):
        raise ApiError(501, "a cluster's state lives in etcd: take an etcd snapshot "
                            "(`etcdctl snapshot save`) instead")
    redact = "redact" in request.query_params
    server_dir = ctx.agent.config.data_dir / "server"
    # Under the change lock: no job, allocation or object write lands between the copies.
    async with ctx.server.change() as index:
        data = await trio.to_thread.run_sync(
            lambda: snapshot_archive.create(server_dir, index, redact=redact))
    return Response(data, media_type="application/octet-stream",
                    headers={"X-Nomad-Index": str(index)})
