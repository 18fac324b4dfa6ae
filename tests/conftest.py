"""Shared fixtures. `state_db` runs a test against every StateDB implementation."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from yurt.store import MemoryStateDB, StateDB, open_state_db


@pytest.fixture(params=["memory", "sqlite"])
async def state_db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StateDB]:
    if request.param == "memory":
        yield MemoryStateDB()
    else:
        async with open_state_db(tmp_path / "state") as db:
            yield db
