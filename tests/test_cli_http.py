"""runtime/cli/http.py against a real HTTP/1.1 server on loopback (layer 2, synchronous: the
client is the CLI's, which has no event loop). The server runs in a thread of this process,
the standard library's `http.server`, so the client meets a real socket and a real peer.

Checked: keep-alive reuse, the retry when the server dropped an idle connection, a streamed
body left unread never read as the next answer, query encoding, and the error split (refused
connection, timeout).
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from yurt.runtime.cli.http import AgentConnection, ConnectError, ReadTimeout

pytestmark = pytest.mark.slow


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    connections: set[tuple[str, int]] = set()  # noqa: RUF012 (one server per test module)
    drop_after_answer = False

    def log_message(self, *args: Any) -> None:
        pass

    def answer(self, body: bytes, *, chunked: bool = False) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not chunked:
            self.wfile.write(body)
            return
        for start in range(0, len(body), 1000):
            piece = body[start:start + 1000]
            self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
        self.wfile.write(b"0\r\n\r\n")

    def do_GET(self) -> None:
        Handler.connections.add(self.client_address)
        url = urlsplit(self.path)
        if url.path == "/big":
            self.answer(b"x" * 200_000, chunked=True)
        elif url.path == "/slow":
            threading.Event().wait(2)
            self.answer(b"{}")
        else:
            self.answer(json.dumps({"path": url.path, "query": parse_qsl(url.query)}).encode())
        if Handler.drop_after_answer:
            self.close_connection = True  # without saying so: the client finds out later

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        self.answer(self.rfile.read(length))


@pytest.fixture
def server() -> Iterator[str]:
    Handler.connections = set()
    Handler.drop_after_answer = False
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)


def test_requests_share_one_connection_and_encode_queries(server: str) -> None:
    with AgentConnection(server) as client:
        first = client.get("/v1/jobs", params={"prefix": "web", "all": True})
        second = client.request("GET", "/v1/job/a b", params=[("index", 3)])
        posted = client.post("/v1/jobs", json={"Job": {"ID": "x"}})
    assert first.status_code == 200
    assert first.json() == {"path": "/v1/jobs", "query": [["prefix", "web"], ["all", "true"]]}
    assert second.json() == {"path": "/v1/job/a%20b", "query": [["index", "3"]]}
    assert posted.json() == {"Job": {"ID": "x"}}
    assert len(Handler.connections) == 1


def test_an_idle_connection_the_server_dropped_is_replaced(server: str) -> None:
    Handler.drop_after_answer = True
    with AgentConnection(server) as client:
        assert client.get("/one").json()["path"] == "/one"
        assert client.get("/two").json()["path"] == "/two"
    assert len(Handler.connections) == 2


def test_a_stream_left_unread_is_never_the_next_answer(server: str) -> None:
    with AgentConnection(server) as client:
        with client.stream("GET", "/big") as response:
            first = next(response.iter_bytes())
        assert 0 < len(first) < 200_000
        assert client.get("/after").json()["path"] == "/after"
        with client.stream("GET", "/big") as response:
            assert sum(len(c) for c in response.iter_bytes()) == 200_000
        assert client.get("/again").json()["path"] == "/again"


def test_nothing_listening_is_a_connect_error() -> None:
    with socket.socket() as s:  # bound, never listening: connections are refused
        s.bind(("127.0.0.1", 0))
        with AgentConnection(f"http://127.0.0.1:{s.getsockname()[1]}") as client, \
                pytest.raises(ConnectError):
            client.get("/v1/jobs")


def test_no_answer_in_time_is_a_read_timeout(server: str) -> None:
    with AgentConnection(server, timeout=0.2) as client, pytest.raises(ReadTimeout):
        client.get("/slow")
