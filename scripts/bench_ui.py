"""Benchmark: the web UI in a real browser (Debian's headless Chromium driven by selenium),
against `yurt agent` as users start it, holding `--allocs` (default 1,000) running allocations.

As users start it means ACLs on: the browser is signed in with the management token the
agent's first start wrote (benchlib/agent_token.py), kept in the tab's session storage as the
UI's token dialog keeps it, so every API request of a page carries it as `X-Nomad-Token`, the
event socket offers it as its subprotocol, and the agent checks it each time: in the numbers.

The allocations are mock-driver tasks (no process each, so the machine measures the agent and
the browser, not 1,000 sleeps): `--jobs` service jobs (default 10) sharing them equally, so
the first job has 100 allocations with the defaults. Once they run, the agent is left to
settle (under 5 % of a core), as a person would find it. Measured in the browser, with the
page's own clock (`performance`):

1. First page load, navigation start to the `yurt:page-ready` mark app.js sets once a page has
   drawn its first data (and `main[data-ready]`): `--loads` cold loads (the browser's HTTP
   cache cleared before each: every asset is a 200) and as many warm ones (each asset a 304),
   median and p95, for /ui/jobs, a 100-allocation job's page and an allocation's page. Beside
   them, where the time went: the document and scripts until the first API request, the page's
   API answers (the `/v1/...` resource timings: the longest one, and their count) and the
   scripts after the last answer (render).
2. One event reaching the page: on /ui/jobs, the page itself re-registers a small job with a
   new priority (a `fetch` PUT), then times, from just before the PUT, (a) the websocket
   delivering the `Job` event of that priority (a listener registered with lib.js `onEvent`,
   the module the page already runs) and (b) the jobs table showing the new priority (a
   MutationObserver): `--samples` times (default 150), p50/p95/p99. Twice: on a quiet agent, and
   with `--churn` allocations (default 20) whose tasks exit and restart every second, so events
   flow all the time, as on a busy node; there the event socket's coalescing
   (runtime/api/events.py `STREAM_COALESCE`) is in play: after each send, a socket waits that
   long before the next, so an event that arrives meanwhile waits for the rest of it. The gap
   between samples is random (0-250 ms) so that they land at every phase of that wait.

The browser: `/usr/bin/chromium` through `/usr/bin/chromedriver`, both named to selenium, so its
driver manager never runs (and it is pointed at nothing, in case). A fresh profile in a temp
dir; no network beyond loopback. Targets (the project's issue): first page < 300 ms, event
< 100 ms p95. A table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_events import job as restarting_job
from bench_restore import YURT, request, wait_api
from benchlib.agent_token import agent_env
from benchlib.procs import cpu_seconds, stop_agent

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
PROBE = "ui-probe"
TARGET_PAGE_MS = 300.0
TARGET_EVENT_P95_MS = 100.0

#: Until the page has drawn its first data: the mark's time and where the time went.
READY_JS = """
const main = document.getElementById("main");
if (!main || !main.dataset.ready) return null;
const marks = performance.getEntriesByName("yurt:page-ready", "mark");
if (!marks.length) return null;
const ready = marks[marks.length - 1].startTime;
const nav = performance.getEntriesByType("navigation")[0];
// What the page asked for before it was ready (a page may read more afterwards).
const before = performance.getEntriesByType("resource").filter((e) => e.startTime <= ready);
const api = before.filter((e) => e.name.includes("/v1/"));
const assets = before.filter((e) => e.name.includes("/ui/"));
return {
  page: main.dataset.ready,
  ready,
  document: nav ? nav.responseEnd : null,
  api_max: api.length ? Math.max(...api.map((e) => e.duration)) : 0,
  api_start: api.length ? Math.min(...api.map((e) => e.startTime)) : 0,
  api_end: api.length ? Math.max(...api.map((e) => e.responseEnd)) : 0,
  api_count: api.length,
  api_bytes: api.reduce((n, e) => n + (e.encodedBodySize || 0), 0),
  assets_end: assets.length ? Math.max(...assets.map((e) => e.responseEnd)) : 0,
};
"""

#: One sample of an event's way to the page (execute_async_script: the callback is last).
EVENT_JS = """
const [priority, body, timeoutMs] = arguments;
const done = arguments[arguments.length - 1];
import("/ui/assets/lib.js").then((lib) => {
const job = JSON.parse(body);
job.Job.Priority = priority;
let t0 = 0, tEvent = null, tDom = null, tPut = null, finished = false;
const column = () => [...document.querySelectorAll("#main thead th")]
  .findIndex((th) => th.textContent === "Priority");
const shown = () => {
  const row = document.querySelector(`#main tr[data-job="${job.Job.ID}"]`);
  const i = column();
  return !!row && i >= 0 && row.children[i] && row.children[i].textContent === String(priority);
};
const finish = (timedOut) => {
  if (finished) return;
  if (!timedOut && (tEvent === null || tDom === null)) return;
  finished = true;
  off();
  observer.disconnect();
  done({ event: tEvent === null ? null : tEvent - t0, dom: tDom === null ? null : tDom - t0,
         put: tPut === null ? null : tPut - t0, timedOut });
};
const off = lib.onEvent((e) => {
  if (tEvent === null && e.Topic === "Job" && e.Key === job.Job.ID && e.Payload &&
      e.Payload.Job && e.Payload.Job.Priority === priority) {
    tEvent = e.receivedAt !== undefined ? e.receivedAt : performance.now();
    finish(false);
  }
});
const observer = new MutationObserver(() => {
  if (tDom === null && shown()) { tDom = performance.now(); finish(false); }
});
observer.observe(document.getElementById("main"), { subtree: true, childList: true,
  characterData: true });
setTimeout(() => finish(true), timeoutMs);
t0 = performance.now();
const headers = { "Content-Type": "application/json" };
if (lib.token()) headers["X-Nomad-Token"] = lib.token();
fetch("/v1/jobs", { method: "PUT", body: JSON.stringify(job), headers })
  .then(() => { tPut = performance.now(); });
});
"""


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def mock_job(job_id: str, count: int, run_for: str = "24h") -> dict[str, Any]:
    task = {"Name": "t", "Driver": "mock_driver", "Config": {"run_for": run_for},
            "Resources": {"CPU": 1, "MemoryMB": 10}}
    return {"Job": {"ID": job_id, "Type": "service", "Priority": 50,
                    "TaskGroups": [{"Name": "g", "Count": count, "Tasks": [task]}]}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def open_browser(profile: Path) -> Any:
    """Headless Chromium at 1280x900, Debian's binaries named so nothing is looked up."""
    os.environ["SE_OFFLINE"] = "true"  # selenium's driver manager must never download
    os.environ.setdefault("SE_MANAGER_PATH", "/bin/false")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            sys.exit(f"bench_ui needs {path} (Debian: apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1280,900",
                 f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_script_timeout(30)
    return driver


def wait_ready(driver: Any, timeout: float) -> dict[str, Any] | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = driver.execute_script(READY_JS)
        if found and found["ready"] is not None:
            return dict(found)
        time.sleep(0.01)
    return None


def page_loads(driver: Any, url: str, loads: int) -> dict[str, Any]:
    """`loads` cold then `loads` warm loads of `url`: ms to the page-ready mark, and where
    they went. A page that never says it is ready (not built yet) is reported as such."""
    out: dict[str, Any] = {"cold": [], "warm": [], "before_api": [], "api": [], "render": [],
                           "api_count": 0, "api_bytes": 0, "missing": False}
    for kind in ("cold", "warm"):
        for _ in range(loads):
            driver.get("about:blank")
            if kind == "cold":
                driver.execute_cdp_cmd("Network.clearBrowserCache", {})
            driver.get(url)
            found = wait_ready(driver, 10.0)
            if found is None:
                out["missing"] = True
                out["error"] = driver.execute_script(
                    "const m = document.getElementById('main'); return m ? m.innerText : ''")
                return out
            out[kind].append(found["ready"])
            # The document and the scripts up to the page's first API request.
            out["before_api"].append(found["api_start"])
            out["api"].append(found["api_max"])
            # After the last API answer and the last asset: scripts running and drawing.
            out["render"].append(found["ready"] - max(found["api_end"], found["assets_end"]))
            out["api_count"] = found["api_count"]
            out["api_bytes"] = found["api_bytes"]
    return out


def event_samples(driver: Any, base: str, samples: int) -> dict[str, Any]:
    """`samples` priority changes of the probe job made from the page; ms to the socket's
    event and to the table showing it."""
    driver.get(base + "/ui/jobs")
    if wait_ready(driver, 10.0) is None:
        sys.exit("the jobs page never became ready")
    body = json.dumps(mock_job(PROBE, 0))
    socket_ms: list[float] = []
    dom_ms: list[float] = []
    put_ms: list[float] = []
    timeouts = 0
    for i in range(samples):
        priority = 10 + i % 80  # never the one shown: each sample is a change
        got = driver.execute_async_script(EVENT_JS, priority, body, 5000)
        if got["timedOut"] or got["event"] is None or got["dom"] is None:
            timeouts += 1
        else:
            socket_ms.append(got["event"])
            dom_ms.append(got["dom"])
            if got["put"] is not None:
                put_ms.append(got["put"])
        time.sleep(random.uniform(0, 0.25))
    return {"socket": socket_ms, "dom": dom_ms, "put": put_ms, "timeouts": timeouts}


def summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    return {"n": len(values), "p50": statistics.median(values), "p95": quantile(values, 0.95),
            "p99": quantile(values, 0.99), "max": max(values)}


def wait_settled(pid: int, deadline: float) -> float:
    """Until the agent uses under 5 % of a core over a second (once its allocations run, it
    is busy a while syncing them): a person opens the UI on a steady agent. Its CPU share."""
    while True:
        before = cpu_seconds(pid)
        time.sleep(1.0)
        share = cpu_seconds(pid) - before
        if share < 0.05 or time.monotonic() > deadline:
            return share


def sign_in(driver: Any, token: str) -> None:
    """What the UI's token dialog does with the token a person gives it (lib.js `setToken`):
    kept in the tab's session storage, which outlives navigation and cache clearing. Done on
    a page of the agent's origin that asks for nothing (a static file)."""
    if token:
        driver.execute_script("sessionStorage.setItem('yurt.token', arguments[0])", token)


def wait_running(base: str, n: int, deadline: float, token: str) -> None:
    while True:
        allocs = request(base, "GET", "/v1/allocations", token=token)
        running = sum(1 for a in allocs if a["ClientStatus"] == "running")
        if running >= n:
            return
        if time.monotonic() > deadline:
            sys.exit(f"only {running} of {n} allocations running")
        time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--allocs", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=10)
    parser.add_argument("--loads", type=int, default=10, help="cold loads, and warm ones")
    parser.add_argument("--samples", type=int, default=150, help="events, per phase")
    parser.add_argument("--churn", type=int, default=20,
                        help="allocations restarting every second in the busy phase")
    args = parser.parse_args()

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    results: dict[str, Any] = {"bench": "ui", "allocs": args.allocs, "jobs": args.jobs,
                               "load1_start": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="yurt-bench-ui-") as tmp:
        data = Path(tmp) / "agent"
        data.mkdir()
        with open(data / "agent.log", "ab") as log:
            agent = subprocess.Popen([str(YURT), "agent", "--data-dir", str(data),
                                      "--port", str(port)], stdout=subprocess.DEVNULL,
                                     stderr=log, start_new_session=True, env=agent_env())
        driver = None
        try:
            token = wait_api(base, data, time.monotonic() + 30)
            per_job = args.allocs // args.jobs
            job_ids = [f"svc-{i:02d}" for i in range(args.jobs)]
            for job_id in job_ids:
                request(base, "PUT", "/v1/jobs", mock_job(job_id, per_job), token=token)
            request(base, "PUT", "/v1/jobs", mock_job(PROBE, 0), token=token)
            wait_running(base, per_job * args.jobs, time.monotonic() + 300, token)
            alloc_id = request(base, "GET", f"/v1/job/{job_ids[0]}/allocations",
                               token=token)[0]["ID"]
            results["agent_cpu_settled"] = wait_settled(agent.pid, time.monotonic() + 120)

            driver = open_browser(Path(tmp) / "profile")
            # A fresh browser's first navigation starts its renderer (about a second here):
            # the browser's start, not the UI's, so apart; on a static file of the agent's
            # origin, where the person signs in before opening a page.
            started = time.monotonic()
            driver.get(base + "/ui/assets/icon.svg")
            results["browser_first_navigation_ms"] = (time.monotonic() - started) * 1000
            sign_in(driver, token)
            driver.get(base + "/ui/jobs")
            wait_ready(driver, 10.0)
            pages = {"/ui/jobs": "jobs list",
                     f"/ui/jobs/{job_ids[0]}": f"a job ({per_job} allocations)",
                     f"/ui/allocations/{alloc_id}": "an allocation"}
            loads = {path: page_loads(driver, base + path, args.loads) for path in pages}
            quiet = event_samples(driver, base, args.samples)
            request(base, "PUT", "/v1/jobs", restarting_job(args.churn), token=token)
            time.sleep(3)  # the churn under way
            busy = event_samples(driver, base, args.samples)
            results["load1_end"] = os.getloadavg()[0]
        finally:
            if driver is not None:
                driver.quit()
            stop_agent(agent)

    table = Table(title=f"yurt web UI in headless Chromium, {args.allocs} allocations in "
                        f"{args.jobs} jobs (load average {results['load1_start']:.2f} at "
                        f"start, {results['load1_end']:.2f} at end, 2 CPUs shared)")
    for col in ("measure", "p50 / median (ms)", "p95 (ms)", "p99 / max (ms)", "notes"):
        table.add_column(col)
    for path, name in pages.items():
        r = loads[path]
        key = name.split(" (")[0].replace(" ", "_")
        if r["missing"]:
            table.add_row(f"first load: {name}", "-", "-", "-",
                          f"never ready: {str(r.get('error', ''))[:60]!r}")
            results[f"page_{key}_missing"] = True
            continue
        for kind in ("cold", "warm"):
            s = summary(r[kind])
            table.add_row(f"first load ({kind}): {name}", f"{s['p50']:.1f}", f"{s['p95']:.1f}",
                          f"{s['max']:.1f}",
                          f"{'OK' if s['p95'] < TARGET_PAGE_MS else 'MISSED'} (< 300 ms)")
            results[f"page_{key}_{kind}_median_ms"] = s["p50"]
            results[f"page_{key}_{kind}_p95_ms"] = s["p95"]
        before, api, render = summary(r["before_api"]), summary(r["api"]), summary(r["render"])
        table.add_row(f"  of which document and scripts: {name}", f"{before['p50']:.1f}",
                      f"{before['p95']:.1f}", f"{before['max']:.1f}",
                      "navigation start to the first API request")
        table.add_row(f"  of which API answers: {name}", f"{api['p50']:.1f}", f"{api['p95']:.1f}",
                      f"{api['max']:.1f}",
                      f"{r['api_count']} requests, {r['api_bytes'] / 1024:.0f} KiB")
        table.add_row(f"  of which scripts after the last answer: {name}",
                      f"{render['p50']:.1f}", f"{render['p95']:.1f}", f"{render['max']:.1f}", "")
        results[f"page_{key}_before_api_median_ms"] = before["p50"]
        results[f"page_{key}_api_median_ms"] = api["p50"]
        results[f"page_{key}_render_median_ms"] = render["p50"]
    for phase, got in (("quiet", quiet), (f"busy ({args.churn} allocs restarting/s)", busy)):
        key = phase.split(" ")[0]
        for what, values in (("event on the socket", got["socket"]),
                             ("table shows it", got["dom"]), ("PUT answered", got["put"])):
            s = summary(values)
            if not s["n"]:
                continue
            ok = "OK" if s["p95"] < TARGET_EVENT_P95_MS else "MISSED"
            table.add_row(f"{what}, {phase}", f"{s['p50']:.1f}", f"{s['p95']:.1f}",
                          f"{s['p99']:.1f}",
                          f"{s['n']} samples, {got['timeouts']} timed out"
                          + (f"; {ok} (p95 < 100 ms)" if what != "PUT answered" else ""))
            wkey = {"event on the socket": "socket", "table shows it": "dom",
                    "PUT answered": "put"}[what]
            for q in ("p50", "p95", "p99"):
                results[f"event_{key}_{wkey}_{q}_ms"] = s[q]
        results[f"event_{key}_timeouts"] = got["timeouts"]
    Console(width=140).print(table)
    print(json.dumps({k: round(v, 2) if isinstance(v, float) else v
                      for k, v in results.items()}))


if __name__ == "__main__":
    main()
