"""`yurt var lock`, `yurt var init` and the variable-lock API they use (layer 2: a real agent
on a real socket, real `yurt` processes): lock holders never overlap, the lock is released when
the child exits, the child's exit status comes back, `-early-return` gives up at once; the
API's acquire/renew/release shapes and statuses are Nomad's (api/varlocks.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import trio

from tests.agent_support import Running, running_agent
from tests.authz_support import acl_agent
from tests.cli_proc_support import YURT

pytestmark = pytest.mark.slow


async def yurt(a: Running, *args: str, cwd: Path | None = None
               ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "YURT_ADDR": a.address}
    done = await trio.run_process([YURT, *args], capture_stdout=True, capture_stderr=True,
                                  check=False, env=env, cwd=cwd)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(),
                                       done.stderr.decode())


async def test_concurrent_holders_never_overlap_and_each_gets_its_childs_status(
        tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    script = f'echo "start $0" >> {marks}; sleep 0.4; echo "end $0" >> {marks}; exit $1'
    codes: dict[str, int] = {}
    with trio.fail_after(60):
        async with running_agent(tmp_path / "agent") as a:
            async def one(name: str, code: int) -> None:
                done = await yurt(a, "var", "lock", "-shell=false", "-backoff", "100ms",
                                  "locks/job", "sh", "-c", script, name, str(code))
                codes[name] = done.returncode

            async with trio.open_nursery() as nursery:
                for name, code in (("a", 0), ("b", 3), ("c", 7)):
                    nursery.start_soon(one, name, code)
            # Released at the child's exit: another holder gets it at once.
            free = await a.client.put("/v1/var/locks/job", params={"lock-acquire": ""},
                                      json={"Lock": {"TTL": "10s"}})
            assert free.status_code == 200, free.text
    assert codes == {"a": 0, "b": 3, "c": 7}
    lines = marks.read_text().splitlines()
    assert len(lines) == 6
    for start, end in zip(lines[::2], lines[1::2], strict=True):
        assert start.startswith("start "), lines
        assert end == "end " + start.split()[1], lines
    assert sorted(line.split()[1] for line in lines[::2]) == ["a", "b", "c"]


async def test_early_return_and_writes_refused_while_another_holds_the_lock(
        tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    with trio.fail_after(60):
        async with running_agent(tmp_path / "agent") as a:
            held = await a.client.put("/v1/var/app/leader", params={"lock-acquire": ""},
                                      json={"Items": {"k": "v"},
                                            "Lock": {"TTL": "10s", "LockDelay": "1s"}})
            assert held.status_code == 200, held.text
            body = held.json()
            assert body["Items"] == {"k": "v"}
            assert body["Lock"]["TTL"] == "10s"
            assert body["Lock"]["LockDelay"] == "1s"
            assert body["Lock"]["ID"]
            done = await yurt(a, "var", "lock", "-early-return", "app/leader", f"touch {ran}")
            assert done.returncode == 0, done.stderr
            assert not ran.exists()
            put = await yurt(a, "var", "put", "-force", "app/leader", "k=other")
            assert put.returncode == 1
            assert "attempting to modify locked variable" in put.stderr
            assert (await a.client.delete("/v1/var/app/leader")).status_code == 409
            unchanged = (await a.client.get("/v1/var/app/leader")).json()
            assert unchanged["Items"] == {"k": "v"}


async def test_lock_api_renew_and_release_need_the_holders_id(tmp_path: Path) -> None:
    path = "/v1/var/svc/lock"
    with trio.fail_after(60):
        async with running_agent(tmp_path / "agent") as a:
            c = a.client
            bad = await c.put(path, params={"lock-acquire": ""}, json={"Lock": {"TTL": "1s"}})
            assert (bad.status_code, bad.text) == (
                400, "TTL must be between 10 seconds and 24 hours")
            both = await c.put(path, params={"lock-acquire": "", "lock-renew": ""}, json={})
            assert (both.status_code, both.text) == (400, "multiple lock operations")
            missing = await c.put(path, params={"lock-renew": ""},
                                  json={"Lock": {"ID": "x"}})
            assert missing.status_code == 404
            first = await c.put(path, params={"lock-acquire": ""}, json={})
            assert first.status_code == 200
            lock_id = first.json()["Lock"]["ID"]
            assert first.json()["Lock"]["TTL"] == "15s"  # api/locks.go's defaults
            second = await c.put(path, params={"lock-acquire": ""}, json={})
            assert second.status_code == 409
            assert second.json()["Path"] == "svc/lock"
            assert "Items" not in second.json()
            renewed = await c.put(path, params={"lock-renew": ""},
                                  json={"Lock": {"ID": lock_id}})
            assert renewed.status_code == 200
            assert renewed.json()["Lock"]["ID"] == lock_id
            stranger = await c.put(path, params={"lock-renew": ""},
                                   json={"Lock": {"ID": "not-it"}})
            assert (stranger.status_code, stranger.text) == (
                409, "attempting to modify locked variable")
            wrong = await c.put(path, params={"lock-release": ""},
                                json={"Lock": {"ID": "not-it"}})
            assert wrong.status_code == 409
            released = await c.put(path, params={"lock-release": ""},
                                   json={"Lock": {"ID": lock_id}})
            assert released.status_code == 200
            assert released.json()["Lock"] is None
            again = await c.put(path, params={"lock-release": ""},
                                json={"Lock": {"ID": lock_id}})
            assert (again.status_code, again.text) == (409, "variable doesn't hold a lock")


async def test_var_init_writes_the_example_once(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path / "agent") as a:
            done = await yurt(a, "var", "init", cwd=tmp_path)
            assert done.returncode == 0, done.stderr
            assert done.stdout == "Example variable specification written to spec.nv.hcl\n"
            spec = (tmp_path / "spec.nv.hcl").read_text()
            assert 'items {\n  key1 = "value 1"' in spec
            again = await yurt(a, "var", "init", cwd=tmp_path)
            assert again.returncode == 1
            assert 'File "spec.nv.hcl" already exists' in again.stderr
            assert (tmp_path / "spec.nv.hcl").read_text() == spec
            js = await yurt(a, "var", "init", "-out", "json", cwd=tmp_path)
            assert js.returncode == 0
            assert '"Path": "path/to/variable"' in (tmp_path / "spec.nv.json").read_text()


async def test_a_lost_lock_stops_the_child_and_exits_1(tmp_path: Path) -> None:
    started = tmp_path / "started"
    with trio.fail_after(60):
        async with running_agent(tmp_path / "agent") as a:
            env = {**os.environ, "YURT_ADDR": a.address}
            proc = await trio.lowlevel.open_process(
                [YURT, "var", "lock", "-shell=false", "-ttl", "10s", "app/lost", "sh", "-c",
                 f"touch {started}; exec sleep 30"], env=env, stderr=subprocess.PIPE)
            try:
                while True:  # the child runs once the lock is held (bounded: fail_after)
                    if started.exists():
                        break
                    await trio.sleep(0.05)
                held = (await a.client.get("/v1/var/app/lost")).json()
                # Only management sees the lock on a read (ACLs off here: everyone is).
                released = await a.client.put("/v1/var/app/lost",
                                              params={"lock-release": ""},
                                              json={"Lock": {"ID": held["Lock"]["ID"]}})
                assert released.status_code == 200
                # The next renewal (at TTL/2) is refused: the child is stopped.
                assert await proc.wait() == 1
                assert proc.stderr is not None
                err = (await proc.stderr.receive_some(65536)).decode()
                assert "Lock error: the lock was lost" in err
            finally:
                proc.kill()
                await proc.wait()


async def test_lock_operations_need_write_and_only_management_sees_the_lock(
        tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with acl_agent(tmp_path) as a:
            reader = a.resolver.token(
                'namespace "default" { variables { path "*" { capabilities = ["read"] } } }')
            writer = a.resolver.token(
                'namespace "default" { variables { path "*" { capabilities = '
                '["read", "write"] } } }')

            def as_(secret: str) -> dict[str, str]:
                return {"X-Nomad-Token": secret}

            refused = await a.admin.put("/v1/var/app/l", params={"lock-acquire": ""},
                                        json={}, headers=as_(reader))
            assert refused.status_code == 403
            held = await a.admin.put("/v1/var/app/l", params={"lock-acquire": ""},
                                     json={}, headers=as_(writer))
            assert held.status_code == 200, held.text
            lock_id = held.json()["Lock"]["ID"]
            assert (await a.admin.get("/v1/var/app/l")).json()["Lock"]["ID"] == lock_id
            plain = (await a.admin.get("/v1/var/app/l", headers=as_(reader))).json()
            assert "Lock" not in plain
            renew = await a.admin.put("/v1/var/app/l", params={"lock-renew": ""},
                                      json={"Lock": {"ID": lock_id}}, headers=as_(reader))
            assert renew.status_code == 403
