"""A page of another site cannot drive the agent through the browser that shows it (layer 3):
requests whose `Origin` is not the agent's own address are refused (runtime/api/origin.py),
same-origin ones and API clients (no `Origin`) are not."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import trio
from trio_websocket import ConnectionRejected, open_websocket_url

from tests.agent_support import mock_job, running_agent
from tests.browser_support import UiAgent, UiBrowser
from yurt.runtime.api.origin import same_origin


def test_same_origin_is_the_host_and_port_whatever_the_scheme_says() -> None:
    assert same_origin(b"http://127.0.0.1:4646", b"127.0.0.1:4646")
    assert same_origin(b"http://agent.example", b"agent.example:80")
    assert same_origin(b"https://agent.example:443", b"agent.example")
    assert not same_origin(b"http://127.0.0.1:4647", b"127.0.0.1:4646")
    assert not same_origin(b"http://evil.example", b"127.0.0.1:4646")
    assert not same_origin(b"null", b"127.0.0.1:4646")
    assert not same_origin(b"file://", b"127.0.0.1:4646")


async def test_another_sites_origin_is_refused_before_anything_runs(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with running_agent(tmp_path) as a:
            c = a.client
            host = a.address.split("//", 1)[1]
            evil = {"Origin": "http://evil.example", "Content-Type": "text/plain"}
            refused = await c.post("/v1/jobs", content=json.dumps(mock_job("csrf")), headers=evil)
            assert refused.status_code == 403
            assert "Cross-origin" in refused.text
            assert (await c.get("/v1/job/csrf")).status_code == 404
            ws = a.address.replace("http", "ws", 1) + "/v1/event/ws"
            with pytest.raises(ConnectionRejected):
                async with open_websocket_url(ws, extra_headers=[(b"Origin", b"http://evil.example")]):
                    pass
            own = await c.post("/v1/jobs", json=mock_job("own"),
                               headers={"Origin": f"http://{host}"})
            assert own.status_code == 200
            assert (await c.post("/v1/jobs", json=mock_job("cli"))).status_code == 200


@pytest.fixture
def other_site() -> Iterator[str]:
    """A page served from another port of this machine: another origin for the browser."""

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<!doctype html><title>another site</title>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_page_of_another_site_cannot_post_a_job_through_the_browser(
        ui_agent: UiAgent, browser: UiBrowser, other_site: str) -> None:
    browser.driver.get(other_site)
    outcome = browser.driver.execute_async_script("""
        const [agent, job, done] = arguments;
        const result = {};
        fetch(agent + "/v1/jobs", {method: "POST", mode: "no-cors", body: job})
          .then(() => { result.fetch = "sent"; }, (e) => { result.fetch = String(e); })
          .then(() => new Promise((resolve) => {
            const ws = new WebSocket(agent.replace("http", "ws") + "/v1/event/ws");
            ws.onopen = () => { result.socket = "open"; ws.close(); resolve(); };
            ws.onerror = () => { result.socket = "refused"; resolve(); };
          }))
          .then(() => done(result));
    """, ui_agent.address, json.dumps(mock_job("from-elsewhere")))

    assert outcome == {"fetch": "sent", "socket": "refused"}  # the browser did send the POST
    assert ui_agent.api.get("/v1/job/from-elsewhere").status_code == 404
