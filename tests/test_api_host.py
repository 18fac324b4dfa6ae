"""Requests must name the agent in `Host` (runtime/api/origin.py `AllowedHosts`): a page of
another site whose DNS name is rebound to 127.0.0.1 cannot drive the agent through the browser,
and the names an operator lists in the config (`[ui] allowed_hosts`) work as the agent's own.

Layer 0: the names, the config key and the decision. Layer 2: an agent on a real socket, with
forged `Host` headers on HTTP and on the exec websocket, and HTTP/1.0 without `Host`.
Layer 3: `yurt agent` processes and Chromium: a rebinding page, and the UI at a listed name.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
import trio

from tests.agent_support import mock_job, raw_job, running_agent, wait_status
from tests.browser_support import UiAgent, UiBrowser, start_ui_agent
from yurt.runtime.agent.config import ConfigError, load_config
from yurt.runtime.api.origin import NO_HOST, AllowedHosts, host_of, own_hosts, refusal

# ---------------------------------------------------------------------------- layer 0


def test_a_host_header_names_a_host_whatever_its_port_case_and_final_dot() -> None:
    assert host_of("127.0.0.1:4646") == "127.0.0.1"
    assert host_of("LocalHost") == "localhost"
    assert host_of("localhost.:80") == "localhost"
    assert host_of("[::1]:4646") == "::1"
    assert host_of("[0:0:0:0:0:0:0:1]") == "::1"
    assert host_of("Yurt.Example.COM:8080") == "yurt.example.com"
    for bad in ("", ":4646", "evil.example:port", "a b", "::1", "[::1", "x/y", "evil..example",
                "[nope]:1", "evil.example:4646:1"):
        assert host_of(bad) is None, bad


def test_the_agents_own_names_are_loopback_its_bind_address_and_the_listed_ones() -> None:
    loopback = AllowedHosts.of("127.0.0.1")
    for own in ("localhost", "127.0.0.1", "127.3.4.5", "::1", "::ffff:127.0.0.1"):
        assert loopback.allows(own), own
    for other in ("evil.example", "10.0.0.5", "evil.localhost", "localhost.evil.example"):
        assert not loopback.allows(other), other
    lan = AllowedHosts.of("10.0.0.5", ["Yurt.Example.com", "not a name"])
    assert lan.names == {"localhost", "10.0.0.5", "yurt.example.com"}
    assert lan.allows("127.0.0.1")
    assert not lan.allows("10.0.0.6")
    # On every interface, every address is the agent's; names are still checked.
    every = AllowedHosts.of("0.0.0.0")
    assert every.allows("10.0.0.6")
    assert every.allows("fd00::1")
    assert not every.allows("evil.example")
    assert AllowedHosts.of("::1").names == {"localhost", "::1"}


async def test_the_machines_names_are_its_own_only_when_it_listens_beyond_loopback() -> None:
    with trio.fail_after(10):
        here = (await own_hosts("0.0.0.0")).names
        assert host_of(socket.gethostname()) in here
        assert (await own_hosts("127.0.0.1", ["yurt.example.com"])).names == {
            "localhost", "127.0.0.1", "yurt.example.com"}


OWN = (b"host", b"127.0.0.1:4646")


@pytest.mark.parametrize(("headers", "refused"), [
    ([OWN], None),
    ([OWN, (b"origin", b"http://127.0.0.1:4646")], None),
    ([(b"host", b"localhost:8080")], None),  # another port: a relay, an SSH tunnel
    ([(b"host", b"evil.example:4646")], "is not a name of this agent"),
    ([(b"host", b"evil.example:4646"), (b"origin", b"http://evil.example:4646")],
     "is not a name of this agent"),
    ([(b"host", b"evil.example:4646"), (b"sec-fetch-site", b"same-origin")],
     "is not a name of this agent"),
    ([(b"host", b"127.0.0.1 evil")], "is not a host name or address"),
    ([OWN, (b"host", b"evil.example")], "more than one Host header"),
    ([], None),  # HTTP/1.0 from an API client
    ([(b"origin", b"http://127.0.0.1:4646")], NO_HOST),
    ([(b"sec-fetch-site", b"same-origin")], NO_HOST),
], ids=["own", "own origin", "other port", "forged", "forged with its origin",
        "forged same-origin", "malformed", "two", "no host", "no host, origin",
        "no host, a browser"])
def test_what_host_is_refused(headers: list[tuple[bytes, bytes]], refused: str | None) -> None:
    found = refusal("http", "POST", "/v1/jobs", headers, AllowedHosts.of("127.0.0.1"))
    if refused is None:
        assert found is None
    else:
        assert found is not None
        assert refused in found


def test_the_refusal_says_how_to_allow_the_name() -> None:
    found = refusal("http", "GET", "/v1/jobs", [(b"host", b"Yurt.Example.com:4646")],
                    AllowedHosts.of("127.0.0.1"))
    assert found == ("Request refused: Host 'Yurt.Example.com:4646' is not a name of this "
                     "agent (a page of another site may be reaching it through DNS "
                     "rebinding); if the agent is reached at 'yurt.example.com', list it in "
                     "the agent's config: [ui] allowed_hosts = [\"yurt.example.com\"] (a yurt "
                     "server: --allowed-host yurt.example.com)")


def test_the_config_lists_more_names(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text('[ui]\nallowed_hosts = ["Yurt.Example.com.", "10.0.0.5", "[FD00::1]"]\n')
    assert load_config(path).allowed_hosts() == ("yurt.example.com", "10.0.0.5", "fd00::1")


@pytest.mark.parametrize(("entry", "message"), [
    ("http://yurt.example.com:4646", "is a URL; give the host name alone: 'yurt.example.com'"),
    ("yurt.example.com:4646", "has a port; give the host name alone \\('yurt.example.com'\\)"),
    ("*.example.com", "wildcards are not supported"),
    ("", "'' is not a host name or IP address"),
    ("yurt example", "is not a host name or IP address"),
])
def test_a_bad_allowed_host_is_an_error_naming_the_key(tmp_path: Path, entry: str,
                                                      message: str) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(f"[ui]\nallowed_hosts = [{json.dumps(entry)}]\n")
    with pytest.raises(ConfigError, match=f"{path}: ui.allowed_hosts: .*{message}"):
        load_config(path)


def test_an_unknown_ui_key_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text('[ui]\nallowed_host = ["yurt.example.com"]\n')
    with pytest.raises(ConfigError, match='unknown key "allowed_host"; did you mean '
                                          '"allowed_hosts"'):
        load_config(path)


# ---------------------------------------------------------------------------- layer 2


def raw_exchange(port: int, request: bytes) -> tuple[bytes, bytes]:
    """`request` as written, on a connection of its own; the answer's head and body (none
    read after a 101)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            assert chunk, f"the agent closed the connection: {data!r}"
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 101"):
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))
            while len(body) < length:
                chunk = sock.recv(65536)
                assert chunk, f"the agent closed the connection: {data!r}"
                body += chunk
    return head, body


def upgrade(path: str, host: str, *extra: str) -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [f"GET {path} HTTP/1.1", f"Host: {host}", "Upgrade: websocket",
             "Connection: Upgrade", "Sec-WebSocket-Version: 13", f"Sec-WebSocket-Key: {key}",
             *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def test_a_forged_host_is_refused_on_http_and_the_exec_socket(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            port = int(a.address.rsplit(":", 1)[1])
            evil = f"evil.example:{port}"
            for headers in ({"Host": evil}, {"Host": evil, "Origin": f"http://{evil}"}):
                refused = await c.post("/v1/jobs", json=mock_job("rebound"), headers=headers)
                assert refused.status_code == 403, headers
                assert "'evil.example:" in refused.text
                assert 'allowed_hosts = ["evil.example"]' in refused.text
            assert (await c.get("/v1/job/rebound")).status_code == 404

            await c.post("/v1/jobs", json=raw_job("web", "exec sleep 1000"))
            alloc_id = (await wait_status(c, "web", "running"))["ID"]
            marker = tmp_path / "exec-ran"
            query = urlencode({"task": "t", "tty": "false",
                               "command": json.dumps(["/bin/sh", "-c", f"touch {marker}"])})
            path = f"/v1/client/allocation/{alloc_id}/exec?{query}"
            for extra in ((), (f"Origin: http://{evil}",)):
                head, body = await trio.to_thread.run_sync(
                    raw_exchange, port, upgrade(path, evil, *extra))
                assert head.startswith(b"HTTP/1.1 403"), head
                assert b"is not a name of this agent" in body
            assert not marker.exists()

            # The agent's own names, at any port (a relay), are answered as before.
            for own in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost:8080",
                        f"[::1]:{port}"):
                assert (await c.get("/v1/jobs", headers={"Host": own})).status_code == 200
            head, _ = await trio.to_thread.run_sync(
                raw_exchange, port, upgrade(path, f"localhost:{port}"))
            assert head.startswith(b"HTTP/1.1 101"), head


async def test_http_1_0_without_host_is_answered_only_to_an_api_client(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            port = int(a.address.rsplit(":", 1)[1])
            head, body = await trio.to_thread.run_sync(
                raw_exchange, port, b"GET /v1/jobs HTTP/1.0\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200"), head
            assert json.loads(body) == []
            job = json.dumps(mock_job("old")).encode()
            head, body = await trio.to_thread.run_sync(
                raw_exchange, port, b"POST /v1/jobs HTTP/1.0\r\nOrigin: http://127.0.0.1\r\n"
                b"Content-Length: " + str(len(job)).encode() + b"\r\n\r\n" + job)
            assert head.startswith(b"HTTP/1.1 403"), head
            assert body.decode() == NO_HOST
            assert (await a.client.get("/v1/job/old")).status_code == 404


# ---------------------------------------------------------------------------- layer 3


class RebindingSite:
    """What DNS rebinding gives a page of another site: `http://evil.localhost:PORT/attack` is
    the attacker's page, and every other request to that origin reaches the agent, with the
    page's `Host` (Chromium resolves `*.localhost` to loopback itself; the first request of a
    connection says where it goes, as a rebound name's next look-up would)."""

    PAGE = b"<!doctype html><title>rebound</title>"

    def __init__(self, upstream: str) -> None:
        self.upstream = ("127.0.0.1", int(upstream.rsplit(":", 1)[1]))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.origin = f"http://evil.localhost:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with contextlib.suppress(OSError), client:
            first = b""
            while b"\r\n" not in first:
                chunk = client.recv(65536)
                if not chunk:
                    return
                first += chunk
            if first.startswith(b"GET /attack "):
                client.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: "
                               b"close\r\nContent-Length: " + str(len(self.PAGE)).encode()
                               + b"\r\n\r\n" + self.PAGE)
                return
            with socket.create_connection(self.upstream) as agent:
                agent.sendall(first)
                back = threading.Thread(target=self._pump, args=(agent, client), daemon=True)
                back.start()
                self._pump(client, agent)
                back.join(timeout=30)

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def rebinding_site(ui_agent: UiAgent) -> Iterator[RebindingSite]:
    site = RebindingSite(ui_agent.address)
    try:
        yield site
    finally:
        site.close()


def test_a_rebound_page_cannot_drive_the_agent_through_the_browser(
        ui_agent: UiAgent, browser: UiBrowser, rebinding_site: RebindingSite) -> None:
    browser.driver.get(rebinding_site.origin + "/attack")
    outcome = browser.driver.execute_async_script("""
        const [job, done] = arguments;
        const result = {};
        fetch("/v1/jobs", {method: "POST", body: job})
          .then((r) => { result.post = r.status; return fetch("/v1/jobs"); })
          .then((r) => { result.read = r.status; })
          .catch((e) => { result.error = String(e); })
          .then(() => new Promise((resolve) => {
            const ws = new WebSocket(location.origin.replace("http", "ws") + "/v1/event/ws");
            ws.onopen = () => { result.socket = "open"; ws.close(); resolve(); };
            ws.onerror = () => { result.socket = "refused"; resolve(); };
          }))
          .then(() => done(result));
    """, json.dumps(mock_job("rebound")))

    # Same-origin for the browser, so the page reads the answers: refused, all of them.
    assert outcome == {"post": 403, "read": 403, "socket": "refused"}
    assert ui_agent.api.get("/v1/job/rebound").status_code == 404


def test_the_ui_answers_at_a_name_the_config_lists(tmp_path: Path, browser: UiBrowser) -> None:
    config = tmp_path / "agent.toml"
    config.write_text('[ui]\nallowed_hosts = ["yurt.localhost"]\n[acl]\nenabled = false\n')
    with start_ui_agent(tmp_path, "", "--config", str(config)) as agent:
        port = agent.address.rsplit(":", 1)[1]
        listed = UiAgent(f"http://yurt.localhost:{port}", agent.data_dir, "", agent.api)
        agent.run_job(mock_job("named"))
        browser.open(listed, "/ui/jobs", fresh=True)
        browser.wait_text("named")
        other = agent.api.get("/v1/jobs", headers={"Host": f"other.localhost:{port}"})
        assert other.status_code == 403
