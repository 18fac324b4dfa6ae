"""The web UI under ACLs in a real headless Chromium against a real agent with ACLs on (layer 3):
a `yurt ui -authenticate` link signs the tab in once and leaves the address bar (used again,
it says so in the token dialog); `yurt ui -authenticate` without `-show-url` hands the browser
a page of its user's alone, never the secret on a command line; a read-only token sees the
jobs, and a stop or a restart it may not do is told as "not allowed" where it was pressed,
with a way to change the token, never a token dialog in a loop; the event socket narrows to
the topics a token may follow (none: "no live updates"); a page and the logs a token may not
read say so on the page; who is signed in shows beside the Token button, and signing
out forgets the token; a token deleted meanwhile is asked for again.
One ACL agent for the module, one browser for the run (tests/browser_support.py); every wait
is on the page's state, bounded.
"""

from __future__ import annotations

import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.agent_support import mock_job
from tests.browser_support import YURT, UiAgent, UiBrowser, start_ui_agent
from tests.token_support import without_suite_token

READ_DEFAULT = 'namespace "default" { policy = "read" }\n'
#: Reads the nodes, nothing of any namespace.
NODE_ONLY = 'node { policy = "read" }\n'
#: Reads the agent, no topic of the event stream.
AGENT_ONLY = 'agent { policy = "read" }\n'


@pytest.fixture(scope="module")
def acl_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiAgent]:
    with start_ui_agent(tmp_path_factory.mktemp("ui-acl-agent"), acl=True) as agent:
        agent.run_job(mock_job("acl-web"))
        agent.wait_alloc("acl-web")
        yield agent


@pytest.fixture(scope="module")
def reader(acl_agent: UiAgent) -> dict[str, Any]:
    """A client token of `namespace "default" { policy = "read" }`, named `reader`."""
    return acl_agent.acl_token("reader", READ_DEFAULT)


def yurt_ui(agent: UiAgent, token: str, *args: str, **env: str
            ) -> subprocess.CompletedProcess[str]:
    """`yurt ui <args>` as its user runs it, with `token` as $YURT_TOKEN; `env` over the
    environment (a variable given as "" is removed from it)."""
    environment = {**without_suite_token(), "YURT_ADDR": agent.address, **env}
    environment = {k: v for k, v in environment.items() if v != "" or k not in env}
    if token:
        environment["YURT_TOKEN"] = token
    return subprocess.run([YURT, "ui", *args], capture_output=True, text=True,
                          env=environment, timeout=60, check=False)


def login_link(agent: UiAgent, token: str, *args: str) -> str:
    done = yurt_ui(agent, token, "-authenticate", "-show-url", *args)
    assert done.returncode == 0, done.stderr
    prefix = "URL for web UI: "
    assert done.stdout.startswith(prefix), done.stdout
    return done.stdout.removeprefix(prefix).strip()


def token_dialog_open(browser: UiBrowser) -> bool:
    return bool(browser.find_all('dialog[open] input[name="token"]'))


def tab_token(browser: UiBrowser) -> str:
    return str(browser.driver.execute_script("return sessionStorage.getItem('yurt.token') || ''"))


def test_a_one_time_link_signs_in_once_and_leaves_the_address_bar(
        acl_agent: UiAgent, reader: dict[str, Any], browser: UiBrowser) -> None:
    link = login_link(acl_agent, reader["SecretID"])
    assert link.startswith(f"{acl_agent.address}/ui/jobs?ott=")
    path = link.removeprefix(acl_agent.address)

    browser.open(acl_agent, path)  # a new origin: this tab keeps no token for it yet

    browser.wait(lambda: browser.find_all('tr[data-job="acl-web"]'), "the job listed")
    assert not browser.find_all("dialog[open]")
    assert "ott" not in browser.driver.current_url
    assert urlsplit(browser.driver.current_url).path == "/ui/jobs"
    assert tab_token(browser) == reader["SecretID"]
    browser.wait_text("Signed in as reader", "#whoami")
    assert browser.text('#whoami [data-role="sign-out"]') == "Sign out"
    # Every topic is a management token's only: the socket narrows to the job topics the
    # token may follow, and the list still updates live.
    browser.wait(lambda: browser.text("#live") == "live", "the event socket with the token")
    acl_agent.run_job(mock_job("acl-late"))
    browser.wait(lambda: browser.find_all('tr[data-job="acl-late"]'), "a new job, live")
    browser.screenshot("acl-signed-in-by-link")

    # The same link again, in a tab without the token: used, and said so.
    browser.driver.execute_script("sessionStorage.clear()")
    browser.driver.get(link)
    browser.wait(lambda: token_dialog_open(browser), "the token dialog")
    assert "already used or has expired" in browser.text("dialog[open]")
    assert "ott" not in browser.driver.current_url
    assert tab_token(browser) == ""
    assert "acl-web" not in browser.text("main")
    browser.screenshot("acl-link-used-twice")
    browser.click('dialog[open] button:not([data-role="save-token"])')  # Cancel


def test_yurt_ui_gives_the_browser_a_private_page_never_the_secret(
        acl_agent: UiAgent, reader: dict[str, Any], browser: UiBrowser, tmp_path: Path) -> None:
    argv_file = tmp_path / "browser-argv"
    recorder = tmp_path / "record-browser"
    recorder.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {argv_file}\n")
    recorder.chmod(0o700)
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = {"BROWSER": str(recorder), "XDG_RUNTIME_DIR": str(runtime), "DISPLAY": "",
           "WAYLAND_DISPLAY": ""}
    job_page = "/ui/jobs/acl-web"

    done = yurt_ui(acl_agent, reader["SecretID"], "-authenticate", "acl-w", **env)

    assert done.returncode == 0, done.stderr
    assert done.stdout == f'Opening URL "{acl_agent.address}{job_page}" with one-time token\n'
    argv = argv_file.read_text().split()
    assert len(argv) == 1, argv
    assert argv[0].startswith("file://")
    assert "ott" not in argv[0]
    page = Path(urlsplit(argv[0]).path)
    assert page.parent.parent == runtime
    assert stat.S_IMODE(page.stat().st_mode) == 0o600
    assert stat.S_IMODE(page.parent.stat().st_mode) == 0o700
    assert f"{acl_agent.address}{job_page}?ott=" in page.read_text()

    browser.origin = acl_agent.address
    browser.driver.get(argv[0])  # what the browser does with its argument
    browser.wait(lambda: urlsplit(browser.driver.current_url).path == job_page,
                 "the page sent on to the job's page")
    browser.wait_ready("job")
    assert "ott" not in browser.driver.current_url
    assert tab_token(browser) == reader["SecretID"]
    assert not browser.find_all("dialog[open]")


def test_a_read_only_token_sees_jobs_and_is_told_not_allowed_without_a_token_loop(
        acl_agent: UiAgent, reader: dict[str, Any], browser: UiBrowser) -> None:
    alloc = acl_agent.wait_alloc("acl-web")
    browser.open(acl_agent, "/ui/jobs", ready=False, fresh=True)
    browser.set_token(reader["SecretID"])
    browser.open(acl_agent, "/ui/jobs/acl-web")
    assert not browser.find_all("dialog[open]")

    browser.click('button[data-action="stop"]')
    browser.confirm()
    toast = browser.wait_text("not allowed", "#toasts")
    assert "Stop" in toast
    assert "“reader” may not do this" in toast
    assert not token_dialog_open(browser)
    assert browser.find_all('#toasts [data-role="change-token"]')
    assert acl_agent.api.get("/v1/job/acl-web").json()["Stop"] is False
    browser.screenshot("acl-stop-not-allowed")

    browser.open(acl_agent, f"/ui/allocations/{alloc['ID']}")
    browser.click('button[data-action="restart"]')
    browser.confirm()
    browser.wait(lambda: "not allowed" in browser.text("#toasts")
                 and "restarting failed" in browser.text("#toasts"), "the restart refused")
    assert not token_dialog_open(browser)
    # Refused again, still no dialog: a denial is not a question.
    browser.click('button[data-action="restart"]')
    browser.confirm()
    browser.wait(lambda: browser.text("#toasts").count("not allowed") >= 2, "the second refusal")
    assert not token_dialog_open(browser)
    assert tab_token(browser) == reader["SecretID"]

    # The way out: Change token opens the dialog, saying why.
    browser.click('#toasts [data-role="change-token"]')
    browser.wait(lambda: token_dialog_open(browser), "the token dialog")
    assert "may not do that" in browser.text("dialog[open]")
    browser.click('dialog[open] button:not([data-role="save-token"])')  # Cancel: kept
    assert tab_token(browser) == reader["SecretID"]


def test_what_a_token_may_not_read_is_said_on_the_page(
        acl_agent: UiAgent, reader: dict[str, Any], browser: UiBrowser) -> None:
    nodes = acl_agent.acl_token("nodes-only", NODE_ONLY)
    browser.open(acl_agent, "/ui/jobs", ready=False, fresh=True)
    browser.set_token(nodes["SecretID"])
    browser.open(acl_agent, "/ui/jobs")
    box = browser.wait_text("Not allowed", "main .error-box")
    assert "“nodes-only” may not do this" in box
    assert browser.find_all('main .error-box [data-role="change-token"]')
    assert not token_dialog_open(browser)
    browser.screenshot("acl-page-not-allowed")
    browser.open(acl_agent, "/ui/clients")  # what it may read, it reads, live
    assert not browser.find_all("main .error-box")
    browser.wait(lambda: browser.text("#live") == "live", "the node events followed")

    # A token that may follow no topic at all: the page says so, and asks nothing.
    agent_only = acl_agent.acl_token("agent-only", AGENT_ONLY)
    browser.set_token(agent_only["SecretID"])
    browser.open(acl_agent, "/ui/jobs")
    browser.wait(lambda: browser.text("#live") == "no live updates", "the socket refused")
    assert not token_dialog_open(browser)

    # The logs of a task: a namespace reader may not read them (read-logs), and is told so
    # once, not asked for a token, not retried.
    alloc = acl_agent.wait_alloc("acl-web")
    browser.set_token(reader["SecretID"])
    browser.open(acl_agent, f"/ui/allocations/{alloc['ID']}/t/logs", ready=False)
    assert "may not do this" in browser.wait_text("Not allowed", "main .error-box")
    assert not token_dialog_open(browser)


def test_who_is_signed_in_shows_and_signing_out_forgets_the_token(
        acl_agent: UiAgent, browser: UiBrowser) -> None:
    who = acl_agent.acl_token("<b>ops</b> & co", READ_DEFAULT, "ops-read")
    browser.open(acl_agent, "/ui/jobs", ready=False, fresh=True)
    browser.set_token(who["SecretID"])
    browser.open(acl_agent, "/ui/jobs")
    # The name as text, never markup.
    name = browser.wait_text("ops", '#whoami [data-role="token-name"]')
    assert name == "<b>ops</b> & co"
    assert not browser.find_all("#whoami b")
    assert who["AccessorID"] in str(browser.attribute("#whoami .who", "title"))
    browser.open(acl_agent, "/ui/settings/tokens")
    browser.wait_text("Signed in as", "#token-verdict")
    assert "Policies" in browser.text("#token-verdict")
    browser.screenshot("acl-token-page")

    browser.click('#whoami [data-role="sign-out"]')

    browser.wait(lambda: tab_token(browser) == "", "the token forgotten")
    browser.wait(lambda: browser.attribute("#whoami", "hidden") is not None, "the name gone")
    browser.wait_text("needs a token", "#token-verdict")


def test_a_token_deleted_meanwhile_is_asked_for_again(acl_agent: UiAgent,
                                                      browser: UiBrowser) -> None:
    gone = acl_agent.acl_token("short-lived", READ_DEFAULT)
    browser.open(acl_agent, "/ui/jobs", ready=False, fresh=True)
    browser.set_token(gone["SecretID"])
    browser.open(acl_agent, "/ui/jobs")
    acl_agent.api.delete(f"/v1/acl/token/{gone['AccessorID']}").raise_for_status()

    browser.resync()  # the page reads again, now with a token the agent no longer knows

    browser.wait(lambda: token_dialog_open(browser), "the token asked for")
    assert "knows no such token" in browser.text("dialog[open]")
    field = browser.find('dialog[open] input[name="token"]')
    field.send_keys(acl_agent.token)
    browser.click('dialog[open] [data-role="save-token"]')
    browser.wait_text("Bootstrap Token", "#whoami")
    browser.wait(lambda: browser.find_all('tr[data-job="acl-web"]'), "the jobs read again")
