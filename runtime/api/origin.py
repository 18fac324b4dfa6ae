"""Requests a browser makes on behalf of another site are refused, before the token is read.

An agent without a token answers whoever reaches its port, and a browser on the same machine
reaches it for any web page it shows. Three ways a page of another site drove the agent
through the browser that showed it, and what stops each:

1. **DNS rebinding.** A page at `http://evil.example:4646` has its name re-resolved to
   127.0.0.1. For the browser it is still the page's own origin, so its script reads and
   writes the agent freely, with `Host: evil.example:4646` (and the matching `Origin`). So
   every request's `Host` must be one of the agent's own names (`AllowedHosts`): `localhost`
   and the loopback addresses, the bind address, a cluster server's advertise address, the
   machine's hostname and FQDN when the agent listens beyond loopback, and the names the
   operator lists in the config (`[ui] allowed_hosts`). Bound to every interface (`0.0.0.0`,
   `::`), any IP address passes: a page whose `Host` is an address was sent to that address
   by the browser, with no name to rebind, and the agent answers on all of its own. The port
   in `Host` is not compared: it guards nothing against rebinding (the attacker picks the
   agent's port), and a relay or an SSH tunnel (`-L 8080:localhost:4646`) changes it.
2. **Cross-origin writes.** A page POSTs a job (a "simple" request needs no CORS preflight,
   and the API reads its body whatever the Content-Type says) or opens
   `/v1/client/allocation/<id>/exec` as a websocket, which browsers never guard. A browser
   names the page's origin in `Origin` on every such request, so an `Origin` that is not
   the agent's own address (scheme aside, the `host:port` of its `Host`) is refused.
   `Origin: null` (a sandboxed frame, a `file:` page) is another site too.
3. **Cross-site reads that write.** `<img src="http://127.0.0.1:4646/v1/client/gc">` makes the
   browser send a GET with no `Origin`, and Nomad's GC routes answer GET
   (command/agent/alloc_endpoint.go `ClientGCRequest`, `allocGC`). Browsers say where every
   request comes from in `Sec-Fetch-Site`; `cross-site` and `same-site` (another port of
   this host is the same site) are refused. The one exception is a top-level navigation to
   the UI's pages (`Sec-Fetch-Mode: navigate`, `Sec-Fetch-Dest: document`; ui.py
   `is_ui_path`): a link to the agent from elsewhere opens the UI, whose page holds no data,
   and whose own requests are then `same-origin`. A browser that sends no `Sec-Fetch-Site`
   (an old one) is judged by `Referer` instead, when it sends one.

API clients (the CLI, python-nomad, Nomad's CLI, curl) send none of `Origin`,
`Sec-Fetch-Site` and `Referer`, and name the agent as they reached it in `Host`. A request
without `Host` (HTTP/1.0) is let through only when it carries no `Origin` or `Sec-Fetch-Site`:
a browser always sends `Host`.

`refusal` decides, without I/O; `CrossOriginMiddleware` answers its refusals with a 403 naming
the cause (a websocket's handshake too, through the ASGI websocket response extension, else
the socket is closed with 1008).
"""

from __future__ import annotations

import ipaddress
import logging
import re
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final, final
from urllib.parse import urlsplit

import trio
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from yurt.runtime.api.ui import is_ui_path

log = logging.getLogger("yurt.api")

REFUSED: Final = "Cross-origin request refused: Origin is not this agent's address"
NO_HOST: Final = "Request refused: a browser's request without a Host header"
#: The config key an operator lists more names in (runtime/agent/config.py `_UI`).
CONFIG_KEY: Final = "[ui] allowed_hosts"
#: Bind addresses that mean every interface.
WILDCARDS: Final = frozenset({"", "0.0.0.0", "::", "[::]"})
#: How long the machine's FQDN may take to look up at start (a DNS query).
FQDN_SECONDS: Final = 2.0

#: A DNS name as it is compared: lowercase labels of letters, digits, `-` and `_`.
_NAME: Final = re.compile(r"[a-z0-9_-]+(?:\.[a-z0-9_-]+)*")
#: A Host header: a bracketed IPv6 address or a name (an IPv4 address is one), then a port.
_HOST: Final = re.compile(r"(\[[^\]]*\]|[^:\[\]]*)(?::[0-9]*)?")


def canonical(name: str) -> str | None:
    """`name` as Host names are compared: an IP address in its standard form (IPv6 without
    brackets), a DNS name lowercased without its final dot; None when it is neither."""
    text = name.strip().lower()
    if text.startswith("[") and text.endswith("]"):  # only an IPv6 address is bracketed
        try:
            return str(ipaddress.IPv6Address(text[1:-1]))
        except ValueError:
            return None
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    text = text.removesuffix(".")
    return text if _NAME.fullmatch(text) else None


def host_of(header: str) -> str | None:
    """The name or address a Host header names (`name`, `name:port`, `[v6]:port`), canonical;
    None when the header is not of that form."""
    found = _HOST.fullmatch(header.strip().lower())
    return canonical(found.group(1)) if found else None


def parse_allowed_host(text: str) -> str:
    """One entry of the config's `allowed_hosts`: a host name or IP address, canonical.

    Raises:
        ValueError: what is wrong with it, and what to give instead.
    """
    value = text.strip()
    if "://" in value:
        bare = urlsplit(value).hostname or "NAME"
        raise ValueError(f"{text!r} is a URL; give the host name alone: {bare!r}")
    if "*" in value:
        raise ValueError(f"{text!r}: wildcards are not supported; list each name")
    name = canonical(value)
    if name is not None:
        return name
    bare_name, colon, port = value.rpartition(":")
    if colon and port.isdigit() and canonical(bare_name) is not None:
        raise ValueError(f"{text!r} has a port; give the host name alone ({bare_name!r}): "
                         f"the port a request names is not checked")
    raise ValueError(f"{text!r} is not a host name or IP address")


def is_loopback(name: str) -> bool:
    if name == "localhost":
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


@final
@dataclass(frozen=True, slots=True)
class AllowedHosts:
    """The names and addresses a request's `Host` may name: the agent's own (see the header).

    `names` are canonical (`canonical`); loopback addresses always pass; with `any_address`
    (bound to every interface), every IP address passes.
    """

    names: frozenset[str]
    any_address: bool = False

    @classmethod
    def of(cls, bind: str, extra: Iterable[str] = ()) -> AllowedHosts:
        """`localhost`, the bind address and `extra` (names that are no host name or address
        are left out: no `Host` can name them)."""
        names = {canonical(n) for n in extra}
        wildcard = bind.strip() in WILDCARDS
        if not wildcard:
            names.add(canonical(bind))
        names.add("localhost")
        return cls(frozenset(n for n in names if n), wildcard)

    def allows(self, name: str) -> bool:
        if name in self.names or is_loopback(name):
            return True
        if not self.any_address:
            return False
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False
        return True


async def own_hosts(bind: str, extra: Sequence[str] = ()) -> AllowedHosts:
    """The agent's `AllowedHosts`: `AllowedHosts.of`, and the machine's hostname and FQDN when
    `bind` is beyond loopback (the FQDN is a DNS look-up: given up after `FQDN_SECONDS`, a
    broken resolver must not hold the API's start)."""
    names = list(extra)
    name = canonical(bind)
    if name is None or not is_loopback(name):
        names.append(socket.gethostname())
        with trio.move_on_after(FQDN_SECONDS):
            names.append(await trio.to_thread.run_sync(
                socket.getfqdn, abandon_on_cancel=True, limiter=trio.CapacityLimiter(1)))
    return AllowedHosts.of(bind, names)


def same_origin(origin: bytes, host: bytes) -> bool:
    """Whether `origin` (an `Origin`, or a `Referer` URL) is the `host:port` of `host`, the
    scheme's default port filled in."""
    try:
        parts = urlsplit(origin.decode("latin-1"))
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return False
    netloc = parts.netloc.lower()
    wanted = host.decode("latin-1").lower()
    default = {"http": ":80", "https": ":443"}[parts.scheme]
    return netloc == wanted or netloc + default == wanted or netloc == wanted + default


def _host_refused(header: bytes) -> str:
    shown = header.decode("latin-1")[:100]
    name = host_of(shown)
    if name is None:
        return f"Request refused: Host {shown!r} is not a host name or address"
    return (f"Request refused: Host {shown!r} is not a name of this agent (a page of another "
            f"site may be reaching it through DNS rebinding); if the agent is reached at "
            f"{name!r}, list it in the agent's config: {CONFIG_KEY} = [\"{name}\"] (a yurt "
            f"server: --allowed-host {name})")


def _ui_navigation(kind: str, method: str, path: str, headers: dict[bytes, bytes]) -> bool:
    """A top-level navigation to the UI's page or its redirect (see the header)."""
    return (kind == "http" and method in ("GET", "HEAD") and is_ui_path(path)
            and headers.get(b"sec-fetch-mode") == b"navigate"
            and headers.get(b"sec-fetch-dest") == b"document")


def refusal(kind: str, method: str, path: str, headers: Sequence[tuple[bytes, bytes]],
            hosts: AllowedHosts) -> str | None:
    """Why a request is refused (the text of its 403), or None when it may go on.

    Args:
        kind: the ASGI scope's type, `http` or `websocket`.
        method: the request's method (a websocket's handshake is a GET).
        path: the request's path.
        headers: its headers as ASGI gives them (lowercase names).
        hosts: the names its `Host` may name.
    """
    given = [value for name, value in headers if name == b"host"]
    single = dict(headers)
    origin = single.get(b"origin")
    site = single.get(b"sec-fetch-site")
    if not given:
        return NO_HOST if origin is not None or site is not None else None
    if len(given) > 1:
        return "Request refused: more than one Host header"
    host = given[0]
    name = host_of(host.decode("latin-1"))
    if name is None or not hosts.allows(name):
        return _host_refused(host)
    if site in (b"cross-site", b"same-site") and not _ui_navigation(kind, method, path, single):
        return (f"Cross-site request refused: Sec-Fetch-Site: {site.decode('latin-1')} (a page "
                f"of another site made the browser send it)")
    if origin is not None and not same_origin(origin, host):
        return REFUSED
    referer = single.get(b"referer")
    if (site is None and origin is None and referer is not None and not is_ui_path(path)
            and not same_origin(referer, host)):
        return "Cross-site request refused: Referer is not this agent's address"
    return None


@final
class CrossOriginMiddleware:
    """Answers `refusal`'s refusals with a 403, before anything inside runs."""

    def __init__(self, app: ASGIApp, hosts: AllowedHosts) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            reason = refusal(scope["type"], scope.get("method", "GET"), scope.get("path", ""),
                             scope.get("headers", []), self.hosts)
            if reason is not None:
                log.debug("%s %s refused: %s", scope.get("method", "GET"),
                          scope.get("path", ""), reason)
                if scope["type"] == "websocket":
                    await _refuse_websocket(scope, send, reason)
                else:
                    await PlainTextResponse(reason, status_code=403)(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def _refuse_websocket(scope: Scope, send: Send, reason: str) -> None:
    """The handshake answered 403 with `reason` (the ASGI websocket response extension), or,
    on a server without it, closed with 1008 before it is accepted (a bare 403)."""
    if "websocket.http.response" not in scope.get("extensions", {}):
        await send({"type": "websocket.close", "code": 1008})
        return
    body = reason.encode()
    await send({"type": "websocket.http.response.start", "status": 403,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "websocket.http.response.body", "body": body})
