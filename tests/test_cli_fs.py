"""`yurt alloc fs` as a user runs it (layer 2): a real `yurt` process against a real agent and
a real raw_exec allocation: ls for a directory, cat for a file, -stat, -tail with -n and -c,
-f following what is written afterwards, and the exit codes of its errors."""

from __future__ import annotations

import os
import subprocess
from functools import partial
from pathlib import Path

import pytest
import trio

from tests.cli_proc_support import YURT, yurt
from tests.test_api_fs import fs_alloc
from yurt.runtime.cli.fs import _size

pytestmark = pytest.mark.slow


async def test_alloc_fs_lists_prints_tails_and_fails_with_nomads_codes(tmp_path: Path) -> None:
    with trio.fail_after(90):
        async with fs_alloc(tmp_path) as (a, alloc_id, root):
            (root / "alloc/data/lines.txt").write_text("".join(f"line {i}\n" for i in range(30)))
            listing = await yurt(a.address, "alloc", "fs", alloc_id[:8])
            assert listing.returncode == 0, listing.stderr
            rows = listing.stdout.decode().splitlines()
            assert rows[0].split() == ["Mode", "Size", "Modified", "Time", "Name"]
            assert [r.split()[-1] for r in rows[1:]] == ["alloc/", "t/"]
            local = await yurt(a.address, "alloc", "fs", "-H", alloc_id, "t/local")
            assert local.stdout.decode().splitlines()[1].split()[0:2] == ["-rw-r--r--", "20"]

            cat = await yurt(a.address, "alloc", "fs", alloc_id, "t/local/hello.txt")
            assert (cat.returncode, cat.stdout) == (0, b"hello from the task\n")
            by_job = await yurt(a.address, "alloc", "fs", "-job", "fs", "t/local/hello.txt")
            assert (by_job.returncode, by_job.stdout) == (0, b"hello from the task\n")
            no_job = await yurt(a.address, "alloc", "fs", "-job", "nojob", "/")
            assert no_job.returncode == 1
            stat = await yurt(a.address, "alloc", "fs", "-stat", alloc_id, "t/local/hello.txt")
            assert "text/plain; charset=utf-8" in stat.stdout.decode()
            assert stat.stdout.decode().splitlines()[1].endswith("hello.txt")
            tail = await yurt(a.address, "alloc", "fs", "-tail", alloc_id, "alloc/data/lines.txt")
            assert tail.stdout == b"".join(f"line {i}\n".encode() for i in range(20, 30))
            tail_n = await yurt(a.address, "alloc", "fs", "-tail", "-n", "2", alloc_id,
                                "alloc/data/lines.txt")
            assert tail_n.stdout == b"line 28\nline 29\n"
            tail_c = await yurt(a.address, "alloc", "fs", "-tail", "-c", "4", alloc_id,
                                "alloc/data/lines.txt")
            assert tail_c.stdout == b" 29\n"

            missing = await yurt(a.address, "alloc", "fs", alloc_id, "t/local/nope")
            assert missing.returncode == 1
            assert b"no such file or directory" in missing.stderr
            escape = await yurt(a.address, "alloc", "fs", alloc_id, "../../etc/passwd")
            assert (escape.returncode, escape.stdout) == (2, b"")
            assert b"Path escapes the alloc directory" in escape.stderr
            unknown = await yurt(a.address, "alloc", "fs", "ffffffff-0000", "/")
            assert unknown.returncode == 1
            both = await yurt(a.address, "alloc", "fs", "-tail", "-n", "1", "-c", "1",
                              alloc_id, "alloc/data/lines.txt")
            assert (both.returncode, both.stderr) == (2, b"yurt: Both -n and -c are not allowed\n")

            # -f: what is written after the command started is printed too.
            log = root / "alloc/data/app.log"
            log.write_bytes(b"one\n")
            with trio.move_on_after(60) as following:
                async with trio.open_nursery() as nursery:
                    proc = await nursery.start(partial(
                        trio.run_process, [YURT, "alloc", "fs", "-f", alloc_id,
                                           "alloc/data/app.log"],
                        stdout=subprocess.PIPE, check=False,
                        env={**os.environ, "YURT_ADDR": a.address}))
                    seen = b""
                    while b"one\n" not in seen:
                        seen += await proc.stdout.receive_some()
                    with log.open("ab") as f:
                        f.write(b"two\n")
                    while b"two\n" not in seen:
                        seen += await proc.stdout.receive_some()
                    proc.terminate()
            assert not following.cancelled_caught
            assert seen == b"one\ntwo\n"


def test_sizes_are_spelled_as_nomads() -> None:
    assert [_size(n, False) for n in (0, 9, 20, 1023, 1024, 4096, 10 * 1024 + 600, 5 << 20)] == [
        "0 B", "9 B", "20 B", "1023 B", "1.0 KiB", "4.0 KiB", "11 KiB", "5.0 MiB"]
    assert _size(4096, True) == "4096"
