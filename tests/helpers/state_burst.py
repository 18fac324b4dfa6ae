"""Child process for the crash test: write a burst of state and report each durable write.

Usage: python -m tests.helpers.state_burst STATE_DIR WRITERS

Each of WRITERS tasks writes TaskState(restarts=1, 2, 3, …) to its own key forever, and prints
`<writer> <n>` once `put_task_state` has returned, i.e. once the write is committed. The parent
kills this process with SIGKILL at some point and checks every reported write is on disk.
"""

from __future__ import annotations

import sys

import trio

from yurt.runtime.structs import TaskState
from yurt.store import SQLiteStateDB, open_state_db


async def write_forever(db: SQLiteStateDB, writer: int) -> None:
    n = 0
    while True:
        n += 1
        await db.put_task_state(f"alloc-{writer}", "task", TaskState(restarts=n))
        sys.stdout.write(f"{writer} {n}\n")
        sys.stdout.flush()


async def main(state_dir: str, writers: int) -> None:
    async with open_state_db(state_dir) as db, trio.open_nursery() as nursery:
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        for w in range(writers):
            nursery.start_soon(write_forever, db, w)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], int(sys.argv[2]))
