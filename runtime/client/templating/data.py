"""What templates read, behind one small protocol: `TemplateData`.

A template reads services (`nomadService`, `nomadServices`) and Nomad Variables (`nomadVar`,
`nomadVarList`, `nomadVarExists`). The agent answers from its server (variables from the
object store, services from the catalogue); tests answer from memory. Every source numbers
its changes with one counter (`index`), and `wait_changed(after)` returns once the counter
has passed `after`: a re-render after that sees every change numbered up to it. A source may
wake for changes that do not concern a template; the renderer compares what it reads, so a
spurious wake costs one fetch, never a spurious restart.

Invariant of `MemoryTemplateData`: each mutation bumps `index` and wakes every waiter (one
`trio.Event` replaced per change, as `LocalServer.changed` does).
"""

from __future__ import annotations

from typing import Protocol, final

import trio

from yurt.runtime.structs.service import ServiceRegistration
from yurt.runtime.structs.variables import Variable, VariableMetadata


class TemplateData(Protocol):
    async def services(self, namespace: str, name: str) -> list[ServiceRegistration]:
        """Registrations of service `name`, in the catalogue's order."""
        ...

    async def all_services(self, namespace: str) -> list[ServiceRegistration]:
        """Every registration in `namespace` (for `nomadServices`)."""
        ...

    async def variable(self, namespace: str, path: str) -> Variable | None:
        """The variable with its items, or None if there is none at `path`."""
        ...

    async def variable_list(self, namespace: str, prefix: str) -> list[VariableMetadata]:
        """Metadata of the variables under `prefix`, sorted by path."""
        ...

    def index(self) -> int:
        """The number of the latest change."""
        ...

    async def wait_changed(self, after: int) -> int:
        """Block until a change numbered above `after` is visible; returns its number."""
        ...


@final
class MemoryTemplateData:
    """An in-memory `TemplateData` (tests, and an agent without a catalogue yet)."""

    def __init__(self) -> None:
        self._services: list[ServiceRegistration] = []
        self._variables: dict[tuple[str, str], tuple[dict[str, str], int]] = {}
        self._index = 1
        self._changed = trio.Event()
        self.fetches = 0  # how many lookups were answered (tests check that renders share)

    # -- mutations -------------------------------------------------------------------------
    def _bump(self) -> None:
        self._index += 1
        self._changed.set()
        self._changed = trio.Event()

    def register(self, reg: ServiceRegistration) -> None:
        self._services = [s for s in self._services if s.id != reg.id] + [reg]
        self._bump()

    def deregister(self, reg_id: str) -> None:
        self._services = [s for s in self._services if s.id != reg_id]
        self._bump()

    def put_variable(self, path: str, items: dict[str, str], namespace: str = "default") -> None:
        self._bump()
        self._variables[(namespace, path)] = (dict(items), self._index)

    def delete_variable(self, path: str, namespace: str = "default") -> None:
        self._variables.pop((namespace, path), None)
        self._bump()

    def touch(self) -> None:
        """A change that concerns no template (another job, a node update)."""
        self._bump()

    # -- TemplateData ----------------------------------------------------------------------
    async def services(self, namespace: str, name: str) -> list[ServiceRegistration]:
        await trio.lowlevel.checkpoint()
        self.fetches += 1
        return [s for s in self._services if s.namespace == namespace and s.service_name == name]

    async def all_services(self, namespace: str) -> list[ServiceRegistration]:
        await trio.lowlevel.checkpoint()
        self.fetches += 1
        return [s for s in self._services if s.namespace == namespace]

    async def variable(self, namespace: str, path: str) -> Variable | None:
        await trio.lowlevel.checkpoint()
        self.fetches += 1
        found = self._variables.get((namespace, path))
        if found is None:
            return None
        items, modified = found
        return Variable(namespace=namespace, path=path, items=dict(items),
                        create_index=1, modify_index=modified)

    async def variable_list(self, namespace: str, prefix: str) -> list[VariableMetadata]:
        await trio.lowlevel.checkpoint()
        self.fetches += 1
        return [VariableMetadata(namespace=ns, path=p, modify_index=self._variables[(ns, p)][1])
                for (ns, p) in sorted(self._variables) if ns == namespace and p.startswith(prefix)]

    def index(self) -> int:
        return self._index

    async def wait_changed(self, after: int) -> int:
        while self._index <= after:
            await self._changed.wait()
        return self._index
