"""The built-in hooks of the alloc and task runners, and their order
(client/allocrunner/builtin_hooks.py, Nomad's `initRunnerHooks` and `initHooks`): the runners
run each phase in list order, so the lists are the order of execution. Layer 1: the runner is
built, never run."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import ClassVar

import trio

from tests.runtime_support import harness, job_alloc
from yurt.hooks.base import AllocPrerunHook, PrestartResponse, TaskHookContext, TaskPrestartHook
from yurt.runtime.client.allocrunner.runner import AllocRunner
from yurt.runtime.client.checks.registration import ServiceDeps
from yurt.runtime.client.checks.runner import CheckRunner
from yurt.runtime.client.devices.manager import DeviceManager
from yurt.runtime.eventstream import EventBroker
from yurt.runtime.server.local import LocalServer
from yurt.runtime.structs import Node

PLAIN = '''job "j" {
  group "g" {
    task "t" {
      driver = "mock_driver"
      config { run_for = "1h" }
    }
  }
}'''

#: A task that every optional built-in hook has something to do for.
EVERYTHING = '''job "j" {
  type = "batch"
  parameterized {}
  group "g" {
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
      dispatch_payload {
        file = "in/data.json"
      }
      identity {
        env = true
      }
      artifact {
        source = "https://example.com/tool.tgz"
      }
      template {
        data = "x"
        destination = "local/x"
      }
      service {
        name = "api"
        port = "8080"
      }
    }
  }
}'''


class ClientAllocHook(AllocPrerunHook):
    name: ClassVar[str] = "client_alloc_hook"

    async def prerun(self) -> None:
        await trio.lowlevel.checkpoint()


class ClientTaskHook(TaskPrestartHook):
    name: ClassVar[str] = "client_task_hook"

    async def prestart(self, ctx: TaskHookContext, previous: dict[str, str]
                       ) -> PrestartResponse:
        raise NotImplementedError


def names(runner: AllocRunner) -> tuple[list[str], list[str]]:
    """The alloc runner's hook names, and task t's."""
    return ([h.name for h in runner.hooks], [h.name for h in runner.task_runners["t"].hooks])


async def test_a_plain_task_gets_the_hooks_every_task_gets() -> None:
    async with harness() as h:
        assert names(h.runner(job_alloc(PLAIN))) == (
            ["await_previous_allocations", "alloc_health_watcher"], ["task_dir", "logmon"])
        h.nursery.cancel_scope.cancel()


async def test_every_built_in_hook_in_nomads_order_then_the_clients_own(tmp_path: Path
                                                                         ) -> None:
    node = Node(id="n1", name="n1")
    async with harness(alloc_hooks=(ClientAllocHook(),)) as h:
        config = dataclasses.replace(
            h.config, alloc_root=tmp_path, sign_identity=lambda claims: "token",
            device_manager=DeviceManager([]), task_hooks=lambda: (ClientTaskHook(),),
            services=ServiceDeps(LocalServer(node, EventBroker()).services,
                                 CheckRunner(), node))
        runner = AllocRunner(job_alloc(EVERYTHING), config, nursery=h.nursery)
        assert names(runner) == (
            ["alloc_dir", "await_previous_allocations", "migrate_disk", "alloc_health_watcher",
             "client_alloc_hook", "group_services"],
            ["task_dir", "dispatch_payload", "identity", "artifacts", "logmon", "devices",
             "template", "task_services", "client_task_hook"])
        h.nursery.cancel_scope.cancel()
