"""The template hook under `autojump_clock` with the mock driver (layer 1): prestart blocks
until every template renders, with Nomad's rate-limited "Missing: …" events; a change of what
a template read re-renders it and applies its change mode (restart, signal, script, noop)
after a splay; `wait { min max }` quiesces bursts of changes; a change nothing reads renders
nothing; `env = true` feeds the task's environment; a template that fails fails the task."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
import trio
from trio.testing import MockClock

from tests.runtime_support import (
    Harness,
    displays,
    harness,
    job_alloc,
    seconds,
    types,
    until_running,
)
from yurt.hooks.template import TemplateHook
from yurt.runtime.client.allocrunner.runner import AllocRunner
from yurt.runtime.client.taskrunner.runner import TaskRunner
from yurt.runtime.client.templating.data import MemoryTemplateData
from yurt.runtime.structs import Allocation
from yurt.runtime.structs.service import ServiceRegistration


def job(template: str, *, task_config: str = 'run_for = "1h"', restart: str = "") -> str:
    return f'''job "j" {{
  group "g" {{
    task "t" {{
      driver = "mock_driver"
      config {{
        {task_config}
      }}
      {restart}
      template {{
{template}
      }}
    }}
  }}
}}'''


VAR_TEMPLATE = '''        data = "user={{ with nomadVar \\"nomad/jobs/j\\" }}{{ .user }}{{ end }}"
        destination = "local/app.conf"
        change_mode = "%s"
        splay = "%s"'''


def hook_of(tr: TaskRunner) -> TemplateHook:
    (hook,) = [h for h in tr.hooks if isinstance(h, TemplateHook)]
    return hook


async def until(ar: AllocRunner, predicate: Callable[[Allocation], bool]) -> None:
    """Wait, on the alloc runner's broadcasts, until the client view satisfies `predicate`."""
    listener = ar.broadcaster.listen()
    try:
        async for alloc in listener:
            if predicate(alloc):
                return
    finally:
        listener.close()


def has_event(task: str, display: str) -> Callable[[Allocation], bool]:
    def check(alloc: Allocation) -> bool:
        state = alloc.task_states.get(task)
        return state is not None and any(e.display_message == display for e in state.events)
    return check


async def next_render(hook: TemplateHook) -> None:
    await hook.rendered_event.wait()


def variable_data(items: dict[str, str]) -> MemoryTemplateData:
    """A data source holding the job's variable `nomad/jobs/j` with `items`."""
    data = MemoryTemplateData()
    data.put_variable("nomad/jobs/j", items)
    return data


@asynccontextmanager
async def templated(data: MemoryTemplateData) -> AsyncIterator[Harness]:
    """The mock-driver harness, its runners' templates reading `data`."""
    async with harness() as h:
        h.config = dataclasses.replace(h.config, template_data=data)
        yield h


async def running(h: Harness, hcl: str) -> tuple[AllocRunner, TaskRunner]:
    """Start the job's allocation and wait until its task "t" runs."""
    ar = h.start(job_alloc(hcl))
    with trio.fail_after(60):
        await until_running(ar, "t")
    return ar, ar.task_runners["t"]


async def test_prestart_waits_for_the_variable_with_missing_events(
        autojump_clock: MockClock) -> None:
    data = MemoryTemplateData()
    async with templated(data) as h:
        ar = h.start(job_alloc(job(VAR_TEMPLATE % ("noop", "0s"))))
        tr = ar.task_runners["t"]
        with trio.fail_after(60):
            await until(ar, has_event(
                "t", "Missing: nomad.var.block(nomad/jobs/j@default.global)"))
        assert tr.handle is None  # still in prestart
        (missing,) = [e for e in tr.state.events if e.type == "Template"]
        assert seconds(missing.time) == pytest.approx(3.0)  # Nomad's event rate
        await trio.sleep(30)
        assert types(tr).count("Template") == 1  # the same missing set: reported once
        data.put_variable("nomad/jobs/j", {"user": "admin"})
        with trio.fail_after(60):
            await until_running(ar, "t")
        assert hook_of(tr).rendered == {"local/app.conf": "user=admin"}
        ar.destroy()


async def test_signal_mode_sends_the_signal_after_the_splay(autojump_clock: MockClock) -> None:
    data = variable_data({"user": "a"})
    async with templated(data) as h:
        ar, tr = await running(h, job(VAR_TEMPLATE % ("signal", "10s")))
        hook = hook_of(tr)
        assert tr.handle is not None
        task_id = tr.handle.task_id
        changed_at = trio.current_time()
        data.put_variable("nomad/jobs/j", {"user": "b"})
        with trio.fail_after(60):
            await until(ar, has_event("t", "Template re-rendered"))
        assert hook.rendered == {"local/app.conf": "user=b"}
        assert h.driver.signals(task_id) == ["SIGHUP"]
        (event,) = [e for e in tr.state.events if e.type == "Signaling"]
        assert event.task_signal == "hangup"
        # The splay: a random wait below 10 s before the signal.
        assert 0 <= trio.current_time() - changed_at < 10
        ar.destroy()


async def test_restart_mode_restarts_the_task(autojump_clock: MockClock) -> None:
    data = variable_data({"user": "a"})
    async with templated(data) as h:
        ar, tr = await running(h, job(VAR_TEMPLATE % ("restart", "0s")))
        data.put_variable("nomad/jobs/j", {"user": "b"})
        with trio.fail_after(60):
            await until(ar, has_event("t", "Template with change_mode restart re-rendered"))
            await until(ar, lambda a: len([e for e in a.task_states["t"].events
                                           if e.type == "Started"]) == 2)
        assert "Restart Signaled" in types(tr)
        assert tr.state.restarts == 1
        assert not tr.state.failed
        ar.destroy()


async def test_noop_mode_only_rewrites_the_file(autojump_clock: MockClock) -> None:
    data = variable_data({"user": "a"})
    async with templated(data) as h:
        ar, tr = await running(h, job(VAR_TEMPLATE % ("noop", "0s")))
        hook = hook_of(tr)
        before = list(displays(tr))
        fetches = data.fetches
        data.put_variable("nomad/jobs/j", {"user": "b"})
        with trio.fail_after(60):
            await next_render(hook)
        assert hook.rendered == {"local/app.conf": "user=b"}
        assert data.fetches == fetches + 1  # the render reuses the read that saw the change
        await trio.sleep(30)
        assert displays(tr) == before
        ar.destroy()


async def test_a_change_nothing_reads_renders_nothing(autojump_clock: MockClock) -> None:
    data = variable_data({"user": "a"})
    async with templated(data) as h:
        ar, tr = await running(h, job(VAR_TEMPLATE % ("restart", "0s")))
        hook = hook_of(tr)
        renders = hook.renders
        data.touch()
        data.put_variable("nomad/jobs/other", {"x": "1"})
        await trio.sleep(30)
        assert hook.renders == renders
        assert tr.state.restarts == 0
        ar.destroy()


WAIT_TEMPLATE = '''        data = "{{ with nomadVar \\"nomad/jobs/j\\" }}{{ .v }}{{ end }}"
        destination = "local/v"
        change_mode = "noop"
        wait {
          min = "2s"
          max = "10s"
        }'''


async def test_wait_quiesces_a_burst_then_renders_once(autojump_clock: MockClock) -> None:
    data = variable_data({"v": "0"})
    async with templated(data) as h:
        ar, tr = await running(h, job(WAIT_TEMPLATE))
        hook = hook_of(tr)
        renders = hook.renders
        t0 = trio.current_time()
        for v in ("1", "2", "3"):  # three changes 1 s apart: each restarts the 2 s quiet
            data.put_variable("nomad/jobs/j", {"v": v})
            await trio.sleep(1)
        with trio.fail_after(60):
            await next_render(hook)
        assert trio.current_time() - t0 == pytest.approx(2 + 2)  # last change at 2 s, +min
        assert hook.renders == renders + 1
        assert hook.rendered == {"local/v": "3"}
        ar.destroy()


async def test_wait_max_bounds_a_steady_stream_of_changes(autojump_clock: MockClock) -> None:
    data = variable_data({"v": "0"})
    async with templated(data) as h:
        ar, tr = await running(h, job(WAIT_TEMPLATE))
        hook = hook_of(tr)
        t0 = trio.current_time()

        async def stream() -> None:
            for i in range(1, 30):  # a change every second, never 2 s quiet
                data.put_variable("nomad/jobs/j", {"v": str(i)})
                await trio.sleep(1)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(stream)
            with trio.fail_after(60):
                await next_render(hook)
            assert trio.current_time() - t0 == pytest.approx(10)  # first change + max
            nursery.cancel_scope.cancel()
        ar.destroy()


async def test_env_template_feeds_the_task_env(autojump_clock: MockClock) -> None:
    data = variable_data({"user": "admin"})
    template = ('        data = "DB_USER={{ with nomadVar \\"nomad/jobs/j\\" }}{{ .user }}'
                '{{ end }}\\nexport MODE=\'x y\'"\n'
                '        destination = "secrets/app.env"\n'
                '        env = true')
    async with templated(data) as h:
        ar, tr = await running(h, job(template))
        assert tr.env["DB_USER"] == "admin"
        assert tr.env["MODE"] == "x y"
        ar.destroy()


async def test_services_render_and_rerender_on_a_new_instance(autojump_clock: MockClock) -> None:
    data = MemoryTemplateData()
    data.register(ServiceRegistration(id="s1", service_name="web", address="10.0.0.1",
                                      port=8080, alloc_id="a-1"))
    template = ('        data = "{{ range nomadService \\"web\\" }}{{ .Address }}:{{ .Port }} '
                '{{ end }}"\n'
                '        destination = "local/upstreams"\n'
                '        change_mode = "signal"\n'
                '        change_signal = "SIGUSR1"\n'
                '        splay = "0s"')
    async with templated(data) as h:
        ar, tr = await running(h, job(template))
        hook = hook_of(tr)
        assert hook.rendered == {"local/upstreams": "10.0.0.1:8080 "}
        data.register(ServiceRegistration(id="s2", service_name="web", address="10.0.0.2",
                                          port=8081, alloc_id="a-2"))
        with trio.fail_after(60):
            await until(ar, has_event("t", "Template re-rendered"))
        assert hook.rendered == {"local/upstreams": "10.0.0.1:8080 10.0.0.2:8081 "}
        assert tr.handle is not None
        assert h.driver.signals(tr.handle.task_id) == ["SIGUSR1"]
        ar.destroy()


async def test_script_mode_runs_the_script_beside_the_task(autojump_clock: MockClock) -> None:
    data = variable_data({"user": "a"})
    template = VAR_TEMPLATE % ("script", "0s") + '''
        change_script {
          command = "/local/reload.sh"
          args = ["-v"]
        }'''
    task_config = 'run_for = "1h"\n        exec_command = { run_for = "1s", exit_code = 3 }'
    async with templated(data) as h:
        ar, tr = await running(h, job(template, task_config=task_config))
        data.put_variable("nomad/jobs/j", {"user": "b"})
        message = ("Template ran script /local/reload.sh with arguments [-v] on change but it "
                   "exited with code: 3")
        with trio.fail_after(60):
            await until(ar, has_event("t", message))
        assert [e.type for e in tr.state.events if e.display_message == message] == [
            "Task hook failed"]
        assert not tr.state.failed  # fail_on_error is false
        ar.destroy()


async def test_a_template_that_does_not_parse_fails_the_task(autojump_clock: MockClock) -> None:
    template = '''        data = "{{ if }}"
        destination = "local/x"'''
    async with harness() as h:
        ar = h.start(job_alloc(job(template, restart='restart {\n        attempts = 0\n'
                                                     '        mode = "fail"\n      }')))
        tr = ar.task_runners["t"]
        with trio.fail_after(60):
            await until(ar, lambda a: a.client_status == "failed")
        (failed,) = [e for e in tr.state.events if e.type == "Task hook failed"]
        assert failed.display_message.startswith(
            "template: Template failed: template: local/x:1:6: missing value for if")
        ar.destroy()


async def test_an_unknown_change_signal_fails_the_task(autojump_clock: MockClock) -> None:
    # Nomad's `newTaskTemplateManager` refuses the name before anything renders.
    template = '''        data = "x"
        destination = "local/x"
        change_mode = "signal"
        change_signal = "SIGFOO"'''
    async with harness() as h:
        ar = h.start(job_alloc(job(template, restart='restart {\n        attempts = 0\n'
                                                     '        mode = "fail"\n      }')))
        tr = ar.task_runners["t"]
        with trio.fail_after(60):
            await until(ar, lambda a: a.client_status == "failed")
        (failed,) = [e for e in tr.state.events if e.type == "Task hook failed"]
        assert failed.display_message == 'template: Failed to parse signal "SIGFOO"'
        assert hook_of(tr).renders == 0
        ar.destroy()


async def test_once_templates_are_not_watched(autojump_clock: MockClock) -> None:
    data = variable_data({"user": "a"})
    async with templated(data) as h:
        ar, tr = await running(h, job(VAR_TEMPLATE % ("restart", "0s") + "\n        once = true"))
        hook = hook_of(tr)
        data.put_variable("nomad/jobs/j", {"user": "b"})
        await trio.sleep(30)
        assert hook.rendered == {"local/app.conf": "user=a"}
        assert tr.state.restarts == 0
        ar.destroy()


async def test_a_rerender_that_fails_kills_and_fails_the_task(autojump_clock: MockClock) -> None:
    data = variable_data({"n": "1"})
    template = ('        data = "{{ with nomadVar \\"nomad/jobs/j\\" }}{{ .n.Value | parseInt }}'
                '{{ end }}"\n'
                '        destination = "local/n"')
    async with templated(data) as h:
        ar, tr = await running(h, job(template))
        data.put_variable("nomad/jobs/j", {"n": "not a number"})
        with trio.fail_after(60):
            await until(ar, lambda a: a.client_status == "failed")
        (killing,) = [e for e in tr.state.events if e.type == "Killing"]
        assert killing.display_message.startswith(
            'Template failed: template: local/n:1:48: executing "local/n" at <parseInt>: '
            'error calling parseInt: strconv.ParseInt: parsing "not a number"')
        assert killing.fails_task
        assert tr.state.failed
        ar.destroy()


async def test_a_template_over_its_budget_fails_the_task(autojump_clock: MockClock) -> None:
    # Each template calls the next twice: 2^23 calls, over the five-million-step budget.
    chain = "".join(f'{{{{ define \\"d{i}\\" }}}}{{{{ template \\"d{i + 1}\\" }}}}'
                    f'{{{{ template \\"d{i + 1}\\" }}}}{{{{ end }}}}' for i in range(23))
    template = (f'        data = "{chain}{{{{ define \\"d23\\" }}}}x{{{{ end }}}}'
                '{{ template \\"d0\\" }}"\n'
                '        destination = "local/x"')
    async with harness() as h:
        ar = h.start(job_alloc(job(template, restart='restart {\n        attempts = 0\n'
                                                     '        mode = "fail"\n      }')))
        tr = ar.task_runners["t"]
        with trio.fail_after(60):
            await until(ar, lambda a: a.client_status == "failed")
        (failed,) = [e for e in tr.state.events if e.type == "Task hook failed"]
        assert failed.display_message.startswith("template: Template failed: template: local/x:1:")
        assert "exceeded the render budget of 5000000 steps" in failed.display_message
        assert hook_of(tr).rendered == {}
        ar.destroy()


async def test_a_kill_cancels_a_prestart_waiting_for_data(autojump_clock: MockClock) -> None:
    # Nomad's template hook returns on its context's end: a kill does not wait for the data.
    data = MemoryTemplateData()
    async with templated(data) as h:
        ar = h.start(job_alloc(job(VAR_TEMPLATE % ("noop", "0s"))))
        tr = ar.task_runners["t"]
        with trio.fail_after(60):
            await until(ar, has_event(
                "t", "Missing: nomad.var.block(nomad/jobs/j@default.global)"))
        assert tr.handle is None  # in prestart
        with trio.fail_after(3600):
            await tr.kill()
        assert tr.state.state == "dead"
        assert "Started" not in types(tr)
        assert hook_of(tr).rendered == {}
        assert "template" not in tr.local_state.hooks  # nothing kept of the cancelled prestart
        data.put_variable("nomad/jobs/j", {"user": "late"})
        await trio.sleep(30)
        assert hook_of(tr).rendered == {}  # no render goes on behind the kill
        ar.destroy()
