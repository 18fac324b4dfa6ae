"""`template`: render a task's `template` blocks before it starts and keep them current
(Nomad's `template_hook.go` and `template/template.go`).

Prestart blocks until every template has rendered once. While a template reads data that is
not there (a `nomadVar` path with no variable), it emits Nomad's `Template` event
"Missing: nomad.var.block(…)" — once the missing set has held for the event rate (3 s), and
again only when the set changes. Each file is written inside the allocation directory
(runtime/client/templating/files.py) with its `perms`; the files of `env = true` templates become
the task's environment (the hook's env, persisted and re-applied as any hook's).

Templates are parsed and rendered in a worker thread (client/templating/render.py), each
execution bounded in steps, output and nesting; a template beyond its bounds fails like any
template error ("Template failed: template: <destination>:…"). A kill or an agent shutdown
cancels prestart, whether it waits for data or renders: it does not wait for a render in
progress.

After the first render a watcher, in the task runner's background nursery, waits for the data
source to change, re-reads what the templates read, and re-renders when it differs, after the
tasks's `wait` quiescence. The templates whose file changed decide the action
(client/templating/change.py): restart ("Restart Signaled" / "Template with change_mode restart
re-rendered"), signal ("Signaling" / "Template re-rendered"), script (run beside the task,
bounded by its timeout), or nothing; a random splay comes first. A re-render that fails kills
the task ("Template failed: …", failing it), as Nomad does.

`once` templates render at the first start and are never watched. The watcher lives until
the task's stop hooks (or an agent shutdown, which cancels the
background nursery). On a restart the files stay as they are unless the restart policy says
`render_templates`; after an agent restart prestart renders again, and a file that changed
while the agent was down applies its change mode to the running task (Nomad's first render
with a driver handle).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import signal as signal_mod
import time
from pathlib import Path
from typing import ClassVar, Final, final

import trio

from yurt.hooks.base import (
    PrestartResponse,
    TaskHookContext,
    TaskPrestartHook,
    TaskShutdownHook,
    TaskStopHook,
)
from yurt.runtime.client.taskenv import build_env, interpolate
from yurt.runtime.client.taskrunner import events
from yurt.runtime.client.templating.change import (
    ChangeAction,
    Quiescence,
    decide,
    missing_message,
    splay_delay,
    task_wait,
)
from yurt.runtime.client.templating.data import MemoryTemplateData, TemplateData
from yurt.runtime.client.templating.files import (
    TemplateFileError,
    client_path,
    parse_env,
    read_confined,
    write_confined,
)
from yurt.runtime.client.templating.render import (
    CompiledTemplate,
    Render,
    compile_all,
    fetch,
    render_all,
)
from yurt.runtime.client.templating.script import run_change_script
from yurt.runtime.errors import TaskNotRunningError
from yurt.runtime.gotemplate import TemplateError
from yurt.runtime.lib.signames import parse_signal_name
from yurt.runtime.structs import TaskEvent
from yurt.runtime.structs.template import Template

log = logging.getLogger("yurt.hooks.template")

#: Nomad's `DefaultMaxTemplateEventRate`: how long a missing set holds before its event.
EVENT_RATE: Final = 3.0
TEMPLATE_EVENT: Final = "Template"
HOOK_MESSAGE: Final = "Task hook message"


class TemplateHookError(Exception):
    """A template that cannot render (its text, its source, its destination)."""


def go_signal_name(name: str) -> str:
    """Go's `os.Signal.String()` ("hangup" for SIGHUP), which Nomad's events carry."""
    try:
        return (signal_mod.strsignal(signal_mod.Signals[name]) or name).lower()
    except (KeyError, ValueError):
        return name


@final
class TemplateHook(TaskPrestartHook, TaskStopHook, TaskShutdownHook):
    name: ClassVar[str] = "template"
    #: Prestart may wait without end (a variable that does not exist yet) or render for a
    #: while: a kill or an agent shutdown cancels it, as Nomad's hook returns on its
    #: context's end. Nothing of a cancelled prestart is kept: the runner persists a hook's
    #: state only when its prestart returned, each file is replaced atomically (a file
    #: written before the cancel is whole), and a watcher started just before it is ended by
    #: the stop hook that follows every kill.
    interruptible: ClassVar[bool] = True

    def __init__(self, data: TemplateData | None = None, *, rng: random.Random | None = None,
                 event_rate: float = EVENT_RATE) -> None:
        self._data: TemplateData = data if data is not None else MemoryTemplateData()
        self._rng = rng or random.Random()
        self._event_rate = event_rate
        self._watch_scope: trio.CancelScope | None = None
        self._env: dict[str, str] = {}
        #: Rendered text per destination, for runtimes without a task directory (mock).
        self.rendered: dict[str, str] = {}
        self.renders = 0  # completed renders (tests wait on it)
        self.rendered_event = trio.Event()  # set, then replaced, after every render

    # ------------------------------------------------------------------ phases

    async def prestart(self, ctx: TaskHookContext, previous: dict[str, str]) -> PrestartResponse:
        policy = ctx.task.restart_policy
        if self._watch_scope is not None:
            if not (policy is not None and policy.render_templates):
                await trio.lowlevel.checkpoint()
                return PrestartResponse(env=dict(self._env))
            self._stop_watch()
        for tmpl in ctx.task.templates:
            # Nomad's `newTaskTemplateManager` (client/allocrunner/taskrunner/template/
            # template.go): a signal it cannot parse fails the task before any render.
            if tmpl.change_mode == "signal":
                try:
                    parse_signal_name(tmpl.change_signal)
                except ValueError:
                    raise TemplateHookError(
                        f"Failed to parse signal {json.dumps(tmpl.change_signal)}") from None
        try:
            compiled = await self._compile(ctx)
            render, index = await self._first_render(ctx, compiled)
            changed = await self._write(ctx, compiled, render)
            self._env = await self._load_env(ctx, compiled, render)
        except (TemplateError, TemplateFileError, OSError) as e:
            raise TemplateHookError(f"Template failed: {e}") from e
        self._note_render()
        initial = ChangeAction()
        if ctx.lifecycle is not None and ctx.lifecycle.handle is not None:
            # Re-attached to a running task: files that changed while the agent was down
            # apply their change mode, once the task runs again (from the watcher).
            initial = decide([c.spec for c in changed])
        if ctx.nursery is not None and not any(t.once for t in ctx.task.templates):
            # `once` templates render at the first start only and are never watched.
            await ctx.nursery.start(self._watch, ctx, compiled, render, index, initial)
        return PrestartResponse(env=dict(self._env))

    async def stop(self, ctx: TaskHookContext) -> None:
        await trio.lowlevel.checkpoint()
        self._stop_watch()

    async def shutdown(self, ctx: TaskHookContext) -> None:
        await trio.lowlevel.checkpoint()
        self._stop_watch()

    def _stop_watch(self) -> None:
        if self._watch_scope is not None:
            self._watch_scope.cancel(reason="template hook stopped")
            self._watch_scope = None

    # ------------------------------------------------------------------ rendering

    def _task_env(self, ctx: TaskHookContext) -> dict[str, str]:
        if ctx.lifecycle is not None:
            env = ctx.lifecycle.env
        else:
            env = build_env(ctx.alloc, ctx.task, task_dir=ctx.task_dir, node=None)
        env.update(self._env)
        return env

    async def _compile(self, ctx: TaskHookContext) -> list[CompiledTemplate]:
        env = self._task_env(ctx)
        region = ctx.alloc.job.region if ctx.alloc.job is not None else "global"
        sources = []
        for spec in ctx.task.templates:
            text = spec.data
            if spec.source:
                text = await self._read_source(ctx, interpolate(spec.source, env))
            sources.append((spec, text))
        return await compile_all(sources, namespace=ctx.alloc.namespace, region=region,
                                 clock=time.time, in_thread=_in_thread(ctx))

    async def _read_source(self, ctx: TaskHookContext, source: str) -> str:
        if ctx.task_dir is None:
            raise TemplateFileError(f"source {source!r}: no task directory")
        task_dir = ctx.task_dir
        rel = client_path(source, task_dir, destination=False)
        data = await trio.to_thread.run_sync(read_confined, task_dir.parent, rel)
        if data is None:
            raise TemplateFileError(f"failed to read template {source!r}: no such file")
        return data.decode("utf-8", "replace")

    async def _first_render(self, ctx: TaskHookContext, compiled: list[CompiledTemplate]
                            ) -> tuple[Render, int]:
        """Render until complete, with Nomad's rate-limited "Missing: …" events."""
        reported: frozenset[str] = frozenset()
        pending: frozenset[str] | None = None
        pending_at = 0.0
        while True:
            index = self._data.index()
            render = await render_all(compiled, self._data, self._task_env(ctx),
                                      in_thread=_in_thread(ctx))
            if render.complete:
                return render, index
            missing = frozenset(render.missing)
            if missing != reported and missing != pending:
                pending, pending_at = missing, trio.current_time() + self._event_rate
            with trio.move_on_at(pending_at if pending is not None else float("inf")):
                await self._data.wait_changed(index)
                continue
            if pending is not None:
                await ctx.emit_event(events.new_event(TEMPLATE_EVENT, ctx.unix_clock(),
                                                      display=missing_message(sorted(pending))))
                reported, pending = pending, None

    async def _write(self, ctx: TaskHookContext, compiled: list[CompiledTemplate],
                     render: Render) -> list[CompiledTemplate]:
        """Write what differs from the file on disk; returns the templates whose file changed."""
        env = self._task_env(ctx)
        changed = []
        for tmpl, result in zip(compiled, render.results, strict=True):
            if result.text is None:
                continue
            dest = str(interpolate(tmpl.spec.destination, env))
            if ctx.task_dir is None:
                if self.rendered.get(dest) != result.text:
                    self.rendered[dest] = result.text
                    changed.append(tmpl)
                continue
            rel = client_path(dest, ctx.task_dir, destination=True)
            if await trio.to_thread.run_sync(_write_file, ctx.task_dir.parent, rel,
                                             result.text.encode(), tmpl.spec):
                changed.append(tmpl)
        return changed

    async def _load_env(self, ctx: TaskHookContext, compiled: list[CompiledTemplate],
                        render: Render) -> dict[str, str]:
        env: dict[str, str] = {}
        for tmpl, result in zip(compiled, render.results, strict=True):
            if tmpl.spec.env and result.text is not None:
                env.update(parse_env(result.text))
        await trio.lowlevel.checkpoint()
        return env

    def _note_render(self) -> None:
        self.renders += 1
        self.rendered_event.set()
        self.rendered_event = trio.Event()

    # ------------------------------------------------------------------ watching

    async def _watch(self, ctx: TaskHookContext, compiled: list[CompiledTemplate],
                     render: Render, index: int, initial: ChangeAction, *,
                     task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with trio.CancelScope() as scope:
            self._watch_scope = scope
            task_status.started()
            await self._act(ctx, initial)
            quiet = Quiescence(task_wait([c.spec for c in compiled]))
            while True:
                index = await self._data.wait_changed(index)
                try:
                    fresh = await fetch(self._data, render.deps)
                except Exception:  # the source failed: keep the files, try on the next change
                    log.exception("task %s of %s: template data", ctx.task.name, ctx.alloc.id)
                    continue
                if fresh == render.snapshot:
                    continue  # a change nothing here reads
                fetched_at = index
                quiet.change(_now())
                while (due := quiet.due_at()) is not None and due > _now():
                    with trio.move_on_at(due / 1e9):
                        index = await self._data.wait_changed(index)
                        quiet.change(_now())
                quiet.rendered()
                # No change since `fresh` was read (no burst to quiesce): render from it rather
                # than read every dependency again.
                known = fresh if self._data.index() == fetched_at else None
                try:
                    render = await render_all(compiled, self._data, self._task_env(ctx), known,
                                              in_thread=_in_thread(ctx))
                    if not render.complete:
                        continue  # keep the last files until the data is back
                    changed = await self._write(ctx, compiled, render)
                    env = await self._load_env(ctx, compiled, render)
                except Exception as e:  # whatever breaks a render fails the task, never the runner
                    await self._fail(ctx, f"Template failed: {e}")
                    return
                self._note_render()
                if env != self._env:
                    self._env = env
                    if ctx.lifecycle is not None:
                        ctx.lifecycle.set_hook_env(self.name, env)
                if changed:
                    await self._act(ctx, decide([c.spec for c in changed]))

    async def _act(self, ctx: TaskHookContext, action: ChangeAction) -> None:
        if not action.acts or ctx.lifecycle is None:
            await trio.lowlevel.checkpoint()
            return
        await trio.sleep(splay_delay(action.splay, self._rng) / 1e9)
        lifecycle = ctx.lifecycle
        if action.restart:
            event = events.new_event(events.RESTART_SIGNALED, ctx.unix_clock(),
                                     display="Template with change_mode restart re-rendered")
            with contextlib.suppress(TaskNotRunningError):
                await lifecycle.restart(event, failure=False)
            return
        failed = []
        for sig in action.signals:
            name = go_signal_name(sig)
            event = events.new_event(events.SIGNALING, ctx.unix_clock(), task_signal=name,
                                     display="Template re-rendered")
            try:
                await lifecycle.signal(event, sig)
            except TaskNotRunningError:
                await ctx.emit_event(events.new_event(
                    HOOK_MESSAGE, ctx.unix_clock(),
                    display=f"Template skipped signal {name}: task is not running"))
            except Exception as e:  # any driver failure fails the task, as in Nomad
                failed.append((name, e))
        if failed:
            names = " ".join(n for n, _ in failed)
            await self._fail(ctx, f"Template failed to send signals [{names}]: {failed[0][1]}")
            return
        for script in action.scripts:
            message, fatal = await run_change_script(ctx, script)
            if message:
                await ctx.emit_event(events.new_event(
                    events.HOOK_FAILED if fatal is not None else HOOK_MESSAGE,
                    ctx.unix_clock(), display=message))
            if fatal:
                await self._fail(ctx, "Template script failed, task is being killed")
                return

    async def _fail(self, ctx: TaskHookContext, message: str) -> None:
        log.warning("task %s of %s: %s", ctx.task.name, ctx.alloc.id, message)
        event = events.new_event(events.KILLING, ctx.unix_clock(), display=message,
                                 fails_task=True)
        if ctx.lifecycle is None:
            await ctx.emit_event(event)
            return
        await ctx.lifecycle.kill(event)


def _write_file(root: Path, rel: str, content: bytes, spec: Template) -> bool:
    """Write the file unless it holds `content` already; True when it was written."""
    mode = int(spec.perms or "644", 8)
    return write_confined(root, rel, content, mode, _id(spec.uid), _id(spec.gid),
                          if_changed=True)


def _in_thread(ctx: TaskHookContext) -> bool:
    """Whether to parse and render in a worker thread: always, but for a task without a
    directory — the in-memory runtime, whose files stay in memory too and whose clock may be
    virtual (a thread's real time would let it jump). The render's bounds hold either way."""
    return ctx.task_dir is not None


def _now() -> int:
    return int(trio.current_time() * 1e9)


def _id(value: int | None) -> int | None:
    return value if value is not None and value >= 0 and os.geteuid() == 0 else None


__all__ = ["TaskEvent", "TemplateHook", "TemplateHookError"]
