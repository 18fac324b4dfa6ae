"""/v1/search (prefix) and /v1/search/fuzzy: Nomad's search over jobs, evaluations,
allocations, nodes and namespaces.

Prefix search (`{Prefix, Context}`) answers `{Matches: {context: [ID…]}, Truncations: {context:
bool}}` with at most 20 IDs per context (Nomad's truncateLimit), a truncation flag when there
were more. `Context` is one context or `all`, which answers every context Nomad's open-source
server answers (empty ones as empty lists).

Fuzzy search (`{Text, Context}`) matches names case-insensitively anywhere in them, as Nomad's
server does: jobs by name, and their groups, tasks and raw_exec commands, with `Scope` the IDs
of their parents (`[namespace, job, group]`); allocations by name, nodes by name, namespaces;
evaluations by ID prefix. Nomad's defaults bound it: 20 objects examined per context
(`limit_query`), 100 matches answered (`limit_results`), text of at least 2 characters;
matches sorted by where the text occurs, then by length, then by name.

Jobs, allocations and evaluations are those of `?namespace=` (default `default`, `*` all).
Evaluations are read from the server's `evals` when it keeps them (the evaluations work adds
them); until then there are none to find.

What the token may see is Nomad's (nomad/search_endpoint.go): a context it may not read in
the namespace asked is left out of the answer (`filteredSearchContexts`), and naming one
explicitly is 403 (`sufficientSearchPerms`; fuzzy search skips that check for `*`, and
leaves every context in: its objects are filtered one by one); within a context, objects of
a namespace where the token may not read jobs are left out (`nsCapFilter`), and so are node
pools it may not read (`nodePoolCapFilter`).

Node pools are every pool the server knows (api/poolset.py `all_pools`: stored, built in,
and those its nodes registered in), read once per request when the context is answered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response

from yurt.runtime.api.authz import allowed, require
from yurt.runtime.api.context import Context
from yurt.runtime.api.namespaces import in_namespace, request_namespace
from yurt.runtime.api.poolset import all_pools
from yurt.runtime.api.request import ApiError, body_field, body_json, json_response
from yurt.runtime.server.acl.acl import Acl
from yurt.runtime.server.namespaces import ALL_NAMESPACES

TRUNCATE_LIMIT: Final = 20
FUZZY_LIMIT_QUERY: Final = 20
FUZZY_LIMIT_RESULTS: Final = 100
FUZZY_MIN_TERM: Final = 2

#: What `all` covers in Nomad's open-source prefix search.
PREFIX_CONTEXTS: Final = ("allocs", "deployment", "evals", "jobs", "nodes", "node_pools",
                          "namespaces", "plugins", "scaling_policy", "vars", "volumes",
                          "host_volumes")
FUZZY_CONTEXTS: Final = ("allocs", "jobs", "groups", "tasks", "commands", "images", "classes",
                         "services", "nodes", "node_pools", "namespaces", "plugins", "vars",
                         "evals", "deployment", "scaling_policy", "volumes", "host_volumes")


def _namespace_filter(request: Request) -> Any:
    """The request's namespace (`*`: all), among those the token may read jobs in (nomad/
    search_endpoint.go `nsCapFilter`)."""
    return lambda ns: in_namespace(request, ns)


#: Contexts read with read-job, a job's parts (fuzzy search) among them.
_JOB_CONTEXTS: Final = frozenset({"allocs", "jobs", "evals", "deployment", "groups", "tasks",
                                  "commands", "images", "classes", "services"})


def _context_rule(context: str, namespace: str, *, explicit: bool) -> Callable[[Acl], bool]:
    """nomad/search_endpoint.go: what `context` needs in `namespace`, when named explicitly
    (`sufficientSearchPerms`) or as part of `all` (`filteredSearchContexts`)."""

    def ns_op(*ops: str) -> Callable[[Acl], bool]:
        return lambda acl: acl.allow_namespace_operation_any_of(namespace, *ops)

    if context in _JOB_CONTEXTS:
        return ns_op("read-job")
    rules: dict[str, Callable[[Acl], bool]] = {
        "scaling_policy": ns_op("read-job") if explicit else ns_op(
            "list-scaling-policies", "read-job"),
        "namespaces": lambda acl: acl.allow_namespace(namespace),
        "vars": lambda acl: acl.allow_variable_search(namespace),
        "nodes": Acl.allow_node_read,
        "node_pools": Acl.allow_node_pool_search,
        "volumes": ns_op("csi-list-volume", "csi-read-volume", "list-jobs", "read-job"),
        "host_volumes": ns_op("host-volume-read"),
        "plugins": Acl.allow_plugin_list,
    }
    return rules.get(context, lambda acl: False)


def _permitted(request: Request, context: str, known: tuple[str, ...], *,
               fuzzy: bool = False) -> tuple[str, ...]:
    """The contexts to answer: 403 for one named that the token may not read, and those of
    `all` it may read (see the header)."""
    namespace = request_namespace(request)
    wanted = _contexts(context, known)
    if fuzzy and namespace == ALL_NAMESPACES:
        return wanted
    if context != "all":
        require(request, _context_rule(context, namespace, explicit=True))
    return tuple(c for c in wanted
                 if allowed(request, _context_rule(c, namespace, explicit=False)))


def _evals(ctx: Context) -> list[Any]:
    evals = getattr(ctx.server, "evals", None)  # the server keeps them once it can
    return list(evals.values()) if isinstance(evals, dict) else []


async def _pools(ctx: Context, wanted: Iterable[str]) -> list[str]:
    """The names of every known pool when `wanted` holds `node_pools`, sorted; else none."""
    if "node_pools" not in wanted:
        return []
    return sorted(p.name for p in await all_pools(ctx))


def _ids(ctx: Context, context: str, request: Request, pools: list[str]) -> Iterator[str]:
    """IDs of `context`, sorted as Nomad's indexes are (by ID); `pools`: `_pools`."""
    in_ns = _namespace_filter(request)
    server = ctx.server
    if context == "jobs":
        yield from sorted(j.id for j in server.jobs.values() if in_ns(j.namespace))
    elif context == "allocs":
        yield from sorted(a.id for a in server.allocs.values() if in_ns(a.namespace))
    elif context == "evals":
        yield from sorted(str(e.id) for e in _evals(ctx)
                          if in_ns(getattr(e, "namespace", "default")))
    elif context == "nodes":
        if allowed(request, Acl.allow_node_read):
            yield ctx.agent.node.id
    elif context == "node_pools":
        yield from (p for p in pools if _pool_visible(request, p))
    elif context == "namespaces" and allowed(request, _default_namespace):
        yield "default"
    elif context == "host_volumes":  # the embedded server's dynamic ones (hostvolumes.py)
        book = getattr(ctx.agent.server_state, "host_volumes", None)
        volumes = book.volumes.values() if book is not None else ()
        yield from sorted(v.id for v in volumes
                          if in_namespace(request, v.namespace, "host-volume-read"))


def _default_namespace(acl: Acl) -> bool:
    return acl.allow_namespace("default")


def _pool_visible(request: Request, pool: str) -> bool:
    return allowed(request, lambda acl: acl.allow_node_pool_operation(pool, "read"))


def _first(ids: Iterable[str], limit: int) -> tuple[list[str], bool]:
    out: list[str] = []
    for item in ids:
        if len(out) == limit:
            return out, True
        out.append(item)
    return out, False


def _contexts(context: str, known: tuple[str, ...]) -> tuple[str, ...]:
    if context == "all":
        return known
    if context not in known:
        raise ApiError(400, f"context must be one of {', '.join(known)} or all; got "
                            f"{context!r}")
    return (context,)


async def search(ctx: Context, request: Request) -> Response:
    body = await body_json(request)
    prefix = body_field(body, "Prefix", str, "")
    context = body_field(body, "Context", str, "")
    if not context:
        raise ApiError(400, "missing Context: one of " + ", ".join(PREFIX_CONTEXTS)
                            + " or all")
    matches: dict[str, list[str]] = {}
    truncations: dict[str, bool] = {}
    permitted = _permitted(request, context, PREFIX_CONTEXTS)
    pools = await _pools(ctx, permitted)
    for c in permitted:
        matches[c], truncations[c] = _first(
            (i for i in _ids(ctx, c, request, pools) if i.startswith(prefix)),
            TRUNCATE_LIMIT)
    return json_response({"Matches": matches, "Truncations": truncations,
                          "Index": ctx.server.visible_index, "LastContact": 0,
                          "KnownLeader": True, "NextToken": ""})


def _fuzzy_candidates(ctx: Context, context: str, request: Request, pools: list[str]
                      ) -> Iterator[tuple[str, str, list[str]]]:
    """(context, searchable name, scope) of each object examined for `context`."""
    in_ns = _namespace_filter(request)
    server = ctx.server
    if context == "jobs":  # a job yields its groups, tasks and commands too
        for job in sorted((j for j in server.jobs.values() if in_ns(j.namespace)),
                          key=lambda j: j.id):
            yield "jobs", job.name or job.id, [job.namespace, job.id]
            for group in job.task_groups:
                yield "groups", group.name, [job.namespace, job.id]
                for task in group.tasks:
                    yield "tasks", task.name, [job.namespace, job.id, group.name]
                    command = task.config.get("command")
                    if task.driver in ("exec", "raw_exec") and isinstance(command, str):
                        yield "commands", command, [job.namespace, job.id, group.name,
                                                    task.name]
    elif context == "allocs":
        for alloc in sorted((a for a in server.allocs.values() if in_ns(a.namespace)),
                            key=lambda a: a.id):
            yield "allocs", alloc.name, [alloc.namespace, alloc.id]
    elif context == "nodes":
        node = ctx.agent.node
        if allowed(request, Acl.allow_node_read):
            yield "nodes", node.name, [node.id]
    elif context == "node_pools":
        for pool in pools:
            if _pool_visible(request, pool):
                yield "node_pools", pool, [pool]
    elif context == "namespaces" and allowed(request, _default_namespace):
        yield "namespaces", "default", []


async def fuzzy(ctx: Context, request: Request) -> Response:
    body = await body_json(request)
    text = body_field(body, "Text", str, "")
    context = body_field(body, "Context", str, "") or "all"
    if len(text.encode()) < FUZZY_MIN_TERM:
        raise ApiError(400, f"fuzzy search query must be at least {FUZZY_MIN_TERM} "
                            f"characters, got {len(text.encode())}")
    lowered = text.lower()
    wanted = set(_permitted(request, context, FUZZY_CONTEXTS, fuzzy=True))
    pools = await _pools(ctx, wanted)
    # Nomad iterates jobs for jobs/groups/tasks/commands alike.
    roots = ["jobs"] if wanted & {"jobs", "groups", "tasks", "commands"} else []
    roots += [c for c in ("allocs", "nodes", "node_pools", "namespaces") if c in wanted]
    found: dict[str, list[tuple[int, str, list[str]]]] = {}
    truncations: dict[str, bool] = {}
    for root in roots:
        examined = 0
        for c, name, scope in _fuzzy_candidates(ctx, root, request, pools):
            if c == root:
                examined += 1
                if examined > FUZZY_LIMIT_QUERY:
                    truncations[root] = True
                    break
            where = name.lower().find(lowered)
            if where < 0 or c not in wanted:
                continue
            if len(found.setdefault(c, [])) >= FUZZY_LIMIT_RESULTS:
                truncations[c] = True
                continue
            found[c].append((where, name, scope))
    if "evals" in wanted:  # UUIDs: by prefix, as Nomad
        ids, cut = _first((i for i in _ids(ctx, "evals", request, pools) if i.startswith(text)),
                          FUZZY_LIMIT_RESULTS)
        if ids:
            found["evals"] = [(0, i, []) for i in ids]
        if cut:
            truncations["evals"] = True
    matches = {c: [{"ID": name, "Scope": scope} if scope else {"ID": name}
                   for _, name, scope in sorted(ms, key=lambda m: (m[0], len(m[1]), m[1]))]
               for c, ms in found.items()}
    return json_response({"Matches": matches, "Truncations": truncations,
                          "Index": ctx.server.visible_index, "LastContact": 0,
                          "KnownLeader": True, "NextToken": ""})
