"""The web UI as a person meets it: a real `yurt agent --dev` process and Debian's headless
Chromium, driven through its chromedriver by selenium (layer 3: real processes, real clock,
every wait bounded).

- `start_ui_agent(tmp, token=...)`: a context manager giving a `UiAgent` (address, a sync API
  client with the token, the data dir). `--dev`, so its stop kills every task it started.
  ACLs off (its config says `[acl] enabled = false`; `token`: the one token it takes, as an
  agent before ACLs); `acl=True`: ACLs on as `yurt agent` has them by default, `token` the
  management token its first start bootstrapped (`<data dir>/server/bootstrap.token`), and
  `UiAgent.acl_token(name, rules)` makes a client token of one policy.
- `ui_agent`: a fixture, one such agent (no token) per test module.
- `browser`: a fixture, ONE Chromium for the whole test run (a start costs about a second);
  each test gets it at 1280 x 900, light theme, with the session storage of the origin it last
  opened cleared by `UiBrowser.open(..., fresh=True)`.
- `UiBrowser`: `open(agent, path)` waits for the page's first data (`main[data-ready]`, set by
  app.js), `wait(predicate, what)` polls every 50 ms up to an absolute bound and fails saying
  what it waited for (with a screenshot beside the other screenshots), `click`, `confirm`,
  `text`, `screenshot(name)` at 1280 px and 375 px.

Chromium missing is a failure that says how to install it (`scripts/test` does), never a skip.
Screenshots go to `ui-screenshots/` at the top of the repository (ignored by git), or to
`$YURT_UI_SCREENSHOTS`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx2
import pytest

CHROMIUM = os.environ.get("YURT_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("YURT_CHROMEDRIVER", "/usr/bin/chromedriver")
YURT = str(Path(sys.executable).parent / "yurt")
SCREENSHOTS = Path(os.environ.get("YURT_UI_SCREENSHOTS")
                   or Path(__file__).resolve().parent.parent / "ui-screenshots")
#: Widths the issue asks every main page to read well at: a laptop and a phone.
WIDE, NARROW = (1280, 900), (375, 812)

T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class UiAgent:
    address: str
    data_dir: Path
    token: str
    api: httpx2.Client

    def acl_token(self, name: str, rules: str, policy: str = "") -> dict[str, Any]:
        """A client token `name` (Nomad's ACLToken, SecretID included) holding one new policy
        of `rules`, named `policy` (default: `name`, when it is a valid policy name); made with
        this agent's (management) token."""
        policy = policy or name
        made = self.api.post(f"/v1/acl/policy/{policy}", json={"Name": policy, "Rules": rules})
        made.raise_for_status()
        answer = self.api.post("/v1/acl/token", json={"Name": name, "Type": "client",
                                                      "Policies": [policy]})
        answer.raise_for_status()
        token: dict[str, Any] = answer.json()
        return token

    def run_job(self, job: dict[str, Any]) -> str:
        """Registers `{"Job": ...}` through the API; the job's ID."""
        answer = self.api.post("/v1/jobs", json=job)
        answer.raise_for_status()
        return str(job["Job"]["ID"])

    def allocations(self, job_id: str) -> list[dict[str, Any]]:
        answer = self.api.get(f"/v1/job/{job_id}/allocations")
        answer.raise_for_status()
        result: list[dict[str, Any]] = answer.json()
        return result

    def wait_alloc(self, job_id: str, status: str = "running",
                   timeout: float = 20) -> dict[str, Any]:
        """The job's first allocation once its client status is `status`."""
        return poll(lambda: next((a for a in self.allocations(job_id)
                                  if a["ClientStatus"] == status), None),
                    timeout, f"an allocation of {job_id} {status}")


def poll(predicate: Callable[[], T | None], timeout: float, what: str,
         interval: float = 0.05) -> T:
    """`predicate()` once it is truthy, polled every `interval` up to `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:g} s for {what}")
        time.sleep(interval)


#: Where an ACL agent's first start writes its management token (runtime/server/acl/settings.py
#: `BOOTSTRAP_TOKEN_FILE`).
BOOTSTRAP_TOKEN_FILE = "server/bootstrap.token"


def _acl_off_config(tmp: Path, extra: tuple[str, ...]) -> tuple[str, ...]:
    """`extra` with a `--config` whose `[acl]` says `enabled = false`: the caller's config
    file, when `extra` names one, with that section added unless it has its own."""
    import tomllib

    args = list(extra)
    text = ""
    if "--config" in args:
        text = Path(args[args.index("--config") + 1]).read_text()
        if "acl" in tomllib.loads(text):
            return extra
        del args[args.index("--config"):args.index("--config") + 2]
    config = tmp / "ui-agent-acl-off.toml"
    config.write_text(text + "\n[acl]\nenabled = false\n")
    return (*args, "--config", str(config))


@contextmanager
def start_ui_agent(tmp: Path, token: str = "", *extra: str, dev: bool = True,
                   acl: bool = False) -> Iterator[UiAgent]:
    """`dev=False`: a plain agent, whose stop leaves its tasks running. `acl`: see the
    module's header."""
    data = tmp / "agent-data"
    env = {k: v for k, v in os.environ.items() if k != "YURT_AGENT_TOKEN"}
    if acl:
        assert not token, "an ACL agent's token is the one it bootstraps"
    else:
        # The UI's pages, not its sign-in: an agent whose ACLs are off, where a token (if
        # given) is the one all-powerful token (tests/test_ui_acl.py has the ACL's UI).
        extra = _acl_off_config(tmp, extra)
    args = [YURT, "agent", *(["--dev"] if dev else []), "--data-dir", str(data),
            "--port", str(free_port()), *extra]
    if token:
        token_file = tmp / "agent-token"
        token_file.write_text(token)
        token_file.chmod(0o600)
        args += ["--token-file", str(token_file)]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, env=env)
    try:
        assert process.stderr is not None
        line = process.stderr.readline()  # "yurt agent … listening on http://…": the API is up
        assert "listening on" in line, f"the agent did not start: {line}{process.stderr.read()}"
        address = line.split("listening on ", 1)[1].split()[0]
        if acl:  # bootstrapped before the API answers anything (runtime/agent/aclsetup.py)
            token = (data / BOOTSTRAP_TOKEN_FILE).read_text().strip()
        headers = {"X-Nomad-Token": token} if token else {}
        with httpx2.Client(base_url=address, headers=headers, timeout=20) as api:
            yield UiAgent(address, data, token, api)
    finally:
        process.send_signal(signal.SIGTERM)  # with --dev, every task it started is killed
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise


class CuttableProxy:
    """A TCP relay to `upstream` on a port of its own, whose connections the test can cut and
    then refuse for a while: the network between a browser and a healthy agent going away."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.rsplit("//", 1)[1].rsplit(":", 1)
        self.upstream = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.refusing = False
        self.open: set[socket.socket] = set()
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            if self.refusing:
                client.close()
                continue
            server = socket.create_connection(self.upstream)
            with self.lock:
                self.open |= {client, server}
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        for s in (source, sink):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Drops every connection and refuses new ones until `restore`."""
        self.refusing = True
        with self.lock:
            for s in self.open:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
            self.open.clear()

    def restore(self) -> None:
        self.refusing = False

    def relaying(self, agent: UiAgent) -> UiAgent:
        """`agent` as reached through this relay (the same API client for the test's calls)."""
        return UiAgent(self.address, agent.data_dir, agent.token, agent.api)

    def close(self) -> None:
        self.cut()
        self.listener.close()


class UiBrowser:
    def __init__(self, driver: Any) -> None:
        self.driver = driver
        self.origin = ""

    # ---- navigation

    def open(self, agent: UiAgent, path: str, *, ready: bool = True, fresh: bool = False) -> None:
        """Opens `path` on `agent`; with `ready`, waits until the page drew its first data."""
        if fresh and self.origin == agent.address:
            self.driver.execute_script("sessionStorage.clear()")
        self.origin = agent.address
        self.driver.get(agent.address + path)
        if fresh:
            self.driver.execute_script("sessionStorage.clear()")
        if ready:
            self.wait_ready()

    def wait_ready(self, page: str | None = None, timeout: float = 15) -> None:
        selector = f'main[data-ready="{page}"]' if page else "main[data-ready]"
        self.wait(lambda: self.driver.execute_script(
            "return document.querySelector(arguments[0]) !== null", selector),
            f"the page to be ready ({selector})", timeout)

    # ---- reading and acting

    def wait(self, predicate: Callable[[], T | None], what: str, timeout: float = 15) -> T:
        try:
            return poll(predicate, timeout, what)
        except AssertionError:
            self.screenshot_failure(what)
            raise

    def find(self, css: str) -> Any:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, css)

    def find_all(self, css: str) -> list[Any]:
        from selenium.webdriver.common.by import By

        return list(self.driver.find_elements(By.CSS_SELECTOR, css))

    def text(self, css: str = "main") -> str:
        """The text of the first element matching `css` ('' when there is none)."""
        value = self.driver.execute_script(
            "const el = document.querySelector(arguments[0]); return el ? el.innerText : ''", css)
        return str(value)

    def attribute(self, css: str, name: str) -> str | None:
        """An attribute of the first element matching `css`, read in one step (a live redraw
        between finding an element and reading it would leave a stale reference)."""
        value = self.driver.execute_script(
            "const el = document.querySelector(arguments[0]);"
            "return el ? el.getAttribute(arguments[1]) : null", css, name)
        return None if value is None else str(value)

    def wait_text(self, needle: str, css: str = "main", timeout: float = 15) -> str:
        def found() -> str | None:
            text = self.text(css)
            return text if needle in text else None

        return self.wait(found, f"{needle!r} in {css}", timeout)

    def click(self, css: str) -> None:
        """Clicks the first element matching `css` once there is one; a live redraw that
        replaces it between the look-up and the click is met by looking it up again."""
        from selenium.common.exceptions import StaleElementReferenceException

        def clicked() -> bool:
            found = self.find_all(css)
            if not found:
                return False
            try:
                found[0].click()
            except StaleElementReferenceException:
                return False
            return True

        self.wait(clicked, f"an element {css} to click")

    def confirm(self) -> None:
        """Confirms the open confirmation dialog."""
        self.click('dialog[open] [data-role="confirm"]')
        self.wait(lambda: not self.find_all("dialog[open]"), "the dialog to close")

    def resync(self) -> None:
        """Makes the page read its data again, as after its event socket reconnects."""
        self.driver.execute_script("window.dispatchEvent(new CustomEvent('yurt:resync'))")

    def stale_notice(self) -> str:
        """The notice a live page shows while it could not re-read what it shows ('' when none)."""
        return str(self.driver.execute_script(
            "const el = document.getElementById('stale'); return el.hidden ? '' : el.innerText"))

    def set_token(self, token: str) -> None:
        self.driver.execute_script("sessionStorage.setItem('yurt.token', arguments[0])", token)

    def console_errors(self) -> list[str]:
        return [entry["message"] for entry in self.driver.get_log("browser")
                if entry.get("level") == "SEVERE"]

    # ---- looking

    def size(self, width: int, height: int, *, dark: bool = False) -> None:
        self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600})
        self.driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {
            "features": [{"name": "prefers-color-scheme", "value": "dark" if dark else "light"}]})

    def screenshot(self, name: str, *, widths: tuple[tuple[int, int], ...] = (WIDE, NARROW),
                   dark: bool = False) -> list[Path]:
        """The whole page at each width, as `ui-screenshots/<name>-<width>[-dark].png`; the
        window is back at 1280 px, light, afterwards."""
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        written = []
        try:
            for width, height in widths:
                self.size(width, height, dark=dark)
                full = int(self.driver.execute_script(
                    "return Math.min(document.documentElement.scrollHeight, 6000)"))
                self.size(width, max(height, full), dark=dark)
                path = SCREENSHOTS / f"{name}-{width}{'-dark' if dark else ''}.png"
                self.driver.save_screenshot(str(path))
                written.append(path)
        finally:
            self.size(*WIDE)
        return written

    def overflow_at(self, width: int) -> int:
        """How many pixels the page is wider than a `width` px screen (0: it fits)."""
        self.size(width, NARROW[1])
        try:
            return int(self.driver.execute_script(
                "return document.documentElement.scrollWidth - window.innerWidth"))
        finally:
            self.size(*WIDE)

    def table_overflow_at(self, width: int) -> int:
        """How many pixels the widest table is wider than its box on a `width` px screen."""
        self.size(width, NARROW[1])
        try:
            return int(self.driver.execute_script(
                "return Math.max(0, ...[...document.querySelectorAll('.table-wrap')]"
                ".map(w => w.scrollWidth - w.clientWidth))"))
        finally:
            self.size(*WIDE)

    def screenshot_failure(self, what: str) -> None:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        safe = "".join(c if c.isalnum() else "-" for c in what)[:60]
        # A failing test's picture is a bonus, never a new error.
        with contextlib.suppress(Exception):
            self.driver.save_screenshot(str(SCREENSHOTS / f"failed-{safe}.png"))


def require_chromium() -> None:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not shutil.which(p)]
    if missing:
        pytest.fail(f"the web UI's tests need Chromium and chromedriver, missing: "
                    f"{', '.join(missing)}. Run ./scripts/test (it installs Debian's chromium "
                    f"and chromium-driver as root), or apt-get install chromium chromium-driver, "
                    f"or set YURT_CHROMIUM and YURT_CHROMEDRIVER.", pytrace=False)


def start_chromium(profile: Path) -> Any:
    """Headless Chromium with the flags this closed network needs (no background connections
    to fail), a throwaway profile, and the browser console kept for `console_errors`."""
    require_chromium()
    # selenium-manager must not look for or download a driver: the paths are given.
    os.environ["SE_OFFLINE"] = "true"
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                 f"--user-data-dir={profile}", f"--window-size={WIDE[0]},{WIDE[1]}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


@pytest.fixture(scope="session")
def chromium_session() -> Iterator[Any]:
    with tempfile.TemporaryDirectory(prefix="yurt-chromium-") as profile:
        driver = start_chromium(Path(profile))
        try:
            yield driver
        finally:
            driver.quit()


@pytest.fixture
def browser(chromium_session: Any) -> UiBrowser:
    """The run's Chromium at 1280 px, light theme, on a blank page, its console log drained.

    The blank page first: the last test's page would otherwise keep running (its event socket
    reconnecting to an agent that test stopped) and log into this test's console."""
    ui = UiBrowser(chromium_session)
    chromium_session.get("about:blank")
    ui.size(*WIDE)
    chromium_session.get_log("browser")
    return ui


@pytest.fixture(scope="module")
def ui_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiAgent]:
    with start_ui_agent(tmp_path_factory.mktemp("ui-agent")) as agent:
        yield agent
