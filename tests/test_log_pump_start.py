"""A log pump's start (layer 2, real files): one worker-thread hop reads the rotated files
already there and replays the shim's spill, in that order, before the pipe."""

from __future__ import annotations

import os
from pathlib import Path

import trio

from yurt.runtime.client.logs import spill
from yurt.runtime.client.logs.pump import LogPump, fifo_path, log_base, open_fifo


async def test_start_resumes_rotation_and_replays_the_spill_in_one_hop(
        tmp_path: Path, thread_hops: list[str]) -> None:
    logs = tmp_path / "logs"  # the spill and lock live one level up, as in an alloc dir
    logs.mkdir()
    base = log_base(logs, "t", "stdout")
    base.with_name(f"{base.name}.0").write_bytes(b"earlier\n")
    spill.spill_path(base).write_bytes(b"spilled\n")
    read_fd, keep_fd = open_fifo(fifo_path(logs, "t", "stdout"))
    pump = LogPump(read_fd, base, file_size=1 << 20, max_files=3)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(pump.run)
            started_hops = [h for h in thread_hops if h != "try_lock"]
            os.close(keep_fd)  # no writer left: the pump ends
    assert started_hops == ["resume"]
    assert base.with_name(f"{base.name}.0").read_bytes() == b"earlier\nspilled\n"
    assert not spill.spill_path(base).exists()
