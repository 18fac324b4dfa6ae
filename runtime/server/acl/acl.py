"""The compiled ACL: what a token's policies, merged, allow (Nomad's acl/acl.go `ACL`).

`compile_acl` merges parsed policies as Nomad's `NewACL` does:

- Labelled rules (namespaces, node pools, host volumes, variables paths) are kept per label,
  exact labels and globs (a label with `*`) in two tables. Two rules on the same label union
  their capabilities, except that `deny` wins: once a label's set holds `deny` it is `{deny}`
  and stays so. Variables paths are keyed by `namespace NUL path`; a path goes to the glob
  table when its namespace or its path holds a `*`.
- Single rules (`agent`, `node`, `operator`, `sentinel`, `quota`, `plugin`) keep the highest
  level, `deny` beating everything (`maxPrivilege`: deny > write > read > list; `scale` ranks
  nowhere and so grants nothing there).

A lookup takes the exact label's set when there is one, even an empty one (a `namespace "x"`
rule with only `variables` blocks shadows a `namespace "*"` rule); else the closest glob
(`findClosestMatchingGlob`): among globs matching the whole name (`*` matches any run of
characters, `/` and NUL included, as ryanuber/go-glob `Glob`), the one with the smallest
`len(name) - len(glob) + count("*")`, i.e. the one spelling out most of the name; on a tie,
the glob last in byte order, which is what Nomad's sort of the radix tree's walk yields.

Invariants: an `Acl` is immutable after `compile_acl`; management allows everything; an
operation not granted is denied. One deliberate difference from Nomad: for variables paths,
`deny` merged with another policy's capabilities on the same path stays `{deny}` (Nomad's
`NewACL` unions them there, letting the other policy's `read` through).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, final

from yurt.runtime.server.acl.policy import (
    POLICY_DENY,
    POLICY_LIST,
    POLICY_READ,
    POLICY_WRITE,
    Policy,
)

#: acl/acl.go `AllNamespacesSentinel`: `?namespace=*`.
ALL_NAMESPACES: Final = "*"
_RANK: Final = {POLICY_DENY: 4, POLICY_WRITE: 3, POLICY_READ: 2, POLICY_LIST: 1}
_DENY: Final = "deny"


def max_privilege(a: str, b: str) -> str:
    """acl/acl.go `maxPrivilege`: deny over write over read over list; anything else is ""."""
    best = max((a, b), key=lambda level: _RANK.get(level, 0))
    return best if best in _RANK else ""


def glob_match(pattern: str, name: str) -> bool:
    """ryanuber/go-glob `Glob`: `*` is the only wildcard and matches any run of characters."""
    parts = pattern.split("*")
    if len(parts) == 1:
        return pattern == name
    first, *middle, last = parts
    if not name.startswith(first):
        return False
    at = len(first)
    for part in middle:  # earliest placement leaves the most room for the rest
        found = name.find(part, at)
        if found < 0:
            return False
        at = found + len(part)
    return len(name) - at >= len(last) and name.endswith(last)


def closest_glob(globs: Iterable[str], name: str) -> str | None:
    """acl/acl.go `findClosestMatchingGlob`: the matching glob with the smallest difference
    `len(name) - len(glob) + count("*")`, ties to the last in byte order; None if none match."""
    best: tuple[int, str] | None = None
    for pattern in sorted(globs):
        if glob_match(pattern, name):
            difference = len(name) - len(pattern) + pattern.count("*")
            if best is None or difference <= best[0]:
                best = (difference, pattern)
    return None if best is None else best[1]


def _lookup(exact: Mapping[str, frozenset[str]], globs: Mapping[str, frozenset[str]],
            name: str) -> frozenset[str] | None:
    found = exact.get(name)
    if found is not None:
        return found
    pattern = closest_glob(globs, name)
    return None if pattern is None else globs[pattern]


def _merge(table: dict[str, set[str]], label: str, caps: Iterable[str]) -> None:
    """Union `caps` into `table[label]`, deny winning (acl/acl.go `NewACL`'s labelled loops).
    The label is entered even when `caps` is empty."""
    _merge_into(table.setdefault(label, set()), caps)


def _merge_into(current: set[str], caps: Iterable[str]) -> None:
    if _DENY in current:
        return
    caps = list(caps)
    if _DENY in caps:
        current.clear()
        current.add(_DENY)
    else:
        current.update(caps)


def _freeze(table: dict[str, set[str]]) -> dict[str, frozenset[str]]:
    return {k: frozenset(v) for k, v in table.items()}


@dataclass(frozen=True)
class AclClaim:
    """acl/acl.go `ACLClaim`: a workload identity, which may always read and list its own
    job's variables (`nomad/jobs/<job>[/<group>[/<task>]]`)."""

    namespace: str
    job: str
    group: str
    task: str


_WORKLOAD_VARIABLES: Final = frozenset({"read", "list"})


@final
@dataclass(frozen=True)
class Acl:
    """A token's merged policies. Built by `compile_acl`; every method is a pure check."""

    management: bool = False
    namespaces: Mapping[str, frozenset[str]] = field(default_factory=dict)
    wildcard_namespaces: Mapping[str, frozenset[str]] = field(default_factory=dict)
    node_pools: Mapping[str, frozenset[str]] = field(default_factory=dict)
    wildcard_node_pools: Mapping[str, frozenset[str]] = field(default_factory=dict)
    host_volumes: Mapping[str, frozenset[str]] = field(default_factory=dict)
    wildcard_host_volumes: Mapping[str, frozenset[str]] = field(default_factory=dict)
    #: keyed by `namespace + "\\0" + path`.
    variables: Mapping[str, frozenset[str]] = field(default_factory=dict)
    wildcard_variables: Mapping[str, frozenset[str]] = field(default_factory=dict)
    agent: str = ""
    node: str = ""
    operator: str = ""
    sentinel: str = ""
    quota: str = ""
    plugin: str = ""
    operator_capabilities: frozenset[str] = frozenset()
    sentinel_capabilities: frozenset[str] = frozenset()

    def is_management(self) -> bool:
        return self.management

    # ---------------------------------------------------------------- namespaces

    def namespace_capabilities(self, ns: str) -> frozenset[str] | None:
        """acl/acl.go `matchingNamespaceCapabilitySet`: None when no rule covers `ns`."""
        return _lookup(self.namespaces, self.wildcard_namespaces, ns)

    def _any_namespace(self, test: Callable[[frozenset[str]], bool]) -> bool:
        return any(test(caps) for table in (self.namespaces, self.wildcard_namespaces)
                   for caps in table.values())

    def allow_namespace_operation(self, ns: str, op: str) -> bool:
        """acl/acl.go `AllowNamespaceOperation`. `ns == "*"` asks whether any namespace rule
        grants `op`."""
        if self.management:
            return True
        if ns == ALL_NAMESPACES and self._any_namespace(lambda caps: op in caps):
            return True
        caps = self.namespace_capabilities(ns)
        return caps is not None and op in caps

    def allow_namespace_operation_any_of(self, ns: str, *ops: str) -> bool:
        """acl/acl.go `AllowNsOpAnyOf`."""
        return any(self.allow_namespace_operation(ns, op) for op in ops)

    def allow_namespace(self, ns: str) -> bool:
        """acl/acl.go `AllowNamespace`: some capability, and not deny."""
        if self.management:
            return True

        def usable(caps: frozenset[str]) -> bool:
            return bool(caps) and _DENY not in caps

        if ns == ALL_NAMESPACES and self._any_namespace(usable):
            return True
        caps = self.namespace_capabilities(ns)
        return caps is not None and usable(caps)

    # ---------------------------------------------------------------- variables

    def variable_capabilities(self, ns: str, path: str, claim: AclClaim | None = None
                              ) -> frozenset[str] | None:
        """acl/acl.go `matchingVariablesCapabilitySet`."""
        key = f"{ns}\x00{path}"
        found = self.variables.get(key)
        if found is not None:
            return found
        if claim is not None and ns == claim.namespace:
            own = ("nomad/jobs", f"nomad/jobs/{claim.job}",
                   f"nomad/jobs/{claim.job}/{claim.group}",
                   f"nomad/jobs/{claim.job}/{claim.group}/{claim.task}")
            if path in own:
                return _WORKLOAD_VARIABLES
        pattern = closest_glob(self.wildcard_variables, key)
        return None if pattern is None else self.wildcard_variables[pattern]

    def allow_variable_operation(self, ns: str, path: str, op: str,
                                 claim: AclClaim | None = None) -> bool:
        """acl/acl.go `AllowVariableOperation`; `op` is one of write, read, list, destroy."""
        if self.management:
            return True
        caps = self.variable_capabilities(ns, path, claim)
        return caps is not None and op in caps

    def allow_variable_search(self, ns: str) -> bool:
        """acl/acl.go `AllowVariableSearch`: any variables rule whose key starts with `ns`."""
        if self.management:
            return True
        keys = (*self.variables, *self.wildcard_variables)
        if ns == ALL_NAMESPACES:
            return bool(keys)
        return any(key.startswith(ns) for key in keys)

    # ---------------------------------------------------------------- node pools, volumes

    def allow_node_pool_operation(self, pool: str, op: str) -> bool:
        """acl/acl.go `AllowNodePoolOperation`."""
        if self.management:
            return True
        caps = _lookup(self.node_pools, self.wildcard_node_pools, pool)
        return caps is not None and op in caps

    def allow_node_pool(self, pool: str) -> bool:
        """acl/acl.go `AllowNodePool`."""
        if self.management:
            return True
        caps = _lookup(self.node_pools, self.wildcard_node_pools, pool)
        return bool(caps) and _DENY not in (caps or ())

    def allow_node_pool_search(self) -> bool:
        """acl/acl.go `AllowNodePoolSearch`: some node pool rule that is not deny."""
        if self.management:
            return True
        return any(_DENY not in caps for table in (self.node_pools, self.wildcard_node_pools)
                   for caps in table.values())

    def allow_host_volume_operation(self, name: str, op: str) -> bool:
        """acl/acl.go `AllowHostVolumeOperation`; `op` is mount-readonly or mount-readwrite."""
        if self.management:
            return True
        caps = _lookup(self.host_volumes, self.wildcard_host_volumes, name)
        return caps is not None and op in caps

    def allow_host_volume(self, name: str) -> bool:
        """acl/acl.go `AllowHostVolume`."""
        if self.management:
            return True
        caps = _lookup(self.host_volumes, self.wildcard_host_volumes, name)
        return bool(caps) and _DENY not in (caps or ())

    # ---------------------------------------------------------------- single rules

    def allow_agent_read(self) -> bool:
        return self.management or self.agent in (POLICY_WRITE, POLICY_READ)

    def allow_agent_write(self) -> bool:
        return self.management or self.agent == POLICY_WRITE

    def allow_node_read(self) -> bool:
        return self.management or self.node in (POLICY_WRITE, POLICY_READ)

    def allow_node_write(self) -> bool:
        return self.management or self.node == POLICY_WRITE

    def allow_operator_read(self) -> bool:
        return self.management or self.operator in (POLICY_WRITE, POLICY_READ)

    def allow_operator_write(self) -> bool:
        return self.management or self.operator == POLICY_WRITE

    def allow_operator_operation(self, op: str) -> bool:
        """acl/acl.go `AllowOperatorOperation`: write allows all, else the capability."""
        return (self.management or self.operator == POLICY_WRITE
                or op in self.operator_capabilities)

    def allow_sentinel_operation(self, op: str) -> bool:
        """acl/acl.go `AllowSentinelOperation`."""
        return (self.management or self.sentinel == POLICY_WRITE
                or op in self.sentinel_capabilities)

    def allow_quota_read(self) -> bool:
        return self.management or self.quota in (POLICY_WRITE, POLICY_READ)

    def allow_quota_write(self) -> bool:
        return self.management or self.quota == POLICY_WRITE

    def allow_plugin_read(self) -> bool:
        """acl/acl.go `AllowPluginRead`: only `read` (Nomad's `write` does not include it)."""
        return self.management or self.plugin == POLICY_READ

    def allow_plugin_list(self) -> bool:
        """acl/acl.go `AllowPluginList`: `read` or `list`."""
        return self.management or self.plugin in (POLICY_READ, POLICY_LIST)


#: acl/acl.go `ManagementACL`.
MANAGEMENT_ACL: Final = Acl(management=True)


def compile_acl(policies: Iterable[Policy], *, management: bool = False) -> Acl:
    """acl/acl.go `NewACL`: one `Acl` from a token's policies (see the module header)."""
    if management:
        return MANAGEMENT_ACL
    ns: dict[str, set[str]] = {}
    wns: dict[str, set[str]] = {}
    pools: dict[str, set[str]] = {}
    wpools: dict[str, set[str]] = {}
    vols: dict[str, set[str]] = {}
    wvols: dict[str, set[str]] = {}
    var: dict[str, set[str]] = {}
    wvar: dict[str, set[str]] = {}
    levels = dict.fromkeys(("agent", "node", "operator", "sentinel", "quota", "plugin"), "")
    operator_caps: set[str] = set()
    sentinel_caps: set[str] = set()
    for policy in policies:
        for rule in policy.namespaces:
            is_glob = "*" in rule.name
            # Variables paths are recorded before the namespace's own deny check, as Nomad.
            for path in rule.variables or ():
                table = wvar if is_glob or "*" in path.path else var
                _merge(table, f"{rule.name}\x00{path.path}", path.capabilities)
            _merge(wns if is_glob else ns, rule.name, rule.capabilities)
        for pool in policy.node_pools:
            _merge(wpools if "*" in pool.name else pools, pool.name, pool.capabilities)
        for volume in policy.host_volumes:
            _merge(wvols if "*" in volume.name else vols, volume.name, volume.capabilities)
        for kind in ("agent", "node", "quota", "plugin"):
            level = getattr(policy, kind)
            if level is not None:
                levels[kind] = max_privilege(levels[kind], level)
        for kind, caps in (("operator", operator_caps), ("sentinel", sentinel_caps)):
            rule_caps = getattr(policy, kind)
            if rule_caps is not None:
                levels[kind] = max_privilege(levels[kind], rule_caps.policy)
                _merge_into(caps, rule_caps.capabilities)
    return Acl(False, _freeze(ns), _freeze(wns), _freeze(pools), _freeze(wpools),
               _freeze(vols), _freeze(wvols), _freeze(var), _freeze(wvar),
               operator_capabilities=frozenset(operator_caps),
               sentinel_capabilities=frozenset(sentinel_caps), **levels)
