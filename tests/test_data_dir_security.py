"""Who can read the agent's databases (layer 2: real files)."""

from __future__ import annotations

import stat
from pathlib import Path

import trio

from yurt.runtime.server.state.sqlite import ServerStore
from yurt.store import open_state_db


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_server_db_holding_job_env_is_private(tmp_path: Path) -> None:
    with trio.fail_after(10):
        store = await ServerStore.open(tmp_path / "server")
        await store.aclose()
    assert mode(tmp_path / "server") == 0o700
    assert mode(tmp_path / "server" / "server.db") == 0o600


async def test_databases_left_readable_by_an_older_yurt_are_narrowed(tmp_path: Path) -> None:
    with trio.fail_after(10):
        store = await ServerStore.open(tmp_path / "server")
        await store.aclose()
        async with open_state_db(tmp_path / "client"):
            pass
        for path in (tmp_path / "server", tmp_path / "client"):
            path.chmod(0o755)
        for path in (tmp_path / "server" / "server.db", tmp_path / "client" / "state.db"):
            path.chmod(0o644)
        store = await ServerStore.open(tmp_path / "server")
        await store.aclose()
        async with open_state_db(tmp_path / "client"):
            pass
    for path in (tmp_path / "server", tmp_path / "client"):
        assert mode(path) == 0o700, path
    for path in (tmp_path / "server" / "server.db", tmp_path / "client" / "state.db"):
        assert mode(path) == 0o600, path
