"""python-nomad's own test suite, unmodified, against `yurt agent`; then nomad-tools' watch.

Run through `scripts/python_nomad_suite`, which installs the clients into their own venvs.

Why this way: python-nomad's sdist ships its tests (`tests/test_*.py`) but not the files its CI
makes around them (`tests/common.py`, `tests/conftest.py` and the job files that `nomad init` /
`nomad run -output` write). Ours are in scripts/pynomad/, copied into a scratch directory the
suite runs in:
- `common.py` and `conftest.py` give the fixtures the tests name (`nomad_setup`,
  `nomad_setup_with_namespace`) from `NOMAD_IP`/`NOMAD_PORT`, as python-nomad's CI does;
- the job files keep the IDs and group/task names the tests expect (`example`, group `cache`,
  task `redis`; `example-batch` parameterized on meta `time`) but run `raw_exec` (`sleep`), as
  yurt has no docker driver; the `redis` task ignores SIGUSR1, which the suite sends it and
  expects it to survive, as redis does (a bare `sleep` would die of it);
- `conftest.py` also records every HTTP exchange of every test (method, path, status, the start
  of the answer, secrets redacted) through `requests.Session.send`, so a failure names the
  endpoint and what yurt answered; exchanges that the `responses` library mocked are marked and
  never reach the agent.

ACLs are on, as python-nomad's CI runs Nomad (`nomad agent -dev -acl-enabled`): the agent's
config says `[acl] bootstrap = "manual"`, so nobody holds a token until python-nomad's first
test, `test_acl.py::test_create_bootstrap`, bootstraps the ACL system and keeps the secret in
`tests.common.NOMAD_TOKEN`, which every later test's client sends (the fixtures read it when
each test starts, as python-nomad's own conftest does). Before the suite this harness asks only
what anyone may (`/v1/agent/health`, until the agent and its node are ready): it registers
nothing, as python-nomad's CI does not (the tests register the `example` job themselves). After
the suite, conftest.py hands over the token python-nomad got (`common.NOMAD_TOKEN`, in a 0600
file of the scratch directory); the harness's own requests carry it, and nomad-tools gets a
token of its own, made with it, whose policy reads the default namespace and its logs only
(what `watch alloc` needs). If python-nomad's bootstrap did not happen, the harness bootstraps
then (the suite is over, nothing is pre-empted) and says so.

Tests are grouped as Nomad documents them. ACL tests (`test_acl.py`, and
`test_base_get_connnection_not_authorized`, which expects a 403 for a made-up token) count,
and are also shown apart; Sentinel (`test_sentinel.py`), Quotas and enterprise features are
excluded from the verdict (yurt is Nomad's open-source single-node agent); they still run and
are shown. The three `test_base_*_connection_error` tests aim at a public address and are
deselected.

Then nomad-tools (`nomadtools watch alloc ID`) follows a short raw_exec batch allocation
(sleep, a line of output, exit 0) to its end; the check passes when the watcher exits 0 on its
own within `--watch-timeout` seconds (whether it showed the task's events and output is
reported too).

Output: one line per test, a summary table, a categorized failure list (Markdown, also written
to `--failures FILE` when given), and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib.agent_token import agent_env, headers

ROOT = Path(__file__).resolve().parent.parent
YURT = ROOT / ".venv" / "bin" / "yurt"
#: The files python-nomad's CI makes around its tests (see the module docstring).
FILES = ROOT / "scripts" / "pynomad"
DESELECT = ("test_base.py::test_base_get_connection_error",
            "test_base.py::test_base_put_connection_error",
            "test_base.py::test_base_delete_connection_error")
# Tests that fail against Nomad itself, with why; still counted, but listed apart so that nobody
# chases them in yurt.
SUITE_DEFECTS = {
    "test_base.py::test_use_custom_user_agent":
        "no @responses.activate: the request goes to nomad.service.consul",
    "test_deployments.py::test_get_deployments_with_namespace":
        "no @responses.activate around its mock",
    "test_job.py::test_delete_job_with_invalid_purge_param_raises":
        "2.1.0 sends purge=True, which Go's ParseBool accepts: the job is purged, no error",
    "test_job.py::test_delete_job_with_purge":
        "the job was already purged by the test before (404 job not found, as Nomad says)",
    "test_job.py::test_dispatch_job_idempotency":
        "registers example-batch under the name example-batch-idempotent: Nomad answers 400 "
        "'Job ID does not match name'",
}
# What the tests' skipif markers compare against: a current Nomad, so that nothing is skipped
# for being "too old".
NOMAD_VERSION = "1.9.7"
#: The categories left out of the verdict (shown, not counted); "ACL" counts.
EXCLUDED = ("Sentinel", "Quotas", "enterprise")
#: Where conftest.py leaves the token python-nomad's bootstrap got (scratch directory, 0600).
TOKEN_FILE = "bootstrap.token"
#: The policy of nomad-tools' token: what `watch alloc` reads (the allocation, its events and
#: its task's logs), in the default namespace only. `read` alone does not read logs (Nomad's
#: acl/policy.go `expandNamespacePolicy`: `read-logs` comes with `write`), so it is named.
WATCH_POLICY = 'namespace "default" {\n  policy = "read"\n  capabilities = ["read-logs"]\n}\n'


def category(nodeid: str) -> str:
    """The group a test is shown in ("" for none); see `counted` for which ones count."""
    name = nodeid.lower()
    # python-nomad's CI runs Nomad with --acl-enabled; this test expects a 403 for a made-up
    # token, which only an agent with ACLs gives.
    if "test_acl.py" in name or name.endswith("test_base_get_connnection_not_authorized"):
        return "ACL"
    if "test_sentinel.py" in name:
        return "Sentinel"
    if "quota" in name:
        return "Quotas"
    if "enterprise" in name or "license" in name or "recommend" in name:
        return "enterprise"
    return ""


def counted(row: dict[str, str]) -> bool:
    """Whether a test's outcome is part of the verdict (every category but `EXCLUDED`)."""
    return row["category"] not in EXCLUDED


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def request(base: str, method: str, path: str, body: object | None = None,
            timeout: float = 30.0, token: str = "") -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method, headers=headers(token))
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read() or b"null")


def start_agent(yurt: str, data_dir: Path, port: int) -> subprocess.Popen[bytes]:
    # The node name of python-nomad's CI (`nomad agent -dev -node pynomad1 -acl-enabled`):
    # tests look it up; ACLs on, bootstrapped by the suite's first test (see the header).
    (data_dir / "agent.toml").write_text(
        'node_name = "pynomad1"\n\n[acl]\nenabled = true\nbootstrap = "manual"\n')
    with open(data_dir / "agent.log", "ab") as log:
        # No token variable of the caller's: none may become a management token of this
        # agent (the suite must meet the ACL system as python-nomad's CI does).
        return subprocess.Popen([yurt, "agent", "--config", str(data_dir / "agent.toml"),
                                 "--data-dir", str(data_dir / "data"),
                                 "--bind", "127.0.0.1", "--port", str(port)],
                                stdout=log, stderr=log, start_new_session=True,
                                env=agent_env())


def wait_until(what: str, check: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
            if value:
                return value
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def job_allocs(base: str, job_id: str, token: str) -> list[dict[str, Any]]:
    return request(base, "GET", f"/v1/job/{job_id}/allocations",  # type: ignore[no-any-return]
                   token=token)


def harness_token(base: str, run: Path) -> tuple[str, str]:
    """The management token for the harness's requests after the suite, and where it came
    from: the one python-nomad's bootstrap got (conftest.py leaves it in `run`), else one
    this harness bootstraps (the suite is over: nothing is pre-empted), else ""."""
    path = run / TOKEN_FILE
    if path.exists() and (token := path.read_text().strip()):
        return token, "python-nomad's bootstrap"
    try:
        answer = request(base, "PUT", "/v1/acl/bootstrap", timeout=10)
    except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError) as e:
        return "", f"none: python-nomad did not bootstrap and the harness could not ({e})"
    return str(answer["SecretID"]), "the harness's bootstrap (python-nomad's did not happen)"


def watch_token(base: str, token: str) -> str:
    """A client token for nomad-tools, made with the management `token`: `WATCH_POLICY`."""
    request(base, "PUT", "/v1/acl/policy/nomad-tools-watch",
            {"Name": "nomad-tools-watch", "Description": "nomad-tools watch alloc",
             "Rules": WATCH_POLICY}, token=token)
    made = request(base, "PUT", "/v1/acl/token",
                   {"Name": "nomad-tools", "Type": "client", "Policies": ["nomad-tools-watch"]},
                   token=token)
    return str(made["SecretID"])


def prepare(suite: Path, run: Path, example: Path) -> None:
    tests = run / "tests"
    shutil.copytree(suite, tests)
    shutil.copy(FILES / "common.py.in", tests / "common.py")
    shutil.copy(FILES / "conftest.py.in", tests / "conftest.py")
    shutil.copy(example, run / "example.json")
    for name in ("example.nomad", "example_batch_parameterized.json"):
        shutil.copy(FILES / name, run / name)


def run_suite(args: argparse.Namespace, run: Path, port: int) -> Path:
    junit = run / "junit.xml"
    # python-nomad reads NOMAD_ADDR, NOMAD_NAMESPACE, NOMAD_REGION, NOMAD_TOKEN and the TLS
    # variables as its defaults: none may leak in (tests/common.py has the namespace the
    # tests compare against).
    env = {k: v for k, v in agent_env().items() if not k.startswith(("NOMAD_", "VAULT_"))}
    env.update(NOMAD_IP="127.0.0.1", NOMAD_PORT=str(port), NOMAD_VERSION=NOMAD_VERSION,
               PYNOMAD_EXCHANGES=str(run / "exchanges.jsonl"),
               PYNOMAD_TOKEN_OUT=str(run / TOKEN_FILE), PYTHONDONTWRITEBYTECODE="1")
    cmd = [args.pytest, "-m", "pytest", "tests", "-p", "no:cacheprovider", "-q",
           f"--timeout={args.test_timeout}", f"--junitxml={junit}", "-o",
           "junit_family=xunit1", *[f"--deselect=tests/{t}" for t in DESELECT], *args.pytest_args]
    subprocess.run(cmd, cwd=run, env=env, stdout=subprocess.DEVNULL if args.quiet else None,
                   check=False)
    return junit


def results(junit: Path) -> list[dict[str, str]]:
    """One row per test. `flaky` reruns leave empty testcases before the last attempt's: the
    last one of a name is the verdict."""
    rows: dict[str, dict[str, str]] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        nodeid = f"{case.get('file') or case.get('classname', '').replace('.', '/') + '.py'}" \
                 f"::{case.get('name')}"
        nodeid = nodeid.removeprefix("tests/")
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome, message = "failed", (child.get("message") or "")[:300]
            elif child.tag == "skipped":
                outcome, message = "skipped", (child.get("message") or "")[:300]
        rows[nodeid] = {"test": nodeid, "outcome": outcome, "message": message,
                        "category": category(nodeid)}
    return list(rows.values())


def exchanges(path: Path) -> dict[str, list[dict[str, Any]]]:
    by_test: dict[str, list[dict[str, Any]]] = defaultdict(list)
    if path.exists():
        for line in path.read_text().splitlines():
            row = json.loads(line)
            by_test[row["test"].removeprefix("tests/")].append(row)
    return by_test


UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def endpoint(url: str) -> str:
    """The path without its query, UUIDs as `:id`, so that one endpoint is one group."""
    path = url.split("://", 1)[-1].split("/", 1)[-1].split("?")[0]
    return "/" + UUID.sub(":id", path)


def failure_list(rows: list[dict[str, str]], seen: dict[str, list[dict[str, Any]]]) -> str:
    """Markdown: failed tests that count, grouped by the first endpoint yurt answered badly."""
    groups: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        if row["outcome"] != "failed" or not counted(row):
            continue
        if row["test"] in SUITE_DEFECTS:
            groups["python-nomad's own defects (fail against Nomad too)"].append(
                f"- `{row['test']}`: {SUITE_DEFECTS[row['test']]}")
            continue
        live = [x for x in seen.get(row["test"], []) if not x["mocked"]]
        bad = [x for x in live if x.get("error") or x.get("status", 200) >= 400]
        if bad:
            x = bad[0]
            key = f"{x['method']} {endpoint(x['url'])}"
            said = x.get("error") or f"{x['status']} {x.get('body', '')!r}"
        elif live:
            x = live[-1]
            key = f"{x['method']} {endpoint(x['url'])} (answered, shape or " \
                  "behaviour wrong)"
            said = f"{x['status']} {x.get('body', '')!r}"
        else:
            # A defect of the suite itself (a missing `responses` mock, say): it fails against
            # Nomad as well.
            key, said = "(no request reached the agent: fails against any agent)", ""
        groups[key].append(f"- `{row['test']}` → {said[:200]} — test says: "
                           f"{row['message'][:200]!r}")
    out = []
    for key in sorted(groups, key=lambda k: (-len(groups[k]), k)):
        out.append(f"\n### {key} ({len(groups[key])})\n")
        out.extend(groups[key])
    return "\n".join(out)


def by_category(rows: list[dict[str, str]]) -> dict[str, dict[str, int]]:
    """Outcomes per category ("general" for the tests of none)."""
    out: dict[str, Counter[str]] = defaultdict(Counter)
    for row in rows:
        out[row["category"] or "general"][row["outcome"]] += 1
    return {c: {o: counts[o] for o in ("passed", "failed", "skipped")}
            for c, counts in out.items()}


def summary_table(rows: list[dict[str, str]], live_ids: set[str]) -> str:
    """Markdown: the verdict's outcomes (every counted test), then each category's."""
    lines = ["", "| outcome | tests | of which talked to the agent |", "|---|---|---|"]
    for outcome in ("passed", "failed", "skipped"):
        sel = [r for r in rows if counted(r) and r["outcome"] == outcome]
        lines.append(f"| {outcome} | {len(sel)} | {sum(r['test'] in live_ids for r in sel)} |")
    lines += ["", "| category | counted | passed | failed | skipped |", "|---|---|---|---|---|"]
    categories = by_category(rows)
    for cat in ("general", "ACL", *EXCLUDED):
        c = categories.get(cat, {"passed": 0, "failed": 0, "skipped": 0})
        lines.append(f"| {cat} | {'no' if cat in EXCLUDED else 'yes'} | {c['passed']} | "
                     f"{c['failed']} | {c['skipped']} |")
    lines.append(f"| deselected (public address) | no | {len(DESELECT)} not run | | |")
    return "\n".join(lines)


def watch_check(args: argparse.Namespace, base: str, data_dir: Path,
                token: str) -> dict[str, Any]:
    """nomad-tools, with a read-only token of its own, follows a short raw_exec batch
    allocation to its end (`token`: the harness's management token)."""
    job = {"Job": {"ID": "watched", "Type": "batch", "TaskGroups": [{
        "Name": "g", "Tasks": [{"Name": "t", "Driver": "raw_exec", "Config": {
            "command": "/bin/sh", "args": ["-c", "sleep 3; echo watched-done"]}}],
        "RestartPolicy": {"Attempts": 0, "Mode": "fail"}}]}}
    watcher = watch_token(base, token)
    request(base, "PUT", "/v1/jobs", job, token=token)
    allocs = wait_until("the watched allocation", lambda: job_allocs(base, "watched", token), 30)
    alloc_id = allocs[0]["ID"]
    # The token in the environment nomad-tools reads it from, never on its command line.
    env = {**agent_env(), "NOMAD_ADDR": base, "NOMAD_TOKEN": watcher}
    start = time.monotonic()
    with open(data_dir / "watch.log", "wb") as log:
        # `--lines -1`: with the default (30), nomad-tools 0.5.8's `watch alloc` joins a log
        # thread it never started and ends in a RuntimeError, exit 1, whatever the agent.
        proc = subprocess.Popen([args.nomadtools, "watch", "--lines", "-1", "alloc", alloc_id],
                                env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code: int | None = proc.wait(timeout=args.watch_timeout)
        except subprocess.TimeoutExpired:
            code = None
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    elapsed = time.monotonic() - start
    output = (data_dir / "watch.log").read_text(errors="replace")
    status = job_allocs(base, "watched", token)[0]["ClientStatus"]
    return {"ended": code is not None, "exit_code": code, "seconds": round(elapsed, 1),
            "alloc_status": status, "saw_output": "watched-done" in output,
            "saw_task_events": "Started" in output,
            "tail": output[-600:]}


def stop_all(base: str, token: str) -> None:
    """Tasks outlive an agent stop by design; this scratch agent's must not: stop every job (of
    every namespace) and wait (bounded) until its allocations are terminal before the agent
    goes."""
    try:
        for job in request(base, "GET", "/v1/jobs?namespace=*", token=token):
            request(base, "DELETE",
                    f"/v1/job/{job['ID']}?namespace={job.get('Namespace') or 'default'}",
                    token=token)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(
                a["ClientStatus"] in ("pending", "running")
                for a in request(base, "GET", "/v1/allocations?namespace=*", token=token)):
            time.sleep(0.2)
    except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError) as e:
        print(f"could not stop the scratch agent's jobs: {e}", file=sys.stderr)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--suite", type=Path, required=True, help="python-nomad's tests/ folder")
    p.add_argument("--pytest", required=True, help="python of the venv with python-nomad")
    p.add_argument("--nomadtools", required=True, help="the nomadtools executable")
    p.add_argument("--test-timeout", type=int, default=90, help="seconds per test")
    p.add_argument("--watch-timeout", type=float, default=60.0)
    p.add_argument("--example", type=Path, default=FILES / "example-init.json",
                   help="the job the suite reads as example.json: by default nomad init's, as "
                        "python-nomad's CI runs it (example.json: a minimal one)")
    p.add_argument("--failures", type=Path, help="also write the failure list (Markdown) here")
    p.add_argument("--keep", action="store_true", help="keep the scratch directory")
    p.add_argument("--yurt-bin", default=str(YURT), help=f"the `yurt` to start (default {YURT})")
    p.add_argument("--quiet", action="store_true", help="hide pytest's own output")
    p.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = p.parse_args()
    args.pytest = str(Path(args.pytest).absolute())
    args.nomadtools = str(Path(args.nomadtools).absolute())

    run = Path(tempfile.mkdtemp(prefix="yurt-pynomad-"))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    agent = start_agent(args.yurt_bin, run, port)
    token = ""
    try:
        # Public: the agent and its node are ready (the client's health is its readiness).
        wait_until("the agent's health", lambda: request(base, "GET", "/v1/agent/health",
                                                         timeout=2), 60)
        prepare(args.suite, run, args.example)
        started = time.monotonic()
        junit = run_suite(args, run, port)
        suite_seconds = time.monotonic() - started
        token, token_source = harness_token(base, run)
        print(f"the harness's token: {token_source}", file=sys.stderr)
        watch: dict[str, Any] = {"ended": False, "exit_code": None, "seconds": 0.0,
                                 "alloc_status": "not run", "saw_output": False,
                                 "saw_task_events": False, "tail": token_source}
        if token:
            watch = watch_check(args, base, run, token)
    finally:
        if not token:  # failed before the suite's end: a token to stop the jobs with
            token = harness_token(base, run)[0]
        stop_all(base, token)
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(agent.pid, signal.SIGKILL)
            agent.wait()

    rows = results(junit)
    seen = exchanges(run / "exchanges.jsonl")
    for row in rows:
        live = sum(1 for x in seen.get(row["test"], []) if not x["mocked"])
        tag = f" [{row['category']}]" if row["category"] else ""
        print(f"{row['outcome'].upper():8} {row['test']}{tag} (live requests: {live})")
    counting = [r for r in rows if counted(r)]
    live_ids = {t for t, xs in seen.items() if any(not x["mocked"] for x in xs)}
    categories = by_category(rows)
    summary: dict[str, Any] = {
        "python_nomad": args.suite.parent.name, "deselected": len(DESELECT),
        "total": len(rows), "passed": sum(r["outcome"] == "passed" for r in counting),
        "failed": sum(r["outcome"] == "failed" for r in counting),
        "skipped": sum(r["outcome"] == "skipped" for r in counting),
        "categories": categories,
        "excluded": {c: sum(v.values()) for c, v in categories.items() if c in EXCLUDED},
        "live_total": sum(r["test"] in live_ids for r in counting),
        "live_passed": sum(r["test"] in live_ids and r["outcome"] == "passed"
                           for r in counting),
        "suite_seconds": round(suite_seconds, 1),
        "harness_token": token_source,
        "nomad_tools_watch": {k: v for k, v in watch.items() if k != "tail"},
    }
    print(summary_table(rows, live_ids))
    print(f"\nthe harness's token after the suite: {token_source}")
    print(f"\nnomad-tools watch alloc: ended={watch['ended']} exit={watch['exit_code']} "
          f"after {watch['seconds']} s, alloc {watch['alloc_status']}, "
          f"task events seen={watch['saw_task_events']}, output seen={watch['saw_output']}")
    if not watch["ended"]:
        print("watch output tail:\n" + watch["tail"])
    failures = failure_list(rows, seen)
    print(f"\n## Failures by endpoint ({', '.join(EXCLUDED)} left out)\n" + failures)
    if args.failures:
        args.failures.write_text(
            f"# python-nomad {args.suite.parent.name} against yurt: failures by endpoint\n\n"
            f"{summary['passed']} passed, {summary['failed']} failed, {summary['skipped']} "
            f"skipped (of {len(counting)} counted, ACL tests included: "
            f"{categories.get('ACL', {})}; {summary['live_passed']}/"
            f"{summary['live_total']} of those that talk to the agent pass); excluded "
            f"{summary['excluded']}. nomad-tools watch: {summary['nomad_tools_watch']}\n"
            f"Generated by ./scripts/python_nomad_suite at "
            f"{time.strftime('%H:%M UTC', time.gmtime())}."
            f"\n{failures}\n")
    print(json.dumps(summary))
    if args.keep:
        print(f"scratch directory kept: {run}", file=sys.stderr)
    else:
        shutil.rmtree(run, ignore_errors=True)


if __name__ == "__main__":
    main()
