"""What a cluster's server refuses of the single agent's operator features (layer 2: a
`yurt server` over a real etcd): snapshots (the state is etcd's: `etcdctl snapshot save`) and
variable locks (kept in one server's memory, which a cluster's servers do not share) answer
501 with the reason, and `yurt operator snapshot save` exits 1 saying it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import httpx2
import pytest
import trio

from tests.cli_proc_support import YURT
from tests.cluster_support import cluster
from tests.token_support import without_suite_token

pytestmark = pytest.mark.slow


async def test_snapshot_and_variable_locks_are_refused_in_a_cluster(
        etcd_urls: list[str], etcd_prefix: bytes, tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with cluster(etcd_urls, etcd_prefix, tmp_path) as c:
            s1 = await c.server("s1")
            async with httpx2.AsyncClient(base_url=s1.address, timeout=30) as client:
                snap = await client.get("/v1/operator/snapshot")
                assert snap.status_code == 501
                assert "etcd" in snap.text
                lock = await client.put("/v1/var/a/b", params={"lock-acquire": ""}, json={})
                assert lock.status_code == 501
                assert "cluster" in lock.text
            env = {**without_suite_token(), "YURT_ADDR": s1.address}
            done = await trio.run_process(
                [YURT, "operator", "snapshot", "save", str(tmp_path / "x.snap")],
                capture_stdout=True, capture_stderr=True, check=False, env=env,
                cwd=os.fspath(tmp_path), stdin=subprocess.DEVNULL)
            assert done.returncode == 1
            assert b"etcd" in done.stderr
            assert not (tmp_path / "x.snap").exists()
