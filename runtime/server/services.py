"""The server's service catalogue: Nomad-provider service registrations, by ID.

What lives here: `ServiceCatalogue`, the registrations the client's service hooks write
(`upsert`, `deregister`), what the API and templates read (`registrations`, `listing`,
`by_alloc`), and `choose` (Nomad's rendezvous selection for `?choose=n|key`).

Nomad's state store rules (state_store_service_registration.go): an upsert keeps a
registration's CreateIndex and takes the write's index as ModifyIndex, and an upsert that
changes nothing writes nothing; deleting an unknown ID is "service registration not found".
Registrations are ordered by ID, as Nomad's memdb index iterates them.

Invariants:
- Every change is one index of the server's counter (`LocalServer.change`, or the commit
  that made an allocation terminal), persisted in the `services` table before it is visible,
  published on topic `Service` (`ServiceRegistration` / `ServiceDeregistration`, payload
  `{"Service": …}`), and followed by a fresh `changed` event (readers wait on the one they
  read before they looked).
- No registration outlives its allocation: `load` drops those of allocations the server
  does not know or knows are terminal (a crashed agent never deregistered them), and
  `drop_allocs` runs in the commit that makes an allocation terminal.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Final, Protocol, final

import msgspec
import trio

from yurt.runtime.eventstream import Event
from yurt.runtime.structs.service import ServiceRegistration

if TYPE_CHECKING:
    # Only a type: the API imports this module (for `choose`) and binds before the agent
    # loads SQLite (tests/test_import_weight.py).
    from yurt.runtime.server.state.sqlite import ServerStateStore

TOPIC: Final = "Service"
MALFORMED_CHOOSE: Final = "Parameter for choose must be in form '<number>|<key>'"

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(ServiceRegistration)


class _Server(Protocol):
    """What the catalogue needs of `LocalServer`."""

    store: ServerStateStore | None

    def change(self, *, capacity: bool = False) -> AbstractAsyncContextManager[int]: ...

    def publish(self, events: list[Event]) -> None: ...


def _event(kind: str, reg: ServiceRegistration) -> Event:
    return Event(topic=TOPIC, type=kind, key=reg.id, namespace=reg.namespace,
                 filter_keys=[reg.job_id, reg.service_name], payload={"Service": reg})


def _same(a: ServiceRegistration, b: ServiceRegistration) -> bool:
    return msgspec.structs.replace(a, create_index=0, modify_index=0) == \
        msgspec.structs.replace(b, create_index=0, modify_index=0)


@final
class ServiceCatalogue:
    def __init__(self, server: _Server) -> None:
        self._server = server
        self._regs: dict[str, ServiceRegistration] = {}
        self.changed = trio.Event()

    # ------------------------------------------------------------------ reads

    def registrations(self, namespace: str, service_name: str) -> list[ServiceRegistration]:
        """The registrations of one service, in Nomad's order (by ID)."""
        return sorted((r for r in self._regs.values()
                       if r.namespace == namespace and r.service_name == service_name),
                      key=lambda r: r.id)

    async def query(self, namespace: str, service_name: str | None
                    ) -> list[ServiceRegistration]:
        """Templates' read (`nomadService`, `nomadServices`; name None: every registration of
        the namespace, by service name then ID)."""
        await trio.lowlevel.checkpoint()
        if service_name is not None:
            return self.registrations(namespace, service_name)
        return sorted((r for r in self._regs.values() if r.namespace == namespace),
                      key=lambda r: (r.service_name, r.id))

    def by_alloc(self, alloc_id: str) -> list[ServiceRegistration]:
        return sorted((r for r in self._regs.values() if r.alloc_id == alloc_id),
                      key=lambda r: r.id)

    def listing(self, namespace: str | None) -> list[dict[str, object]]:
        """`/v1/services`: per namespace (sorted), each service with the union of its
        registrations' tags. `None` is every namespace."""
        tags: dict[str, dict[str, set[str]]] = {}
        for r in self._regs.values():
            if namespace is None or r.namespace == namespace:
                tags.setdefault(r.namespace, {}).setdefault(r.service_name, set()).update(
                    r.tags)
        return [{"Namespace": ns,
                 "Services": [{"ServiceName": name, "Tags": sorted(t)}
                              for name, t in sorted(by_name.items())]}
                for ns, by_name in sorted(tags.items())]

    async def wait_changed(self) -> None:
        """Until the next change of the catalogue."""
        await self.changed.wait()

    # ------------------------------------------------------------------ writes

    async def load(self, live_alloc_ids: Callable[[], set[str]]) -> None:
        """Take back the persisted registrations, dropping those of allocations that are
        gone or over (called after the server loaded its allocations)."""
        store = self._server.store
        if store is None:
            return
        regs = [_decoder.decode(v) for v in await store.load_services()]
        live = live_alloc_ids()
        stale: dict[str, tuple[str, bytes] | None] = {
            r.id: None for r in regs if r.alloc_id not in live}
        self._regs = {r.id: r for r in regs if r.id not in stale}
        if stale:
            await store.save_services(stale)

    async def upsert(self, regs: Iterable[ServiceRegistration]) -> int | None:
        """Register (or update) `regs`; the index of the change, None when nothing changed."""
        new = [r for r in regs if r.id not in self._regs or not _same(self._regs[r.id], r)]
        if not new:
            await trio.lowlevel.checkpoint()
            return None
        async with self._server.change() as index:
            written = []
            for reg in new:
                before = self._regs.get(reg.id)
                written.append(msgspec.structs.replace(
                    reg, create_index=before.create_index if before else index,
                    modify_index=index))
            await self._persist({r.id: r for r in written})
            for reg in written:
                self._regs[reg.id] = reg
            self._server.publish([_event("ServiceRegistration", r) for r in written])
            self._notify()
            return index

    async def deregister(self, ids: Iterable[str]) -> int | None:
        """Remove registrations by ID (those not there are skipped)."""
        gone = [i for i in ids if i in self._regs]
        if not gone:
            await trio.lowlevel.checkpoint()
            return None
        async with self._server.change() as index:
            self._server.publish(await self._remove(gone))
            return index

    async def delete(self, service_id: str) -> int:
        """`DELETE /v1/service/<name>/<id>`. Raises KeyError (Nomad's "service registration
        not found") for an unknown ID."""
        if service_id not in self._regs:
            raise KeyError(service_id)
        index = await self.deregister([service_id])
        if index is None:  # deregistered meanwhile
            raise KeyError(service_id)
        return index

    async def drop_allocs(self, alloc_ids: set[str]) -> list[Event]:
        """Inside a server commit that made `alloc_ids` terminal: remove their registrations
        and return the events to publish with the commit."""
        if not alloc_ids or not self._regs:
            return []
        gone = [r.id for r in self._regs.values() if r.alloc_id in alloc_ids]
        if not gone:
            return []
        return await self._remove(gone)

    async def _remove(self, ids: list[str]) -> list[Event]:
        await self._persist({i: None for i in ids})
        removed = [self._regs.pop(i) for i in ids]
        self._notify()
        return [_event("ServiceDeregistration", r) for r in removed]

    async def _persist(self, rows: dict[str, ServiceRegistration | None]) -> None:
        store = self._server.store
        if store is None:
            await trio.lowlevel.checkpoint()
            return
        await store.save_services({k: None if v is None else (v.alloc_id, _encoder.encode(v))
                                   for k, v in rows.items()})

    def _notify(self) -> None:
        self.changed.set()
        self.changed = trio.Event()


def choose(regs: list[ServiceRegistration], parameter: str) -> list[ServiceRegistration]:
    """Nomad's `?choose=<n>|<key>`: a stable subset by rendezvous hashing. Raises ValueError
    with Nomad's message on a malformed parameter."""
    count, sep, key = parameter.partition("|")
    try:
        n = int(count)
    except ValueError:
        raise ValueError(MALFORMED_CHOOSE) from None
    if not sep or not key:
        raise ValueError(MALFORMED_CHOOSE)

    def rank(r: ServiceRegistration) -> str:
        h = hashlib.sha256(r.port.to_bytes(8, "big", signed=False))
        for part in (r.alloc_id, r.id, r.namespace, r.address, r.service_name, *r.tags, key):
            h.update(part.encode())
        return h.hexdigest()

    return sorted(regs, key=rank)[:max(n, 0)]
