"""/v1/event/stream (newline-delimited JSON) and /v1/event/ws (a websocket): the event broker.

Streams never block the agent: each reads from a per-subscriber bounded buffer (overflow drops
the oldest and marks the next record with `"Lost": n`) and the stream sends a heartbeat `{}`
when idle. Event records are encoded once for all subscribers, and a stream sends what has piled
up in one chunk (eventstream.py). A subscription is closed however its stream ends.

Pacing. A stream's wake-ups are what a subscriber costs the agent, so they are rationed by a
token bucket (`Pacer`): `STREAM_BURST` wake-ups at once, then one per `STREAM_COALESCE`, while
records pile up between them. Sustained traffic gets one chunk per `STREAM_COALESCE`, as before;
a burst after a quiet spell goes out as it happens. A plain wait of `STREAM_COALESCE` after
every send (the first version) made the web UI's usual case slow: a person's action causes a
few records within some tens of milliseconds (the job, its evaluation, its allocations), and
each record after the first waited for the rest of the previous one's wait: the UI measured
(scripts/bench_ui) an event's p95 at 105 ms on a quiet agent where its median was 22 ms.
The bucket alone brought that to 77 ms, but left 102-125 ms on an agent with allocations
restarting every second (sustained traffic: a wait of up to `STREAM_COALESCE` per event), where
no pacing at all measured 45 ms. So the web UI's socket, recognised by its subprotocol, is
rationed at `UI_STREAM_COALESCE`: a person's browser tabs are few, where API subscribers may be
hundreds (scripts/bench_events), and those keep `STREAM_COALESCE`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Final, final

import trio
from starlette.requests import HTTPConnection, Request
from starlette.responses import Response, StreamingResponse
from starlette.websockets import WebSocket, WebSocketDisconnect

from yurt.runtime.api.authz import PERMISSION_DENIED, identity, refuse_websocket
from yurt.runtime.api.context import Context
from yurt.runtime.api.request import ApiError, no_head, query_duration, query_int
from yurt.runtime.eventstream import Event, as_line, as_text, topic_filter
from yurt.runtime.server.namespaces import ALL_NAMESPACES, DEFAULT_NAMESPACE

HEARTBEAT: Final = 30.0
#: Under sustained traffic a stream wakes once per this long, records piling up in between: a
#: subscriber then costs the agent a few wake-ups a second, whatever the event rate (200
#: subscribers each woken per record cost most of a core), for at most this much more lag.
STREAM_COALESCE: Final = 0.1
#: The web UI's socket (it asked for `UI_SUBPROTOCOL`) is rationed to this instead: a browser
#: tab is one person looking, so the few there are may wake often; under sustained traffic an
#: event waits up to this long to reach the page, against the UI's goal of 100 ms at p95.
UI_STREAM_COALESCE: Final = 0.02
#: Wake-ups a stream may have at once before `STREAM_COALESCE` rations them (`Pacer`).
STREAM_BURST: Final = 4
#: The subprotocol the web UI's event socket asks for beside its token.
UI_SUBPROTOCOL: Final = "yurt-events"


@final
class Pacer:
    """A stream's wake-up ration, a token bucket without I/O or clock (times are passed in):
    `burst` tokens, one more every `interval`; a wake-up takes one, and when none is left the
    stream waits for the next. So at most `burst` wake-ups at once and one per `interval` on
    average, whatever the event rate."""

    def __init__(self, interval: float, burst: int, now: float) -> None:
        self.interval = interval
        self.burst = burst
        self._tokens = float(burst)
        self._at = now

    def woke(self, now: float) -> float:
        """Count a wake-up at `now`; how long to wait before the next one (0: none)."""
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) / self.interval)
        self._at = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 1.0 else (1.0 - self._tokens) * self.interval


#: Topics whose events are shown by a namespace capability in the event's namespace
#: (nomad/event_endpoint.go `validateNsOp`).
_NAMESPACE_TOPICS: Final = {
    "Deployment": "read-job", "Evaluation": "read-job", "Allocation": "read-job",
    "Job": "read-job", "Service": "read-job", "CSIPlugin": "read-job",
    "Task": "read-job",  # yurt's: an allocation's task events
    "HostVolume": "host-volume-read", "CSIVolume": "csi-read-volume"}


def _acl_filter(conn: HTTPConnection) -> Callable[[Event], bool] | None:
    """What of the stream the token may see, by each event's topic as Nomad's
    `validateNsOp` (nomad/event_endpoint.go) rules it: a namespace capability in the
    event's namespace (`_NAMESPACE_TOPICS`), node:read for `Node`, operator:read for
    `Operator`, list on the variable's path for `Variable` (`Event.stream`'s FilterFn), a
    management token for every other topic (`NodePool`, the ACL topics). Nomad refuses a
    subscription that names a topic the token may not read (`_subscription_allowed`); what
    it may subscribe to can still hold events it may not see (another namespace's, with `*`).
    None: everything (ACLs off, management)."""
    acl = identity(conn).acl
    if acl is None or acl.is_management():
        return None
    node_read = acl.allow_node_read()
    operator_read = acl.allow_operator_read()

    def visible(event: Event) -> bool:
        op = _NAMESPACE_TOPICS.get(event.topic)
        if op is not None:
            return acl.allow_namespace_operation(event.namespace, op)
        if event.topic == "Node":
            return node_read
        if event.topic == "Operator":
            return operator_read
        if event.topic == "Variable":
            return acl.allow_variable_operation(event.namespace, event.key, "list")
        return False

    return visible


async def _subscription_allowed(ctx: Context, conn: HTTPConnection) -> bool:
    """nomad/event_endpoint.go `validateACL`: every topic asked for (none: all, which only a
    management token may follow) in the namespace asked for (`*`: in every namespace)."""
    acl = identity(conn).acl
    if acl is None or acl.is_management():
        return True
    topics = {spec.partition(":")[0] for spec in conn.query_params.getlist("topic")} or {"*"}
    namespace = conn.query_params.get("namespace") or DEFAULT_NAMESPACE
    namespaces = [namespace] if namespace != ALL_NAMESPACES else [
        ns.name for ns in await (await ctx.agent.object_store()).namespaces()]
    for topic in topics:
        op = _NAMESPACE_TOPICS.get(topic)
        if op is not None:
            allowed = all(acl.allow_namespace_operation(ns, op) for ns in namespaces)
        elif topic == "Node":
            allowed = acl.allow_node_read()
        elif topic == "Operator":
            allowed = acl.allow_operator_read()
        elif topic == "Variable":
            allowed = all(acl.allow_variable_search(ns) for ns in namespaces)
        else:  # `*` and the rest: management only
            allowed = False
        if not allowed:
            return False
    return True


def _filters(conn: HTTPConnection) -> Callable[[Event], bool] | None:
    """The topics asked for, within what the token may see."""
    topics = topic_filter(conn.query_params.getlist("topic"))
    permitted = _acl_filter(conn)
    if topics is None or permitted is None:
        return topics or permitted
    return lambda event: topics(event) and permitted(event)


async def event_stream(ctx: Context, request: Request) -> Response:
    no_head(request)
    if not await _subscription_allowed(ctx, request):
        raise ApiError(403, PERMISSION_DENIED)
    matches = _filters(request)
    index = query_int(request, "index")
    heartbeat = query_duration(request, "heartbeat", HEARTBEAT)
    # Nomad: index 0 starts from the oldest event kept, any other from that index on.
    subscription = ctx.agent.broker.subscribe(from_index=index)

    async def body() -> AsyncIterator[bytes]:
        pacer = Pacer(STREAM_COALESCE, STREAM_BURST, trio.current_time())
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
                    await trio.sleep(pacer.woke(trio.current_time()))
        except trio.EndOfChannel:
            return
        finally:
            subscription.close()

    return StreamingResponse(body(), media_type="application/json")


async def event_ws(ctx: Context, websocket: WebSocket) -> None:
    # As Nomad's stream: the web UI asks for narrower topics when refused (ui/assets/live.js).
    if not await _subscription_allowed(ctx, websocket):
        await refuse_websocket(websocket.scope, websocket.receive, websocket.send)
        return
    matches = _filters(websocket)
    raw_index = websocket.query_params.get("index")
    # A browser that offers subprotocols (the web UI: its token rides in one, app.py) drops a
    # connection whose answer names none, so the plain one it offers is chosen.
    offered = websocket.scope.get("subprotocols") or []
    ui = UI_SUBPROTOCOL in offered
    await websocket.accept(subprotocol=UI_SUBPROTOCOL if ui else None)
    subscription = ctx.agent.broker.subscribe(
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

    pacer = Pacer(UI_STREAM_COALESCE if ui else STREAM_COALESCE, STREAM_BURST,
                  trio.current_time())
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch_disconnect, nursery.cancel_scope)
            while True:
                for r in await subscription.receive_encoded(matches):
                    await websocket.send_text(as_text(r))
                await trio.sleep(pacer.woke(trio.current_time()))
    except* (WebSocketDisconnect, trio.EndOfChannel):
        pass
    finally:
        subscription.close()
