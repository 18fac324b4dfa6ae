"""The web UI's frame in a real headless Chromium (layer 3): the jobs list, live updates without
a reload, and the token gate (tests/browser_support.py has the agent and the browser)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.agent_support import mock_job
from tests.browser_support import CuttableProxy, UiAgent, UiBrowser, poll, start_ui_agent
from yurt.runtime.lib.durations import MILLISECOND, MINUTE


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


def test_a_request_refused_for_a_token_replaced_meanwhile_is_sent_again_unasked(
        tmp_path: Path, browser: UiBrowser) -> None:
    # A request in flight with a wrong token when the person saves the right one (in the
    # dialog another request opened) is refused after the save: it must try the token kept
    # now, not open a new dialog that asks again for what was just given.
    with start_ui_agent(tmp_path, token="flight-token") as agent:
        agent.run_job(mock_job("in-flight"))
        browser.open(agent, "/ui/jobs", ready=False, fresh=True)
        browser.set_token("flight-token")
        browser.open(agent, "/ui/jobs")  # drawn, no dialog open
        assert not browser.find_all("dialog[open]")
        outcome = browser.driver.execute_async_script("""
            const done = arguments[arguments.length - 1];
            import('/ui/assets/lib.js').then(async ({ api }) => {
              sessionStorage.setItem('yurt.token', 'wrong');
              const jobs = api.get('/v1/jobs');  // sent now, with 'wrong'
              sessionStorage.setItem('yurt.token', 'flight-token');
              const ids = (await jobs).map((j) => j.ID);
              done({ids, dialogs: document.querySelectorAll('dialog[open]').length});
            }).catch((err) => done({error: String(err)}));
        """)
        assert outcome == {"ids": ["in-flight"], "dialogs": 0}, outcome


def test_what_happened_while_the_socket_was_down_is_caught_up(ui_agent: UiAgent,
                                                              browser: UiBrowser) -> None:
    proxy = CuttableProxy(ui_agent.address)
    through = proxy.relaying(ui_agent)
    try:
        browser.open(through, "/ui/jobs", fresh=True)
        browser.wait(lambda: browser.text("#live") == "live", "the event socket to connect")
        proxy.cut()
        browser.wait(lambda: browser.text("#live") == "offline", "the socket to drop")
        # A batch job done at once: every event it makes is sent while the page is away.
        away = mock_job("ui-while-away")
        away["Job"]["Type"] = "batch"
        away["Job"]["TaskGroups"][0]["Tasks"][0]["Config"]["run_for"] = "0s"
        ui_agent.run_job(away)
        ui_agent.wait_alloc("ui-while-away", "complete")
        assert not browser.find_all('tr[data-job="ui-while-away"]')
        proxy.restore()
        browser.wait(lambda: browser.text("#live") == "live", "the socket back", timeout=20)
        browser.wait(lambda: browser.find_all('tr[data-job="ui-while-away"]'),
                     "the job registered while away, listed after the reconnect")
    finally:
        proxy.close()


def test_a_job_id_holding_an_at_sign_and_a_group_path_open_the_right_pages(
        ui_agent: UiAgent, browser: UiBrowser) -> None:
    job = mock_job("svc@v2")
    job["Job"]["TaskGroups"][0]["Name"] = "Web_1"
    ui_agent.run_job(job)
    browser.open(ui_agent, "/ui/jobs", fresh=True)
    browser.click('tr[data-job="svc@v2"] a')
    browser.wait_ready("job")
    assert "svc@v2" in browser.text("main h1")

    browser.open(ui_agent, "/ui/jobs/svc%40v2@default/Web_1")
    assert "Not found" not in browser.text("main h1")
    assert "Web_1" in browser.text("main")


def test_a_broken_address_says_not_found_and_the_skip_link_moves_the_focus(
        ui_agent: UiAgent, browser: UiBrowser) -> None:
    browser.open(ui_agent, "/ui/jobs/%E0%A4%A", ready=False, fresh=True)
    browser.wait(lambda: browser.text("main h1") == "Not found", "the not-found page")

    browser.open(ui_agent, "/ui/jobs")
    before = browser.driver.execute_script("return history.length")
    browser.driver.execute_script("document.querySelector('a.skip').focus()")
    from selenium.webdriver.common.keys import Keys

    browser.driver.switch_to.active_element.send_keys(Keys.ENTER)
    browser.wait(lambda: browser.driver.execute_script(
        "return document.activeElement === document.getElementById('main')"),
        "the focus on the main content")
    assert browser.driver.execute_script("return history.length") == before + 1  # the #main
    assert browser.driver.current_url.endswith("/ui/jobs#main")


def test_a_confirmation_says_what_it_asks_and_nothing_else(ui_agent: UiAgent,
                                                           browser: UiBrowser) -> None:
    ui_agent.run_job(mock_job("ui-confirm"))
    browser.open(ui_agent, "/ui/jobs/ui-confirm", fresh=True)
    browser.click('button[data-action="stop"]')
    text = browser.wait(lambda: browser.text("dialog[open]"), "the confirmation")
    assert "null" not in text, text
    assert "undefined" not in text, text
    browser.click('dialog[open] [data-role="cancel"]')
    assert ui_agent.api.get("/v1/job/ui-confirm").json()["Stop"] is False


def test_an_action_while_the_agent_is_away_says_so_in_words(ui_agent: UiAgent,
                                                            browser: UiBrowser) -> None:
    proxy = CuttableProxy(ui_agent.address)
    through = proxy.relaying(ui_agent)
    try:
        ui_agent.run_job(mock_job("ui-away"))
        browser.open(through, "/ui/jobs/ui-away", fresh=True)
        proxy.cut()
        # A refresh while the agent is away (what an event or a reconnect starts) keeps the
        # job on screen, marked stale, instead of a page without it.
        browser.resync()
        stale = browser.wait(browser.stale_notice, "the stale notice")
        assert "did not answer" in stale
        assert "showing what the agent said before" in stale
        assert "ui-away" in browser.text("main h1")
        browser.screenshot("job-agent-away")

        browser.click('button[data-action="stop"]')
        browser.confirm()
        toast = browser.wait_text("did not answer", "#toasts")
        assert "Failed to fetch" not in toast

        proxy.restore()  # the event socket comes back, the page reads again, the notice goes
        browser.wait(lambda: not browser.stale_notice(), "the stale notice to go", 20)
        assert ui_agent.api.get("/v1/job/ui-away").json()["Stop"] is False
    finally:
        proxy.close()


@pytest.mark.parametrize("page", ["jobs", "evaluations", "clients", "client", "allocation"])
def test_a_live_page_keeps_what_it_shows_while_the_agent_is_away(ui_agent: UiAgent,
                                                                 browser: UiBrowser,
                                                                 page: str) -> None:
    ui_agent.run_job(mock_job("ui-stale"))
    alloc = ui_agent.wait_alloc("ui-stale", "running")
    path, shown = {
        "jobs": ("/ui/jobs", 'tr[data-job="ui-stale"]'),
        "evaluations": ("/ui/evaluations", "tr[data-eval]"),
        "clients": ("/ui/clients", "tr[data-node]"),
        "client": (f"/ui/clients/{alloc['NodeID']}", "main h1"),
        "allocation": (f"/ui/allocations/{alloc['ID']}", "main h1"),
    }[page]
    proxy = CuttableProxy(ui_agent.address)
    try:
        browser.open(proxy.relaying(ui_agent), path, fresh=True)
        # What the page shows (a title, or how many rows: a row's status and relative times
        # may still change while the page is live).
        def showing() -> str:
            return browser.text(shown) if shown == "main h1" else str(len(browser.find_all(shown)))

        before = showing()
        assert before not in ("", "0")
        proxy.cut()
        browser.resync()
        assert "did not answer" in browser.wait(browser.stale_notice, "the stale notice")
        assert showing() == before
        assert not browser.find_all("main .error-box")
    finally:
        proxy.close()


def test_the_token_page_at_nomads_path_checks_the_tabs_token(tmp_path: Path,
                                                             browser: UiBrowser) -> None:
    with start_ui_agent(tmp_path, token="page-token") as agent:
        browser.open(agent, "/ui/jobs", ready=False, fresh=True)
        browser.set_token("page-token")
        browser.open(agent, "/ui/settings/tokens")
        assert "accepted" in browser.wait_text("accepted", "#token-verdict")
        assert "ending in …oken" in browser.text("#token-state")

        browser.set_token("wrong")
        browser.open(agent, "/ui/settings/tokens")
        assert "refused" in browser.wait_text("refused", "#token-verdict")


def test_an_action_without_the_token_is_refused_and_changes_nothing(tmp_path: Path,
                                                                    browser: UiBrowser) -> None:
    job = mock_job("guarded")
    # Health after 100 ms rather than the default migrate strategy's 10 s: see below.
    job["Job"]["TaskGroups"][0]["Migrate"] = {
        "MaxParallel": 1, "HealthCheck": "task_states", "MinHealthyTime": 100 * MILLISECOND,
        "HealthyDeadline": MINUTE}
    with start_ui_agent(tmp_path, token="act-token") as agent:
        agent.run_job(job)
        # The page refreshes on every event of the job: one after the token is gone would be
        # refused and ask for the token before the stop could. So the page opens once the
        # allocation has nothing left to report: running, and its health set (the last change
        # of a service allocation without a deployment, hooks/alloc_health.py); its event
        # socket then hears only what happens later.
        poll(lambda: any((a.get("DeploymentStatus") or {}).get("Healthy")
                         for a in agent.allocations("guarded")),
             20, "the allocation running and healthy")
        browser.open(agent, "/ui/jobs", ready=False, fresh=True)
        browser.set_token("act-token")
        browser.open(agent, "/ui/jobs/guarded")
        # The tab's token is gone (forgotten, another tab's session): the page stays drawn.
        browser.driver.execute_script("sessionStorage.removeItem('yurt.token')")

        browser.click('button[data-action="stop"]')
        browser.click('dialog[open] [data-role="confirm"]')  # the token dialog follows it

        # The agent refuses the stop; the UI asks for the token instead of pretending.
        browser.wait(lambda: browser.find_all('dialog[open] input[name="token"]'),
                     "the token asked for after the refusal")
        browser.click('dialog[open] button:not([data-role="save-token"])')  # Cancel
        toast = browser.wait_text("failed", "#toasts")
        assert "403" in toast
        assert agent.api.get("/v1/job/guarded").json()["Stop"] is False
