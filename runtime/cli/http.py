"""The command line's HTTP client: the small part of httpx2's `Client` the verbs use, over the
standard library's `http.client`.

Why not httpx2 here: a CLI verb is one process doing two or three requests to a local agent,
and its cost is start-up. Importing httpx2 takes about 50 ms (its models, auth, and
`importlib.metadata` for its version), more than the requests themselves; `http.client` is
about 5 ms on top of what Python has loaded anyway. The agent (checks, artifacts) keeps
httpx2, where pooling, TLS options and async matter.

What lives here: `AgentConnection` (one keep-alive connection to the agent, `request`/`get`/`post`/
`put`/`delete` answering a fully read `Response`, and `stream` answering one read as it
arrives) and the transport errors, split by when they happen: `ConnectError` (nobody
answered: the agent is not running there), `ReadTimeout`, `TransportError` (the connection
broke mid-way). HTTP error statuses are not exceptions: callers read `status_code`.
`agent_address` reads `$YURT_ADDR` and `AddressError` refuses a malformed one (bad input,
exit 2, one line): the address is checked here, where every client is built, so no verb can
turn `http://127.0.0.1:99999` into a traceback or `notaurl` into "cannot reach the agent".

Invariants: at most one response is open on the connection; a streamed response not read to
its end closes the connection (the next request opens a new one), so a later request never
reads the rest of an earlier body. A request that fails on a reused connection before any
byte of its answer arrived is sent once more on a new one (the agent may have closed the
idle connection; this is urllib3's rule), never after.
"""

from __future__ import annotations

import http.client
import json as jsonlib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Final, final
from urllib.parse import quote, urlencode, urlsplit

import click

#: The default per-operation socket timeout, as the CLI has always used.
DEFAULT_TIMEOUT: Final = 30.0
CHUNK: Final = 64 * 1024

Params = Mapping[str, Any] | Sequence[tuple[str, Any]]


class TransportError(Exception):
    """The exchange with the agent failed below HTTP (the connection broke, timed out)."""


class ConnectError(TransportError):
    """No connection could be made: nothing listens there, or the name does not resolve."""


class ReadTimeout(TransportError):
    """The agent accepted the request but did not answer within the timeout."""


class AddressError(click.ClickException):
    """`$YURT_ADDR` (or the address given) is not `http(s)://HOST[:PORT]`: the user's input is
    wrong, not the agent, so it is exit 2 and one line, shown by the CLI's `main()`."""

    exit_code = 2  # EXIT_USAGE, spelled here so the module needs nothing of runtime.errors

    def show(self, file: Any = None) -> None:
        from yurt.runtime.cli.output import echo

        echo(f"yurt: {self.message}", err=True)


#: The agent's address when `$YURT_ADDR` is not set, as Nomad's 4646.
DEFAULT_ADDR: Final = "http://127.0.0.1:4646"


def check_address(addr: str) -> tuple[str, str, int, str]:
    """Split an agent address into scheme, host, port and path prefix.

    Raises:
        AddressError: not http(s), no host, or a port outside 1-65535.
    """
    expected = "expected http://HOST:PORT or https://HOST:PORT, such as " + DEFAULT_ADDR
    try:
        parts = urlsplit(addr)
        port = parts.port  # urllib raises ValueError for a port out of range or not a number
    except ValueError as e:
        raise AddressError(f"YURT_ADDR={addr!r}: {e}; {expected}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise AddressError(f"YURT_ADDR={addr!r} is not an http(s) address; {expected}")
    if port == 0:
        raise AddressError(f"YURT_ADDR={addr!r}: port 0 cannot be reached; {expected}")
    https = parts.scheme == "https"
    return parts.scheme, parts.hostname, port or (443 if https else 80), parts.path.rstrip("/")


def agent_address() -> str:
    """`$YURT_ADDR` (default `DEFAULT_ADDR`), checked.

    Raises:
        AddressError: it is malformed.
    """
    import os

    addr = os.environ.get("YURT_ADDR", DEFAULT_ADDR)
    check_address(addr)
    return addr


class _Unset:
    """The `timeout` argument was not given: the client's default applies."""


_UNSET: Final = _Unset()


def _param_value(value: Any) -> str:
    if isinstance(value, bool):  # as httpx2 encodes them
        return "true" if value else "false"
    return "" if value is None else str(value)


@final
class Response:
    """One answer. `content`, `text` and `json()` read the whole body; a streamed response
    is read piece by piece with `iter_bytes`, `iter_text` or `iter_lines`."""

    def __init__(self, raw: http.client.HTTPResponse) -> None:
        self._raw = raw
        self.status_code: int = raw.status
        self.headers: http.client.HTTPMessage = raw.headers  # case-insensitive `get`
        self._content: bytes | None = None

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    def read(self) -> bytes:
        if self._content is None:
            try:
                self._content = self._raw.read()
            except TimeoutError as e:
                raise ReadTimeout(str(e) or "timed out") from None
            except (OSError, http.client.HTTPException) as e:
                raise TransportError(str(e) or type(e).__name__) from None
        return self._content

    @property
    def content(self) -> bytes:
        return self.read()

    @property
    def text(self) -> str:
        return self.read().decode("utf-8", errors="replace")

    def json(self) -> Any:
        return jsonlib.loads(self.read())

    def iter_bytes(self) -> Iterator[bytes]:
        """The body as it arrives (each piece as soon as the server sent it)."""
        if self._content is not None:
            yield self._content
            return
        while True:
            try:
                chunk = self._raw.read1(CHUNK)
            except TimeoutError as e:
                raise ReadTimeout(str(e) or "timed out") from None
            except (OSError, http.client.HTTPException) as e:
                raise TransportError(str(e) or type(e).__name__) from None
            if not chunk:
                return
            yield chunk

    def iter_text(self) -> Iterator[str]:
        import codecs

        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        for chunk in self.iter_bytes():
            text = decoder.decode(chunk)
            if text:
                yield text
        rest = decoder.decode(b"", final=True)
        if rest:
            yield rest

    def iter_lines(self) -> Iterator[str]:
        pending = ""
        for text in self.iter_text():
            pending += text
            *lines, pending = pending.split("\n")
            yield from (line.rstrip("\r") for line in lines)
        if pending:
            yield pending

    @property
    def finished(self) -> bool:
        return self._content is not None or self._raw.isclosed()


@final
class AgentConnection:
    """Requests to one agent (`base_url`, e.g. http://127.0.0.1:4646) over one connection.

    Args:
        base_url: scheme, host and port; `https` uses the system's trust store.
        headers: sent with every request (the token).
        timeout: seconds each socket operation may take; None waits forever.

    Raises:
        AddressError: `base_url` is malformed.
    """

    def __init__(self, base_url: str, headers: Mapping[str, str] | None = None,
                 timeout: float | None = DEFAULT_TIMEOUT) -> None:
        scheme, self._host, self._port, self._prefix = check_address(base_url)
        self._https = scheme == "https"
        self._headers = dict(headers or {})
        self._timeout = timeout
        self._conn: http.client.HTTPConnection | None = None
        self._open: Response | None = None

    def __enter__(self) -> AgentConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._open = None

    def _connection(self, timeout: float | None) -> tuple[http.client.HTTPConnection, bool]:
        """The connection, and whether it was used before (a stale one may be retried)."""
        if self._conn is not None and self._open is not None and not self._open.finished:
            self.close()  # an earlier body was left unread: never read it as ours
        if self._conn is not None:
            self._conn.timeout = timeout
            if self._conn.sock is not None:
                self._conn.sock.settimeout(timeout)
            return self._conn, True
        conn: http.client.HTTPConnection
        if self._https:
            conn = http.client.HTTPSConnection(self._host, self._port, timeout=timeout)
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=timeout)
        try:
            conn.connect()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            where = f"{self._host}:{self._port}"
            raise ConnectError(f"{where}: {getattr(e, 'strerror', None) or e}") from None
        self._conn = conn
        return conn, False

    def _target(self, path: str, params: Params | None) -> str:
        path, _, query = path.partition("?")
        target = quote(self._prefix + path, safe="/%:@!$&'()*+,;=-._~")
        pairs = list(params.items()) if isinstance(params, Mapping) else list(params or ())
        extra = urlencode([(k, _param_value(v)) for k, v in pairs])
        query = "&".join(q for q in (query, extra) if q)
        return f"{target}?{query}" if query else target

    def _send(self, method: str, path: str, params: Params | None, json: Any,
              content: bytes | str | None, timeout: float | _Unset | None) -> Response:
        limit = self._timeout if isinstance(timeout, _Unset) else timeout
        body: bytes | None = None
        headers = {**self._headers, "Accept": "application/json"}
        if json is not None:
            body = jsonlib.dumps(json).encode()
            headers["Content-Type"] = "application/json"
        elif content is not None:
            body = content.encode() if isinstance(content, str) else content
        if body is not None or method in ("POST", "PUT", "PATCH"):
            headers["Content-Length"] = str(len(body or b""))
        target = self._target(path, params)
        for attempt in (1, 2):
            conn, reused = self._connection(limit)
            try:
                conn.request(method, target, body=body, headers=headers)
                raw = conn.getresponse()
            except TimeoutError as e:
                self.close()
                raise ReadTimeout(str(e) or "timed out") from None
            except (http.client.RemoteDisconnected, ConnectionResetError,
                    BrokenPipeError) as e:
                self.close()
                if reused and attempt == 1:
                    continue  # the agent closed the idle connection: once more, on a new one
                raise TransportError(str(e) or type(e).__name__) from None
            except (OSError, http.client.HTTPException) as e:
                self.close()
                raise TransportError(str(e) or type(e).__name__) from None
            response = Response(raw)
            self._open = response
            if raw.will_close:
                self._conn = None  # http.client closes the socket once the body is read
            return response
        raise AssertionError("unreachable")  # pragma: no cover

    def request(self, method: str, path: str, *, params: Params | None = None,
                json: Any = None, content: bytes | str | None = None,
                timeout: float | _Unset | None = _UNSET) -> Response:
        """Send a request and read its whole answer.

        Raises:
            ConnectError: the agent cannot be reached.
            ReadTimeout: no answer within the timeout.
            TransportError: the connection broke.
        """
        response = self._send(method.upper(), path, params, json, content, timeout)
        response.read()
        return response

    def get(self, path: str, **kw: Any) -> Response:
        return self.request("GET", path, **kw)

    def post(self, path: str, **kw: Any) -> Response:
        return self.request("POST", path, **kw)

    def put(self, path: str, **kw: Any) -> Response:
        return self.request("PUT", path, **kw)

    def delete(self, path: str, **kw: Any) -> Response:
        return self.request("DELETE", path, **kw)

    @contextmanager
    def stream(self, method: str, path: str, *, params: Params | None = None,
               json: Any = None, content: bytes | str | None = None,
               timeout: float | _Unset | None = _UNSET) -> Iterator[Response]:
        """Send a request; the answer's body is read by the caller as it arrives. Leaving
        the block with the body unread closes the connection (see the module's invariants).
        Raises as `request` does."""
        response = self._send(method.upper(), path, params, json, content, timeout)
        try:
            yield response
        finally:
            if not response.finished:
                self.close()

