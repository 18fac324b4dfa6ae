"""The rooms' arrows hold: every import of yurt's own modules points the way the layers allow.

The contract (runtime/ARCHITECTURE.md, "Which way imports point"): each room on the left may
import only the rooms on its right. Every import counts, at module level, inside functions and
under `if TYPE_CHECKING:` alike, since a type-only import is still a dependency a reader must
follow. Modules are found with `ast`, so nothing is imported to check them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
R = "yurt.runtime."
BASE = ("yurt.runtime.errors", "yurt.runtime.lib", "yurt.runtime.structs")
#: room (longest prefix wins) -> what it may import besides itself and BASE.
RULES: dict[str, tuple[str, ...]] = {
    R + "lib": (),
    R + "structs": (),
    R + "errors": (),
    R + "eventstream": (),
    "yurt.store": (),
    R + "jobspec": (R + "client.drivers.configs",),
    R + "gotemplate": (),
    R + "server.scheduler": (),
    R + "server": (R + "eventstream", "yurt.store.sqlite_file"),
    R + "client": (R + "eventstream", "yurt.store", "yurt.hooks.base", R + "jobspec",
                   R + "gotemplate"),
    "yurt.hooks": (R + "client", R + "eventstream", "yurt.store", R + "gotemplate"),
    R + "api": (R + "client", R + "server", R + "jobspec", R + "eventstream", R + "gotemplate",
                R + "ui"),
    R + "ui": (),
    R + "agent": ("yurt",),
    R + "sim": ("yurt",),
    R + "cli": (R + "jobspec", R + "gotemplate"),
}
#: Nomad's `initRunnerHooks`: the one client module that builds the hooks, so imports them.
HOOK_FACTORY = R + "client.allocrunner.builtin_hooks"
#: The CLI commands that start an agent, a server or simulated nodes in this process.
CLI_ROOTS = {R + "cli.agent", R + "cli.agent_options", R + "cli.server", R + "cli.run",
             R + "cli.nodesim", R + "cli.sim"}


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for top in ("runtime", "hooks", "store"):
        for path in (ROOT / top).rglob("*.py"):
            parts = path.relative_to(ROOT / top).with_suffix("").parts
            found[".".join(("yurt", top, *(p for p in parts if p != "__init__")))] = path
    return found


def room(name: str) -> str:
    return max((r for r in RULES if name == r or name.startswith(r + ".")), key=len)


def imports(name: str, path: Path, known: dict[str, Path]) -> set[tuple[int, str]]:
    """(line, module) for every import in `path`; `from pkg import mod` names `pkg.mod`."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[tuple[int, str]] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {(node.lineno, a.name) for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            found |= {(node.lineno, f"{base}.{a.name}" if f"{base}.{a.name}" in known else base)
                      for a in node.names}
    return found


def allowed(importer: str, target: str) -> bool:
    if target == "trio" or target.startswith("trio."):
        return not room(importer).startswith(R + "server.scheduler")
    if not target.startswith("yurt.") or target == "yurt.runtime":  # the root: __version__
        return True
    own = room(importer)
    base = (R + "errors",) if own == R + "lib" else BASE  # lib sits below structs
    permitted = (own, *base, *RULES[own])
    if importer == HOOK_FACTORY:
        permitted += ("yurt.hooks",)
    if own == R + "cli" and importer in CLI_ROOTS:
        permitted += (R + "agent", R + "sim")
    return any(target == p or target.startswith(p + ".") for p in permitted)


def wrong_way() -> list[str]:
    known = modules()
    return sorted(f"{path.relative_to(ROOT)}:{line}: {name} -> {target}"
                  for name, path in known.items()
                  for line, target in imports(name, path, known) if not allowed(name, target))


def cycles_across_packages() -> list[list[str]]:
    """Strongly connected components of the import graph that span more than one package."""
    known = modules()
    graph = {name: {t for _, t in imports(name, path, known) if t in known and t != name
                    and not name.startswith(t + ".")}  # a package's own __init__ is no cycle
             for name, path in known.items()}
    order: list[str] = []
    seen: set[str] = set()
    for start in graph:  # Kosaraju: finishing order on the graph, then components on its reverse
        stack = [(start, iter(sorted(graph[start])))] if start not in seen else []
        seen.add(start)
        while stack:
            node, todo = stack[-1]
            nxt = next((t for t in todo if t not in seen), None)
            if nxt is None:
                order.append(node)
                stack.pop()
            else:
                seen.add(nxt)
                stack.append((nxt, iter(sorted(graph[nxt]))))
    reverse: dict[str, set[str]] = {name: set() for name in graph}
    for name, targets in graph.items():
        for t in targets:
            reverse[t].add(name)
    found: list[list[str]] = []
    assigned: set[str] = set()
    for node in reversed(order):
        if node in assigned:
            continue
        component, todo = [], [node]
        assigned.add(node)
        while todo:
            current = todo.pop()
            component.append(current)
            todo += [r for r in reverse[current] if r not in assigned]
            assigned |= set(reverse[current])
        packages = {known[m].parent for m in component}
        if len(packages) > 1:
            found.append(sorted(component))
    return found


def test_every_import_points_the_way_the_layers_allow() -> None:
    assert wrong_way() == []


def test_no_import_cycle_spans_two_packages() -> None:
    assert cycles_across_packages() == []


@pytest.mark.parametrize(("importer", "target", "ok"), [
    ("yurt.runtime.client.gc", "yurt.runtime.server.local", False),
    ("yurt.runtime.server.scheduler.generic", "trio", False),
    ("yurt.runtime.server.local", "trio", True),
    ("yurt.runtime.server.scheduler.generic", "yurt.runtime.server.local", False),
    ("yurt.runtime.server.scheduler.system", "yurt.runtime.server.scheduler.plan", True),
    ("yurt.runtime.cli.jobs", "yurt.runtime.agent.agent", False),
    ("yurt.runtime.cli.agent", "yurt.runtime.agent.agent", True),
    ("yurt.hooks.template", "yurt.runtime.client.templating.render", True),
    ("yurt.runtime.lib.durations", "yurt.runtime.structs", False),
    ("yurt.runtime.client.allocrunner.runner", "yurt.hooks.logmon", False),
    ("yurt.runtime.client.allocrunner.builtin_hooks", "yurt.hooks.logmon", True),
])
def test_the_rules_themselves(importer: str, target: str, ok: bool) -> None:
    assert allowed(importer, target) is ok
