"""What a raw_exec task runs as and what it inherits (layer 2 where processes run).

A task with `user = "nobody"` runs as nobody, or is refused with a task event when the agent
cannot switch users; a task inherits only the allow-listed part of the agent's environment.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.test_rawexec import NODE, alloc_of, last, one_task
from yurt.runtime.agent.config import ConfigError, load_config
from yurt.runtime.client.allocrunner.runner import AllocRunner, AllocRunnerConfig
from yurt.runtime.client.drivers import users
from yurt.runtime.client.drivers.rawexec import RawExecDriver, plugin
from yurt.runtime.client.taskenv import inherited_env
from yurt.store import MemoryStateDB


@asynccontextmanager
async def runner(hcl: str, tmp_path: Path, options: dict[str, Any]
                 ) -> AsyncIterator[AllocRunner]:
    driver: RawExecDriver = plugin(options)
    config = AllocRunnerConfig(state_db=MemoryStateDB(), drivers={"raw_exec": driver},
                               unix_clock=time.time_ns, alloc_root=tmp_path / "alloc",
                               node=NODE)
    async with trio.open_nursery() as nursery:
        yield AllocRunner(alloc_of(hcl), config, nursery=nursery)


def stdout(ar: AllocRunner) -> str:
    assert ar.alloc_dir is not None
    return (ar.alloc_dir.logs / "t.stdout.0").read_text()


# ------------------------------------------------------------------ user

@pytest.mark.slow
async def test_a_task_runs_as_its_user(tmp_path: Path) -> None:
    hcl = one_task("/bin/sh", "-c", "id -u; id -g; echo $USER $HOME", extra='user = "nobody"')
    with trio.fail_after(20):
        async with runner(hcl, tmp_path, {}) as ar:
            await ar.run()
    uid, gid = users.resolve_user("nobody")
    assert stdout(ar).splitlines()[:2] == [str(uid), str(gid)]
    assert ar.alloc_dir is not None  # its secrets dir is its own, and only its
    secrets = (ar.alloc_dir.task_dir("t") / "secrets").stat()
    assert (secrets.st_uid, secrets.st_gid, secrets.st_mode & 0o777) == (uid, gid, 0o700)
    assert stdout(ar).splitlines()[2].startswith("nobody ")
    assert last(ar.task_runners["t"], "Terminated") == "Exit Code: 0"


@pytest.mark.slow
async def test_an_unknown_user_is_a_driver_failure(tmp_path: Path) -> None:
    hcl = one_task("/bin/true", extra='user = "no-such-user-here"')
    with trio.fail_after(20):
        async with runner(hcl, tmp_path, {}) as ar:
            await ar.run()
    message = last(ar.task_runners["t"], "Driver Failure")
    assert 'user "no-such-user-here" does not exist' in message
    assert ar.alloc_state().client_status == "failed"


@pytest.mark.slow
async def test_a_non_root_agent_refuses_another_user(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(users.os, "geteuid", lambda: 1000)
    hcl = one_task("/bin/true", extra='user = "nobody"')
    with trio.fail_after(20):
        async with runner(hcl, tmp_path, {}) as ar:
            await ar.run()
    assert "agent is not running as root" in last(ar.task_runners["t"], "Driver Failure")


def test_resolve_user() -> None:
    assert users.resolve_user("root") == (0, 0)
    assert users.resolve_user("0") == (0, 0)
    with pytest.raises(users.UserError, match='user "nope-x" does not exist'):
        users.resolve_user("nope-x")


# ------------------------------------------------------------------ environment

def test_inherited_env_is_an_allow_list() -> None:
    environ = {"PATH": "/bin", "LC_ALL": "C", "AWS_SECRET_ACCESS_KEY": "s",
               "YURT_AGENT_TOKEN": "t", "KEEP": "k"}
    assert inherited_env(environ, ["PATH", "LC_*"]) == {"PATH": "/bin", "LC_ALL": "C"}
    assert inherited_env(environ, ["*"]) == {"PATH": "/bin", "LC_ALL": "C",
                                             "AWS_SECRET_ACCESS_KEY": "s", "KEEP": "k"}


@pytest.mark.slow
async def test_only_allowed_agent_variables_reach_the_task(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "agent-secret")
    monkeypatch.setenv("YURT_TEST_ALLOWED", "from-agent")
    monkeypatch.setenv("YURT_AGENT_TOKEN", "token")
    options = {"env_allow": ["PATH", "YURT_TEST_*"]}
    with trio.fail_after(20):
        async with runner(one_task("/bin/sh", "-c", "env"), tmp_path, options) as ar:
            await ar.run()
    env = stdout(ar)
    assert "YURT_TEST_ALLOWED=from-agent\n" in env
    assert "AWS_SECRET_ACCESS_KEY" not in env
    assert "YURT_AGENT_TOKEN" not in env
    assert "NOMAD_TASK_NAME=t\n" in env  # the task's own variables are not filtered


@pytest.mark.slow
async def test_the_default_allow_list_keeps_secrets_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "agent-secret")
    monkeypatch.setenv("LC_TIME", "C")
    with trio.fail_after(20):
        async with runner(one_task("/bin/sh", "-c", "env"), tmp_path, {}) as ar:
            await ar.run()
    env = stdout(ar)
    assert "AWS_SECRET_ACCESS_KEY" not in env
    assert "LC_TIME=C\n" in env
    assert "PATH=" in env


def test_agent_config_checks_raw_exec_options(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text('[drivers.config.raw_exec]\nenv_allow = ["PATH"]\n'
                    'tree_tracking = "subreaper"\n')
    assert load_config(good).drivers.config["raw_exec"]["env_allow"] == ["PATH"]
    bad = tmp_path / "bad.toml"
    bad.write_text('[drivers.config.raw_exec]\nenv_alow = ["PATH"]\n')
    with pytest.raises(ConfigError, match="env_alow"):
        load_config(bad)
    wrong = tmp_path / "wrong.toml"
    wrong.write_text('[drivers.config.raw_exec]\ntree_tracking = "cgroup3"\n')
    with pytest.raises(ConfigError, match="tree_tracking must be one of"):
        load_config(wrong)


@pytest.mark.slow
async def test_the_shims_own_variables_stay_out_of_the_task(tmp_path: Path) -> None:
    options = {"tree_tracking": "subreaper", "env_allow": ["*"]}
    with trio.fail_after(20):
        async with runner(one_task("/bin/sh", "-c", "env"), tmp_path, options) as ar:
            await ar.run()
    assert "YURT_REAPER" not in stdout(ar)
    assert "YURT_SHIM_CHILD" not in stdout(ar)
