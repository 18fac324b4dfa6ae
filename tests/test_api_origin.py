"""A page of another site cannot drive the agent through the browser that shows it
(runtime/api/origin.py): requests whose `Origin` is not the agent's own address, and requests
the browser marks `Sec-Fetch-Site: cross-site` or `same-site` (an `<img>`'s GET of a GC route)
are refused, whatever their method; same-origin ones, a navigation to the UI and API clients
(none of these headers) are not. Each state-changing route takes only its Nomad methods (405).

Layer 0 (the decision), layer 2 (an agent on a real socket), layer 3 (Chromium and a page
served from another port or name of this machine).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import nomad
import pytest
import trio
from trio_websocket import ConnectionRejected, open_websocket_url

from tests.agent_support import mock_job, raw_job, running_agent, wait_status
from tests.browser_support import UiAgent, UiBrowser
from yurt.runtime.api.origin import AllowedHosts, refusal, same_origin


def test_same_origin_is_the_host_and_port_whatever_the_scheme_says() -> None:
    assert same_origin(b"http://127.0.0.1:4646", b"127.0.0.1:4646")
    assert same_origin(b"http://agent.example", b"agent.example:80")
    assert same_origin(b"https://agent.example:443", b"agent.example")
    assert not same_origin(b"http://127.0.0.1:4647", b"127.0.0.1:4646")
    assert not same_origin(b"http://evil.example", b"127.0.0.1:4646")
    assert not same_origin(b"null", b"127.0.0.1:4646")
    assert not same_origin(b"file://", b"127.0.0.1:4646")


OWN = (b"host", b"127.0.0.1:4646")
NAVIGATE = [(b"sec-fetch-mode", b"navigate"), (b"sec-fetch-dest", b"document")]


@pytest.mark.parametrize(("method", "path", "headers", "refused"), [
    ("GET", "/v1/client/gc", [(b"sec-fetch-site", b"cross-site")], "Sec-Fetch-Site: cross"),
    ("GET", "/v1/client/gc", [(b"sec-fetch-site", b"same-site")], "Sec-Fetch-Site: same-site"),
    ("POST", "/v1/jobs", [(b"sec-fetch-site", b"cross-site")], "Cross-site"),
    ("GET", "/v1/jobs", [(b"sec-fetch-site", b"cross-site"), *NAVIGATE], "Cross-site"),
    ("GET", "/v1/client/gc", [(b"referer", b"http://evil.example/page")], "Referer"),
    ("POST", "/v1/jobs", [(b"origin", b"http://evil.example")], "Cross-origin"),
    ("POST", "/v1/jobs", [(b"sec-fetch-site", b"same-origin"),
                          (b"origin", b"http://evil.example")], "Cross-origin"),
    ("GET", "/ui/jobs", [(b"sec-fetch-site", b"cross-site"), (b"sec-fetch-mode", b"no-cors"),
                         (b"sec-fetch-dest", b"image")], "Cross-site"),
    ("GET", "/v1/jobs", [(b"sec-fetch-site", b"same-origin")], None),
    ("POST", "/v1/jobs", [(b"sec-fetch-site", b"same-origin"),
                          (b"origin", b"http://127.0.0.1:4646")], None),
    ("GET", "/v1/jobs", [(b"sec-fetch-site", b"none"), *NAVIGATE], None),  # a typed address
    ("GET", "/ui/jobs", [(b"sec-fetch-site", b"cross-site"), *NAVIGATE], None),  # a link
    ("GET", "/", [(b"sec-fetch-site", b"same-site"), *NAVIGATE], None),
    ("GET", "/ui/jobs", [(b"referer", b"http://evil.example/page")], None),
    ("GET", "/v1/jobs", [(b"referer", b"http://127.0.0.1:4646/ui/jobs")], None),
    ("GET", "/v1/client/gc", [], None),  # an API client
])
def test_what_a_browser_sends_for_another_site_is_refused(
        method: str, path: str, headers: list[tuple[bytes, bytes]], refused: str | None
        ) -> None:
    found = refusal("http", method, path, [OWN, *headers], AllowedHosts.of("127.0.0.1"))
    if refused is None:
        assert found is None
    else:
        assert found is not None
        assert refused in found


def test_a_websocket_is_never_a_navigation() -> None:
    headers = [OWN, (b"sec-fetch-site", b"cross-site"), *NAVIGATE]
    assert refusal("websocket", "GET", "/ui/jobs", headers, AllowedHosts.of("127.0.0.1"))


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


async def test_a_cross_site_get_of_the_gc_routes_deletes_nothing(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            await c.post("/v1/jobs", json=raw_job("once", "true", job_type="batch"))
            alloc_id = (await wait_status(c, "once", "complete"))["ID"]
            alloc_dir = tmp_path / "alloc" / alloc_id
            assert alloc_dir.is_dir()
            routes = (f"/v1/client/allocation/{alloc_id}/gc", "/v1/client/gc")
            for site in ("cross-site", "same-site"):
                for path in routes:
                    for method in ("GET", "PUT"):
                        refused = await c.request(method, path, headers={
                            "Sec-Fetch-Site": site, "Sec-Fetch-Mode": "no-cors",
                            "Sec-Fetch-Dest": "image"})
                        assert refused.status_code == 403, (site, method, path)
                        assert f"Sec-Fetch-Site: {site}" in refused.text
            referred = await c.get(routes[0], headers={"Referer": "http://evil.example/"})
            assert referred.status_code == 403
            assert alloc_dir.is_dir()
            assert alloc_id in a.agent.client.runners
            # The same GET from an API client (python-nomad's `gc_allocation`) collects it.
            pynomad = nomad.Nomad(host="127.0.0.1", port=urlsplit(a.address).port, timeout=10)
            await trio.to_thread.run_sync(
                lambda: pynomad.client.gc_allocation.garbage_collect(alloc_id))
            assert not alloc_dir.exists()
            await trio.to_thread.run_sync(pynomad.client.gc_all_allocations.garbage_collect)


async def test_state_changing_routes_take_only_their_methods(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            await c.post("/v1/jobs", json=raw_job("once", "true", job_type="batch"))
            alloc_id = (await wait_status(c, "once", "complete"))["ID"]
            alloc_dir = tmp_path / "alloc" / alloc_id
            alloc = f"/v1/client/allocation/{alloc_id}"
            servers = (await c.get("/v1/agent/servers")).json()
            wrong = [
                ("HEAD", f"{alloc}/gc"), ("POST", f"{alloc}/gc"), ("DELETE", f"{alloc}/gc"),
                ("HEAD", "/v1/client/gc"), ("POST", "/v1/client/gc"),
                ("DELETE", "/v1/client/gc"), ("GET", f"{alloc}/restart"),
                ("HEAD", f"{alloc}/restart"), ("GET", f"{alloc}/signal"),
                ("GET", f"/v1/allocation/{alloc_id}/stop"), ("HEAD", "/v1/jobs"),
                ("HEAD", "/v1/job/once"), ("PATCH", "/v1/job/once"),
                ("GET", "/v1/job/once/evaluate"), ("GET", "/v1/job/once/plan"),
                ("HEAD", "/v1/job/once/scale"), ("GET", "/v1/system/gc"),
                ("POST", "/v1/system/gc"), ("HEAD", "/v1/agent/servers?address=10.9.9.9"),
                ("GET", "/v1/agent/join"), ("HEAD", "/v1/namespace/default"),
                ("HEAD", "/v1/var/a/b"), ("HEAD", "/v1/operator/scheduler/configuration"),
                ("GET", "/v1/namespace"), ("DELETE", "/v1/jobs"),
            ]
            for method, path in wrong:
                answer = await c.request(method, path)
                assert answer.status_code == 405, (method, path, answer.status_code)
            assert alloc_dir.is_dir()
            assert (await c.get("/v1/job/once")).status_code == 200
            assert (await c.get("/v1/agent/servers")).json() == servers
            # Reads keep HEAD.
            assert (await c.head("/v1/job/once/allocations")).status_code == 200


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost"], ids=["same-site", "cross-site"])
def test_a_page_of_another_site_cannot_collect_allocations_with_an_image(
        ui_agent: UiAgent, browser: UiBrowser, other_site: str, name: str) -> None:
    job = mock_job(f"img-{name.replace('.', '-')}")
    job["Job"]["Type"] = "batch"
    job["Job"]["TaskGroups"][0]["Tasks"][0]["Config"]["run_for"] = "0s"
    alloc_id = ui_agent.wait_alloc(ui_agent.run_job(job), "complete")["ID"]
    alloc_dir = ui_agent.data_dir / "alloc" / alloc_id
    assert alloc_dir.is_dir()

    browser.driver.get(other_site.replace("127.0.0.1", name))
    loaded = browser.driver.execute_async_script("""
        const [agent, alloc, done] = arguments;
        const paths = ["/v1/client/gc", "/v1/client/allocation/" + alloc + "/gc"];
        Promise.all(paths.map((path) => new Promise((resolve) => {
          const img = document.createElement("img");
          img.onload = () => resolve("load");
          img.onerror = () => resolve("error");
          img.src = agent + path;
          document.body.append(img);
        }))).then(done);
    """, ui_agent.address, alloc_id)

    assert loaded == ["error", "error"]  # both loads are over (no image, refused or not)
    assert alloc_dir.is_dir()
    # The allocation was collectable: an API client's GET collects it.
    assert ui_agent.api.get(f"/v1/client/allocation/{alloc_id}/gc").status_code == 200
    assert not alloc_dir.exists()
