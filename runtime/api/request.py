"""Request parsing and errors shared by every handler: what a body or a query may be.

Every request body is untrusted and bounded before it costs anything: its size while it is read
(413 past `MAX_BODY`), its nesting and value count right after msgspec decodes it (the jobspec's
limits), and job parsing, plain CPU-bound Python, runs in a worker thread behind a limiter so
that a large-but-allowed job never stalls the event loop. Every malformed input is an
`ApiError` with a 4xx status and a message (app.py turns it into Nomad's plain-text answer); a
5xx means a bug in yurt. Query parameters parse as Nomad's Go code parses them (`strconv.ParseBool`,
durations such as `5m`).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Final

import msgspec
import trio
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive

from yurt.runtime.errors import JobSpecError
from yurt.runtime.jobspec import MAX_JOB_CHARS, VarInputs, json_value_trouble, parse_job
from yurt.runtime.lib.durations import parse_duration
from yurt.runtime.lib.goparse import parse_go_bool, parse_go_uint
from yurt.runtime.structs import Job

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
        await drop_body(request.receive)
        raise
    return b"".join(parts)


#: How much of a refused body is read and dropped before the connection is closed instead.
DRAIN_BYTES: Final = 256 << 20
DRAIN_SECONDS: Final = 2.0


async def drop_body(receive: Receive) -> None:
    """Read and drop what is left of a request body straight from the ASGI channel (the
    request's stream may be half consumed, and Starlette allows one iteration only), up to
    `DRAIN_BYTES` and `DRAIN_SECONDS`."""
    dropped = 0
    with trio.move_on_after(DRAIN_SECONDS):
        while dropped <= DRAIN_BYTES:
            message = await receive()
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
                             format: Any = None, variables: VarInputs | None = None) -> Job:
    """`parse_job` in a worker thread, so a large job never stalls the event loop; its
    `JobSpecError` as a 400."""
    try:
        return await trio.to_thread.run_sync(
            partial(parse_job, text, filename=filename, format=format, variables=variables),
            limiter=limiter)
    except JobSpecError as e:
        raise ApiError(400, e.render()) from None


def query_bool(request: Request, name: str) -> bool:
    """Go's `strconv.ParseBool`, as Nomad parses boolean query parameters (absent or empty:
    false)."""
    value = request.query_params.get(name, "")
    try:
        return value != "" and parse_go_bool(value)
    except ValueError:
        raise ApiError(400, f'failed to parse value of "{name}" as a boolean: {value!r}'
                       ) from None


def query_cas(request: Request, error_prefix: str, *, empty_is_absent: bool) -> int | None:
    """`?cas=N`, parsed as Nomad's endpoints parse it (`strconv.ParseUint`), or None when it
    is absent. Nomad's endpoints differ in two ways, which the caller names: the message's
    prefix, and whether `?cas=` (empty) counts as absent (variables) or is an error
    (operator)."""
    params = request.query_params
    if "cas" not in params or (empty_is_absent and params["cas"] == ""):
        return None
    try:
        return parse_go_uint(params["cas"])
    except ValueError as e:
        raise ApiError(400, f"{error_prefix}: {e}") from None


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


def no_head(request: Request) -> None:
    """Streams answer GET only (Starlette would also route HEAD to them)."""
    if request.method == "HEAD":
        raise ApiError(405, "Method Not Allowed")
