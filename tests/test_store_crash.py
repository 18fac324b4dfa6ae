"""Layer 3: the SQLite store survives a SIGKILL in the middle of a write burst.

A real child process writes state from many tasks and reports every write whose `put` has
returned; we kill it with SIGKILL mid-burst, then reopen the directory and require that every
reported write is readable (the value on disk is at least the last one reported: later writes
may have committed without being reported). Real clock, bounded by `fail_after`.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import trio

from yurt.store import open_state_db

WRITERS = 20
KILL_AFTER_REPORTS = 2000


async def test_every_reported_write_survives_sigkill(tmp_path: Path) -> None:
    reported: dict[int, int] = {}
    with trio.fail_after(60):
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-m", "tests.helpers.state_burst", str(tmp_path), str(WRITERS)],
            stdout=subprocess.PIPE, cwd=Path(__file__).parent.parent)
        assert proc.stdout is not None
        buffer = b""
        count = 0
        try:
            while count < KILL_AFTER_REPORTS:
                chunk = await proc.stdout.receive_some()
                assert chunk, "writer exited before it was killed"
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line == b"ready":
                        continue
                    writer, n = map(int, line.split())
                    reported[writer] = max(reported.get(writer, 0), n)
                    count += 1
        finally:
            proc.send_signal(signal.SIGKILL)
            # Reports already in the pipe count too: each was printed after its commit.
            while chunk := await proc.stdout.receive_some():
                buffer += chunk
            await proc.wait()
        for line in buffer.split(b"\n"):
            if line and line != b"ready":
                writer, n = map(int, line.split())
                reported[writer] = max(reported.get(writer, 0), n)

        assert proc.returncode == -signal.SIGKILL
        assert len(reported) == WRITERS
        async with open_state_db(tmp_path) as db:  # the dead writer's lock is gone
            for writer, n in reported.items():
                _, state = await db.get_task_runner_state(f"alloc-{writer}", "task")
                assert state is not None, f"writer {writer}: nothing on disk, reported {n}"
                assert state.restarts >= n, f"writer {writer}: {state.restarts} < {n}"
