"""Nomad's `-ui` and its web UI hint (runtime/cli/ui_hint.py): the page each route names and
the hint's words (plain logic); then each command that has the flag, run against a real agent
with a fake browser (`$BROWSER`, a script that records its argument): the page it opens is the
object's, the agent serves it, and the hint is on stderr only when asked for."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.agent_support import mock_job
from tests.browser_support import YURT, UiAgent, poll, start_ui_agent
from tests.token_support import without_suite_token
from yurt.runtime.cli.ui_hint import hint_text, hints_setting, job_ref, ui_url

# ---------------------------------------------------------------------------- plain logic


@pytest.mark.parametrize(("route", "params", "path"), [
    ("job status", {}, "/ui/jobs"),
    ("job status single", {"job": job_ref("web", "default")}, "/ui/jobs/web"),
    ("job run", {"job": job_ref("web", "prod")}, "/ui/jobs/web@prod"),
    # An ID holding `@` names its namespace even when it is the default one (lib.js `jobHref`).
    ("job dispatch", {"job": job_ref("a@b", "")}, "/ui/jobs/a%40b@default"),
    ("alloc status", {"allocID": "ab/c"}, "/ui/allocations/ab%2Fc"),
    ("node status single", {"nodeID": "n1"}, "/ui/clients/n1"),
    ("server members", {}, "/ui/clients"),
    ("eval status", {"evalID": "e1"}, "/ui/evaluations?currentEval=e1"),
    ("deployment status", {"job": job_ref("web", "")}, "/ui/jobs/web/deployments"),
])
def test_each_route_names_yurts_page(route: str, params: dict[str, str], path: str) -> None:
    url, _ = ui_url(route, "http://127.0.0.1:4646/", **params)
    assert url == "http://127.0.0.1:4646" + path


def test_the_hint_is_nomads_line() -> None:
    url, description = ui_url("job run", "http://h:1", job="web")
    assert hint_text(url, description) == "\n\n==> View this job in the Web UI: http://h:1/ui/jobs/web"


@pytest.mark.parametrize(("raw", "expected"), [
    ("", None), ("1", True), ("true", True), ("T", True), ("0", False), ("false", False),
    ("yes", None),  # not a Go boolean: as unset
])
def test_show_hints_reads_go_booleans(raw: str, expected: bool | None) -> None:
    assert hints_setting({"NOMAD_CLI_SHOW_HINTS": raw} if raw else {}) is expected


# ---------------------------------------------------------------------------- the commands

JOB_FILE = """
job "hint-run" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "mock_driver"
      config { run_for = "1h" }
      resources {
        cpu    = 1
        memory = 10
      }
    }
  }
}
"""


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiAgent]:
    with start_ui_agent(tmp_path_factory.mktemp("cli-ui-hint")) as running:
        web = mock_job("hint-web")
        web["Job"]["TaskGroups"][0]["Update"] = {"MaxParallel": 1}  # so it has a deployment
        running.run_job(web)
        param = mock_job("hint-param")
        param["Job"].update(Type="batch", ParameterizedJob={})
        running.run_job(param)
        running.wait_alloc("hint-web")
        yield running


class Browser:
    """A fake `$BROWSER`: records the address it is given."""

    def __init__(self, folder: Path) -> None:
        self.record = folder / "browser-argv"
        self.script = folder / "record-browser"
        self.script.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {self.record}\n")
        self.script.chmod(0o700)

    def opened(self) -> list[str]:
        return self.record.read_text().split() if self.record.exists() else []


@pytest.fixture
def browser(tmp_path: Path) -> Browser:
    return Browser(tmp_path)


def yurt(agent: UiAgent, browser: Browser, *args: str, **env: str
         ) -> subprocess.CompletedProcess[str]:
    environment = {**without_suite_token(), "YURT_ADDR": agent.address,
                   "BROWSER": str(browser.script), "DISPLAY": "", "WAYLAND_DISPLAY": ""}
    environment.pop("NOMAD_CLI_SHOW_HINTS", None)
    environment.update(env)
    return subprocess.run([YURT, *args], capture_output=True, text=True, env=environment,
                          timeout=60, check=False, cwd=env.get("CWD"))


def assert_opened(agent: UiAgent, browser: Browser, done: subprocess.CompletedProcess[str],
                  path: str, description: str, tail: str = "") -> None:
    """The command succeeded, opened `path` of the agent, printed Nomad's hint last on
    stderr (then `tail`), and the agent serves the page."""
    assert done.returncode == 0, done.stderr
    url = agent.address + path
    assert browser.opened() == [url]
    assert done.stderr.endswith(f"\n\n==> {description} in the Web UI: {url}\n{tail}"), done.stderr
    assert url not in done.stdout
    page = httpx2.get(url, timeout=20)
    assert page.status_code == 200
    assert "text/html" in page.headers["content-type"]


def the(agent: UiAgent, path: str) -> Any:
    answer = agent.api.get(path)
    answer.raise_for_status()
    return answer.json()


@pytest.mark.slow
def test_status_commands_open_the_objects_page(agent: UiAgent, tmp_path: Path) -> None:
    alloc = agent.wait_alloc("hint-web")
    node = alloc["NodeID"]
    evaluation = the(agent, "/v1/job/hint-web/evaluations")[0]["ID"]
    cases = [
        (("job", "status", "-ui"), "/ui/jobs", "View and manage Nomad jobs"),
        (("job", "status", "-ui", "hint-web"), "/ui/jobs/hint-web",
         "View job details and metrics"),
        (("job", "status", "-short", "-ui", "hint-w"), "/ui/jobs/hint-web",
         "View job details and metrics"),
        (("status", "-ui", "hint-web"), "/ui/jobs/hint-web", "View job details and metrics"),
        (("status", "-ui", alloc["ID"][:8]), f"/ui/allocations/{alloc['ID']}",
         "View allocation details"),
        (("alloc", "status", "-ui", alloc["ID"][:8]), f"/ui/allocations/{alloc['ID']}",
         "View allocation details"),
        (("node", "status", "-ui"), "/ui/clients", "View and manage Nomad clients"),
        (("node", "status", "-ui", node[:8]), f"/ui/clients/{node}",
         "View client details and metrics"),
        (("server", "members", "-ui"), "/ui/clients", "View and manage Nomad clients"),
        (("eval", "list", "-ui"), "/ui/evaluations", "View evaluations"),
        (("eval", "status", "-ui", evaluation), f"/ui/evaluations?currentEval={evaluation}",
         "View evaluation details"),
    ]
    for n, (args, path, description) in enumerate(cases):
        folder = tmp_path / str(n)
        folder.mkdir()
        browser = Browser(folder)
        assert_opened(agent, browser, yurt(agent, browser, *args), path, description)


@pytest.mark.slow
def test_job_run_and_dispatch_open_the_jobs_page(agent: UiAgent, browser: Browser,
                                                tmp_path: Path) -> None:
    job_file = tmp_path / "hint-run.nomad.hcl"
    job_file.write_text(JOB_FILE)
    done = yurt(agent, browser, "job", "run", "-ui", str(job_file))
    # Before the monitor, and a line apart from it (command/job_run.go).
    assert_opened(agent, browser, done, "/ui/jobs/hint-run", "View this job", tail="\n")
    assert "Evaluation" in done.stdout

    browser.record.unlink()
    done = yurt(agent, browser, "job", "run", "-detach", "-ui", str(job_file))
    assert_opened(agent, browser, done, "/ui/jobs/hint-run", "View this job")

    browser.record.unlink()
    done = yurt(agent, browser, "job", "dispatch", "-ui", "hint-param")
    assert done.returncode == 0, done.stderr
    child = done.stdout.split("Dispatched Job ID = ", 1)[1].split()[0]
    assert child.startswith("hint-param/dispatch-")
    assert_opened(agent, browser, done, f"/ui/jobs/{child.replace('/', '%2F')}",
                  "View this job")


@pytest.mark.slow
def test_deployment_status_opens_the_jobs_deployments(agent: UiAgent, browser: Browser) -> None:
    deployment = poll(lambda: the(agent, "/v1/job/hint-web/deployments"), 20,
                      "a deployment of hint-web")[0]
    done = yurt(agent, browser, "deployment", "status", "-ui", deployment["ID"][:8])
    assert_opened(agent, browser, done, "/ui/jobs/hint-web/deployments",
                  "View all deployments for this job")


@pytest.mark.slow
def test_the_hint_shows_when_asked_and_hides_when_told(agent: UiAgent,
                                                       browser: Browser) -> None:
    url = f"{agent.address}/ui/jobs/hint-web"
    plain = yurt(agent, browser, "job", "status", "hint-web")
    assert (plain.returncode, plain.stderr, browser.opened()) == (0, "", [])

    shown = yurt(agent, browser, "job", "status", "hint-web", NOMAD_CLI_SHOW_HINTS="true")
    assert shown.returncode == 0
    assert shown.stderr == f"\n\n==> View job details and metrics in the Web UI: {url}\n"
    assert browser.opened() == []  # a hint, not a browser

    quiet = yurt(agent, browser, "job", "status", "-ui", "hint-web", NOMAD_CLI_SHOW_HINTS="0")
    assert (quiet.returncode, quiet.stderr) == (0, "")
    assert browser.opened() == [url]

    machine = yurt(agent, browser, "job", "status", "-json", "hint-web",
                   NOMAD_CLI_SHOW_HINTS="1")
    assert (machine.returncode, machine.stderr) == (0, "")  # JSON is for scripts: no hint


@pytest.mark.slow
def test_no_browser_is_a_warning_not_a_failure(agent: UiAgent, tmp_path: Path) -> None:
    nothing = tmp_path / "bin"
    nothing.mkdir()
    environment = {**without_suite_token(), "YURT_ADDR": agent.address, "PATH": str(nothing),
                   "DISPLAY": "", "WAYLAND_DISPLAY": ""}
    environment.pop("BROWSER", None)
    done = subprocess.run([YURT, "job", "status", "-ui", "hint-web"], capture_output=True,
                          text=True, env=environment, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "Failed to open browser" in done.stderr
    assert done.stderr.endswith(f"in the Web UI: {agent.address}/ui/jobs/hint-web\n")


@pytest.mark.slow
def test_objects_without_a_page_refuse_ui(agent: UiAgent, browser: Browser) -> None:
    for args in (("var", "get", "-ui", "a/b"), ("var", "list", "-ui"),
                 ("var", "put", "-ui", "a/b", "k=v")):
        done = yurt(agent, browser, *args)
        assert done.returncode == 2, (args, done.stderr)
        assert "-ui: yurt's web UI has no page for" in done.stderr, args
        assert browser.opened() == []
