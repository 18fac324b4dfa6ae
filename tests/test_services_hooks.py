"""The service hooks under `autojump_clock` with the mock driver (layer 1; no I/O: the
check runner's probes are faked, the catalogue is the server's, in memory): registrations
at prerun and at task start, a `pending` result per check at once, check_restart restarting
the task through its restart policy as a failure (limit, grace), and services deregistered
before `shutdown_delay` starts."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
from trio.testing import MockClock

from tests.runtime_support import Harness, at, harness, job_alloc, stopped, types
from yurt.runtime.client.checks.probes import Outcome
from yurt.runtime.client.checks.registration import ServiceDeps, expected_checks
from yurt.runtime.client.checks.runner import CheckJob, CheckRunner
from yurt.runtime.eventstream import EventBroker
from yurt.runtime.server.local import LocalServer
from yurt.runtime.server.services import ServiceCatalogue
from yurt.runtime.structs import Node

JOB = '''job "j" {
  group "g" {
    restart {
      attempts = 2
      delay = "15s"
      interval = "10m"
      mode = "fail"
    }
    service {
      name = "front"
      port = "80"
      check {
        type = "tcp"
        interval = "5s"
        timeout = "1s"
      }
    }
    task "t" {
      driver = "mock_driver"
      config { run_for = "1h" }
      shutdown_delay = "7s"
      service {
        name = "api"
        port = "8080"
        check {
          name = "alive"
          type = "http"
          path = "/health"
          interval = "5s"
          timeout = "1s"
          check_restart {
            limit = 3
            grace = "10s"
          }
        }
      }
    }
  }
}'''


@dataclasses.dataclass
class Wired:
    h: Harness
    catalogue: ServiceCatalogue
    statuses: dict[str, str]  # check name -> the status the fake probe gives


@asynccontextmanager
async def wired() -> AsyncIterator[Wired]:
    statuses = {"alive": "success", 'service: "front" check': "success"}

    async def probe(job: CheckJob) -> Outcome:
        await trio.sleep(0.1)
        return Outcome(statuses[job.template.check], "fake")

    node = Node(id="n1", name="n1", attributes={"unique.network.ip-address": "10.1.2.3"})
    server = LocalServer(node, EventBroker())
    checks = CheckRunner(probe=probe)
    async with harness() as h:
        await h.nursery.start(checks.run)
        h.config = dataclasses.replace(
            h.config, services=ServiceDeps(server.services, checks, node))
        yield Wired(h, server.services, statuses)
        h.nursery.cancel_scope.cancel()


async def test_services_register_and_checks_start_pending(autojump_clock: MockClock) -> None:
    alloc = job_alloc(JOB)
    assert expected_checks(alloc) == 2
    async with wired() as w:
        ar = w.h.start(alloc)
        while "api" not in {r.service_name for r in w.catalogue.by_alloc(alloc.id)}:
            await w.catalogue.wait_changed()
        # Pending as soon as the checks were registered; the fake probes take 0.1 s.
        assert {r.status for r in ar.check_results.results().values()} == {"pending"}
        api, front = sorted(w.catalogue.by_alloc(alloc.id), key=lambda r: r.service_name)
        assert (front.id, front.address, front.port) == (
            f"_nomad-task-{alloc.id}-group-g-front-80", "10.1.2.3", 80)
        assert api.id == f"_nomad-task-{alloc.id}-t-api-8080"
        await trio.sleep(1)
        assert {r.status for r in ar.check_results.results().values()} == {"success"}
        ar.update(stopped(alloc))
        await ar.wait_done.wait()
        assert w.catalogue.by_alloc(alloc.id) == []
        assert ar.check_results.results() == {}


async def test_a_failing_check_restarts_the_task_per_check_restart(
        autojump_clock: MockClock) -> None:
    alloc = job_alloc(JOB)
    async with wired() as w:
        w.statuses["alive"] = "failure"
        ar = w.h.start(alloc)
        await ar.wait_done.wait()
    tr = ar.task_runners["t"]
    # Three restarts signaled: two within the policy, the third exceeds it. (The ring keeps
    # the last 10 events: the first start and signal fell off.)
    assert types(tr) == ["Terminated", "Restarting", "Started", "Restart Signaled",
                         "Terminated", "Restarting", "Started", "Restart Signaled",
                         "Terminated", "Not Restarting"]
    signaled = [e for e in tr.state.events if e.type == "Restart Signaled"]
    assert [e.restart_reason for e in signaled] == ['healthcheck: check "alive" unhealthy'] * 2
    # Results come every 5.1 s (probe 0.1 s, then the 5 s interval); the first failure after
    # the 10 s grace from each start marks it unhealthy, and (limit - 1) x 5 s later it
    # restarts.
    for n in range(2):
        assert 20.0 <= at(tr, "Restart Signaled", n) - at(tr, "Started", n) <= 26.0
    assert (tr.state.restarts, tr.state.failed) == (2, True)
    assert ar.alloc_state().client_status == "failed"


async def test_services_are_deregistered_before_the_shutdown_delay(
        autojump_clock: MockClock) -> None:
    alloc = job_alloc(JOB)
    async with wired() as w:
        ar = w.h.start(alloc)
        while len(w.catalogue.by_alloc(alloc.id)) < 2:
            await w.catalogue.wait_changed()
        await trio.sleep(3)
        stop_at = trio.current_time()
        ar.update(stopped(alloc))
        while w.catalogue.by_alloc(alloc.id):
            await w.catalogue.wait_changed()
        gone_at = trio.current_time()
        await ar.wait_done.wait()
        killed_at = trio.current_time()
    assert gone_at == stop_at  # before any of the delay
    assert killed_at - stop_at >= 7.0  # the task's shutdown_delay came after
