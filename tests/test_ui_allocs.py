"""The allocation, task log, client and event pages in a real headless Chromium (layer 3), and
a node's allocations as the API answers them (whole; the client page reads the lighter stubs).

One agent (`ui_agent`, module scope) and the run's one browser serve every test. One raw_exec
job (`talker`: a line every 200 ms, every other line red through ANSI escapes, and an `oops`
line on stderr) is started once for the module; the tests that disturb it (a kill from
outside, restarts from the UI or the API) each wait for the state they caused, never for time.
Every wait polls the page with an absolute bound (`UiBrowser.wait`).
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agent_support import mock_job
from tests.browser_support import WIDE, CuttableProxy, UiAgent, UiBrowser, poll, start_ui_agent
from tests.proc_support import processes_with_env
from yurt.runtime.lib.procfs import stat_fields

TALKER = ("i=0; while :; do i=$((i+1)); echo line $i; "
          "printf '\\033[31mred %s\\033[0m\\n' $i; echo oops $i >&2; sleep 0.2; done")


#: More than the log view keeps (1 MiB), then a last line, then quiet.
BULK = ("head -c 2500000 /dev/zero | tr '\\0' x | fold -w 99; echo bulk-done; "
        "exec sleep 3600")


DEVICE, INSTANCES = "yurtco/gpu/fake1", ("g0", "g1")


def talker_job(job_id: str) -> dict[str, Any]:
    """One group: `talker` talks forever (restarted at once when killed), `bulk` writes
    2.5 MB at once and then sleeps, holding one of the fake devices."""
    tasks = [{"Name": name, "Driver": "raw_exec",
              "Config": {"command": "/bin/sh", "args": ["-c", script]},
              "Resources": {"CPU": 50, "MemoryMB": 32}}
             for name, script in (("talker", TALKER), ("bulk", BULK))]
    tasks[1]["Resources"]["Devices"] = [{"Name": DEVICE, "Count": 1}]
    return {"Job": {"ID": job_id, "Type": "service", "TaskGroups": [{
        "Name": "g", "Count": 1, "Tasks": tasks,
        "RestartPolicy": {"Attempts": 20, "Interval": 600_000_000_000, "Delay": 100_000_000,
                          "Mode": "delay"}}]}}


@pytest.fixture(scope="module")
def ui_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiAgent]:
    """The module's one agent (the shared fixture's, with two fake devices to show)."""
    with start_ui_agent(tmp_path_factory.mktemp("ui-allocs-agent"), "",
                        "--fake-device", f"{DEVICE}={','.join(INSTANCES)}") as agent:
        yield agent


@pytest.fixture(scope="module")
def talker(ui_agent: UiAgent) -> dict[str, Any]:
    """The running allocation of the module's talker job."""
    ui_agent.run_job(talker_job("ui-talker"))
    return ui_agent.wait_alloc("ui-talker")


def task_pid(alloc_id: str, task: str) -> int:
    """The task's own process: of the processes with its environment (shims left out), the one
    whose parent is not one of them (a child of the task's has the same environment)."""
    matches = processes_with_env(NOMAD_ALLOC_ID=alloc_id, NOMAD_TASK_NAME=task)
    parents = {pid: fields[1] for pid in matches if (fields := stat_fields(pid)) is not None}
    tops = [pid for pid, parent in parents.items() if int(parent) not in parents]
    if len(tops) != 1:
        raise AssertionError(f"not one process of task {task} of {alloc_id}: {tops}")
    return tops[0]


def events_of(browser: UiBrowser, task: str) -> list[str]:
    """The event types listed for `task` on the allocation page, as shown (newest first)."""
    return [str(t) for t in browser.driver.execute_script(
        "return [...document.querySelectorAll(`[data-task='${arguments[0]}'] li[data-event-type]`)]"
        ".map(li => li.dataset.eventType)", task)]


def mark_drawn(browser: UiBrowser, css: str) -> None:
    """Remembers the element `css` finds now, for `redrawn`."""
    browser.driver.execute_script(
        "window.markedEl = document.querySelector(arguments[0])", css)


def redrawn(browser: UiBrowser, css: str) -> bool:
    """Whether `css` now finds another element than `mark_drawn` remembered: the page drew
    that part again."""
    return bool(browser.driver.execute_script(
        "const el = document.querySelector(arguments[0]);"
        "return el !== null && el !== window.markedEl", css))


def is_open(browser: UiBrowser, css: str) -> bool:
    return bool(browser.driver.execute_script(
        "return document.querySelector(arguments[0]).open", css))


def mark_no_reload(browser: UiBrowser) -> None:
    browser.driver.execute_script("window.notReloaded = true")


def assert_not_reloaded(browser: UiBrowser) -> None:
    assert browser.driver.execute_script("return window.notReloaded") is True


# ---- a node's allocations, whole


def test_a_nodes_allocations_are_answered_whole_with_allocated_resources(
        ui_agent: UiAgent) -> None:
    ui_agent.run_job(mock_job("ui-node-allocs"))
    alloc = ui_agent.wait_alloc("ui-node-allocs")
    answer = ui_agent.api.get(f"/v1/node/{alloc['NodeID']}/allocations")
    assert answer.status_code == 200
    mine = next(a for a in answer.json() if a["ID"] == alloc["ID"])
    # As /v1/allocation/<id> answers it: Nomad's AllocatedResources, not yurt's stored fields.
    assert mine["AllocatedResources"]["Tasks"]["t"]["Memory"]["MemoryMB"] == 10
    whole = ui_agent.api.get(f"/v1/allocation/{alloc['ID']}").json()
    assert set(mine) == set(whole)
    assert "AllocatedShared" not in mine
    assert mine["AllocatedResources"] == whole["AllocatedResources"]


# ---- the allocation page


def test_a_task_killed_from_outside_shows_terminated_and_restarting_live(
        ui_agent: UiAgent, talker: dict[str, Any], browser: UiBrowser) -> None:
    alloc_id = talker["ID"]
    browser.open(ui_agent, f"/ui/allocations/{alloc_id}", fresh=True)
    browser.wait(lambda: browser.text("#live") == "live", "the event socket to connect")
    browser.wait(lambda: "Started" in events_of(browser, "talker"), "the Started event")
    before = len(events_of(browser, "talker"))
    mark_no_reload(browser)

    os.kill(task_pid(alloc_id, "talker"), signal.SIGKILL)

    def restarted() -> list[str] | None:
        types = events_of(browser, "talker")
        new = types[:len(types) - before]  # newest first
        return new if "Terminated" in new and "Restarting" in new else None

    new = browser.wait(restarted, "Terminated and Restarting on the page")
    # Newest first: the restart is announced after the task ended.
    assert new.index("Restarting") < new.index("Terminated")
    terminated = browser.text("[data-task='talker'] li[data-event-type='Terminated']")
    assert "Signal: 9" in terminated or "signal" in terminated.lower(), terminated
    assert_not_reloaded(browser)
    browser.screenshot("allocation")
    browser.screenshot("allocation", dark=True)
    assert browser.console_errors() == []


def open_with_action(browser: UiBrowser, agent: UiAgent, path: str, action: str) -> None:
    """Opens `path` once the talker task is running: its `action` button enabled."""
    browser.open(agent, path, fresh=True)
    browser.wait(lambda: browser.find_all(
        f"[data-task='talker'] [data-action='{action}']:not([disabled])"),
        f"the task running, its {action} enabled")


def test_restart_of_a_task_from_the_ui_asks_first_then_shows_restart_signaled(
        ui_agent: UiAgent, talker: dict[str, Any], browser: UiBrowser) -> None:
    alloc_id = talker["ID"]
    ui_agent.wait_alloc("ui-talker")
    open_with_action(browser, ui_agent, f"/ui/allocations/{alloc_id}/talker", "restart-task")
    signaled = events_of(browser, "talker").count("Restart Signaled")

    # Cancelled: nothing is sent.
    browser.click("[data-task='talker'] [data-action='restart-task']")
    browser.click('dialog[open] [data-role="cancel"]')
    browser.wait(lambda: not browser.find_all("dialog[open]"), "the dialog to close")
    browser.click("[data-task='talker'] [data-action='restart-task']")
    browser.confirm()

    browser.wait(lambda: events_of(browser, "talker").count("Restart Signaled") == signaled + 1,
                 "one more Restart Signaled event")
    assert "User requested task to restart" in browser.text(
        "[data-task='talker'] li[data-event-type='Restart Signaled']")
    browser.wait(lambda: events_of(browser, "talker")[0] == "Started",
                 "the task started again")


def test_a_signal_chosen_in_the_dialog_reaches_the_task(
        ui_agent: UiAgent, talker: dict[str, Any], browser: UiBrowser) -> None:
    alloc_id = talker["ID"]
    open_with_action(browser, ui_agent, f"/ui/allocations/{alloc_id}", "signal-task")
    signaled = events_of(browser, "talker").count("Signaling")
    browser.click("[data-task='talker'] [data-action='signal-task']")
    from selenium.webdriver.support.ui import Select

    Select(browser.find("dialog[open] select[data-role='signal']")).select_by_value("SIGUSR1")
    browser.confirm()

    browser.wait(lambda: events_of(browser, "talker").count("Signaling") == signaled + 1,
                 "a Signaling event")
    assert "SIGUSR1" in browser.text("[data-task='talker'] li[data-event-type='Signaling']")
    # sh ends on SIGUSR1: the task is restarted; later tests want it running.
    browser.wait(lambda: events_of(browser, "talker")[0] == "Started", "the task started again")


def test_a_folded_events_list_stays_folded_across_live_redraws(
        ui_agent: UiAgent, talker: dict[str, Any], browser: UiBrowser) -> None:
    alloc_id = talker["ID"]
    browser.open(ui_agent, f"/ui/allocations/{alloc_id}", fresh=True)
    talker_events = "[data-task='talker'] details.task-history"
    bulk_events = "[data-task='bulk'] details.task-history"
    browser.wait(lambda: "Started" in events_of(browser, "talker"), "the Started event")
    assert is_open(browser, talker_events)
    assert is_open(browser, bulk_events)
    browser.click(f"{talker_events} summary")
    browser.wait(lambda: not is_open(browser, talker_events), "the list folded")
    mark_drawn(browser, talker_events)
    before = restarts(browser, "talker")

    restart_task(ui_agent, alloc_id, "talker")

    # The task's events are capped at ten (as Nomad keeps them): its restart count is what
    # surely moves.
    browser.wait(lambda: restarts(browser, "talker") > before, "the restart on the page")
    assert redrawn(browser, talker_events)
    assert not is_open(browser, talker_events)  # as the person left it
    assert is_open(browser, bulk_events)  # not touched: open, as drawn first
    browser.wait(lambda: events_of(browser, "talker")[0] == "Started", "the task started again")
    # Unfolded again, it stays open through the next restart's redraws.
    browser.click(f"{talker_events} summary")
    browser.wait(lambda: is_open(browser, talker_events), "the list unfolded")
    mark_drawn(browser, talker_events)
    restart_task(ui_agent, alloc_id, "talker")
    browser.wait(lambda: restarts(browser, "talker") > before + 1, "the second restart")
    assert redrawn(browser, talker_events)
    assert is_open(browser, talker_events)
    browser.wait(lambda: events_of(browser, "talker")[0] == "Started", "the task started again")


def restarts(browser: UiBrowser, task: str) -> int:
    """The task's restart count as its card shows it."""
    return int(browser.driver.execute_script(
        "const dt = [...document.querySelectorAll(`[data-task='${arguments[0]}'] dt`)]"
        ".find(d => d.textContent === 'Restarts');"
        "return dt ? dt.nextElementSibling.textContent : -1", task))


def restart_task(agent: UiAgent, alloc_id: str, task: str) -> None:
    agent.api.post(f"/v1/client/allocation/{alloc_id}/restart",
                   json={"TaskName": task}).raise_for_status()


def test_the_allocation_page_charts_usage_and_links_its_job_node_and_logs(
        ui_agent: UiAgent, talker: dict[str, Any], browser: UiBrowser) -> None:
    alloc_id = talker["ID"]
    browser.open(ui_agent, f"/ui/allocations/{alloc_id}", fresh=True)
    # Read in one script: the page redraws on every event of the allocation.
    hrefs = set(browser.driver.execute_script(
        "return [...document.querySelectorAll('#alloc-header a[href]')]"
        ".map(a => a.getAttribute('href'))"))
    assert "/ui/jobs/ui-talker" in hrefs
    assert f"/ui/clients/{talker['NodeID']}" in hrefs
    assert browser.find_all(
        f"[data-task='talker'] a[href='/ui/allocations/{alloc_id}/talker/logs']")
    # The first sample is drawn at once, CPU included (the average since the task started).
    browser.wait(lambda: re.search(r"\d", browser.text(
        "#alloc-usage [data-task='talker'] [data-metric='memory']")), "a memory value")
    assert re.search(r"\d+ MHz · \d+\.\d% of a core",
                     browser.text("#alloc-usage [data-task='talker'] [data-metric='cpu']"))
    assert browser.find_all("#alloc-usage [data-task='talker'] svg.spark")
    # The task holding a device shows its instance's stats.
    device = browser.wait(lambda: browser.text("#alloc-usage [data-task='bulk'] [data-device]"),
                          "the device's stats")
    assert "yurtco/gpu/fake1" in device
    assert "utilization" in device


# ---- the log view


def test_the_log_view_follows_new_output_and_renders_ansi_colours(
        ui_agent: UiAgent, talker: dict[str, Any], browser: UiBrowser) -> None:
    alloc_id = ui_agent.wait_alloc("ui-talker")["ID"]
    browser.open(ui_agent, f"/ui/allocations/{alloc_id}/talker/logs", fresh=True)
    mark_no_reload(browser)

    def last_line() -> int | None:
        numbers = re.findall(r"^line (\d+)$", browser.text("#log"), re.M)
        return int(numbers[-1]) if numbers else None

    first = browser.wait(last_line, "a line in the log")
    browser.wait(lambda: (last_line() or 0) > first + 2, "later lines, followed")
    assert_not_reloaded(browser)
    # The red lines are spans coloured by the renderer; no escape code reaches the page.
    red = browser.driver.execute_script(
        "return [...document.querySelectorAll('#log span')].filter(s => "
        "s.style.color && /^red \\d+$/.test(s.textContent)).map(s => s.style.color)")
    assert red, "no red span in the log"
    assert set(red) == {"rgb(205, 49, 49)"}, red
    assert "\x1b" not in browser.text("#log")
    assert "[31m" not in browser.text("#log")
    # Followed at the bottom.
    assert browser.driver.execute_script(
        "const p = document.getElementById('log');"
        "return p.scrollHeight - p.scrollTop - p.clientHeight < 30")
    browser.screenshot("logs")
    browser.screenshot("logs", dark=True)

    # stderr, from the start, not followed: each switch restarts the stream, and the view
    # holds only the last one's text (never a chunk the stream before had in flight).
    from selenium.webdriver.support.ui import Select

    Select(browser.find("#log-origin")).select_by_value("start")
    browser.find("#log-follow").click()
    browser.click("[data-stream='stderr']")
    browser.wait(lambda: "type=stderr" in browser.driver.current_url,
                 "the stream in the address")
    assert "follow=false" in browser.driver.current_url
    assert "origin=start" in browser.driver.current_url
    browser.wait_text("end of the log", "#log-status")
    text = browser.text("#log")
    # From the start: the task's first stderr line is there.
    assert re.match(r"oops 1\n", text), text[:200]
    assert re.search(r"^oops \d+$", text, re.M)
    assert not re.search(r"^(line|red) \d+$", text, re.M), text[:400]
    assert browser.console_errors() == []


def test_the_log_view_keeps_at_most_a_mebibyte_of_text(
        ui_agent: UiAgent, talker: dict[str, Any], browser: UiBrowser) -> None:
    alloc_id = talker["ID"]
    path = f"/ui/allocations/{alloc_id}/bulk/logs?follow=false&origin=start"
    browser.open(ui_agent, path, fresh=True)
    browser.wait_text("end of the log", "#log-status")
    kept = int(browser.driver.execute_script(
        "return document.getElementById('log').textContent.length"))
    # 2.5 MB written: the oldest dropped, chunk by chunk, down to about 1 MiB.
    assert 900_000 < kept <= 1_048_576 + 70_000, kept
    assert browser.text("#log").rstrip().endswith("bulk-done")


def test_the_log_view_of_a_task_not_started_yet_starts_with_the_task(
        ui_agent: UiAgent, browser: UiBrowser, tmp_path: Path) -> None:
    gate = tmp_path / "open"

    def task(name: str, script: str, hook: str | None = None) -> dict[str, Any]:
        return {"Name": name, "Driver": "raw_exec", "Resources": {"CPU": 20, "MemoryMB": 16},
                "Config": {"command": "/bin/sh", "args": ["-c", script]},
                **({"Lifecycle": {"Hook": hook, "Sidecar": False}} if hook else {})}

    ui_agent.run_job({"Job": {"ID": "ui-gated", "Type": "service", "TaskGroups": [{
        "Name": "g", "Count": 1, "Tasks": [
            task("gate", f"while [ ! -e {gate} ]; do sleep 0.05; done", "prestart"),
            task("main", "echo main says hi; exec sleep 3600")]}]}})
    alloc = poll_alloc_with_task(ui_agent, "ui-gated", "gate")
    browser.open(ui_agent, f"/ui/allocations/{alloc['ID']}/main/logs", fresh=True)
    browser.wait_text("has not started yet", "#log-note")
    mark_no_reload(browser)

    gate.touch()

    browser.wait_text("main says hi", "#log")
    assert browser.text("#log-note") == ""
    assert_not_reloaded(browser)


def poll_alloc_with_task(agent: UiAgent, job_id: str, task: str) -> dict[str, Any]:
    """The job's allocation once `task` runs in it."""
    def found() -> dict[str, Any] | None:
        for a in agent.allocations(job_id):
            if ((a.get("TaskStates") or {}).get(task) or {}).get("State") == "running":
                return a
        return None

    return poll(found, 20, f"{task} of {job_id} running")


def test_log_frames_cut_anywhere_decode_whole(ui_agent: UiAgent, browser: UiBrowser) -> None:
    """The stream's bytes arrive cut anywhere: inside a frame, a JSON string holding braces,
    a UTF-8 character of the log split between two frames."""
    browser.open(ui_agent, "/ui/events", fresh=True)
    text = browser.driver.execute_async_script(r"""
        const done = arguments[arguments.length - 1];
        import('/ui/assets/pages/logs.js').then(({ logDecoder }) => {
          const b64 = (bytes) => btoa(String.fromCharCode(...bytes));
          const enc = new TextEncoder();
          const euro = enc.encode('\u20ac');  // 3 bytes, cut after the first
          const one = [...enc.encode('h\u00e9llo '), euro[0]];
          const two = [euro[1], euro[2], ...enc.encode(' {x} done\n')];
          const stream = JSON.stringify({Offset: 1, Data: b64(one), File: 'we}ird{"'}) + '{}' +
            JSON.stringify({Offset: 2, Data: b64(two), File: 'stdout.0'}) +
            JSON.stringify({Offset: 2, File: 'stdout.0', FileEvent: 'file truncated'});
          const bytes = enc.encode(stream);
          const logs = logDecoder();
          const out = [];
          for (let i = 0; i < bytes.length; i += 5) out.push(...logs.push(bytes.slice(i, i + 5)));
          out.push(...logs.end());
          done(out.map((p) => p.event ? `[${p.event}]` : p.text).join(''));
        });
    """)
    assert text == "h\u00e9llo \u20ac {x} done\n[file truncated]"


#: In the page: logs.js mounted on a scratch element with `fetch` replaced by streams the
#: script feeds by hand (`window.feeds`, one per request), so a chunk can be made to arrive
#: exactly between a read and a switch of stream.
def test_a_followed_log_that_breaks_off_reconnects_by_itself(
        ui_agent: UiAgent, talker: dict[str, Any], browser: UiBrowser) -> None:
    proxy = CuttableProxy(ui_agent.address)
    through = proxy.relaying(ui_agent)
    alloc_id = ui_agent.wait_alloc("ui-talker")["ID"]

    def last_line() -> int | None:
        numbers = re.findall(r"^line (\d+)$", browser.text("#log"), re.M)
        return int(numbers[-1]) if numbers else None

    try:
        browser.open(through, f"/ui/allocations/{alloc_id}/talker/logs", fresh=True)
        mark_no_reload(browser)
        before = browser.wait(last_line, "a line in the log")
        proxy.cut()  # the agent restarting, the network dropping: the stream breaks off
        browser.wait(lambda: browser.find_all("#log-status [data-stream-state='disconnected']"),
                     "the view saying it is disconnected")
        proxy.restore()
        browser.wait(lambda: browser.find_all("#log-status [data-stream-state='live']"),
                     "the stream open again", timeout=20)
        browser.wait(lambda: (last_line() or 0) > before + 2, "later lines, followed again")
        assert_not_reloaded(browser)
    finally:
        proxy.close()


FAKE_LOG_STREAMS = r"""
    window.feeds = [];
    const realFetch = window.fetch;
    window.fetch = async (url, opts) => {
      // Only the log streams are fed by hand; the page's other reads go to the agent.
      if (!String(url).includes('/v1/client/fs/logs/')) return realFetch(url, opts);
      const feed = { url: String(url) };
      feed.body = new ReadableStream({ start(c) { feed.c = c; } });
      opts.signal.addEventListener('abort', () => {
        try { feed.c.error(new DOMException('aborted', 'AbortError')); } catch {}
      });
      window.feeds.push(feed);
      return window.refuse
        ? { ok: false, status: 403, text: async () => 'Permission denied' }
        : { ok: true, status: 200, body: feed.body };
    };
    window.frame = (text) => new TextEncoder().encode(JSON.stringify(
      { Offset: 1, Data: btoa(text), File: 'x.0' }));
    window.tick = () => new Promise((r) => setTimeout(r, 0));
    window.mountLogs = async () => {
      const { default: mount } = await import('/ui/assets/pages/logs.js');
      const view = document.createElement('div');
      document.body.append(view);
      const leave = new AbortController();
      window.leave = leave;  // reachable while mount still waits (for a token)
      await mount(view, { id: 'a1', task: 't' },
                  { signal: leave.signal, title() {}, onEvent() {} });
      await window.tick();
      return { view, leave };
    };
"""


def test_a_log_chunk_in_flight_at_a_switch_is_not_shown(browser: UiBrowser,
                                                        ui_agent: UiAgent) -> None:
    browser.open(ui_agent, "/ui/events", fresh=True)
    shown = browser.driver.execute_async_script(FAKE_LOG_STREAMS + r"""
        const done = arguments[arguments.length - 1];
        (async () => {
          const { view } = await window.mountLogs();
          // The stdout read resolves with a chunk; before its code runs, stderr is chosen.
          window.feeds[0].c.enqueue(window.frame('from stdout\n'));
          view.querySelector("[data-stream='stderr']").click();
          await window.tick();
          window.feeds[1].c.enqueue(window.frame('from stderr\n'));
          await window.tick();
          done([window.feeds.map((f) => new URL(f.url, location.href).searchParams.get('type')),
                view.querySelector('#log').textContent]);
        })();
    """)
    assert shown == [["stdout", "stderr"], "from stderr\n"]


def test_a_token_given_after_leaving_the_log_view_starts_no_stream(
        browser: UiBrowser, ui_agent: UiAgent) -> None:
    browser.open(ui_agent, "/ui/events", fresh=True)
    browser.driver.execute_script(FAKE_LOG_STREAMS + r"""
        window.refuse = true;
        window.mountLogs();
    """)
    browser.wait(lambda: browser.find_all("dialog[open] input[name='token']"), "the token asked")
    # The person leaves the page, then answers the dialog still open.
    browser.driver.execute_script("window.refuse = false; window.leave.abort()")
    browser.find("dialog[open] input[name='token']").send_keys("s3cret")
    browser.click("dialog[open] [data-role='save-token']")
    browser.wait(lambda: not browser.find_all("dialog[open]"), "the dialog closed")
    requests = browser.driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "window.tick().then(window.tick).then(() => done(window.feeds.length))")
    browser.driver.execute_script("sessionStorage.clear()")
    assert requests == 1


# ---- clients and events


def test_clients_list_and_a_client_page(ui_agent: UiAgent, talker: dict[str, Any],
                                        browser: UiBrowser) -> None:
    node_id = talker["NodeID"]
    browser.open(ui_agent, "/ui/clients", fresh=True)
    row = browser.text(f"tr[data-node='{node_id}']")
    # Exactly: "eligible" alone would also be found in "ineligible".
    assert browser.driver.execute_script(
        "return [...document.querySelectorAll(`tr[data-node='${arguments[0]}'] .badge`)]"
        ".map(b => b.textContent)", node_id) == ["ready", "eligible"]
    assert "raw_exec" in row
    browser.screenshot("clients")

    browser.open(ui_agent, f"/ui/clients/{node_id}")
    assert browser.find_all(f"#node-allocations tr[data-alloc='{talker['ID']}']")
    # Unfolded, "All N attributes" stays so while an allocation event redraws the page.
    attributes = "#node-attributes details"
    assert not is_open(browser, attributes)
    browser.click(f"{attributes} summary")
    browser.wait(lambda: is_open(browser, attributes), "the attributes unfolded")
    mark_drawn(browser, attributes)
    # A name with no place to break a line (a person's job names are often this long).
    job_id = "ui_client_page_live_allocation"
    ui_agent.run_job(mock_job(job_id))
    placed = ui_agent.wait_alloc(job_id)
    row = f"#node-allocations tr[data-alloc='{placed['ID']}']"
    browser.wait(lambda: "running" in browser.text(row) if browser.find_all(row) else None,
                 "the new allocation running on the page")
    assert redrawn(browser, attributes)
    assert is_open(browser, attributes)
    # Drawn from the allocations' stubs: the row shows its job and group's name all the same.
    assert f"{job_id}.g[0]" in browser.text(row)
    # On a phone the allocation's status is in view without scrolling sideways.
    browser.size(375, 800)
    try:
        visible = browser.driver.execute_script(
            "const b = document.querySelector(arguments[0] + ' .badge');"
            "const wrap = b.closest('.table-wrap').getBoundingClientRect();"
            "const r = b.getBoundingClientRect();"
            "return r.width > 0 && r.right <= wrap.right && r.right <= window.innerWidth", row)
        assert visible, "the status badge is off screen at 375 px"
    finally:
        browser.size(*WIDE)
    assert "healthy" in browser.text("#node-drivers tr[data-driver='raw_exec']")
    assert "of" in browser.text("#node-resources [data-resource='memory allocated']")
    devices = browser.text("#node-devices")
    for instance in INSTANCES:
        assert instance in devices
    assert devices.count("healthy") == len(INSTANCES)
    browser.screenshot("client")
    browser.screenshot("client", dark=True)


def test_the_event_stream_shows_new_events_live_and_filters_by_topic(
        ui_agent: UiAgent, browser: UiBrowser) -> None:
    browser.open(ui_agent, "/ui/events", fresh=True)
    browser.wait(lambda: browser.text("#live") == "live", "the event socket to connect")

    ui_agent.run_job(mock_job("ui-events"))

    browser.wait(lambda: browser.find_all("#events-list li[data-topic='Job']"), "a Job event")
    browser.wait(lambda: browser.find_all("#events-list li[data-topic='Allocation']"),
                 "an Allocation event")
    job_row = browser.find("#events-list li[data-topic='Job'] a")
    assert job_row.get_attribute("href").endswith("/ui/jobs/ui-events")
    browser.find("input[data-topic='Allocation']").click()
    browser.wait(lambda: not browser.find_all("#events-list li[data-topic='Allocation']"),
                 "Allocation events filtered out")
    assert "topic=" in browser.driver.current_url
    browser.screenshot("events")

    # Paused: events are counted, the list stays still; resumed, they are drawn.
    browser.click("#events-pause")
    rows = len(browser.find_all("#events-list li"))
    ui_agent.run_job(mock_job("ui-events-paused"))
    browser.wait(lambda: re.search(r"paused · [1-9]", browser.text("#events-count")),
                 "events counted while paused")
    assert len(browser.find_all("#events-list li")) == rows
    assert "ui-events-paused" not in browser.text("#events-list")
    browser.click("#events-pause")
    browser.wait_text("ui-events-paused", "#events-list")


def test_drain_from_the_client_page_sends_the_deadline_and_can_be_cancelled(
        ui_agent: UiAgent, talker: dict[str, Any], browser: UiBrowser) -> None:
    # Last in the module: a drain moves the allocations off the module's one node. A drain
    # leaves a batch allocation to finish (as Nomad's does): this one keeps the drain under
    # way until the test cancels it, however soon the other allocations are stopped.
    node_id = talker["NodeID"]
    holder = mock_job("ui-drain-holder")
    holder["Job"]["Type"] = "batch"
    ui_agent.run_job(holder)
    ui_agent.wait_alloc("ui-drain-holder")
    browser.open(ui_agent, f"/ui/clients/{node_id}", fresh=True)
    try:
        browser.click("[data-action='drain']")
        field = browser.find("dialog[open] #drain-deadline")
        field.clear()
        field.send_keys("soon")
        browser.click('dialog[open] [data-role="confirm"]')
        # An unreadable deadline is refused in the dialog, which opens again saying why.
        browser.wait_text("not a duration", "dialog[open]")
        field = browser.find("dialog[open] #drain-deadline")
        field.clear()
        field.send_keys("30m")
        browser.find("dialog[open] #drain-ignore-system").click()
        browser.confirm()

        browser.wait(lambda: browser.find_all("[data-action='cancel-drain']"),
                     "the page showing the drain")
        strategy = ui_agent.api.get(f"/v1/node/{node_id}").json()["DrainStrategy"]
        assert strategy["Deadline"] == 30 * 60 * 10**9
        assert strategy["IgnoreSystemJobs"] is True
        assert "ineligible" in browser.text("#node-header h1")

        browser.click("[data-action='cancel-drain']")
        browser.confirm()
        browser.wait(lambda: browser.find_all("[data-action='drain']"), "the drain cancelled")
        assert ui_agent.api.get(f"/v1/node/{node_id}").json()["DrainStrategy"] is None
        browser.click("[data-action='eligibility']")
        browser.confirm()
        browser.wait(lambda: "Make ineligible" in browser.text("[data-action='eligibility']"),
                     "the node eligible again")
    finally:
        ui_agent.api.put(f"/v1/node/{node_id}/drain", json={"DrainSpec": None})
        ui_agent.api.put(f"/v1/node/{node_id}/eligibility",
                         json={"Eligibility": "eligible"})
        ui_agent.api.delete("/v1/job/ui-drain-holder")
