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
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from yurt.runtime.gotemplate import Template as GoTemplate
from yurt.runtime.gotemplate import TemplateError
from yurt.runtime.gotemplate.consul import (
    NomadService,
    NomadServicesSnippet,
    NomadVarItems,
    NomadVarMeta,
    consul_funcs,
)
from yurt.runtime.server.variables import Variable, VariableMetadata
from yurt.runtime.structs.service import ServiceRegistration
from yurt.runtime.structs.template import Template
from yurt.runtime.templating.data import TemplateData

#: More passes than any template needs: each pass adds what the last one found missing, and
#: only a lookup whose argument comes from another lookup needs a further pass.
MAX_PASSES: Final = 8

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
    """A template's `Lookups`: answers from the snapshot of the current execution and
    records what it used and what the snapshot lacked (reset by `start`)."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.start({})

    def start(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
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
    """A task template parsed once, executed on every render.

    Raises:
        TemplateError: the template does not parse.
    """

    def __init__(self, spec: Template, text: str, *, namespace: str = "default",
                 region: str = "global", clock: Callable[[], float] = time.time) -> None:
        self.spec = spec
        self.namespace = namespace
        self._env: dict[str, str] = {}  # the functions' view of the current execution's env
        self._recorder = _Recorder(namespace)
        funcs = consul_funcs(self._env, self._recorder, namespace=namespace, region=region,
                             clock=clock)
        self._template = GoTemplate(spec.destination, text, funcs,
                                    left=spec.left_delimiter, right=spec.right_delimiter,
                                    missing_key="error" if spec.error_on_missing_key else "zero")

    def execute(self, snapshot: Snapshot, env: dict[str, str]) -> tuple[Rendered, _Recorder]:
        """Render over `snapshot`; the recorder holds what this execution read until the next."""
        recorder = self._recorder
        recorder.start(snapshot)
        self._env.clear()
        self._env.update(env)
        text = self._template.execute(None)
        if recorder.missing:
            return Rendered(None, sorted(set(recorder.missing))), recorder
        return Rendered(text), recorder


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


async def render_all(templates: Sequence[CompiledTemplate], data: TemplateData,
                     env: dict[str, str], snapshot: Snapshot | None = None) -> Render:
    """Render every template, fetching what the passes discover.

    Raises:
        TemplateError: a template failed to execute (the text names the template).
    """
    snap: Snapshot = dict(snapshot or {})
    for _ in range(MAX_PASSES):
        results: list[Rendered] = []
        used: set[Dep] = set()
        unfetched: set[Dep] = set()
        for tmpl in templates:
            rendered, recorder = tmpl.execute(snap, env)
            results.append(rendered)
            used |= recorder.used
            unfetched |= recorder.unfetched
        if not unfetched:
            return Render(results, frozenset(used), {d: snap[d] for d in used})
        snap.update(await fetch(data, unfetched))
    raise TemplateError("template: dependencies did not settle after "
                        f"{MAX_PASSES} passes")
