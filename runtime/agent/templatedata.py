"""`TemplateData` over the agent's own server: Nomad Variables from its object store (the
same table `/v1/var` writes, agent.py `Agent.object_store`), services from the catalogue when
one is plugged in, and the server's one change counter (`LocalServer.visible_index`, woken
through `changed`).

The service catalogue is another part of the agent: `catalogue(namespace, name)` is any
callable that lists registrations (name None: all of the namespace). Until one is given,
templates see no services (an empty list, which is what Nomad answers for an unknown name).

Every change the server numbers wakes the watchers; the renderer compares what it read, so a
change to something else costs a fetch. Reads are cached per server index: every write takes a
new index, so the tasks woken by one change that read the same variable share one read
(through the object store's worker thread) instead of one each.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, final

import trio

from yurt.runtime.structs.service import ServiceRegistration
from yurt.runtime.structs.variables import Variable, VariableMetadata

if TYPE_CHECKING:
    from yurt.runtime.server.state.objects_sqlite import Objects

Catalogue = Callable[[str, str | None], Awaitable[list[ServiceRegistration]]]


class IndexedServer(Protocol):
    """The server's change counter and the event its changes set."""

    @property
    def visible_index(self) -> int: ...
    @property
    def changed(self) -> trio.Event: ...


class VariableSource(Protocol):
    """What templates read of the agent (agent.py `Agent`): its server's index, its store."""

    @property
    def server(self) -> IndexedServer: ...
    async def object_store(self) -> Objects: ...


@final
class AgentTemplateData:
    def __init__(self, agent: VariableSource, catalogue: Catalogue | None = None) -> None:
        self._agent = agent
        self.catalogue = catalogue
        self._cache_index = -1
        self._cache: dict[tuple[str, str, str], Any] = {}

    async def _cached(self, key: tuple[str, str, str], read: Callable[[], Awaitable[Any]]
                      ) -> Any:
        index = self.index()  # taken before the read: a later write is a later index
        if index != self._cache_index:
            self._cache_index, self._cache = index, {}
        if key in self._cache:
            await trio.lowlevel.checkpoint()
            return self._cache[key]
        value = await read()
        if self._cache_index == index:
            self._cache[key] = value
        return value

    async def services(self, namespace: str, name: str) -> list[ServiceRegistration]:
        if self.catalogue is None:
            return []
        return await self.catalogue(namespace, name)

    async def all_services(self, namespace: str) -> list[ServiceRegistration]:
        if self.catalogue is None:
            return []
        return await self.catalogue(namespace, None)

    async def variable(self, namespace: str, path: str) -> Variable | None:
        async def read() -> Variable | None:
            return await (await self._agent.object_store()).variable(namespace, path)

        found: Variable | None = await self._cached(("var", namespace, path), read)
        return found

    async def variable_list(self, namespace: str, prefix: str) -> list[VariableMetadata]:
        async def read() -> list[VariableMetadata]:
            return await (await self._agent.object_store()).variables(namespace, prefix)

        found: list[VariableMetadata] = await self._cached(("list", namespace, prefix), read)
        return list(found)

    def index(self) -> int:
        return self._agent.server.visible_index

    async def wait_changed(self, after: int) -> int:
        server = self._agent.server
        while server.visible_index <= after:
            await server.changed.wait()
        return server.visible_index
