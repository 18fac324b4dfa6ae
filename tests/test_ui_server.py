"""The web UI's server side (runtime/api/ui.py, the token's UI parts in api/app.py and
api/events.py): paths, types, HEAD, ETags, security headers, the root redirect, what the token
guards, the event websocket's subprotocol token, `yurt server` and a client agent (`--servers`,
the event socket relayed) serving the UI, and the event streams' pacing (layer 2: a real agent
on a real socket, the real clock; the cluster's are real processes over a real etcd; the pacer
itself is layer 0)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx2
import pytest
import trio
from trio_websocket import ConnectionClosed, open_websocket_url

from tests.agent_support import mock_job, running_agent
from tests.cluster_support import cluster
from yurt.runtime.api import events, ui
from yurt.runtime.api.events import Pacer

PAGES = ("/ui/jobs", "/ui/jobs/web", "/ui/jobs/web@prod/allocations", "/ui/jobs/run",
         "/ui/allocations/0123abcd", "/ui/allocations/0123abcd/web/logs", "/ui/clients",
         "/ui/clients/n1", "/ui/evaluations", "/ui/events", "/ui/no/such/page")
ASSETS = {"app.js": "text/javascript", "lib.js": "text/javascript",
          "pages/jobs.js": "text/javascript", "app.css": "text/css",
          "index.html": "text/html", "icon.svg": "image/svg+xml"}


async def raw_get(address: str, target: str, headers: str = "") -> tuple[int, bytes]:
    """A GET of `target` exactly as written (an HTTP client would normalise `..` away)."""
    host, port = address.removeprefix("http://").rsplit(":", 1)
    stream = await trio.open_tcp_stream(host, int(port))
    async with stream:
        await stream.send_all(f"GET {target} HTTP/1.1\r\nHost: localhost\r\n{headers}"
                              "Connection: close\r\n\r\n".encode())
        data = b""
        while chunk := await stream.receive_some(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def token_protocol(token: str) -> str:
    return "x-nomad-token." + base64.urlsafe_b64encode(token.encode()).decode().rstrip("=")


async def test_every_page_path_answers_the_page_with_its_security_headers(
        tmp_path: Path) -> None:
    page = (Path(ui.__file__).parent.parent / "ui" / "assets" / "index.html").read_bytes()
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            for path in PAGES:
                r = await a.client.get(path)
                assert r.status_code == 200, path
                assert r.content == page, path
                assert r.headers["content-type"] == "text/html; charset=utf-8"
                csp = r.headers["content-security-policy"]
                assert "script-src 'self'" in csp
                assert "unsafe-inline" not in csp
                assert "connect-src 'self'" in csp
                assert r.headers["x-content-type-options"] == "nosniff"
                assert r.headers["cache-control"] == "no-cache"
            for name, media in ASSETS.items():
                r = await a.client.get(f"/ui/assets/{name}")
                assert r.status_code == 200, name
                assert r.headers["content-type"].split(";")[0] == media, name
                assert r.headers["x-content-type-options"] == "nosniff"
                assert r.headers["etag"].startswith('"')
                assert r.content


async def test_what_is_not_an_asset_is_a_404_and_reads_no_file(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            for target in (
                    "/ui/assets/../../api/ui.py", "/ui/assets/%2e%2e/%2e%2e/api/ui.py",
                    "/ui/assets/..%2f..%2fapi%2fui.py", "/ui/assets/pages/../app.js",
                    "/ui/assets/../__init__.py", "/ui/assets/%2e%2e%2f__init__.py",
                    "/ui/assets/..%5c__init__.py", "/ui/assets/pages/../../__init__.py",
                    "/ui/assets/pages", "/ui/assets/pages/", "/ui/assets/", "/ui/assets//app.js",
                    "/ui/assets/APP.JS", "/ui/assets/app.js/", "/ui/assets/.app.js",
                    "/ui/assets/pages/jobs.js/x", "/ui/assets/%00", "/ui/assets/app.js%00",
                    "/ui/assets/etc/passwd", "/ui/assets//etc/passwd"):
                status, body = await raw_get(a.address, target)
                assert (status, body) == (404, b"Not found"), target
            r = await a.client.get("/ui/assets/nope.js")
            assert r.status_code == 404
            assert r.headers["x-content-type-options"] == "nosniff"
            assert "content-security-policy" in r.headers
            # Made-up names grow nothing: the table of assets is the wheel's, read once.
            known = dict(ui.assets())
            for i in range(300):
                assert (await a.client.get(f"/ui/assets/x{i}.js")).status_code == 404
            assert ui.assets() == known
            assert set(known) >= set(ASSETS)


async def test_head_says_what_get_would_without_the_body(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            for path in ("/ui/jobs", "/ui/assets/app.js", "/ui/assets/pages/jobs.js"):
                got = await a.client.get(path)
                head = await a.client.head(path)
                assert head.status_code == 200, path
                assert head.content == b""
                assert int(head.headers["content-length"]) == len(got.content) > 0
                for key in ("content-type", "etag", "content-security-policy"):
                    assert head.headers[key] == got.headers[key], (path, key)
            assert (await a.client.head("/ui/assets/nope.js")).status_code == 404
            assert (await a.client.post("/ui/jobs")).status_code == 405


async def test_an_unchanged_asset_is_a_304_without_a_body(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            first = await a.client.get("/ui/assets/lib.js")
            etag = first.headers["etag"]
            for sent in (etag, f"W/{etag}", f'"other", {etag}', "*"):
                again = await a.client.get("/ui/assets/lib.js",
                                           headers={"If-None-Match": sent})
                assert again.status_code == 304, sent
                assert again.content == b""
                assert again.headers["etag"] == etag
            changed = await a.client.get("/ui/assets/lib.js",
                                         headers={"If-None-Match": '"stale"'})
            assert changed.status_code == 200
            assert changed.content == first.content
            other = await a.client.get("/ui/assets/app.js")
            assert other.headers["etag"] != etag  # a content tag, not one for all


async def test_the_root_sends_a_browser_to_the_ui_and_an_api_client_gets_a_404(
        tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            browser = await a.client.get("/", headers={
                "Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
            assert browser.status_code == 307
            assert browser.headers["location"] == "/ui/jobs"
            assert "accept" in browser.headers["vary"].lower()
            for accept in ("*/*", "application/json", ""):
                r = await a.client.get("/", headers={"Accept": accept})
                assert r.status_code == 404, accept
                assert "accept" in r.headers["vary"].lower()
            for path in ("/ui", "/ui/"):
                r = await a.client.get(path)
                assert (r.status_code, r.headers["location"]) == (307, "/ui/jobs"), path


async def test_with_a_token_the_ui_is_served_and_no_data_is_without_it(
        tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path, token="s3cret") as a:
            # The client sends the token: register something to look for.
            r = await a.client.post("/v1/jobs", json=mock_job("secret-job-name"))
            assert r.status_code == 200
            async with httpx2.AsyncClient(base_url=a.address) as anon:
                for path in (*PAGES, *(f"/ui/assets/{n}" for n in ASSETS)):
                    r = await anon.get(path)
                    assert r.status_code == 200, path
                    assert b"secret-job-name" not in r.content, path
                for path in ("/v1/jobs", "/v1/allocations", "/v1/job/secret-job-name",
                             "/v1/nodes", "/v1/agent/members"):
                    r = await anon.get(path)
                    assert r.status_code == 403, path
                    r = await anon.get(path, headers={"X-Nomad-Token": "wrong"})
                    assert r.status_code == 403, path
                assert (await anon.get("/v1/jobs", headers={
                    "X-Nomad-Token": "s3cret"})).status_code == 200
                # The UI's token never travels in the query string, nor counts there.
                assert (await anon.get("/v1/jobs?token=s3cret")).status_code == 403
            # A path that starts as the UI's but names the API is the UI's page, never data.
            for target in ("/ui/../v1/jobs", "/ui/%2e%2e/v1/jobs", "/ui/assets/../../v1/jobs",
                           "/ui/..%2fv1%2fjobs"):
                status, body = await raw_get(a.address, target)
                assert b"secret-job-name" not in body, target
                assert status in (200, 404), target
            status, body = await raw_get(a.address, "/v1/jobs")
            assert status == 403


async def test_the_event_socket_takes_the_token_as_a_subprotocol(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path, token="s3cret") as a:
            url = a.address.replace("http", "ws") + "/v1/event/ws?index=0"
            async with open_websocket_url(
                    url, subprotocols=["yurt-events", token_protocol("s3cret")]) as ws:
                assert ws.subprotocol == "yurt-events"  # never the token's echo
                record = json.loads(await ws.get_message())
                assert record["Events"][0]["Topic"] == "Node"
            # The header still works, with no subprotocol chosen when none is offered.
            async with open_websocket_url(url, extra_headers=[
                    (b"X-Nomad-Token", b"s3cret")]) as ws:
                assert ws.subprotocol is None
                assert json.loads(await ws.get_message())["Events"]
            for offered in ([token_protocol("wrong")], ["yurt-events", token_protocol("wrong")],
                            ["yurt-events"], ["yurt-events", "x-nomad-token.!!!"],
                            ["yurt-events", token_protocol("s3cret") + "x"],
                            ["yurt-events", "x-nomad-token."]):
                with pytest.raises(ConnectionClosed) as closed:
                    async with open_websocket_url(url, subprotocols=offered) as ws:
                        await ws.get_message()  # nothing is ever sent before the close
                assert closed.value.reason.code == 1008, offered
            # A header with the wrong token is not rescued by a right subprotocol: the
            # header is what a non-browser client meant.
            with pytest.raises(ConnectionClosed) as closed:
                async with open_websocket_url(
                        url, subprotocols=["yurt-events", token_protocol("s3cret")],
                        extra_headers=[(b"X-Nomad-Token", b"wrong")]) as ws:
                    await ws.get_message()
            assert closed.value.reason.code == 1008


async def test_without_a_token_the_ui_subprotocol_is_chosen(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            url = a.address.replace("http", "ws") + "/v1/event/ws?index=0"
            async with open_websocket_url(url, subprotocols=["yurt-events"]) as ws:
                assert ws.subprotocol == "yurt-events"
                assert json.loads(await ws.get_message())["Events"]
            async with open_websocket_url(url) as ws:
                assert ws.subprotocol is None
                assert json.loads(await ws.get_message())["Events"]


async def test_a_server_and_a_client_agent_serve_the_ui_and_its_event_socket(
        etcd_urls: list[str], etcd_prefix: bytes, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("s3cret\n")
    with trio.fail_after(120):
        async with cluster(etcd_urls, etcd_prefix, tmp_path) as c:
            server = await c.server("s1", "--token-file", str(token_file))
            agent = await c.agent("a1", [server], "--driver-allow", "mock_driver",
                                  "--token-file", str(token_file))
            for member in (server, agent):
                async with httpx2.AsyncClient(base_url=member.address, timeout=30) as anon:
                    for path in ("/ui/jobs", "/ui/assets/app.js", "/ui/assets/pages/jobs.js"):
                        r = await anon.get(path)
                        assert r.status_code == 200, (member.name, path)
                        assert "content-security-policy" in r.headers
                    assert (await anon.get("/v1/jobs")).status_code == 403, member.name
            # The client agent's page talks to the client agent: its answers are the server's,
            # the event socket's too (relayed: a browser's page can open no other).
            url = agent.address.replace("http", "ws") + "/v1/event/ws?topic=Job"
            with pytest.raises(ConnectionClosed) as closed:
                async with open_websocket_url(
                        url, subprotocols=["yurt-events", token_protocol("wrong")]) as ws:
                    await ws.get_message()
            assert closed.value.reason.code == 1008
            async with open_websocket_url(
                    url, subprotocols=["yurt-events", token_protocol("s3cret")]) as ws, \
                    httpx2.AsyncClient(base_url=agent.address, timeout=30,
                                       headers={"X-Nomad-Token": "s3cret"}) as client:
                assert ws.subprotocol == "yurt-events"
                job = mock_job("relayed")
                job["Job"]["Datacenters"] = ["dc1"]
                r = await client.put("/v1/jobs", json=job)
                assert r.status_code == 200, r.text
                while True:
                    record = json.loads(await ws.get_message())
                    if "relayed" in [e["Key"] for e in record.get("Events", [])]:
                        break
                assert (await client.get("/v1/jobs")).json()[0]["ID"] == "relayed"


def test_the_pacer_lets_a_burst_through_and_rations_what_follows() -> None:
    pacer = Pacer(0.1, 4, now=100.0)
    assert [pacer.woke(100.0 + i * 0.01) for i in range(3)] == [0.0, 0.0, 0.0]
    # The fourth takes the last whole token (0.3 grew back meanwhile): the next waits until
    # a whole one has.
    assert pacer.woke(100.03) == pytest.approx(0.07)
    # Sustained: one wake-up per interval, each told to wait a whole interval.
    at = 100.10
    for _ in range(20):
        assert pacer.woke(at) == pytest.approx(0.1, abs=1e-6)
        at += 0.1
    # A quiet spell refills the bucket, never past the burst.
    assert [pacer.woke(at + 60.0 + i * 0.001) for i in range(3)] == [0.0, 0.0, 0.0]
    assert pacer.woke(at + 60.003) > 0.0


async def test_a_burst_of_records_reaches_the_event_socket_without_waiting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A long interval: any wait on it would outlast the test's deadline.
    monkeypatch.setattr(events, "STREAM_COALESCE", 30.0)
    with trio.fail_after(20):
        async with running_agent(tmp_path) as a:
            url = a.address.replace("http", "ws") + "/v1/event/ws?topic=Job"
            async with open_websocket_url(url) as ws:  # an API client's: STREAM_COALESCE
                # Each record published once the one before arrived: a person's action and
                # what follows it.
                for i in range(events.STREAM_BURST):
                    a.agent.broker.publish("Job", "JobRegistered", f"j{i}", {"Job": {}})
                    record = json.loads(await ws.get_message())
                    assert [e["Key"] for e in record["Events"]] == [f"j{i}"]
                # Past the burst, the socket is rationed again: records pile up.
                a.agent.broker.publish("Job", "JobRegistered", "late", {"Job": {}})
                with trio.move_on_after(0.5) as waited:
                    await ws.get_message()
                assert waited.cancelled_caught


async def test_the_ui_socket_is_rationed_at_its_own_interval(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(events, "STREAM_COALESCE", 30.0)  # never waited on here
    with trio.fail_after(20):
        async with running_agent(tmp_path) as a:
            url = a.address.replace("http", "ws") + "/v1/event/ws?topic=Job"
            async with open_websocket_url(url, subprotocols=["yurt-events"]) as ws:
                # Sustained, well past the burst: each waits at most UI_STREAM_COALESCE.
                for i in range(5 * events.STREAM_BURST):
                    a.agent.broker.publish("Job", "JobRegistered", f"j{i}", {"Job": {}})
                    record = json.loads(await ws.get_message())
                    assert [e["Key"] for e in record["Events"]] == [f"j{i}"]
