"""The web UI's frame in a real headless Chromium (layer 3): the jobs list, live updates without
a reload, and the token gate (tests/browser_support.py has the agent and the browser)."""

from __future__ import annotations

from pathlib import Path

from tests.agent_support import mock_job
from tests.browser_support import UiAgent, UiBrowser, start_ui_agent


def test_jobs_list_shows_a_new_job_live_without_a_reload(ui_agent: UiAgent,
                                                         browser: UiBrowser) -> None:
    browser.open(ui_agent, "/ui/jobs", fresh=True)
    browser.wait(lambda: browser.text("#live") == "live", "the event socket to connect")
    browser.driver.execute_script("window.notReloaded = true")

    ui_agent.run_job(mock_job("ui-live", count=2))

    row = browser.wait(lambda: browser.text('tr[data-job="ui-live"]'),
                       "the new job's row")
    assert "service" in row
    browser.wait(lambda: "Running 2" in browser.text('tr[data-job="ui-live"]'),
                 "both allocations counted as running")
    assert browser.driver.execute_script("return window.notReloaded") is True
    assert browser.console_errors() == []


def test_jobs_search_filters_and_keeps_the_filter_in_the_address(ui_agent: UiAgent,
                                                                  browser: UiBrowser) -> None:
    ui_agent.run_job(mock_job("ui-alpha"))
    ui_agent.run_job(mock_job("ui-beta"))
    browser.open(ui_agent, "/ui/jobs", fresh=True)
    browser.wait(lambda: browser.find_all('tr[data-job="ui-beta"]'), "the jobs listed")

    browser.find('input[type="search"]').send_keys("alph")

    browser.wait(lambda: not browser.find_all('tr[data-job="ui-beta"]'), "ui-beta filtered out")
    assert browser.find_all('tr[data-job="ui-alpha"]')
    assert browser.driver.current_url.endswith("/ui/jobs?search=alph")


def test_a_configured_token_is_asked_for_and_nothing_shows_without_it(
        tmp_path: Path, browser: UiBrowser) -> None:
    with start_ui_agent(tmp_path, token="s3cret-ui-token") as agent:
        agent.run_job(mock_job("secret-job"))
        browser.open(agent, "/ui/jobs", ready=False, fresh=True)

        browser.wait(lambda: browser.find_all('dialog[open] input[name="token"]'),
                     "the token dialog")
        assert "secret-job" not in browser.driver.page_source
        # The event socket was refused too: without the token it never goes live.
        assert browser.text("#live") != "live"

        browser.find('dialog[open] input[name="token"]').send_keys("wrong")
        browser.click('dialog[open] [data-role="save-token"]')
        # A wrong token is refused again and asked for again; still nothing shown.
        browser.wait(lambda: "refused" in browser.text("dialog[open]"),
                     "the dialog saying the token was refused")
        assert "secret-job" not in browser.driver.page_source

        field = browser.find('dialog[open] input[name="token"]')
        field.clear()
        field.send_keys("s3cret-ui-token")
        browser.click('dialog[open] [data-role="save-token"]')

        browser.wait(lambda: browser.find_all('tr[data-job="secret-job"]'), "the job listed")
        browser.wait(lambda: browser.text("#live") == "live", "the event socket with the token")
        assert browser.driver.execute_script(
            "return sessionStorage.getItem('yurt.token')") == "s3cret-ui-token"
