"""A tiny HTTP/1.1 file server on loopback for download tests (layer 2).

Each route answers a fixed body, or (`endless`) a body that never ends, sent until the
client hangs up: the server records every request's headers and how many bytes it managed
to send, and sets `hung_up` when a client cut an endless stream off.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial

import trio
import trio.abc

CHUNK = 64 * 1024


@dataclass
class Route:
    body: bytes = b""
    status: int = 200
    endless: bool = False


@dataclass
class FileServer:
    routes: dict[str, Route]
    base_url: str = ""
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    sent: int = 0
    hung_up: trio.Event = field(default_factory=trio.Event)
    tls: ssl.SSLContext | None = None

    async def _handle(self, stream: trio.abc.Stream) -> None:
        if self.tls is not None:
            stream = trio.SSLStream(stream, self.tls, server_side=True)
            try:
                await stream.do_handshake()
            except trio.BrokenResourceError:  # a client that refused the certificate
                await trio.aclose_forcefully(stream)
                return
        data = b""
        while b"\r\n\r\n" not in data and len(data) < 65536:
            chunk = await stream.receive_some(4096)
            if not chunk:
                return
            data += chunk
        head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
        _, target, _ = head[0].split(" ", 2)
        headers = {k.strip().lower(): v.strip()
                   for k, _, v in (line.partition(":") for line in head[1:])}
        self.requests.append((target, headers))
        route = self.routes.get(target.split("?")[0], Route(b"not found", status=404))
        length = 1 << 40 if route.endless else len(route.body)
        try:
            await stream.send_all(f"HTTP/1.1 {route.status} X\r\nContent-Length: {length}\r\n"
                                  "Connection: close\r\n\r\n".encode())
            if not route.endless:
                await stream.send_all(route.body)
                self.sent += len(route.body)
                return
            block = b"\0" * CHUNK
            while True:
                await stream.send_all(block)
                self.sent += CHUNK
        except trio.BrokenResourceError:
            self.hung_up.set()
        finally:
            await stream.aclose()


@asynccontextmanager
async def open_file_server(routes: dict[str, Route], *, tls: ssl.SSLContext | None = None
                           ) -> AsyncIterator[FileServer]:
    """Serve `routes` on loopback (over TLS with `tls`) until the block ends."""
    server = FileServer(routes, tls=tls)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            partial(trio.serve_tcp, server._handle, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        server.base_url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()


def self_signed_context() -> ssl.SSLContext:
    """A server context with a fresh self-signed certificate for 127.0.0.1, which no client
    trusts."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(key, hashes.SHA256()))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.NamedTemporaryFile() as pem:
        pem.write(cert.public_bytes(serialization.Encoding.PEM))
        pem.write(key.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))
        pem.flush()
        context.load_cert_chain(pem.name)
    return context
