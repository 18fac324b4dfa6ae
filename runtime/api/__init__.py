"""The HTTP API: Nomad's paths and JSON shapes, served by hypercorn's trio worker.

Starlette routes requests to small handlers that call the agent's parts (server, client,
garbage collector, event broker); every body is encoded with msgspec in Nomad's field names, so
Nomad API clients (python-nomad, `curl` recipes) work unchanged. Errors are plain text with
Nomad's status codes: 400 bad parameter, 403 missing/wrong token, 404 unknown job/alloc/node,
405 wrong method (Starlette's router), 413 body too large, 500 anything else (a bug).

Streams never block the agent: the event stream and websocket read from a per-subscriber
bounded buffer (overflow drops the oldest and marks the next record with `"Lost": n`), and send
a heartbeat `{}` when idle; log streams read files in worker threads. Event records are encoded
once for all subscribers, and a stream sends what has piled up in one chunk (eventstream.py).

The server listens on 127.0.0.1 by default. With a token configured, a middleware answers 403
to every request without `X-Nomad-Token: <token>` before any handler runs. The header is the only
place for the token: a `?token=` query parameter ends up in access logs, proxies and shell
histories, so it is not looked at.

Every request body is untrusted and bounded before it costs anything: its size while it is read
(413 past `MAX_BODY`), its nesting and value count right after msgspec decodes it (the jobspec's
limits), and job parsing, plain CPU-bound Python, runs in a worker thread behind a limiter so
that a large-but-allowed job never stalls the event loop. Every malformed input is a 4xx with a
message; a 5xx means a bug in yurt.
"""

from __future__ import annotations

import base64
import hmac
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final

import hypercorn
import hypercorn.trio
import msgspec
import trio
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect

from yurt.runtime import __version__
from yurt.runtime.durations import parse_duration
from yurt.runtime.errors import JobSpecError, TaskNotRunningError, YurtError
from yurt.runtime.eventstream import as_line, as_text, topic_filter
from yurt.runtime.jobspec import MAX_JOB_CHARS, json_value_trouble, parse_job
from yurt.runtime.procfs import stat_fields
from yurt.runtime.restore import RESTORING
from yurt.runtime.signames import parse_signal_name
from yurt.runtime.stateguard import StateGuardMiddleware
from yurt.runtime.structs import Allocation, Job

if TYPE_CHECKING:
    from yurt.runtime.agent import Agent
    from yurt.runtime.allocrunner.runner import AllocRunner

# The alloc runner and the log reader are imported where they are used: the agent binds this
# API before it loads them (and its state), so that a restarted agent answers at once.

HEARTBEAT: Final = 30.0
#: After an event stream sends, it lets records pile up this long before it wakes again: a
#: subscriber then costs the agent a few wake-ups a second, whatever the event rate (200
#: subscribers each woken per record cost most of a core), for at most this much more lag.
STREAM_COALESCE: Final = 0.1
LOG_HEARTBEAT: Final = 1.0
_encoder = msgspec.json.Encoder()


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def json_response(value: object, status: int = 200) -> Response:
    return Response(_encoder.encode(value), status_code=status,
                    media_type="application/json")


#: Largest request body: a job of `MAX_JOB_CHARS` fits, with its JSON escapes.
MAX_BODY: Final = 2 * MAX_JOB_CHARS
#: Largest `JobHCL` /v1/jobs/parse takes. lark reads HCL at about 10 µs a character, so this
#: bounds one parse to half a second (in a worker thread); real jobs are a few KiB.
MAX_HCL: Final = 48 * 1024
#: Job parses at once: each holds a worker thread and the GIL most of its time.
PARSES_AT_ONCE: Final = 2


async def read_body(request: Request, limit: int = MAX_BODY) -> bytes:
    """The request body, refused with 413 as soon as it is known to exceed `limit` bytes.

    A refused body is still read and dropped, up to `DRAIN_BYTES` and `DRAIN_SECONDS`: the
    server hands the body to the app through a small queue, and a body nobody reads leaves
    the connection waiting on that queue while the client waits to finish sending, so neither
    would ever see the 413. Past those bounds the connection is closed.
    """
    too_large = ApiError(413, f"request body is larger than {limit} bytes")
    declared = request.headers.get("content-length", "")
    parts: list[bytes] = []
    size = 0
    try:
        if declared.isdigit() and int(declared) > limit:
            raise too_large
        async for part in request.stream():
            size += len(part)
            if size > limit:
                raise too_large
            parts.append(part)
    except ClientDisconnect:
        raise ApiError(400, "the client went away while sending the body") from None
    except ApiError:
        parts.clear()
        await _drop_body(request)
        raise
    return b"".join(parts)


#: How much of a refused body is read and dropped before the connection is closed instead.
DRAIN_BYTES: Final = 256 << 20
DRAIN_SECONDS: Final = 2.0


async def _drop_body(request: Request) -> None:
    """Read what is left of the body straight from the ASGI channel (the request's stream
    may be half consumed, and Starlette allows one iteration only)."""
    dropped = 0
    with trio.move_on_after(DRAIN_SECONDS):
        while dropped <= DRAIN_BYTES:
            message = await request.receive()
            if message["type"] != "http.request":
                return  # the client went away
            dropped += len(message.get("body", b""))
            if not message.get("more_body", False):
                return


async def body_json(request: Request) -> dict[str, Any]:
    """The request body as a JSON object ({} when empty); anything else is a 4xx."""
    raw = await read_body(request)
    if not raw:
        return {}
    try:
        body = msgspec.json.decode(raw)
    except msgspec.DecodeError as e:
        raise ApiError(400, f"failed to parse request body: {e}") from None
    except RecursionError:
        raise ApiError(400, "failed to parse request body: nested too deeply") from None
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    trouble = json_value_trouble(body)
    if trouble is not None:
        path, why = trouble
        where = "/".join(str(p) for p in path[:8])
        raise ApiError(400, f"failed to parse request body: {why}"
                            + (f" (at {where})" if where else ""))
    return body


def body_field(body: dict[str, Any], name: str, kind: type[Any], default: Any) -> Any:
    """`body[name]` when it has the JSON type `kind`; absent or null: `default`; else 400."""
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        want = {str: "a string", bool: "true or false", dict: "an object"}.get(kind, "valid")
        raise ApiError(400, f'"{name}" must be {want}')
    return value


async def parse_job_off_loop(text: str, limiter: trio.CapacityLimiter, *, filename: str,
                             format: Any = None) -> Job:
    """`parse_job` in a worker thread, so a large job never stalls the event loop; its
    `JobSpecError` as a 400."""
    try:
        return await trio.to_thread.run_sync(
            partial(parse_job, text, filename=filename, format=format), limiter=limiter)
    except JobSpecError as e:
        raise ApiError(400, e.render()) from None


_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE: Final = frozenset({"", "0", "f", "F", "FALSE", "false", "False"})


def query_bool(request: Request, name: str) -> bool:
    """Go's `strconv.ParseBool`, as Nomad parses boolean query parameters."""
    value = request.query_params.get(name, "")
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ApiError(400, f'failed to parse value of "{name}" as a boolean: {value!r}')


def query_duration(request: Request, name: str, default: float) -> float:
    value = request.query_params.get(name)
    if value is None:
        return default
    try:
        seconds = parse_duration(value) / 1e9 if not value.replace(".", "").isdigit() else (
            float(value))
    except ValueError:
        raise ApiError(400, f'failed to parse value of "{name}" as a duration: {value!r}'
                       ) from None
    if seconds <= 0:
        raise ApiError(400, f'"{name}" must be positive, got {value!r}')
    return seconds


def query_int(request: Request, name: str) -> int:
    value = request.query_params.get(name, "0")
    try:
        return int(value)
    except ValueError:
        raise ApiError(400, f'failed to parse value of "{name}" as an integer: {value!r}'
                       ) from None


# --------------------------------------------------------------------------- list stubs


def job_stub(job: Job) -> dict[str, Any]:
    return {"ID": job.id, "ParentID": "", "Name": job.name, "Namespace": job.namespace,
            "Datacenters": job.datacenters, "Type": job.type, "Priority": job.priority,
            "Periodic": False, "ParameterizedJob": False, "Stop": job.stop,
            "Status": job.status, "StatusDescription": job.status_description,
            "CreateIndex": job.create_index, "ModifyIndex": job.modify_index,
            "JobModifyIndex": job.job_modify_index, "SubmitTime": job.submit_time}


def alloc_stub(alloc: Allocation) -> dict[str, Any]:
    job = alloc.job
    return {"ID": alloc.id, "EvalID": alloc.eval_id, "Name": alloc.name,
            "Namespace": alloc.namespace, "NodeID": alloc.node_id, "NodeName": alloc.node_name,
            "JobID": alloc.job_id, "JobType": job.type if job else "",
            "JobVersion": job.version if job else 0, "TaskGroup": alloc.task_group,
            "DesiredStatus": alloc.desired_status,
            "DesiredDescription": alloc.desired_description,
            "ClientStatus": alloc.client_status, "ClientDescription": alloc.client_description,
            "TaskStates": alloc.task_states, "FollowupEvalID": "",
            "PreviousAllocation": alloc.previous_allocation,
            "NextAllocation": alloc.next_allocation,
            "PreemptedAllocations": alloc.preempted_allocations,
            "PreemptedByAllocation": alloc.preempted_by_allocation,
            "CreateIndex": alloc.create_index, "ModifyIndex": alloc.modify_index,
            "AllocModifyIndex": alloc.alloc_modify_index, "CreateTime": alloc.create_time,
            "ModifyTime": alloc.modify_time}


# --------------------------------------------------------------------------- the app


class Api:
    """Handlers bound to one agent."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.parse_limiter = trio.CapacityLimiter(PARSES_AT_ONCE)

    # ------------------------------------------------------------------ lookups

    def alloc_view(self, alloc_id: str) -> Allocation:
        """The server copy with the client's live view laid over it."""
        server = self.agent.server.allocs.get(alloc_id)
        runner = self.agent.client.runners.get(alloc_id)
        if server is None and runner is None:
            raise ApiError(404, "alloc not found")
        if runner is None:
            assert server is not None
            stored = self.agent.restoring.pending.get(alloc_id)
            if stored is not None:  # what the tasks were doing when the last agent died
                return msgspec.structs.replace(server, client_status=stored.client_status,
                                               client_description=RESTORING,
                                               task_states=stored.task_states)
            return server
        view = runner.client_alloc()
        if server is not None:
            view = msgspec.structs.replace(server, client_status=view.client_status,
                                           client_description=view.client_description,
                                           task_states=view.task_states)
        return view

    async def restored_runner(self, alloc_id: str) -> AllocRunner:
        """`runner`, once the allocation is restored if it still is (see restore.py)."""
        await self.agent.restoring.wait(alloc_id)
        return self.runner(alloc_id)

    def runner(self, alloc_id: str) -> AllocRunner:
        runner = self.agent.client.runners.get(alloc_id)
        if runner is None:
            if alloc_id in self.agent.server.allocs:
                raise ApiError(400, f"allocation {alloc_id} is not running on this client")
            raise ApiError(404, "Unknown allocation")
        return runner

    def job(self, job_id: str) -> Job:
        job = self.agent.server.jobs.get(job_id)
        if job is None:
            raise ApiError(404, "job not found")
        return job

    def find_alloc_id(self, prefix: str) -> str:
        if prefix in self.agent.server.allocs or prefix in self.agent.client.runners:
            return prefix
        matches = [a for a in self.agent.server.allocs if a.startswith(prefix)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise ApiError(404, "alloc not found")
        raise ApiError(400, f"alloc ID prefix {prefix!r} is ambiguous")

    # ------------------------------------------------------------------ jobs

    async def jobs(self, request: Request) -> Response:
        if request.method == "GET":
            prefix = request.query_params.get("prefix", "")
            return json_response([job_stub(j) for j in sorted(
                self.agent.server.jobs.values(), key=lambda j: j.id)
                if j.id.startswith(prefix)])
        return await self.register(request, None)

    async def register(self, request: Request, job_id: str | None) -> Response:
        body = await body_json(request)
        if not isinstance(body.get("Job"), dict):
            raise ApiError(400, 'request body must be {"Job": {...}}')
        job = await parse_job_off_loop(msgspec.json.encode({"Job": body["Job"]}).decode(),
                                       self.parse_limiter, filename="request", format="json")
        if job_id is not None and job.id != job_id:
            raise ApiError(400, "Job ID does not match name")
        result = await self.agent.server.register_job(job)
        warnings = "; ".join(f"group {g!r} not placed: {why}" for g, why in
                             result.failed.items())
        return json_response({"EvalID": result.eval_id, "EvalCreateIndex": result.index,
                              "JobModifyIndex": self.agent.server.jobs[job.id].job_modify_index,
                              "Warnings": warnings, "Index": result.index, "LastContact": 0,
                              "KnownLeader": True})

    async def parse(self, request: Request) -> Response:
        body = await body_json(request)
        text = body.get("JobHCL")
        if not isinstance(text, str):
            raise ApiError(400, 'request body must be {"JobHCL": "..."}')
        if len(text) > MAX_HCL:
            raise ApiError(413, f"JobHCL is larger than {MAX_HCL} characters")
        return json_response(await parse_job_off_loop(text, self.parse_limiter,
                                                      filename="JobHCL"))

    async def job_item(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]
        if request.method == "GET":
            return json_response(self.job(job_id))
        if request.method == "DELETE":
            self.job(job_id)
            await self.agent.server.stop_job(job_id, purge=query_bool(request, "purge"))
            return json_response({"EvalID": "", "EvalCreateIndex": self.agent.server.index,
                                  "JobModifyIndex": self.agent.server.index,
                                  "Index": self.agent.server.index})
        return await self.register(request, job_id)

    async def job_allocations(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]
        self.job(job_id)
        return json_response([alloc_stub(self.alloc_view(a.id))
                              for a in self.agent.server.job_allocs(job_id)])

    # ------------------------------------------------------------------ allocations

    async def allocations(self, request: Request) -> Response:
        prefix = request.query_params.get("prefix", "")
        allocs = sorted(self.agent.server.allocs.values(),
                        key=lambda a: (a.create_index, a.name))
        return json_response([alloc_stub(self.alloc_view(a.id)) for a in allocs
                              if a.id.startswith(prefix)])

    async def allocation(self, request: Request) -> Response:
        return json_response(self.alloc_view(self.find_alloc_id(request.path_params["id"])))

    async def allocation_stop(self, request: Request) -> Response:
        alloc_id = self.find_alloc_id(request.path_params["id"])
        if alloc_id not in self.agent.server.allocs:
            raise ApiError(404, "alloc not found")
        stopped = await self.agent.server.stop_alloc(alloc_id)
        return json_response({"EvalID": "", "Index": stopped.modify_index})

    async def alloc_restart(self, request: Request) -> Response:
        runner = await self.restored_runner(self.find_alloc_id(request.path_params["id"]))
        body = await body_json(request)
        task = body_field(body, "TaskName", str, "")
        all_tasks = body_field(body, "AllTasks", bool, False)
        if task and all_tasks:
            raise ApiError(400, "task name cannot be set when restarting all tasks")
        from yurt.runtime.allocrunner.runner import AllocRunnerError

        try:
            if task:
                await runner.restart_task(task)
            elif all_tasks:
                await runner.restart_all()
            else:
                await runner.restart_running()
        except TaskNotRunningError as e:
            raise ApiError(400, str(e)) from None
        except AllocRunnerError as e:
            raise ApiError(404 if "Could not find" in str(e) else 400, str(e)) from None
        return json_response({})

    async def alloc_signal(self, request: Request) -> Response:
        runner = await self.restored_runner(self.find_alloc_id(request.path_params["id"]))
        body = await body_json(request)
        task = body_field(body, "Task", str, "") or None
        if "Signal" in body and not isinstance(body["Signal"], str):
            raise ApiError(400, '"Signal" must be a signal name such as "SIGHUP"')
        try:
            # Refused here, before any task is touched: a driver sends a name it does not
            # know as SIGINT, which stops most tasks.
            sig = parse_signal_name(body.get("Signal") or "SIGINT")
        except ValueError as e:
            raise ApiError(400, str(e)) from None
        try:
            await runner.signal(task, sig)
        except (YurtError, OSError) as e:
            raise ApiError(400, str(e)) from None
        return json_response({})

    async def alloc_gc(self, request: Request) -> Response:
        alloc_id = self.find_alloc_id(request.path_params["id"])
        await self.agent.restoring.wait(alloc_id)
        if not await self.agent.gc.collect(alloc_id):
            raise ApiError(400, "No such allocation on client, or allocation not eligible "
                                "for GC")
        return json_response({})

    async def client_gc(self, request: Request) -> Response:
        await self.agent.restoring.wait()
        await self.agent.gc.collect_all()
        return json_response({})

    async def alloc_stats(self, request: Request) -> Response:
        runner = await self.restored_runner(self.find_alloc_id(request.path_params["id"]))
        only = request.query_params.get("task")
        if any(r.devices for r in runner.alloc.task_resources.values()):
            await self.agent.devices.refresh_stats()  # only what reserves devices asks
        now = time.time_ns()
        tasks: dict[str, Any] = {}
        total_rss = total_ticks = 0.0
        all_devices: list[dict[str, Any]] = []
        for name, tr in runner.task_runners.items():
            if only and name != only:
                continue
            pid = int(tr.handle.driver_state.get("pid", 0)) if tr.handle else 0
            rss, ticks = process_usage(pid)  # /proc only: no thread hop (runtime.procfs)
            usage = resource_usage(rss, ticks)
            allocated = runner.alloc.task_resources.get(name)
            usage["DeviceStats"] = self.device_stats(
                {(d.vendor, d.type, d.name): set(d.device_ids)
                 for d in (allocated.devices if allocated else [])})
            all_devices += usage["DeviceStats"]
            tasks[name] = {"ResourceUsage": usage, "Timestamp": now,
                           "Pids": {str(pid): usage} if pid else {}}
            if tr.state.state == "running":
                total_rss, total_ticks = total_rss + rss, total_ticks + ticks
        total = resource_usage(total_rss, total_ticks)
        total["DeviceStats"] = all_devices
        return json_response({"ResourceUsage": total, "Tasks": tasks, "Timestamp": now})

    def device_stats(self, wanted: dict[tuple[str, str, str], set[str]] | None
                     ) -> list[dict[str, Any]]:
        """Nomad's `DeviceGroupStats`: per group, the cached stats of its instances (only the
        `wanted` instances of the `wanted` groups, when given)."""
        stats = self.agent.devices.stats()
        out = []
        for group in self.agent.devices.all_groups():
            key = (group.vendor, group.type, group.name)
            if wanted is not None and key not in wanted:
                continue
            ids = wanted[key] if wanted is not None else {i.id for i in group.instances}
            instances = {i: {"Summary": stats[i].summary, "Timestamp": stats[i].timestamp}
                         for i in sorted(ids) if i in stats}
            out.append({"Vendor": group.vendor, "Type": group.type, "Name": group.name,
                        "InstanceStats": instances})
        return out

    # ------------------------------------------------------------------ logs

    async def logs(self, request: Request) -> Response:
        no_head(request)
        alloc_id = self.find_alloc_id(request.path_params["alloc_id"])
        task = request.query_params.get("task", "")
        stream = request.query_params.get("type", "")
        origin = request.query_params.get("origin", "start")
        if not task:
            raise ApiError(400, "must include task name")
        if stream not in ("stdout", "stderr"):
            raise ApiError(400, "must include a valid log type (stdout or stderr)")
        if origin not in ("start", "end"):
            raise ApiError(400, 'origin must be "start" or "end"')
        follow, plain = query_bool(request, "follow"), query_bool(request, "plain")
        offset = query_int(request, "offset")
        runner = await self.restored_runner(alloc_id)
        tr = runner.task_runners.get(task)
        if tr is None:
            raise ApiError(400, f'unknown task name "{task}"')
        if tr.state.started_at.year == 1 and tr.handle is None:
            raise ApiError(404, f'task "{task}" not started yet. No logs available')
        if runner.alloc_dir is None:
            raise ApiError(404, f'task "{task}" keeps no logs (it has no alloc dir)')
        from yurt.runtime.logs.reader import read_log

        chunks = read_log(runner.alloc_dir.logs, task, stream, offset=offset, origin=origin,
                          follow=follow)
        if plain:
            return StreamingResponse(plain_body(chunks), media_type="text/plain")
        return FramedLogResponse(chunks, follow)

    # ------------------------------------------------------------------ nodes, agent

    def node_stub(self) -> dict[str, Any]:
        node = self.agent.node
        return {"ID": node.id, "Datacenter": node.datacenter, "Name": node.name,
                "NodeClass": node.node_class, "NodePool": node.node_pool,
                "Drivers": node.drivers, "Status": node.status,
                "StatusDescription": node.status_description, "Version": __version__,
                "CreateIndex": node.create_index, "ModifyIndex": node.modify_index}

    async def nodes(self, request: Request) -> Response:
        return json_response([self.node_stub()])

    async def node(self, request: Request) -> Response:
        node_id = request.path_params["id"]
        if not self.agent.node.id.startswith(node_id):
            raise ApiError(404, "node not found")
        return json_response(self.agent.node)

    async def client_stats(self, request: Request) -> Response:
        stats = await trio.to_thread.run_sync(host_stats, str(self.agent.config.data_dir))
        await self.agent.devices.refresh_stats()
        stats["DeviceStats"] = self.device_stats(None)
        return json_response(stats)

    async def agent_self(self, request: Request) -> Response:
        cfg = self.agent.config
        loaded = self.agent.ready.is_set()
        return json_response({
            "config": {"Version": {"Version": __version__}, "DataDir": str(cfg.data_dir),
                       "Datacenter": cfg.datacenter, "NodeName": self.agent.node.name,
                       "Addresses": {"HTTP": cfg.bind}, "Ports": {"HTTP": cfg.port},
                       "ACL": {"Enabled": bool(cfg.token)}},
            "member": {"Name": self.agent.node.name, "Addr": cfg.bind,
                       "Tags": {"build": __version__}},
            "stats": {"client": {"known_servers": "embedded", "node_id": self.agent.node.id,
                                 "num_allocations": str(len(self.agent.client.runners)
                                                        if loaded else 0),
                                 "restoring_allocations": str(len(
                                     self.agent.restoring.pending)),
                                 # "false" while the state still loads after a start
                                 "state_loaded": str(loaded).lower()},
                      "runtime": {"version": __version__,
                                  "uptime_seconds": str(int(time.time()
                                                            - self.agent.started_at))}}})

    # ------------------------------------------------------------------ events

    async def event_stream(self, request: Request) -> Response:
        no_head(request)
        matches = topic_filter(request.query_params.getlist("topic"))
        index = query_int(request, "index")
        heartbeat = query_duration(request, "heartbeat", HEARTBEAT)
        # Nomad: index 0 starts from the oldest event kept, any other from that index on.
        subscription = self.agent.broker.subscribe(from_index=index)

        async def body() -> AsyncIterator[bytes]:
            try:
                yield b"{}\n"
                while True:
                    with trio.move_on_after(heartbeat) as idle:
                        records = await subscription.receive_encoded(matches)
                    if idle.cancelled_caught:
                        yield b"{}\n"
                        continue
                    if records:  # everything buffered, in one chunk
                        yield b"".join(as_line(r) for r in records)
                        await trio.sleep(STREAM_COALESCE)
            except trio.EndOfChannel:
                return
            finally:
                subscription.close()

        return StreamingResponse(body(), media_type="application/json")

    async def event_ws(self, websocket: WebSocket) -> None:
        matches = topic_filter(websocket.query_params.getlist("topic"))
        raw_index = websocket.query_params.get("index")
        await websocket.accept()
        subscription = self.agent.broker.subscribe(
            from_index=int(raw_index) if raw_index and raw_index.isdigit() else None)

        async def watch_disconnect(scope: trio.CancelScope) -> None:
            # The only way to learn that a client went away is to read: sends to a closed
            # socket are dropped silently, and the subscription would live forever.
            try:
                while True:
                    message = await websocket.receive()
                    if message["type"] == "websocket.disconnect":
                        break
            finally:
                scope.cancel()

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch_disconnect, nursery.cancel_scope)
                while True:
                    for r in await subscription.receive_encoded(matches):
                        await websocket.send_text(as_text(r))
                    await trio.sleep(STREAM_COALESCE)
        except* (WebSocketDisconnect, trio.EndOfChannel):
            pass
        finally:
            subscription.close()


def no_head(request: Request) -> None:
    """Streams answer GET only (Starlette would also route HEAD to them)."""
    if request.method == "HEAD":
        raise ApiError(405, "Method Not Allowed")


async def plain_body(chunks: AsyncIterator[Any]) -> AsyncIterator[bytes]:
    async for chunk in chunks:
        yield chunk.data


@final
class FramedLogResponse(StreamingResponse):
    """Nomad's framed log stream: `{"Offset", "Data" (base64), "File"}` objects, and `{}`
    heartbeats every second while following and idle.

    A heartbeat must go out while the log reader waits, so the reader runs in a task of its
    own. That task lives in a nursery this response owns while it is sent (ASGI `__call__`),
    not in an async generator: a generator that yields inside a nursery hands its caller a
    cancel scope it cannot see, and a consumer that stops iterating corrupts it. Beside the
    reader, a task watches for the client's `http.disconnect` and ends the stream.
    """

    def __init__(self, chunks: AsyncIterator[Any], follow: bool) -> None:
        super().__init__(iter(()), media_type="application/json")
        self._chunks = chunks
        self._follow = follow

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        frames_in, frames_out = trio.open_memory_channel[Any](0)

        async def read_chunks() -> None:
            async with frames_in:
                async for chunk in self._chunks:
                    await frames_in.send(chunk)

        async def watch_disconnect(scope: trio.CancelScope) -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            scope.cancel(reason="the client went away")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_chunks)
            nursery.start_soon(watch_disconnect, nursery.cancel_scope)
            await send({"type": "http.response.start", "status": self.status_code,
                        "headers": self.raw_headers})
            async with frames_out:
                while True:
                    with trio.move_on_after(LOG_HEARTBEAT if self._follow else float("inf")
                                            ) as idle:
                        try:
                            chunk = await frames_out.receive()
                        except trio.EndOfChannel:
                            break
                    frame = b"{}" if idle.cancelled_caught else _encoder.encode(
                        {"Offset": chunk.offset + len(chunk.data),
                         "Data": base64.b64encode(chunk.data).decode(), "File": chunk.file})
                    await send({"type": "http.response.body", "body": frame,
                                "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            nursery.cancel_scope.cancel(reason="the stream is complete")


# --------------------------------------------------------------------------- /proc readers

_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def process_usage(pid: int) -> tuple[float, float]:
    """(RSS bytes, CPU ticks user+system) of a process, zeros if it is gone."""
    if pid <= 0:
        return 0.0, 0.0
    try:
        rss = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
    except OSError:
        return 0.0, 0.0
    fields = stat_fields(pid)
    if fields is None:
        return 0.0, 0.0
    return float(rss), float(int(fields[11]) + int(fields[12]))


def resource_usage(rss: float, ticks: float) -> dict[str, Any]:
    return {"MemoryStats": {"RSS": int(rss), "Cache": 0, "Swap": 0, "MappedFile": 0,
                            "Usage": int(rss), "MaxUsage": 0, "KernelUsage": 0,
                            "KernelMaxUsage": 0, "Measured": ["RSS"]},
            "CpuStats": {"SystemMode": 0.0, "UserMode": 0.0, "TotalTicks": ticks,
                         "ThrottledPeriods": 0, "ThrottledTime": 0, "Percent": 0.0,
                         "Measured": ["Total Ticks"]},
            "DeviceStats": []}


def host_stats(data_dir: str) -> dict[str, Any]:
    mem: dict[str, int] = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, value = line.split(":", 1)
            mem[key] = int(value.split()[0]) * 1024
    st = os.statvfs(data_dir)
    size, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return {"Memory": {"Total": mem.get("MemTotal", 0), "Available": mem.get("MemAvailable", 0),
                       "Used": mem.get("MemTotal", 0) - mem.get("MemAvailable", 0),
                       "Free": mem.get("MemFree", 0)},
            "CPU": [], "DiskStats": [{"Device": "", "Mountpoint": data_dir, "Size": size,
                                      "Used": size - free, "Available": free,
                                      "UsedPercent": 100.0 * (size - free) / size if size else 0,
                                      "InodesUsedPercent": 100.0 * (1 - st.f_favail / st.f_files)
                                      if st.f_files else 0}],
            "AllocDirStats": None, "DeviceStats": [], "Uptime": int(uptime),
            "Timestamp": time.time_ns(), "CPUTicksConsumed": 0.0}


# --------------------------------------------------------------------------- wiring


MAX_BLOCKING_WAIT: Final = 600.0
DEFAULT_BLOCKING_WAIT: Final = 300.0


def _handler(agent: Agent, fn: Callable[[Request], Awaitable[Response]], *,
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
                    while agent.server.index <= index:
                        await agent.server.changed.wait()
            response = await fn(request)
        except ApiError as e:
            response = PlainTextResponse(str(e), status_code=e.status)
            if e.status == 413:
                # What is left of a body past the drain bounds (read_body) is never read:
                # the connection must not be kept for another request.
                response.headers["Connection"] = "close"
        index = agent.server.index if agent.ready.is_set() else 0
        response.headers["X-Nomad-Index"] = str(max(index, 1))
        response.headers["X-Nomad-LastContact"] = "0"
        response.headers["X-Nomad-KnownLeader"] = "true"
        return response

    return handle


class TokenMiddleware:
    """403 for every request without the configured `X-Nomad-Token` header (websockets too:
    clients send it with the upgrade request). Never read from the query string."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and self.token:
            headers = dict(scope.get("headers", []))
            supplied = headers.get(b"x-nomad-token", b"")
            if not hmac.compare_digest(supplied, self.token):
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                response = PlainTextResponse("Permission denied", status_code=403)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def build_app(agent: Agent) -> ASGIApp:
    api = Api(agent)

    def h(fn: Callable[[Request], Awaitable[Response]]
          ) -> Callable[[Request], Awaitable[Response]]:
        return _handler(agent, fn)

    def stream(fn: Callable[[Request], Awaitable[Response]]
               ) -> Callable[[Request], Awaitable[Response]]:
        return _handler(agent, fn, blocking=False)  # `index` means something else there
    routes = [
        Route("/v1/jobs", h(api.jobs), methods=["GET", "PUT", "POST"]),
        Route("/v1/jobs/parse", h(api.parse), methods=["PUT", "POST"]),
        Route("/v1/job/{job_id}", h(api.job_item), methods=["GET", "PUT", "POST", "DELETE"]),
        Route("/v1/job/{job_id}/allocations", h(api.job_allocations), methods=["GET"]),
        Route("/v1/allocations", h(api.allocations), methods=["GET"]),
        Route("/v1/allocation/{id}", h(api.allocation), methods=["GET"]),
        Route("/v1/allocation/{id}/stop", h(api.allocation_stop), methods=["PUT", "POST"]),
        Route("/v1/client/allocation/{id}/stats", h(api.alloc_stats), methods=["GET"]),
        Route("/v1/client/allocation/{id}/restart", h(api.alloc_restart),
              methods=["PUT", "POST"]),
        Route("/v1/client/allocation/{id}/signal", h(api.alloc_signal),
              methods=["PUT", "POST"]),
        Route("/v1/client/allocation/{id}/gc", h(api.alloc_gc), methods=["GET", "PUT"]),
        Route("/v1/client/gc", h(api.client_gc), methods=["GET", "PUT"]),
        Route("/v1/client/fs/logs/{alloc_id}", stream(api.logs), methods=["GET"]),
        Route("/v1/client/stats", h(api.client_stats), methods=["GET"]),
        Route("/v1/nodes", h(api.nodes), methods=["GET"]),
        Route("/v1/node/{id}", h(api.node), methods=["GET"]),
        # The one answer that needs no loaded state: up as soon as the agent listens.
        Route("/v1/agent/self", _handler(agent, api.agent_self, needs_state=False),
              methods=["GET"]),
        Route("/v1/event/stream", stream(api.event_stream), methods=["GET"]),
        WebSocketRoute("/v1/event/ws", api.event_ws),
    ]
    app: ASGIApp = StateGuardMiddleware(Starlette(routes=routes), agent.state_failure)
    if agent.config.token:
        app = TokenMiddleware(app, agent.config.token)
    return app


async def serve_api(agent: Agent, stop: trio.Event, *,
                    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve until `stop` is set; `task_status.started` gets `http://host:port`."""
    config = hypercorn.Config()
    config.bind = [f"{agent.config.bind}:{agent.config.port}"]
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = 5

    async with trio.open_nursery() as nursery:
        binds = await nursery.start(_serve, build_app(agent), config, stop)
        task_status.started(binds[0])


async def _serve(app: ASGIApp, config: hypercorn.Config, stop: trio.Event, *,
                 task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
    await hypercorn.trio.serve(app, config, shutdown_trigger=stop.wait,  # type: ignore[arg-type]
                               task_status=task_status)

