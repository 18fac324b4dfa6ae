"""Names chosen by others never drive the operator's terminal (layers 0 and 3).

The attack: a remote API client registers a job whose ID, group, task and event messages hold
ESC and BEL (`ESC ] 0 ; … BEL` retitles the terminal window, `ESC [ 2 J` clears it; other
sequences rewrite lines or set the clipboard); a task names a file the same way; then the
operator runs `yurt job status`. Every human-readable line the CLI prints must show those
characters escaped as Go's `%q` shows them (runtime/lib/printable.py), while `--json` stays
the exact data.

Layer 0: the escaping itself, against what Go's `strconv.Quote` writes, and a guard that no
verb module prints around runtime/cli/output.py. Layer 3: one agent as a process (`--dev`, a
node name with ESC in it) holding the attacker's objects, and `yurt` as a process for each
command, its output a pipe (or, once, a pseudo-terminal, where rich draws the tables).
"""

from __future__ import annotations

import ast
import json
import os
import re
import selectors
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx2
import pytest

from tests.cli_proc_support import YURT
from tests.test_cli_scripting import read_terminal
from tests.token_support import bootstrap_token
from yurt.runtime.lib.printable import printable

EVIL = "evil\x1b]0;pwned\x07"
FILES_JOB = "evil\x1b]0;files\x07"  # shares EVIL's prefix: `job status evil` is ambiguous
GROUP = "g\x1b]0;group\x07"
TASK = "t\x1b[2J"
EVENT_ERROR = "boom \x1b]0;event\x07"
NODE = "node\x1b]0;node\x07"
FILE_NAME = "f\x1b]0;file\x07"
ITEM = "v\x1b]0;item\x07"
DESCRIPTION = "d\x1b]0;namespace\x07"
#: What `EVIL` looks like once escaped: proof the name is shown, not dropped.
SHOWN = rb"evil\x1b]0;pwned\a"


# --------------------------------------------------------------------------- layer 0


@pytest.mark.parametrize(("raw", "shown"), [
    ("web-1", "web-1"),
    ("a b", "a b"),
    ("été 日本 ☃ —", "été 日本 ☃ —"),
    ("back\\slash", "back\\slash"),  # not doubled: text, not a Go literal
    ("\x1b]0;x\x07", "\\x1b]0;x\\a"),
    ("\a\b\f\n\r\t\v", "\\a\\b\\f\\n\\r\\t\\v"),
    ("\x00\x01\x1f", "\\x00\\x01\\x1f"),
    ("\x7f", "\\x7f"),
    ("\u0085\u009b", "\\u0085\\u009b"),  # C1: NEL, and CSI, which some terminals obey
    ("\u00a0", "\\u00a0"),  # a space that is not ASCII's
    ("\u202eevil", "\\u202eevil"),  # a bidirectional override
    ("\U000e0001", "\\U000e0001"),
    ("\udc80", "\\udc80"),  # a lone surrogate: unprintable, and unencodable as it is
])
def test_unprintable_characters_are_escaped_as_go_quotes_them(raw: str, shown: str) -> None:
    assert printable(raw) == shown


def test_a_message_keeps_its_lines() -> None:
    assert printable("a\x1b\nb\r\n", lines=True) == "a\\x1b\nb\\r\n"
    assert printable("a\nb") == "a\\nb"  # a cell or a field stays on its line


def _printing_calls(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Calls that write text past runtime/cli/output.py: `click.echo`, `click.secho`,
    `print`, `sys.stdout.write`, `sys.stderr.write`, rich's `Console`."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = ast.unparse(func)
        if name in ("click.echo", "click.secho", "print", "sys.stdout.write",
                    "sys.stderr.write", "Console") or name.endswith(".print"):
            yield node.lineno, name


def test_verbs_print_only_through_the_output_helpers() -> None:
    """The one place is the only place: a verb that printed by itself could forget."""
    cli = Path(__file__).parent.parent / "runtime" / "cli"
    found = [f"{path.name}:{line}: {name}"
             for path in sorted(cli.glob("*.py")) if path.name != "output.py"
             for line, name in _printing_calls(ast.parse(path.read_text()))]
    assert found == []


# --------------------------------------------------------------------------- layer 3


def _wait_for(what: str, probe: Any, deadline: float) -> Any:
    """`probe()`'s first true answer, polled until the absolute `deadline` (monotonic)."""
    while True:
        answer = probe()
        if answer:
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _evil_job() -> dict[str, Any]:
    task = {"Name": TASK, "Driver": "mock_driver", "Config": {"start_error": EVENT_ERROR},
            "Resources": {"CPU": 1, "MemoryMB": 10}}
    return {"Job": {"ID": EVIL, "Type": "service", "Meta": {"owner\x1b": "x\x07"},
                    "TaskGroups": [{
                        "Name": GROUP, "Count": 1, "Tasks": [task],
                        "Update": {"MaxParallel": 1},
                        "RestartPolicy": {"Attempts": 0, "Mode": "fail"},
                        "ReschedulePolicy": {"Attempts": 0, "Unlimited": False}}]}}


def _files_job() -> dict[str, Any]:
    """A task that names a file in its allocation directory with ESC and BEL."""
    script = 'touch "$NOMAD_ALLOC_DIR/$(printf \'f\\033]0;file\\007\')"; exec sleep 3600'
    task = {"Name": "t", "Driver": "raw_exec",
            "Config": {"command": "/bin/sh", "args": ["-c", script]}}
    return {"Job": {"ID": FILES_JOB, "Type": "service",
                    "TaskGroups": [{"Name": "g", "Tasks": [task]}]}}


@pytest.fixture(scope="module")
def attacked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """An agent holding the attacker's objects; the IDs the commands below need."""
    data = tmp_path_factory.mktemp("agent")
    env = {k: v for k, v in os.environ.items() if k not in ("YURT_AGENT_TOKEN", "YURT_TOKEN")}
    agent = subprocess.Popen(
        [YURT, "agent", "--dev", "--port", "0", "--data-dir", str(data), "--node-name", NODE,
         "--meta", "rack=r\x1b\x07"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert agent.stderr is not None
        line = agent.stderr.readline()  # "yurt agent … listening on ADDRESS (…)": the API is up
        found = re.search(r"listening on (\S+)", line)
        assert found, line
        address = found.group(1)
        deadline = time.monotonic() + 60
        token = bootstrap_token(data)
        with httpx2.Client(base_url=address, headers={"X-Nomad-Token": token},
                           timeout=20) as api:
            for job in (_evil_job(), _files_job()):
                assert api.post("/v1/jobs", json=job).status_code == 200
            assert api.put("/v1/var/app/evil", json={"Items": {"k": ITEM}}).status_code == 200
            assert api.put("/v1/namespace/ops", json={
                "Name": "ops", "Description": DESCRIPTION}).status_code == 200

            def failed_alloc() -> dict[str, Any] | None:
                for alloc in api.get(f"/v1/job/{quote(EVIL, safe='')}/allocations").json():
                    events = (alloc.get("TaskStates") or {}).get(TASK, {}).get("Events") or []
                    if any(e["Type"] == "Driver Failure" for e in events):
                        return alloc  # type: ignore[no-any-return]
                return None

            def file_written() -> str | None:
                for alloc in api.get(f"/v1/job/{quote(FILES_JOB, safe='')}/allocations").json():
                    listed = api.get(f"/v1/client/fs/ls/{alloc['ID']}",
                                     params={"path": "alloc"})
                    if listed.status_code == 200 and any(
                            f["Name"] == FILE_NAME for f in listed.json()):
                        return str(alloc["ID"])
                return None

            evil_alloc = _wait_for("the task's driver failure", failed_alloc, deadline)
            files_alloc = _wait_for("the task's file", file_written, deadline)
            deployment = _wait_for("the deployment", lambda: api.get(
                "/v1/deployments").json(), deadline)[0]
        yield {"address": address, "alloc": evil_alloc["ID"], "eval": evil_alloc["EvalID"],
               "files_alloc": files_alloc, "deployment": deployment["ID"], "token": token}
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=60)


def run(attacked: dict[str, str], *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "YURT_ADDR": attacked["address"], "COLUMNS": "300"}
    env["YURT_TOKEN"] = attacked["token"]
    return subprocess.run([YURT, *args], capture_output=True, timeout=60, check=False,
                          env=env)


#: (command, the exit status, what it shows of the attacker's names, escaped)
COMMANDS = {
    "job status": (["job", "status"], 0, SHOWN),
    "job status JOB": (["job", "status", EVIL], 0, rb"g\x1b]0;group\a"),
    "job status PREFIX (ambiguous)": (["job", "status", "evil"], 2, rb"evil\x1b]0;files\a"),
    "alloc status": (["alloc", "status", "{alloc}"], 0, rb"boom \x1b]0;event\a"),
    "eval list": (["eval", "list"], 0, SHOWN),
    "eval status": (["eval", "status", "{eval}"], 0, SHOWN),
    "tasks": (["tasks"], 0, rb"g\x1b]0;group\a"),
    "status": (["status"], 0, SHOWN),
    "status ID": (["status", EVIL], 0, rb"g\x1b]0;group\a"),
    "node status": (["node", "status"], 0, rb"node\x1b]0;node\a"),
    "deployment list": (["deployment", "list"], 0, SHOWN),
    "deployment status": (["deployment", "status", "{deployment}"], 0, rb"g\x1b]0;group\a"),
    "var get": (["var", "get", "app/evil"], 0, rb"v\x1b]0;item\a"),
    "var list": (["var", "list"], 0, b"app/evil"),  # paths are checked by the API
    "namespace list": (["namespace", "list"], 0, rb"d\x1b]0;namespace\a"),
    "namespace status": (["namespace", "status", "ops"], 0, rb"d\x1b]0;namespace\a"),
    "alloc fs (a directory)": (["alloc", "fs", "{files_alloc}", "alloc"], 0,
                               rb"f\x1b]0;file\a"),
}


@pytest.mark.slow
@pytest.mark.parametrize("command", list(COMMANDS))
def test_no_control_character_reaches_the_terminal(attacked: dict[str, str], command: str
                                                   ) -> None:
    args, code, shown = COMMANDS[command]
    out = run(attacked, *(arg.format(**attacked) for arg in args))
    assert out.returncode == code, out.stderr
    printed = out.stdout + out.stderr
    assert b"\x1b" not in printed, printed
    assert b"\x07" not in printed, printed
    assert shown in printed, printed  # shown, escaped: not dropped


@pytest.mark.slow
def test_a_terminal_gets_rich_tables_without_the_attackers_sequences(
        attacked: dict[str, str]) -> None:
    env = {**os.environ, "YURT_ADDR": attacked["address"], "COLUMNS": "200", "TERM": "xterm"}
    env["YURT_TOKEN"] = attacked["token"]
    for args in (["job", "status", EVIL], ["alloc", "status", attacked["alloc"]]):
        code, output = read_terminal([YURT, *args], env)
        assert code == 0, output
        # rich styles its headers (ESC [ … m); the attacker's OSC and BEL never pass.
        for sequence in ("\x1b]", "\x07", "\x1b[2J"):
            assert sequence not in output, output
        assert "\\x1b]0;pwned\\a" in output or "\\x1b[2J" in output, output


@pytest.mark.slow
def test_the_event_stream_shows_task_events_escaped(attacked: dict[str, str]) -> None:
    env = {**os.environ, "YURT_ADDR": attacked["address"]}
    env["YURT_TOKEN"] = attacked["token"]
    events = subprocess.Popen([YURT, "events", "--index", "0"], stdout=subprocess.PIPE,
                              env=env)
    assert events.stdout is not None
    printed = b""
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(events.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + 30
            while b"Driver Failure" not in printed:
                left = deadline - time.monotonic()
                assert left > 0, printed
                if selector.select(timeout=left):
                    chunk = os.read(events.stdout.fileno(), 65536)
                    assert chunk, printed  # the stream ended before the event
                    printed += chunk
    finally:
        events.kill()
        events.wait(timeout=10)
    assert b"\x1b" not in printed, printed
    assert b"\x07" not in printed, printed
    assert rb"boom \x1b]0;event\a" in printed


@pytest.mark.slow
def test_json_keeps_the_exact_names(attacked: dict[str, str]) -> None:
    listed = run(attacked, "job", "status", "--json")
    assert EVIL in [job["ID"] for job in json.loads(listed.stdout)]
    one = json.loads(run(attacked, "job", "status", EVIL, "--json").stdout)
    assert one["Job"]["ID"] == EVIL
    assert one["Job"]["TaskGroups"][0]["Name"] == GROUP
    alloc = json.loads(run(attacked, "alloc", "status", attacked["alloc"], "-json").stdout)
    messages = [e["DisplayMessage"] for e in alloc["TaskStates"][TASK]["Events"]]
    assert EVENT_ERROR in messages
    node = json.loads(run(attacked, "node", "status", "-json").stdout)
    assert node[0]["Name"] == NODE
    # A template prints the value itself, as Nomad's -t does: the user asked for it exactly.
    template = run(attacked, "job", "status", EVIL, "-t", "{{.Job.ID}}")
    assert template.stdout == EVIL.encode()
