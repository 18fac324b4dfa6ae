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
`agent_address` reads the address of runtime/cli/general.py's settings (`-address`,
`$YURT_ADDR`, `$NOMAD_ADDR`) and `AddressError` refuses a malformed one (bad input, exit 2, one
line, naming the flag or variable it came from): the address is checked here, where every
client is built, so no verb can turn `http://127.0.0.1:99999` into a traceback or `notaurl`
into "cannot reach the agent".

TLS: an `https` address is spoken to with the context runtime/cli/tls.py builds from the
general TLS options. A TLS failure is a `TLSError`, worded to say which option to set, never
"is the agent running?". The websockets (events, exec, actions) take the same address, context
and query parameters (`websocket_url`, `websocket_context`).

Every request carries the settings' `namespace` and `region` query parameters unless the
request sets them itself (Nomad's api/api.go `newRequest`, then `setQueryOptions`).

Invariants: at most one response is open on the connection; a streamed response not read to
its end closes the connection (the next request opens a new one), so a later request never
reads the rest of an earlier body. A request that fails on a reused connection before any
byte of its answer arrived is sent once more on a new one (the agent may have closed the
idle connection; this is urllib3's rule), never after.
"""

from __future__ import annotations

import http.client
import json as jsonlib
import ssl  # loaded by http.client already: no start-up cost
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final, final
from urllib.parse import quote, urlencode, urlsplit

import click

from yurt.runtime.cli.general import DEFAULT_ADDR, settings
from yurt.runtime.cli.tls import tls_context, tls_hint, tls_reason

if TYPE_CHECKING:
    from yurt.runtime.cli.general import Settings

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


class TLSError(TransportError):
    """The TLS handshake with the agent failed (its certificate, ours, or plain HTTP there)."""


class AddressError(click.ClickException):
    """`-address`, `$YURT_ADDR` or `$NOMAD_ADDR` is not `http(s)://HOST[:PORT]`: the user's input is
    wrong, not the agent, so it is exit 2 and one line, shown by the CLI's `main()`."""

    exit_code = 2  # EXIT_USAGE, spelled here so the module needs nothing of runtime.errors

    def show(self, file: Any = None) -> None:
        from yurt.runtime.cli.output import echo

        echo(f"yurt: {self.message}", err=True)


def check_address(addr: str, source: str = "address") -> tuple[str, str, int, str]:
    """Split an agent address into scheme, host, port and path prefix; `source` names where
    it came from in the message (`-address`, `NOMAD_ADDR`).

    Raises:
        AddressError: not http(s), no host, or a port outside 1-65535.
    """
    expected = "expected http://HOST:PORT or https://HOST:PORT, such as " + DEFAULT_ADDR
    try:
        parts = urlsplit(addr)
        port = parts.port  # urllib raises ValueError for a port out of range or not a number
    except ValueError as e:
        raise AddressError(f"{source}={addr!r}: {e}; {expected}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise AddressError(f"{source}={addr!r} is not an http(s) address; {expected}")
    if port == 0:
        raise AddressError(f"{source}={addr!r}: port 0 cannot be reached; {expected}")
    https = parts.scheme == "https"
    return parts.scheme, parts.hostname, port or (443 if https else 80), parts.path.rstrip("/")


def agent_address(current: Settings | None = None) -> str:
    """The agent's address (general.py `settings`: `-address`, `$YURT_ADDR`, `$NOMAD_ADDR`,
    default `DEFAULT_ADDR`), checked.

    Raises:
        AddressError: it is malformed.
    """
    current = current or settings()
    check_address(current.address, current.source_of("address") or "address")
    return current.address


def websocket_url(path: str, params: Params | None = None,
                  current: Settings | None = None) -> str:
    """The `ws://` or `wss://` URL of `path` at the agent, with `params` and the settings'
    namespace and region where `params` does not set them.

    Raises:
        AddressError: the address is malformed.
    """
    current = current or settings()
    addr = agent_address(current).rstrip("/")
    pairs = list(params.items()) if isinstance(params, Mapping) else list(params or ())
    given = {k for k, _ in pairs}
    pairs += [(k, v) for k, v in current.query() if k not in given]
    query = urlencode([(k, _param_value(v)) for k, v in pairs])
    return addr.replace("http", "ws", 1) + path + (f"?{query}" if query else "")


class TLSFailure(click.ClickException):
    """A TLS failure found before a websocket was opened: exit 1, `yurt: ...` on stderr."""

    def show(self, file: Any = None) -> None:
        from yurt.runtime.cli.output import echo

        echo(f"yurt: {self.message}", err=True)


def websocket_context(url: str, current: Settings | None = None) -> ssl.SSLContext | None:
    """The TLS context for a `wss://` URL (None for `ws://`), tried first with one plain
    request: trio_websocket reports a failed TLS handshake only as a timeout, a minute
    later, and never says why; here it is said at once, as for any other verb.

    Raises:
        TLSFailure: the handshake failed (said with what to set, `tls_hint`).
    """
    if not url.startswith("wss:"):
        return None
    current = current or settings()
    context = tls_context(current)
    addr = agent_address(current)
    try:
        with AgentConnection(addr, tls=context) as probe:
            probe.request("GET", "/v1/status/leader")
    except TLSError as e:
        reason = str(e)
        raise TLSFailure(f"TLS with the agent at {addr} failed: {reason}"
                         f"{tls_hint(reason, current)}") from None
    except TransportError:
        pass  # not a TLS matter: the websocket says what it is
    return context


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
        base_url: scheme, host and port.
        headers: sent with every request (the token).
        timeout: seconds each socket operation may take; None waits forever.
        tls: the context of an `https` address (default: the system's trust store).
        query: parameters every request carries unless it sets them (`namespace`, `region`).

    Raises:
        AddressError: `base_url` is malformed.
    """

    def __init__(self, base_url: str, headers: Mapping[str, str] | None = None,
                 timeout: float | None = DEFAULT_TIMEOUT, *, tls: ssl.SSLContext | None = None,
                 query: Sequence[tuple[str, str]] = ()) -> None:
        scheme, self._host, self._port, self._prefix = check_address(base_url)
        self._https = scheme == "https"
        self._tls = tls
        self._query = list(query)
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
            conn = http.client.HTTPSConnection(self._host, self._port, timeout=timeout,
                                               context=self._tls)
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=timeout)
        try:
            conn.connect()
        except ssl.SSLError as e:  # before OSError: it is one
            conn.close()
            raise TLSError(tls_reason(e)) from None
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
        given = {k for k, _ in pairs} | {q.partition("=")[0] for q in query.split("&")}
        pairs += [(k, v) for k, v in self._query if k not in given]
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
            except ssl.SSLError as e:  # a TLS 1.3 server refusing our certificate says so here
                self.close()
                raise TLSError(tls_reason(e)) from None
            except (http.client.RemoteDisconnected, ConnectionResetError,
                    BrokenPipeError) as e:
                self.close()
                if reused and attempt == 1:
                    continue  # the agent closed the idle connection: once more, on a new one
                if self._https and not reused:  # as a TLS 1.3 server refusing our certificate
                    raise TLSError("the agent closed the connection without an answer"
                                   ) from None
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

