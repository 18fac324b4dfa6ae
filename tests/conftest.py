"""Shared fixtures. `state_db` runs a test against every StateDB implementation; `small_fs`
(tests/disk_support.py) is a real small file system to fill up."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.disk_support import small_fs  # noqa: F401 (a fixture, shared here)
from yurt.store import MemoryStateDB, StateDB, open_state_db


@pytest.fixture(params=["memory", "sqlite"])
async def state_db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StateDB]:
    if request.param == "memory":
        yield MemoryStateDB()
    else:
        async with open_state_db(tmp_path / "state") as db:
            yield db
