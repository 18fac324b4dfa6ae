"""Check probes over real sockets (layer 2, real clock): http checks against a local trio
HTTP server judged as Nomad's checker judges them (200, other 2xx/3xx, 4xx/5xx with the
body), a refused connection, a probe that hangs cut by its timeout, tcp checks, and the
pooled client reusing one connection across probes."""

from __future__ import annotations

import trio

from tests.http_fixture import HttpState, serve_http
from tests.test_agent_e2e import free_port as closed_port
from yurt.runtime.client.checks.probes import HttpProber, HttpTarget, probe_tcp
from yurt.runtime.client.checks.runner import CheckJob, CheckRunner
from yurt.runtime.structs.checks import CheckQueryResult


async def test_http_outcomes_are_nomads() -> None:
    state = HttpState()
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(serve_http, state)
            prober = HttpProber()
            ok = await prober.probe(HttpTarget("127.0.0.1", port, "/ok"))
            assert (ok.status, ok.output, ok.status_code) == ("success", "nomad: http ok", 200)
            moved = await prober.probe(HttpTarget("127.0.0.1", port, "/redirect"))
            assert (moved.status, moved.output, moved.status_code) == ("success", "elsewhere",
                                                                       302)
            bad = await prober.probe(HttpTarget("127.0.0.1", port, "/fail"))
            assert (bad.status, bad.output, bad.status_code) == ("failure", "not healthy", 503)
            refused = await prober.probe(HttpTarget("127.0.0.1", closed_port(), "/ok"))
            assert refused.status == "failure"
            assert refused.output.startswith("nomad: ")
            await prober.aclose()
            nursery.cancel_scope.cancel()


async def test_tcp_outcomes() -> None:
    state = HttpState()
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(serve_http, state)
            ok = await probe_tcp("127.0.0.1", port)
            assert (ok.status, ok.output) == ("success", "nomad: tcp ok")
            refused = await probe_tcp("127.0.0.1", closed_port())
            assert refused.status == "failure"
            nursery.cancel_scope.cancel()


async def test_the_runner_times_out_a_hanging_http_probe_and_reuses_connections() -> None:
    state = HttpState()
    results: list[CheckQueryResult] = []
    done = trio.Event()

    def on_result(result: CheckQueryResult) -> None:
        results.append(result)
        if len([r for r in results if r.id == "ok"]) >= 3 and any(
                r.id == "slow" for r in results):
            done.set()

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(serve_http, state)
            runner = CheckRunner()
            await nursery.start(runner.run)
            for name, interval in (("ok", 0.2), ("slow", 60.0)):
                runner.add(CheckJob(template=CheckQueryResult(id=name), kind="http",
                                    interval=interval, timeout=0.3, on_result=on_result,
                                    http=HttpTarget("127.0.0.1", port, f"/{name}")))
            await done.wait()
            runner.remove("ok")
            runner.remove("slow")
            # No check uses the server any more: its kept-alive connection is closed.
            while state.open_connections:
                await state.closed.wait()
            nursery.cancel_scope.cancel()
    slow = next(r for r in results if r.id == "slow")
    assert (slow.status, slow.output) == ("failure", "nomad: context deadline exceeded")
    assert {r.status for r in results if r.id == "ok"} == {"success"}
    # One pooled client: the ok probes share a kept-alive connection; slow holds another.
    assert state.connections == 2
