"""What the daemon loads: `yurt agent` must not carry the CLI client's or HCL parsing's imports.

Each check runs in a fresh interpreter, since this test process has long imported everything.
The daemon's resident size and its time to answer after a restart depend on it (httpx2, rich,
python-hcl2 and lark are about 10 MiB and a third of the start-up imports).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

CLIENT_ONLY = ("rich", "httpx2", "yurt.runtime.cli.api_client", "yurt.runtime.agent.foreground")
HCL_ONLY = ("lark", "hcl2")

JSON_JOB = json.dumps({"Job": {"ID": "web", "Type": "service", "TaskGroups": [{
    "Name": "web", "Tasks": [{"Name": "t", "Driver": "raw_exec",
                              "Config": {"command": "/bin/true"}}]}]}})
HCL_JOB = 'job "web" {\n  group "web" {\n    task "t" {\n      driver = "raw_exec"\n' \
          '      config {\n        command = "/bin/true"\n      }\n    }\n  }\n}\n'


def _loaded_after(code: str, names: tuple[str, ...]) -> list[str]:
    """The `names` present in `sys.modules` once `code` has run in a new interpreter."""
    probe = (f"{code}\nimport sys, json\n"
             f"print(json.dumps([n for n in {names!r} if n in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True)
    loaded: list[str] = json.loads(done.stdout.splitlines()[-1])
    return loaded


def test_the_agent_command_loads_neither_client_nor_hcl_modules() -> None:
    code = ("import yurt.runtime.cli, yurt.runtime.agent.agent, yurt.runtime.api\n"
            "from yurt.runtime.cli import cli\n"
            "cli.get_command(None, 'agent')\n")
    assert _loaded_after(code, CLIENT_ONLY + HCL_ONLY) == []


def test_a_json_job_parses_without_hcl_modules() -> None:
    code = ("from yurt.runtime.jobspec import parse_job\n"
            f"parse_job({JSON_JOB!r}, filename='job.json')\n")
    assert _loaded_after(code, HCL_ONLY) == []


@pytest.mark.parametrize("text", [HCL_JOB, '{"Job": {"ID": 1}}'],
                         ids=["hcl job", "json job with an error to place"])
def test_hcl_modules_load_when_a_job_needs_them(text: str) -> None:
    # The counterpart of the checks above: the probe does see lark once it is used.
    code = ("from yurt.runtime.errors import JobSpecError\n"
            "from yurt.runtime.jobspec import parse_job\n"
            f"try:\n    parse_job({text!r}, filename='job')\nexcept JobSpecError:\n    pass\n")
    assert "lark" in _loaded_after(code, HCL_ONLY)


def test_client_verbs_still_reach_their_modules() -> None:
    code = ("from yurt.runtime import cli\n"
            "from click.testing import CliRunner\n"
            "CliRunner().invoke(cli.cli, ['node', 'status'],\n"
            "                   env={'YURT_ADDR': 'http://127.0.0.1:9'})\n")
    assert _loaded_after(code, ("yurt.runtime.cli.http", "yurt.runtime.cli.api_client")) == [
        "yurt.runtime.cli.http", "yurt.runtime.cli.api_client"]


#: What start-up must not pay for: the async runtime, the agent's HTTP stack, HCL parsing,
#: rich (a terminal's tables only), the Go template engine (`-t` only), the foreground runner,
#: and importlib.metadata (`--version` only). scripts/bench_cli measures the time it saves.
NOT_AT_START = ("trio", "httpx2", "lark", "hcl2", "rich", "yurt.runtime.gotemplate",
                "yurt.runtime.agent.foreground", "importlib.metadata")


def test_the_command_tree_loads_nothing_heavy() -> None:
    # --help walks every group, as a listing of all commands does.
    code = ("from click.testing import CliRunner\n"
            "from yurt.runtime.cli import cli\n"
            "for args in (['--help'], ['job', '--help'], ['alloc', '--help']):\n"
            "    assert CliRunner().invoke(cli, args).exit_code == 0\n")
    assert _loaded_after(code, NOT_AT_START) == []


@pytest.mark.parametrize("args", [["job", "status"], ["alloc", "status", "0123abcd"],
                                  ["node", "status"], ["status"], ["tasks"],
                                  ["status", "ab12"]])
def test_remote_verbs_take_the_light_http_path(args: list[str]) -> None:
    # Against an address where nothing listens: the verb runs its whole client path, up to
    # the connection, in a piped (not terminal) stdout.
    code = ("from click.testing import CliRunner\n"
            "from yurt.runtime.cli import cli\n"
            f"result = CliRunner().invoke(cli, {args!r}, env={{'YURT_ADDR': "
            "'http://127.0.0.1:9'})\n"
            "assert result.exit_code == 1, result.output\n")
    assert _loaded_after(code, NOT_AT_START) == []


#: What the agent loads behind its API (`runtime/agent/agent.py`, `PARTS`): the runners, the stores
#: with sqlite_utils, the server, the drivers' manager and the devices.
BEHIND_THE_API = ("yurt.runtime.client.allocrunner.runner", "yurt.runtime.client.taskrunner.runner",
                  "yurt.runtime.client.client", "yurt.runtime.server.local", "sqlite_utils",
                  "yurt.store.sqlite", "yurt.runtime.client.devices.manager")
#: The raw_exec driver is loaded by the driver manager, behind the API too.
RAW_EXEC = "yurt.runtime.client.drivers.rawexec"


def test_the_api_binds_before_the_runners_and_stores_load() -> None:
    code = ("import yurt.runtime.cli, yurt.runtime.agent.agent, yurt.runtime.api\n"
            "import yurt.runtime.agent.config\n"
            "from yurt.runtime.cli import cli\n"
            "cli.get_command(None, 'agent')\n")
    assert _loaded_after(code, (*BEHIND_THE_API, RAW_EXEC)) == []


def test_the_agent_loads_what_it_put_behind_the_api() -> None:
    # The counterpart: the probe sees the modules once the agent loads its parts.
    code = "from yurt.runtime.agent import agent\nagent._load_parts()\n"
    assert _loaded_after(code, BEHIND_THE_API) == list(BEHIND_THE_API)
