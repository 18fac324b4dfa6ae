"""One render of a task's templates, with consul-template's dependency discovery.

A template's functions cannot wait for data (the engine is synchronous), so a render runs in
passes: each pass renders every template against a `Snapshot` of fetched data, and a lookup
the snapshot cannot answer is recorded as *unfetched* and answered with an empty value. The
caller fetches what was unfetched and runs the next pass; the render is over when a pass asks
for nothing new. What a render read (`Render.deps`) is what the watcher fetches again after a
change, so that an unchanged snapshot skips the render entirely.

A template is *incomplete* while it reads a variable that does not exist (`nomadVar` blocks
until it does, as consul-template's `nomad.var.block` dependency does); its missing
dependencies carry consul-template's names for the "Missing: …" event.

Invariants: the snapshot is never changed by a pass; a pass is pure given the snapshot, the
environment and the clock; results keep the order of the task's templates.

Off the event loop: templates are written by job submitters, so parsing and executing them
runs in a worker thread (`compile_all`, and each pass of `render_all`, one thread hop per
pass for all of a task's templates), behind one `CapacityLimiter` per Trio run
(`RENDERS_AT_ONCE`), so a slow render delays neither the agent's API nor other allocations.
Every execution is bounded (`gotemplate.limits`: steps, output, nesting), and the step
budget is the render's, shared by its templates and passes, so a thread ends soon however
many templates a task has. A pass has no effect beyond its return value (and the step count
of its own render) — every execution gets its own recorder and function table, and reads a
snapshot nobody changes — which is what makes `abandon_on_cancel` safe: a cancelled render
(a task killed mid-render) returns at once, and its thread, told to stop, ends at its next
budget check; until then it holds its render slot, which is why every call inside a render
(a regexp search or compile too) is bounded by what remains of the budget. The caller may
keep a render on the loop (`in_thread=False`: a runtime under a virtual clock, where a
thread's real time would let the clock jump); the bounds hold there all the same.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeVar

import trio

from yurt.runtime.client.templating.data import TemplateData
from yurt.runtime.gotemplate import Limits, TemplateError
from yurt.runtime.gotemplate import Template as GoTemplate
from yurt.runtime.gotemplate.consul import (
    NomadService,
    NomadServicesSnippet,
    NomadVarItems,
    NomadVarMeta,
    consul_funcs,
)
from yurt.runtime.gotemplate.consul_helpers import helper_funcs
from yurt.runtime.structs.service import ServiceRegistration
from yurt.runtime.structs.template import Template
from yurt.runtime.structs.variables import Variable, VariableMetadata

#: More passes than any template needs: each pass adds what the last one found missing, and
#: only a lookup whose argument comes from another lookup needs a further pass.
MAX_PASSES: Final = 8

#: Renders running in worker threads at once, agent-wide. Rendering is pure Python and holds
#: the GIL, so more threads add no throughput; two keep one heavy template from queueing
#: every other task's render behind it.
RENDERS_AT_ONCE: Final = 2

_T = TypeVar("_T")
_limiter: trio.lowlevel.RunVar[trio.CapacityLimiter] = trio.lowlevel.RunVar("template_renders")

DepKind = Literal["service", "services", "var", "varlist"]


@dataclass(frozen=True, slots=True)
class Dep:
    kind: DepKind
    namespace: str
    key: str


Snapshot = dict[Dep, Any]


@dataclass
class Rendered:
    text: str | None  # None while incomplete
    missing: list[str] = field(default_factory=list)


@dataclass
class Render:
    results: list[Rendered]
    deps: frozenset[Dep]
    snapshot: Snapshot

    @property
    def complete(self) -> bool:
        return all(r.text is not None for r in self.results)

    @property
    def missing(self) -> list[str]:
        return sorted({m for r in self.results for m in r.missing})


def _service(reg: ServiceRegistration) -> NomadService:
    return NomadService(ID=reg.id, Name=reg.service_name, Namespace=reg.namespace,
                        Node=reg.node_id, Datacenter=reg.datacenter, Address=reg.address,
                        Port=reg.port, Tags=list(reg.tags), JobID=reg.job_id,
                        AllocID=reg.alloc_id)


def _meta(var: VariableMetadata) -> NomadVarMeta:
    return NomadVarMeta(Namespace=var.namespace, Path=var.path, CreateIndex=var.create_index,
                        ModifyIndex=var.modify_index, CreateTime=var.create_time,
                        ModifyTime=var.modify_time)


class _Recorder:
    """One execution's `Lookups`: answers from `snapshot` and records what the execution
    used and what the snapshot lacked."""

    def __init__(self, namespace: str, snapshot: Snapshot | None = None) -> None:
        self.namespace = namespace
        self.snapshot: Snapshot = snapshot if snapshot is not None else {}
        self.used: set[Dep] = set()
        self.unfetched: set[Dep] = set()
        self.missing: list[str] = []

    def _get(self, dep: Dep, name: str) -> tuple[bool, Any]:
        self.used.add(dep)
        if dep not in self.snapshot:
            self.unfetched.add(dep)
            self.missing.append(name)
            return False, None
        return True, self.snapshot[dep]

    def services(self, name: str, dep: str) -> list[NomadService] | None:
        found, regs = self._get(Dep("service", self.namespace, name), dep)
        return [_service(r) for r in regs] if found else None

    def service_names(self, dep: str) -> list[NomadServicesSnippet] | None:
        found, regs = self._get(Dep("services", self.namespace, ""), dep)
        if not found:
            return None
        tags: dict[str, set[str]] = {}
        for reg in regs:
            tags.setdefault(reg.service_name, set()).update(reg.tags)
        return [NomadServicesSnippet(Name=n, Tags=sorted(t)) for n, t in sorted(tags.items())]

    def variable(self, path: str, dep: str) -> NomadVarItems | None:
        found, var = self._get(Dep("var", self.namespace, path), dep)
        if not found:
            return None
        if var is None:  # blocks until the variable exists
            self.missing.append(dep)
            return None
        assert isinstance(var, Variable)
        return NomadVarItems(var.items or {}, _meta(var))

    def variable_list(self, prefix: str, dep: str) -> list[NomadVarMeta] | None:
        found, metas = self._get(Dep("varlist", self.namespace, prefix), dep)
        return [_meta(m) for m in metas] if found else None

    def variable_exists(self, path: str, dep: str) -> bool | None:
        found, var = self._get(Dep("var", self.namespace, path), dep)
        return (var is not None) if found else None


class CompiledTemplate:
    """A task template parsed once, executed on every render (from any thread: executions
    share nothing but the parsed trees, which they only read).

    Raises:
        TemplateError: the template does not parse.
    """

    def __init__(self, spec: Template, text: str, *, namespace: str = "default",
                 region: str = "global", clock: Callable[[], float] = time.time) -> None:
        self.spec = spec
        self.namespace = namespace
        self.region = region
        self.clock = clock
        # The function names the parser checks against; executions bind their own.
        funcs = {**consul_funcs({}, _Recorder(namespace), namespace=namespace, region=region,
                                clock=clock), **helper_funcs()}
        self._template = GoTemplate(spec.destination, text, funcs,
                                    left=spec.left_delimiter, right=spec.right_delimiter,
                                    missing_key="error" if spec.error_on_missing_key else "zero")

    def execute(self, snapshot: Snapshot, env: dict[str, str],
                limits: Limits | None = None) -> tuple[Rendered, _Recorder]:
        """Render over `snapshot`; the recorder holds what this execution read.

        Raises:
            TemplateError: the execution failed or exceeded `limits`.
        """
        recorder = _Recorder(self.namespace, snapshot)
        funcs = {**consul_funcs(dict(env), recorder, namespace=self.namespace,
                                region=self.region, clock=self.clock), **helper_funcs()}
        text = self._template.execute(None, funcs=funcs, limits=limits)
        if recorder.missing:
            return Rendered(None, sorted(set(recorder.missing))), recorder
        return Rendered(text), recorder


def _render_limiter() -> trio.CapacityLimiter:
    try:
        return _limiter.get()
    except LookupError:
        limiter = trio.CapacityLimiter(RENDERS_AT_ONCE)
        _limiter.set(limiter)
        return limiter


async def _off_loop(fn: Callable[[], _T], stop: threading.Event, in_thread: bool) -> _T:
    """`fn()` in a render thread (or here, when not `in_thread`).

    Cancelled, this returns at once (`abandon_on_cancel`: `fn` has no effect but its
    result) and sets `stop`, which `fn` watches, so the abandoned thread ends at its next
    budget check. Only then: `render_all` hands the same `Limits` (and so the same `stop`)
    to its next pass, which a `stop` set after a normal return would abandon at its first
    check.
    """
    if not in_thread:
        await trio.lowlevel.checkpoint()
        return fn()
    try:
        return await trio.to_thread.run_sync(fn, limiter=_render_limiter(),
                                             abandon_on_cancel=True)
    except BaseException:
        # Cancelled (or interrupted): nobody waits for this thread any more. An error of
        # `fn` itself lands here too, when its thread has ended already; setting `stop` then
        # is harmless, since that error ends the render.
        stop.set()
        raise


async def compile_all(sources: Sequence[tuple[Template, str]], *, namespace: str = "default",
                      region: str = "global", clock: Callable[[], float] = time.time,
                      in_thread: bool = True) -> list[CompiledTemplate]:
    """Parse each (spec, text), in a render thread unless not `in_thread` (parsing is linear
    in the text, so it needs no budget).

    Raises:
        TemplateError: a template does not parse (the text names it).
    """
    def parse_all() -> list[CompiledTemplate]:
        return [CompiledTemplate(spec, text, namespace=namespace, region=region, clock=clock)
                for spec, text in sources]

    return await _off_loop(parse_all, threading.Event(), in_thread)


async def fetch(data: TemplateData, deps: set[Dep] | frozenset[Dep]) -> Snapshot:
    """Read every dependency from the data source."""
    out: Snapshot = {}
    for dep in sorted(deps, key=lambda d: (d.kind, d.namespace, d.key)):
        if dep.kind == "service":
            out[dep] = await data.services(dep.namespace, dep.key)
        elif dep.kind == "services":
            out[dep] = await data.all_services(dep.namespace)
        elif dep.kind == "var":
            out[dep] = await data.variable(dep.namespace, dep.key)
        else:
            out[dep] = await data.variable_list(dep.namespace, dep.key)
    return out


_Pass = list[tuple[Rendered, set[Dep], set[Dep]]]


def _run_pass(templates: Sequence[CompiledTemplate], snap: Snapshot, env: dict[str, str],
              limits: Limits) -> _Pass:
    """One pass: each template's result, and what it used and found unfetched."""
    out: _Pass = []
    for tmpl in templates:
        rendered, recorder = tmpl.execute(snap, env, limits)
        out.append((rendered, recorder.used, recorder.unfetched))
    return out


async def render_all(templates: Sequence[CompiledTemplate], data: TemplateData,
                     env: dict[str, str], snapshot: Snapshot | None = None, *,
                     in_thread: bool = True) -> Render:
    """Render every template, fetching what the passes discover; each pass runs in a render
    thread unless not `in_thread`. The render's templates and passes share one step budget
    (`gotemplate.limits`); each template's text has its own output cap.

    Raises:
        TemplateError: a template failed to execute or exceeded its bounds (the text names
            the template).
    """
    env = dict(env)
    snap: Snapshot = dict(snapshot or {})
    # One budget for the whole render: every template, every pass.
    limits = Limits()
    for _ in range(MAX_PASSES):
        # The pass reads `snap` while this task waits: `snap` is replaced, never changed.
        outcome = await _off_loop(functools.partial(_run_pass, templates, snap, env, limits),
                                  limits.stop, in_thread)
        results = [rendered for rendered, _, _ in outcome]
        used: set[Dep] = set().union(*(u for _, u, _ in outcome))
        unfetched: set[Dep] = set().union(*(f for _, _, f in outcome))
        if not unfetched:
            return Render(results, frozenset(used), {d: snap[d] for d in used})
        snap = {**snap, **await fetch(data, unfetched)}
    raise TemplateError("template: dependencies did not settle after "
                        f"{MAX_PASSES} passes")
