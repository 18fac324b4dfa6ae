"""The scheduler configuration's check-and-set under concurrent PUTs (layer 2, real socket),
and `write_atomically` with concurrent writers."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import trio

from tests.agent_support import running_agent
from yurt.runtime.server.nodestate import write_atomically

pytestmark = pytest.mark.slow


async def test_concurrent_cas_puts_update_once_and_never_fail(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            c = a.client
            cas = (await c.get("/v1/operator/scheduler/configuration")
                   ).json()["SchedulerConfig"]["ModifyIndex"]
            answers: list[tuple[str, int, str]] = []

            async def put(algorithm: str) -> None:
                r = await c.put(f"/v1/operator/scheduler/configuration?cas={cas}",
                                json={"SchedulerAlgorithm": algorithm})
                answers.append((algorithm, r.status_code, r.text))

            async with trio.open_nursery() as nursery:
                for algorithm in ("spread", "binpack", "spread", "binpack", "spread"):
                    nursery.start_soon(put, algorithm)
            assert [s for _, s, _ in answers] == [200] * 5, answers
            won = [alg for alg, _, text in answers if '"Updated":true' in text]
            assert len(won) == 1
            now = (await c.get("/v1/operator/scheduler/configuration")).json()
            assert now["SchedulerConfig"]["SchedulerAlgorithm"] == won[0]
            stored = (tmp_path / "server" / "scheduler-config.json").read_text()
            assert f'"SchedulerAlgorithm":"{won[0]}"' in stored
            leftovers = [p.name for p in (tmp_path / "server").iterdir()
                         if p.name.endswith(".tmp")]
            assert leftovers == []


def test_write_atomically_concurrent_writers_leave_one_whole_file(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def write(n: int) -> None:
        start.wait()
        try:
            for _ in range(50):
                write_atomically(path, str(n).encode() * 1000)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    content = path.read_bytes()
    assert len(content) == 1000
    assert len(set(content)) == 1
    assert (path.stat().st_mode & 0o777) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


async def test_cas_is_parsed_as_each_nomad_endpoint_parses_it(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            c = a.client
            url = "/v1/operator/scheduler/configuration"
            body = {"SchedulerAlgorithm": "spread"}
            # The operator endpoint: present means parsed, empty included.
            for raw, why in (("", "invalid syntax"), ("-1", "invalid syntax"),
                             ("\u00b2", "invalid syntax"),
                             (str(1 << 64), "value out of range")):
                r = await c.put(url, params={"cas": raw}, json=body)
                assert r.status_code == 400, raw
                assert r.text.startswith("Error parsing cas value: strconv.ParseUint: "
                                         f"parsing {json.dumps(raw)}: {why}"), r.text
            # Variables: an empty cas is no cas at all.
            r = await c.put("/v1/var/x", params={"cas": ""}, json={"Items": {"k": "v"}})
            assert r.status_code == 200
            for raw in ("-1", "\u00b2", str(1 << 64)):
                r = await c.put("/v1/var/x", params={"cas": raw}, json={"Items": {"k": "v"}})
                assert r.status_code == 400, raw
                assert r.text.startswith("can not parse cas: strconv.ParseUint: parsing "), r.text
                r = await c.delete("/v1/var/x", params={"cas": raw})
                assert r.status_code == 400, raw
