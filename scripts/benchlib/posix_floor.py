"""The floor of the peer benchmark: bare os.posix_spawn in a loop, no state, nothing else.

Run as its own process so its memory and CPU are read like a daemon's. It waits for one line
on stdin (a JSON list: [count, argv...]), spawns the children, then respawns each as it exits
(restart delay 0) until SIGTERM, when it stops them all and waits for them.
Imports only the standard library's smallest modules, so its memory is the interpreter's.
"""

import contextlib
import json
import os
import signal
import sys


class Stop(Exception):
    pass


def on_term(signum: int, frame: object) -> None:
    raise Stop


def main() -> None:
    signal.signal(signal.SIGTERM, on_term)
    live: set[int] = set()
    try:
        print("ready", flush=True)
        line = sys.stdin.readline()
        if not line:
            return
        count, *argv = json.loads(line)
        env = dict(os.environ)
        for _ in range(count):
            live.add(os.posix_spawn(argv[0], argv, env))
        while True:
            pid, _ = os.wait()
            live.discard(pid)
            live.add(os.posix_spawn(argv[0], argv, env))
    except Stop:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for pid in live:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        for pid in live:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
