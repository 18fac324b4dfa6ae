"""Nomad Variables as data: `Variable` and `VariableMetadata` (Nomad's `api.Variable` and
`api.VariableMetadata`), with Nomad's JSON names (`Namespace`, `Path`, `CreateIndex`, `Items`).

The server stores and seals them (`server/variables.py` holds the path and size rules,
check-and-set and the table); templates read them (`client/templating/`). Both sides share
these types and nothing else of each other.

Invariant: `VariableMetadata` never carries items; a `Variable`'s items are in clear, so one is
never stored as it is (the server seals the items before they reach a table).
"""

from __future__ import annotations

import msgspec


class VariableMetadata(msgspec.Struct, rename="pascal", kw_only=True):
    """What lists show: never the items."""

    namespace: str
    path: str
    create_index: int = 0
    modify_index: int = 0
    create_time: int = 0
    modify_time: int = 0


class Variable(VariableMetadata, kw_only=True):
    """Nomad's `api.Variable`: the metadata and the items in clear (never stored so)."""

    items: dict[str, str] | None = None

    def metadata(self) -> VariableMetadata:
        return VariableMetadata(namespace=self.namespace, path=self.path,
                                create_index=self.create_index,
                                modify_index=self.modify_index,
                                create_time=self.create_time, modify_time=self.modify_time)
