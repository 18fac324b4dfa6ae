"""`yurt` as a real process against a test agent: run to its end, or spawned and streamed.

Both take the agent's address (`running_agent`'s) and pass it as `$YURT_ADDR`; every wait on
them is bounded by the caller's `fail_after`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

YURT = str(Path(sys.executable).parent / "yurt")


def env_for(address: str) -> dict[str, str]:
    return {**os.environ, "YURT_ADDR": address}


async def yurt(address: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    """`yurt <args>` to its end, output captured."""
    return await trio.run_process(
        [YURT, *args], capture_stdout=True, capture_stderr=True, check=False, env=env_for(address)
    )


@asynccontextmanager
async def spawned(address: str, *args: str) -> AsyncIterator[trio.Process]:
    """`yurt <args>` with stdout and stderr piped; given 10 s to end by itself when the block
    ends, then killed, and always waited for."""
    proc = await trio.lowlevel.open_process(
        [YURT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env_for(address)
    )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            with trio.move_on_after(10):
                await proc.wait()
            proc.kill()
        await proc.wait()
