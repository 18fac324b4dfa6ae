"""Shared fixtures. `state_db` runs a test against every StateDB implementation; `small_fs`
(tests/disk_support.py) is a real small file system to fill up; `thread_hops` records the name
of every function sent to a worker thread (hot paths promise how many hops they make)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import trio

from tests.browser_support import browser, chromium_session, ui_agent  # noqa: F401 (fixtures)
from tests.disk_support import small_fs  # noqa: F401 (a fixture, shared here)
from tests.docker_support import dockerd, dockerd_bridge  # noqa: F401 (fixtures)
from tests.etcd_support import etcd_cluster, etcd_prefix, etcd_urls  # noqa: F401 (fixtures)
from tests.token_support import install as install_suite_token
from yurt.store import MemoryStateDB, StateDB, open_state_db

install_suite_token()


@pytest.fixture(autouse=True)
def suite_token() -> None:
    """The suite's token in the environment before every test: an in-process `yurt agent`
    start takes `$YURT_AGENT_TOKEN` out of it (runtime/cli/agent.py `agent_token`), which
    would leave the agents of the tests after it, on the same worker, without one."""
    install_suite_token()


@pytest.fixture(params=["memory", "sqlite"])
async def state_db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StateDB]:
    if request.param == "memory":
        yield MemoryStateDB()
    else:
        async with open_state_db(tmp_path / "state") as db:
            yield db


@pytest.fixture
def thread_hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the functions run through `trio.to_thread.run_sync`, in order."""
    hops: list[str] = []
    real_run_sync = trio.to_thread.run_sync

    async def counting_run_sync(fn: Callable[..., object], *args: object,
                                **kwargs: object) -> object:
        hops.append(getattr(fn, "__name__", repr(fn)))
        return await real_run_sync(fn, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(trio.to_thread, "run_sync", counting_run_sync)
    return hops
