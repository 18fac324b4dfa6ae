"""A cluster of real processes for the cluster tests: `yurt server` and `yurt agent --servers`
spawned with their output in files, their address read from their start line, and every one
killed (by pid, with its process group) when the test ends.

Every wait is bounded by the caller's `trio.fail_after`."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import trio

from tests.cli_proc_support import YURT
from tests.token_support import without_suite_token

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from benchlib import procs

_LISTENING = re.compile(rb"listening on (http://\S+)")


@dataclass
class Member:
    name: str
    process: trio.Process
    log: Path
    data_dir: Path
    address: str = ""

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the process and its process group."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)

    def kill_with_tasks(self) -> list[int]:
        """SIGKILL an agent and every task it runs (tasks outlive their agent by design)."""
        killed = procs.kill_with_tasks(self.process.pid, str(self.data_dir))
        self.kill(signal.SIGKILL)
        return killed


@dataclass
class Cluster:
    etcd: list[str]
    prefix: str
    root: Path
    members: list[Member] = field(default_factory=list)

    async def _spawn(self, name: str, args: list[str]) -> Member:
        log = self.root / f"{name}.log"
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            # No token: a cluster's servers keep no ACL state yet, and its members admit all.
            process = await trio.lowlevel.open_process(
                [YURT, *args], stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                env=without_suite_token())
        finally:
            os.close(out)
        member = Member(name, process, log, self.root / name)
        self.members.append(member)
        while True:
            found = _LISTENING.search(log.read_bytes())
            if found:
                member.address = found.group(1).decode()
                return member
            if process.returncode is not None or process.poll() is not None:
                raise AssertionError(f"{name} exited: {log.read_text()[-2000:]}")
            await trio.sleep(0.05)

    async def server(self, name: str, *extra: str) -> Member:
        return await self._spawn(name, [
            "server", "--etcd", ",".join(self.etcd), "--port", "0", "--name", name,
            "--prefix", self.prefix, "--data-dir", str(self.root / name), *extra])

    async def agent(self, name: str, servers: list[Member], *extra: str) -> Member:
        return await self._spawn(name, [
            "agent", "--servers", ",".join(s.address for s in servers), "--port", "0",
            "--data-dir", str(self.root / name), "--node-name", name, *extra])

    def stop(self) -> None:
        for member in self.members:
            member.kill(signal.SIGCONT)  # a frozen one too
            member.kill_with_tasks()


@asynccontextmanager
async def cluster(etcd: list[str], prefix: bytes, root: Path) -> AsyncIterator[Cluster]:
    c = Cluster(etcd, prefix.decode(), root)
    try:
        yield c
    finally:
        c.stop()
        for member in c.members:
            with trio.move_on_after(5):
                await member.process.wait()


async def get(address: str, path: str, **params: Any) -> Any:
    async with httpx2.AsyncClient(base_url=address, timeout=30) as client:
        response = await client.get(path, params=params)
        response.raise_for_status()
        return response.json()


async def wait_for(check: Any, *, interval: float = 0.1) -> Any:
    """Poll `check()` (async) until it returns something truthy; the caller bounds it."""
    while True:
        result = await check()
        if result:
            return result
        await trio.sleep(interval)
