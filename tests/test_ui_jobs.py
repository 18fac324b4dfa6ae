"""The job pages of the web UI in a real headless Chromium against a real agent (layer 3): a
job run from the editor (plan, run, confirm) whose allocation goes pending → running on its
page without a reload; a validation error shown against its line; stop behind its
confirmation; scale through its dialog; a JSON job file opened from disk and planned (an
edit makes the plan stale); a periodic job launched now, a parameterized one dispatched;
versions with their diffs, and a revert; placement failures with their reasons, and the
evaluations list live.
One agent for the module, one browser for the run (tests/browser_support.py); every wait is
on the page's state, bounded.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from selenium.common.exceptions import StaleElementReferenceException

from tests.agent_support import mock_job
from tests.browser_support import UiAgent, UiBrowser

#: Its allocation is pending for 3 s (the mock driver blocks its start), then runs.
SLOW_START_HCL = """job "ui-run" {
  group "app" {
    task "main" {
      driver = "mock_driver"
      config {
        start_block_for = "3s"
        run_for         = "10m"
      }
      resources {
        cpu    = 10
        memory = 10
      }
    }
  }
}
"""

#: Line 3 holds the mistake.
BAD_HCL = """job "ui-bad" {
  group "g" {
    count = "many"
    task "t" {
      driver = "mock_driver"
    }
  }
}
"""

#: Records every client status an allocation row of the page shows, in order, however briefly.
WATCH_ALLOC_ROWS = """
window.seenStatuses = [];
new MutationObserver(() => {
  for (const row of document.querySelectorAll('tr[data-alloc]')) {
    const seen = window.seenStatuses;
    if (seen[seen.length - 1] !== row.dataset.status) seen.push(row.dataset.status);
  }
}).observe(document.getElementById('main'), {childList: true, subtree: true, attributes: true});
"""


def click_live(browser: UiBrowser, css: str) -> None:
    """Clicks `css` on a page that may redraw under the click (a live update): found again
    if the element was replaced in between."""
    def clicked() -> bool:
        try:
            found = browser.find_all(css)
            if not found:
                return False
            found[0].click()
            return True
        except StaleElementReferenceException:
            return False

    browser.wait(clicked, f"{css} to click")


def job_of(agent: UiAgent, job_id: str) -> dict[str, Any]:
    answer = agent.api.get(f"/v1/job/{job_id}")
    answer.raise_for_status()
    job: dict[str, Any] = answer.json()
    return job


def job_missing(agent: UiAgent, job_id: str) -> bool:
    return agent.api.get(f"/v1/job/{job_id}").status_code == 404


def type_job(browser: UiBrowser, text: str) -> None:
    editor = browser.find("#job-text")
    editor.clear()
    editor.send_keys(text)


def test_a_job_run_from_the_editor_goes_pending_then_running_live(
        ui_agent: UiAgent, browser: UiBrowser) -> None:
    browser.open(ui_agent, "/ui/jobs/run", fresh=True)
    browser.wait(lambda: browser.text("#live") == "live", "the event socket to connect")
    type_job(browser, SLOW_START_HCL)

    browser.click("#plan")
    browser.wait_text("All tasks successfully allocated", "#plan-result")
    assert 'Task Group: "app" (1 create)' in browser.text("#plan-result .diff")
    assert job_missing(ui_agent, "ui-run"), "a plan registers nothing"
    browser.screenshot("job-run-planned")
    browser.driver.execute_script("window.notReloaded = true;" + WATCH_ALLOC_ROWS)

    browser.click("#run")
    browser.confirm()

    browser.wait_ready("job")
    assert browser.driver.current_url == f"{ui_agent.address}/ui/jobs/ui-run"
    seen = browser.wait(lambda: (s := browser.driver.execute_script(
        "return window.seenStatuses")) and "running" in s and s, "the allocation running")
    assert seen == ["pending", "running"], seen
    assert browser.driver.execute_script("return window.notReloaded") is True
    assert browser.console_errors() == []
    browser.screenshot("job")


def test_a_validation_error_is_shown_against_its_line(ui_agent: UiAgent,
                                                       browser: UiBrowser) -> None:
    browser.open(ui_agent, "/ui/jobs/run", fresh=True)
    type_job(browser, BAD_HCL)

    browser.click("#plan")

    problem = browser.wait_text("Line 3", "#problems")
    assert 'expected a whole number, got a string "many"' in problem
    assert [m.text for m in browser.find_all(".gutter .bad-line")] == ["3"]
    assert browser.find("#run").get_attribute("disabled") is not None
    # The complaint leads to its line: the caret lands on line 3.
    browser.click('#problems button[data-line="3"]')
    caret_line = browser.driver.execute_script(
        "const t = document.getElementById('job-text');"
        "return document.activeElement === t &&"
        " t.value.slice(0, t.selectionStart).split('\\n').length")
    assert caret_line == 3
    assert job_missing(ui_agent, "ui-bad")
    browser.screenshot("job-run-problems")
    # The text outlives a reload (the tab's session storage).
    browser.open(ui_agent, "/ui/jobs/run")
    assert browser.find("#job-text").get_attribute("value") == BAD_HCL


def test_a_json_job_file_opened_from_disk_is_planned(ui_agent: UiAgent, browser: UiBrowser,
                                                     tmp_path: Path) -> None:
    path = tmp_path / "ui-file.nomad.json"
    path.write_text(json.dumps(mock_job("ui-file", count=2), indent=2))
    browser.open(ui_agent, "/ui/jobs/run", fresh=True)

    browser.find("#job-file").send_keys(str(path))

    browser.wait(lambda: '"ui-file"' in browser.find("#job-text").get_attribute("value"),
                 "the file in the editor")
    browser.click("#plan")
    plan = browser.wait_text('Plan for job "ui-file"', "#plan-result")
    assert "All tasks successfully allocated" in plan
    assert 'Task Group: "g" (2 create)' in plan
    assert len(browser.find_all(".gutter span")) == 0
    assert browser.find("#run").get_attribute("disabled") is None
    # An edit makes the plan stale: Run waits for a new plan.
    browser.find("#job-text").send_keys(" ")
    assert browser.find("#run").get_attribute("disabled") is not None
    assert "plan again" in browser.text("#plan-result .stale-note")


def test_stop_from_the_job_page_asks_first_then_stops(ui_agent: UiAgent,
                                                      browser: UiBrowser) -> None:
    ui_agent.run_job(mock_job("ui-stop"))
    ui_agent.wait_alloc("ui-stop")
    browser.open(ui_agent, "/ui/jobs/ui-stop", fresh=True)
    browser.wait(lambda: browser.find_all('tr[data-status="running"]'), "the running allocation")

    click_live(browser, 'button[data-action="stop"]')
    browser.click('dialog[open] [data-role="cancel"]')
    browser.wait(lambda: not browser.find_all("dialog[open]"), "the dialog to close")
    assert job_of(ui_agent, "ui-stop")["Stop"] is False, "a cancelled stop stops nothing"

    click_live(browser, 'button[data-action="stop"]')
    browser.confirm()

    browser.wait_text("Stopping ui-stop", "#toasts")
    browser.wait(lambda: browser.find_all('button[data-action="start"]'), "the Start action")
    browser.wait(lambda: not browser.find_all('tr[data-status="running"]'),
                 "the allocation no longer running")
    assert job_of(ui_agent, "ui-stop")["Stop"] is True
    assert browser.console_errors() == []


def test_scale_a_group_from_its_dialog(ui_agent: UiAgent, browser: UiBrowser) -> None:
    ui_agent.run_job(mock_job("ui-scale"))
    ui_agent.wait_alloc("ui-scale")
    browser.open(ui_agent, "/ui/jobs/ui-scale", fresh=True)

    # An emptied field is refused, not taken for 0 (which would stop the whole group).
    click_live(browser, 'button[data-action="scale"][data-group="g"]')
    browser.find('dialog[open] input[data-role="scale-count"]').clear()
    browser.confirm()
    browser.wait_text("whole number", "#toasts")
    assert job_of(ui_agent, "ui-scale")["TaskGroups"][0]["Count"] == 1

    click_live(browser, 'button[data-action="scale"][data-group="g"]')
    count = browser.find('dialog[open] input[data-role="scale-count"]')
    assert count.get_attribute("value") == "1"
    count.clear()
    count.send_keys("3\n")  # Enter confirms
    browser.wait(lambda: not browser.find_all("dialog[open]"), "the dialog to close")

    browser.wait_text("Scaled g to 3", "#toasts")
    browser.wait(lambda: len(browser.find_all('tr[data-status="running"]')) == 3,
                 "three running allocations")
    assert job_of(ui_agent, "ui-scale")["TaskGroups"][0]["Count"] == 3


def test_a_periodic_job_launched_now_shows_its_child_live(ui_agent: UiAgent,
                                                          browser: UiBrowser) -> None:
    job = mock_job("ui-cron")
    job["Job"].update(Type="batch", Periodic={"Enabled": True, "SpecType": "cron",
                                              "Specs": ["0 3 1 1 *"]})
    ui_agent.run_job(job)
    browser.open(ui_agent, "/ui/jobs/ui-cron", fresh=True)
    browser.wait_text("Not launched yet")

    click_live(browser, 'button[data-action="launch"]')
    browser.confirm()

    child = 'a[href^="/ui/jobs/ui-cron%2Fperiodic-"]'
    name = browser.wait(lambda: browser.text(child), "the launched child listed")
    assert name.startswith("ui-cron/periodic-")
    click_live(browser, child)  # a child's ID holds a "/": its page opens all the same
    browser.wait(lambda: browser.text("h1").startswith(name), "the child's page")


def test_a_parameterized_job_is_dispatched_with_its_meta_and_payload(
        ui_agent: UiAgent, browser: UiBrowser) -> None:
    job = mock_job("ui-param")
    job["Job"].update(Type="batch", ParameterizedJob={
        "Payload": "required", "MetaRequired": ["who"], "MetaOptional": ["format"]})
    ui_agent.run_job(job)
    browser.open(ui_agent, "/ui/jobs/ui-param", fresh=True)
    browser.wait_text("Nothing dispatched yet")

    click_live(browser, 'button[data-action="dispatch"]')
    browser.find('dialog[open] input[data-meta="who"]').send_keys("alice")
    browser.find('dialog[open] textarea[data-role="payload"]').send_keys('{"n": 1}')
    browser.confirm()

    browser.wait(lambda: browser.text("h1").startswith("ui-param/dispatch-"),
                 "the dispatched child's page")
    child = job_of(ui_agent, browser.text("h1").split()[0])
    assert child["Meta"] == {"who": "alice"}
    assert base64.b64decode(child["Payload"]) == b'{"n": 1}'


def test_versions_show_their_diffs_and_revert(ui_agent: UiAgent, browser: UiBrowser) -> None:
    job = mock_job("ui-versions")
    ui_agent.run_job(job)
    job["Job"]["TaskGroups"][0]["Tasks"][0]["Config"]["run_for"] = "2h"
    ui_agent.run_job(job)
    browser.open(ui_agent, "/ui/jobs/ui-versions/versions", fresh=True)

    diff = browser.wait_text("+/-", 'li[data-version="1"] .diff')
    assert '+/- run_for: "1h" => "2h"' in diff
    click_live(browser, 'button[data-action="revert"][data-version="0"]')
    browser.confirm()

    reverted = browser.wait_text("+/-", 'li[data-version="2"] .diff')
    assert '+/- run_for: "2h" => "1h"' in reverted
    assert job_of(ui_agent, "ui-versions")["Version"] == 2


def test_folded_and_unfolded_versions_stay_so_across_live_redraws(
        ui_agent: UiAgent, browser: UiBrowser) -> None:
    job = mock_job("ui-folds")
    for run_for in ("1h", "2h", "3h"):
        job["Job"]["TaskGroups"][0]["Tasks"][0]["Config"]["run_for"] = run_for
        ui_agent.run_job(job)
    browser.open(ui_agent, "/ui/jobs/ui-folds/versions", fresh=True)
    newest, older = ('li[data-version="2"] details', 'li[data-version="1"] details')
    browser.wait_text("+/-", f"{newest} .diff")

    def is_open(css: str) -> bool:
        return bool(browser.driver.execute_script(
            "return document.querySelector(arguments[0]).open", css))

    # As first drawn: the newest unfolded, the older folded.
    assert is_open(newest)
    assert not is_open(older)
    click_live(browser, f"{newest} summary")
    click_live(browser, f"{older} summary")
    browser.wait(lambda: not is_open(newest) and is_open(older), "the person's folds")
    browser.driver.execute_script(
        "window.markedEl = document.querySelector(arguments[0])", newest)

    # An evaluation of the job: its event redraws the section.
    ui_agent.api.post("/v1/job/ui-folds/evaluate", json={}).raise_for_status()

    browser.wait(lambda: browser.driver.execute_script(
        "const el = document.querySelector(arguments[0]);"
        "return el !== null && el !== window.markedEl", newest), "the versions drawn again")
    assert not is_open(newest)
    assert is_open(older)


def test_the_evaluations_list_shows_a_new_evaluation_live(ui_agent: UiAgent,
                                                          browser: UiBrowser) -> None:
    browser.open(ui_agent, "/ui/evaluations", fresh=True)
    browser.wait(lambda: browser.text("#live") == "live", "the event socket to connect")
    browser.driver.execute_script("window.notReloaded = true")

    answer = ui_agent.api.post("/v1/jobs", json=mock_job("ui-evals"))
    answer.raise_for_status()

    row = browser.wait(lambda: browser.text(f'tr[data-eval="{answer.json()["EvalID"]}"]'),
                       "the new evaluation's row")
    assert "ui-evals" in row
    assert "job-register" in row
    assert browser.driver.execute_script("return window.notReloaded") is True


def test_placement_failures_show_their_reasons(ui_agent: UiAgent, browser: UiBrowser) -> None:
    job = mock_job("ui-unplaced", count=2)
    job["Job"]["TaskGroups"][0]["Constraints"] = [
        {"LTarget": "${attr.kernel.name}", "RTarget": "plan9", "Operand": "="}]
    ui_agent.run_job(job)

    browser.open(ui_agent, "/ui/jobs/ui-unplaced/evaluations", fresh=True)
    failure = browser.wait_text("unplaced", ".placement-failures")
    assert '2 unplaced' in failure
    assert 'Constraint "${attr.kernel.name} = plan9" filtered 1 node' in failure
    assert "Nodes evaluated 1 · filtered 1 · exhausted 0" in failure

    browser.open(ui_agent, "/ui/evaluations?status=blocked")
    row = browser.wait(lambda: browser.text('tr[data-status="blocked"]'), "the blocked eval")
    assert "ui-unplaced" in row
    button = 'tr[data-status="blocked"] button[data-action="failures"]'
    assert not browser.find_all("tr.failures-row")
    assert browser.attribute(button, "aria-expanded") == "false"
    click_live(browser, button)
    shown = browser.wait_text("filtered 1 node", "tr.failures-row")
    # The blocked evaluation's own failures, under its row: the group, how many, and why.
    assert "2 unplaced" in shown
    assert 'Constraint "${attr.kernel.name} = plan9" filtered 1 node' in shown
    assert browser.attribute(button, "aria-expanded") == "true"
    blocked_id = browser.attribute('tr[data-status="blocked"]', "data-eval")
    assert browser.attribute("tr.failures-row", "data-failures") == blocked_id
    browser.screenshot("evaluations")
    # A second click folds them away again.
    click_live(browser, button)
    browser.wait(lambda: not browser.find_all("tr.failures-row"), "the failures folded")
    assert browser.attribute(button, "aria-expanded") == "false"
