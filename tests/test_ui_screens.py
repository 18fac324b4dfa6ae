"""Every main page of the web UI in a real headless Chromium (layer 3), as people look at it: at
1280 px and on a 375 px phone, light and dark. Each page must draw its data, log no error in the
browser's console, and fit a phone's width (tables scroll inside their own box, never the page).
The screenshots land in `ui-screenshots/` for people to look at.

One more test walks the jobs list with the keyboard alone."""

from __future__ import annotations

import pytest

from tests.agent_support import raw_job
from tests.browser_support import NARROW, UiAgent, UiBrowser

#: A task whose log has plain and coloured lines, and that keeps running.
SCRIPT = ("printf 'starting\\n\\033[32mready\\033[0m on port 8080\\n'; "
          "i=0; while :; do i=$((i+1)); echo tick $i; sleep 1; done")


@pytest.fixture(scope="module")
def shown(ui_agent: UiAgent) -> dict[str, str]:
    """A running raw_exec job, and the IDs its pages need."""
    ui_agent.run_job(raw_job("screens", SCRIPT))
    alloc = ui_agent.wait_alloc("screens")
    return {"job": "screens", "alloc": alloc["ID"], "node": alloc["NodeID"], "task": "t"}


def pages(ids: dict[str, str]) -> list[tuple[str, str]]:
    return [
        ("jobs", "/ui/jobs"),
        ("job", f"/ui/jobs/{ids['job']}"),
        ("job-run", "/ui/jobs/run"),
        ("allocation", f"/ui/allocations/{ids['alloc']}"),
        ("task-logs", f"/ui/allocations/{ids['alloc']}/{ids['task']}/logs"),
        ("clients", "/ui/clients"),
        ("client", f"/ui/clients/{ids['node']}"),
        ("evaluations", "/ui/evaluations"),
        ("events", "/ui/events"),
        ("token", "/ui/settings/tokens"),
    ]


def test_every_main_page_draws_fits_a_phone_and_is_pictured(
        ui_agent: UiAgent, browser: UiBrowser, shown: dict[str, str]) -> None:
    problems = []
    for name, path in pages(shown):
        browser.open(ui_agent, path)
        if name == "task-logs":
            browser.wait_text("ready on port 8080", "main")
        overflow = browser.overflow_at(NARROW[0])
        if overflow > 0:
            problems.append(f"{path} is {overflow} px wider than a {NARROW[0]} px phone")
        # The lists are read on a phone without scrolling their tables sideways.
        if name in ("jobs", "clients", "evaluations"):
            inside = browser.table_overflow_at(NARROW[0])
            if inside > 0:
                problems.append(f"{path}'s table needs {inside} px of sideways scrolling")
        errors = browser.console_errors()
        if errors:
            problems.append(f"{path} logged errors: {errors}")
        browser.screenshot(name)
        browser.screenshot(name, widths=((1280, 900),), dark=True)
    assert problems == []


def test_the_jobs_list_is_usable_with_the_keyboard_alone(
        ui_agent: UiAgent, browser: UiBrowser, shown: dict[str, str]) -> None:
    from selenium.webdriver.common.keys import Keys

    browser.open(ui_agent, "/ui/jobs", fresh=True)
    browser.wait(lambda: browser.find_all(f'tr[data-job="{shown["job"]}"] a'), "the job listed")
    body = browser.find("body")
    focused = ""
    for _ in range(20):  # skip link, brand, nav, live, token, run, search, selects, the rows
        body = browser.driver.switch_to.active_element
        body.send_keys(Keys.TAB)
        focused = str(browser.driver.execute_script(
            "return document.activeElement.getAttribute('href') || ''"))
        if focused.startswith(f"/ui/jobs/{shown['job']}"):
            break
    assert focused.startswith(f"/ui/jobs/{shown['job']}"), "Tab never reached the job's link"
    outline = browser.driver.execute_script(
        "return getComputedStyle(document.activeElement).outlineStyle")
    assert outline != "none", "the focused link shows no focus ring"

    browser.driver.switch_to.active_element.send_keys(Keys.ENTER)

    browser.wait_ready("job")
    assert browser.driver.current_url.endswith(f"/ui/jobs/{shown['job']}")
