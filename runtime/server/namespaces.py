"""Nomad namespaces: the object, its validation, why a delete is refused, and its table.

A namespace scopes jobs, their allocations and variables. `default` always exists: it is not
stored until someone updates it (its description, its meta), and it can never be deleted. A
namespace holding a job that is not dead, an allocation that is not terminal, or any variable
cannot be deleted either; the refusal names each reason the way Nomad's multierror prints it,
so scripts that match Nomad's text keep working. Quotas are an Enterprise feature: `Quota` is
kept as given and enforces nothing.

A namespace's `NodePoolConfiguration` (Nomad Enterprise's node pool governance; Nomad's
open-source server refuses it, nomad/structs/structs_ce.go) is applied: a job registered
without a node pool takes the namespace's `Default` (`job_node_pool`), and a pool `Allowed`
does not match, or `Denied` does, is refused (`node_pool_refusal`); the namespace's default
pool is always allowed. `Allowed` and `Denied` globs match `*` as any run of characters.

The SQL helpers take an open connection and run inside the caller's transaction
(server/state/objects_sqlite.py owns the file, the thread and the index); nothing here does I/O
of its own.
"""

from __future__ import annotations

import json
import re
import sqlite3
from typing import Any, Final

import msgspec

DEFAULT_NAMESPACE: Final = "default"
#: `?namespace=*`: every namespace (lists only).
ALL_NAMESPACES: Final = "*"
_VALID_NAME: Final = re.compile(r"[a-zA-Z0-9-]{1,128}")
_NAME_REGEX_TEXT: Final = "^[a-zA-Z0-9-]{1,128}$"
MAX_DESCRIPTION: Final = 256


class NodePoolConfiguration(msgspec.Struct, rename="pascal"):
    """Nomad's `NamespaceNodePoolConfiguration`: `allowed` None allows every pool, an empty
    list only `default`; `denied` allows every pool but those it matches."""

    default: str = "default"
    allowed: list[str] | None = None
    denied: list[str] | None = None


class Namespace(msgspec.Struct, rename="pascal", kw_only=True):
    """Nomad's `api.Namespace`, the fields a single-region agent without Enterprise has."""

    name: str
    description: str = ""
    quota: str = ""
    capabilities: dict[str, Any] | None = None
    node_pool_configuration: NodePoolConfiguration = msgspec.field(
        default_factory=NodePoolConfiguration)
    vault_configuration: dict[str, Any] | None = None
    consul_configuration: dict[str, Any] | None = None
    meta: dict[str, str] | None = None
    create_index: int = 0
    modify_index: int = 0


def default_namespace() -> Namespace:
    """What Nomad's `default` namespace is until someone updates it."""
    return Namespace(name=DEFAULT_NAMESPACE, description="Default shared namespace",
                     create_index=1, modify_index=1)


def go_quote(s: str) -> str:
    """Go's `%q` for the text in messages (JSON escapes are the same for printable text)."""
    return json.dumps(s, ensure_ascii=False)


def multierror(errors: list[str]) -> str:
    """Go's `multierror` text, as Nomad's answers carry it."""
    noun = "error" if len(errors) == 1 else "errors"
    items = "\n".join(f"\t* {e}" for e in errors)
    return f"{len(errors)} {noun} occurred:\n{items}\n\n"


def validate(ns: Namespace) -> str | None:
    """Nomad's `Namespace.Validate` as the 400 text, or None when valid."""
    errors = []
    if not _VALID_NAME.fullmatch(ns.name):
        errors.append(f"invalid name {go_quote(ns.name)}. Must match regex {_NAME_REGEX_TEXT}")
    if len(ns.description) > MAX_DESCRIPTION:
        errors.append(f"description longer than {MAX_DESCRIPTION}")
    config = ns.node_pool_configuration
    if config.allowed is not None and config.denied is not None:
        errors.append("invalid node pool configuration: only one of Allowed and Denied may "
                      "be set")
    if not errors:
        return None
    return f"Invalid namespace {go_quote(ns.name)}: {multierror(errors)}"


def _glob(pattern: str) -> re.Pattern[str]:
    """A node pool glob (`*`: any run of characters, nothing else special)."""
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")))


def job_node_pool(ns: Namespace, given: str) -> str:
    """The pool a job registered in `ns` with node pool `given` ("": none) is in:
    nomad/job_endpoint_hook_node_pool_ce.go `jobNodePoolMutatingHook` sets `default`; with
    node pool governance, the namespace's default."""
    return given or ns.node_pool_configuration.default or "default"


def node_pool_refusal(ns: Namespace, job_id: str, pool: str) -> str | None:
    """Why a job `job_id` may not be in `pool` in namespace `ns`, or None (see the header)."""
    config = ns.node_pool_configuration
    if pool == (config.default or "default"):
        return None
    if config.allowed is not None:
        refused = not any(_glob(p).fullmatch(pool) for p in config.allowed)
    else:
        refused = any(_glob(p).fullmatch(pool) for p in config.denied or ())
    if not refused:
        return None
    return (f"job {go_quote(job_id)} is in node pool {go_quote(pool)}, which namespace "
            f"{go_quote(ns.name)} does not allow")


def delete_refusal(name: str, *, live_jobs: bool, live_allocs: bool, variables: bool
                   ) -> str | None:
    """Why Nomad refuses to delete namespace `name`, or None when it may go."""
    if name == DEFAULT_NAMESPACE:
        return "can not delete default namespace"
    quoted = go_quote(name)
    errors = []
    if live_jobs:
        errors.append(f"namespace {quoted} has non-terminal jobs in regions: [global]")
    if live_allocs:
        errors.append(f"namespace {quoted} has non-terminal allocations in regions: [global]")
    if variables:
        errors.append(f"namespace {quoted} has variables associated with it in regions: "
                      "[global]")
    return multierror(errors) if errors else None


# ---------------------------------------------------------------------- table

SCHEMA: Final = ("CREATE TABLE IF NOT EXISTS namespaces (name TEXT PRIMARY KEY, "
                 "value TEXT NOT NULL)")
_decode = msgspec.json.Decoder(Namespace)


def list_all(conn: sqlite3.Connection) -> list[Namespace]:
    """Every namespace, `default` included, sorted by name."""
    stored = {ns.name: ns for ns in (_decode.decode(v) for (v,) in
                                     conn.execute("SELECT value FROM namespaces"))}
    stored.setdefault(DEFAULT_NAMESPACE, default_namespace())
    return [stored[n] for n in sorted(stored)]


def get(conn: sqlite3.Connection, name: str) -> Namespace | None:
    row = conn.execute("SELECT value FROM namespaces WHERE name = ?", (name,)).fetchone()
    if row is not None:
        return _decode.decode(row[0])
    return default_namespace() if name == DEFAULT_NAMESPACE else None


def put(conn: sqlite3.Connection, ns: Namespace, index: int) -> Namespace:
    """Create or update `ns` at `index` (CreateIndex kept on update)."""
    existing = get(conn, ns.name)
    stored = msgspec.structs.replace(
        ns, create_index=existing.create_index if existing is not None else index,
        modify_index=index)
    conn.execute("INSERT INTO namespaces (name, value) VALUES (?, ?) ON CONFLICT (name) "
                 "DO UPDATE SET value = excluded.value",
                 (ns.name, msgspec.json.encode(stored).decode()))
    return stored


def delete(conn: sqlite3.Connection, name: str) -> None:
    conn.execute("DELETE FROM namespaces WHERE name = ?", (name,))
