"""A minimal Trio supervisor, the second floor of the peer benchmark.

One Trio task per child, no state: each task spawns its child, waits for it and spawns it
again at once (restart delay 0). Like the posix floor it reads one JSON line on stdin
([count, argv...]) and stops every child on SIGTERM, waiting for all of them together.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import trio


async def keep_running(argv: list[str]) -> None:
    while True:
        process = await trio.lowlevel.open_process(argv, stdin=subprocess.DEVNULL)
        try:
            await process.wait()
        finally:
            if process.returncode is None:
                process.terminate()
                with trio.CancelScope(shield=True), trio.move_on_after(10):
                    await process.wait()


async def main() -> None:
    with trio.open_signal_receiver(signal.SIGTERM) as signals:
        print("ready", flush=True)
        line = await trio.to_thread.run_sync(sys.stdin.readline)
        if not line:
            return
        count, *argv = json.loads(line)
        async with trio.open_nursery() as nursery:
            for _ in range(count):
                nursery.start_soon(keep_running, argv)
            async for _ in signals:
                nursery.cancel_scope.cancel()
                break


if __name__ == "__main__":
    trio.run(main)
