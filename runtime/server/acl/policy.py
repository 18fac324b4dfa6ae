"""ACL policies: Nomad's policy language, read from HCL or JSON into a checked `Policy`.

A policy is a set of rules, each granting capabilities on one kind of object (Nomad's
acl/policy.go `Policy`):

- `namespace "glob" { policy = "...", capabilities = [...], variables { path "glob" {...} } }`
  (`NamespacePolicy`, `VariablesPolicy`), `node_pool "glob" {...}`, `host_volume "glob" {...}`:
  labelled rules, any number of each; a label with `*` is a glob.
- `agent`, `node`, `operator`, `sentinel`, `quota`, `plugin`: one block each, `policy = ...`;
  `operator` and `sentinel` also take `capabilities`.

`policy = "deny|read|write|scale"` is shorthand for a list of capabilities and is expanded into
them here, exactly as Nomad's `expandNamespacePolicy`, `expandNodePoolPolicy`,
`expandHostVolumePolicy`, `expandOperatorPolicy`, `expandSentinelPolicy` do, then the implied
host-volume capabilities are added (`expandNamespaceCapabilities`) and a variables path that may
`read` may also `list` (`expandVariablesCapabilities`). The shorthand is kept too, since
`agent`, `node`, `operator`, `quota` and `plugin` checks read it rather than capabilities.

Invariants: `parse_policy` returns a fully validated, expanded, immutable `Policy`, or raises
`PolicyError` carrying Nomad's wording of the first problem and its line and column (0 where
the source gives none). Parsing is strict (Nomad's `PolicyParseStrict`): an unknown block or key,
or a second `agent`-like block, is an error. No I/O, no clock: a pure function of its text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, final

from yurt.runtime.errors import YurtError
from yurt.runtime.lib.sourcemap import (
    PathKey,
    Position,
    hcl_positions,
    hcl_trouble,
    json_positions,
    locate,
)

if TYPE_CHECKING:
    import lark
    from hcl2 import SerializationOptions

# Shorthand levels (acl/policy.go `PolicyDeny` …). `list` is valid only for `plugin`.
POLICY_DENY: Final = "deny"
POLICY_READ: Final = "read"
POLICY_LIST: Final = "list"
POLICY_WRITE: Final = "write"
POLICY_SCALE: Final = "scale"
#: acl/policy.go `isPolicyValid`: every rule but `plugin`.
_POLICIES: Final = frozenset({POLICY_DENY, POLICY_READ, POLICY_WRITE, POLICY_SCALE})
#: acl/policy.go `PluginPolicy.isValid`.
_PLUGIN_POLICIES: Final = frozenset({POLICY_DENY, POLICY_READ, POLICY_LIST, POLICY_WRITE})

#: Namespace capabilities, acl/policy.go `isNamespaceCapabilityValid`.
NAMESPACE_CAPABILITIES: Final = frozenset({
    "deny", "list-jobs", "parse-job", "read-job", "submit-job", "dispatch-job", "read-logs",
    "read-fs", "alloc-exec", "alloc-node-exec", "alloc-lifecycle",
    "csi-register-plugin", "csi-write-volume", "csi-read-volume", "csi-list-volume",
    "csi-mount-volume",
    "host-volume-create", "host-volume-register", "host-volume-read", "host-volume-write",
    "host-volume-delete",
    "list-scaling-policies", "read-scaling-policy", "read-job-scaling", "scale-job",
    "register-job", "revert-job", "deregister-job", "purge-job", "evaluate-job", "plan-job",
    "tag-job-version", "stable-job",
    "fail-deployment", "pause-deployment", "promote-deployment", "unblock-deployment",
    "cancel-deployment", "set-alloc-health-deployment",
    "gc-allocation", "pause-allocation", "force-periodic-job", "delete-service-registration",
    # Enterprise-only in Nomad, valid everywhere.
    "sentinel-override", "submit-recommendation",
})
#: acl/policy.go `isPathCapabilityValid`.
VARIABLE_CAPABILITIES: Final = frozenset({"write", "read", "list", "destroy", "deny"})
#: acl/policy.go `isNodePoolCapabilityValid`.
NODE_POOL_CAPABILITIES: Final = frozenset({"delete", "deny", "read", "write"})
#: acl/policy.go `isHostVolumeCapabilityValid`.
HOST_VOLUME_CAPABILITIES: Final = frozenset({"deny", "mount-readonly", "mount-readwrite"})
#: acl/policy.go `isOperatorCapabilityValid`.
OPERATOR_CAPABILITIES: Final = frozenset({"deny", "snapshot-save", "license-read",
                                          "keyring-rotate", "keyring-read", "keyring-delete"})
#: acl/policy.go `isSentinelCapabilityValid`.
SENTINEL_CAPABILITIES: Final = frozenset({"deny", "sentinel-read", "sentinel-submit",
                                          "sentinel-delete"})

_NAMESPACE_READ: Final = ("list-jobs", "parse-job", "read-job", "csi-list-volume",
                          "csi-read-volume", "read-job-scaling", "list-scaling-policies",
                          "read-scaling-policy", "host-volume-read")
#: acl/policy.go `expandNamespacePolicy`.
NAMESPACE_POLICY_CAPABILITIES: Final[dict[str, tuple[str, ...]]] = {
    POLICY_DENY: ("deny",),
    POLICY_READ: _NAMESPACE_READ,
    POLICY_WRITE: (*_NAMESPACE_READ, "scale-job", "submit-job", "dispatch-job", "read-logs",
                   "read-fs", "alloc-exec", "alloc-lifecycle", "csi-mount-volume",
                   "csi-write-volume", "submit-recommendation", "host-volume-create"),
    POLICY_SCALE: ("list-scaling-policies", "read-scaling-policy", "read-job-scaling",
                   "scale-job", "read-job", "submit-recommendation"),
}
#: acl/policy.go `expandNamespaceCapabilities`: what a host-volume capability implies.
_IMPLIED_NAMESPACE_CAPABILITIES: Final[dict[str, tuple[str, ...]]] = {
    "host-volume-write": ("host-volume-register", "host-volume-create", "host-volume-delete",
                          "host-volume-read"),
    "host-volume-register": ("host-volume-create", "host-volume-read"),
    "host-volume-create": ("host-volume-read",),
}
#: acl/policy.go `expandNodePoolPolicy` (`scale` grants nothing).
NODE_POOL_POLICY_CAPABILITIES: Final[dict[str, tuple[str, ...]]] = {
    POLICY_DENY: ("deny",), POLICY_READ: ("read",), POLICY_WRITE: ("delete", "read", "write")}
#: acl/policy.go `expandHostVolumePolicy`.
HOST_VOLUME_POLICY_CAPABILITIES: Final[dict[str, tuple[str, ...]]] = {
    POLICY_DENY: ("deny",), POLICY_READ: ("mount-readonly",),
    POLICY_WRITE: ("mount-readonly", "mount-readwrite")}
#: acl/policy.go `expandOperatorPolicy`.
OPERATOR_POLICY_CAPABILITIES: Final[dict[str, tuple[str, ...]]] = {
    POLICY_DENY: ("deny",), POLICY_READ: ("license-read", "keyring-read"),
    POLICY_WRITE: ("snapshot-save", "license-read", "keyring-rotate", "keyring-read",
                   "keyring-delete")}
#: acl/policy.go `expandSentinelPolicy`.
SENTINEL_POLICY_CAPABILITIES: Final[dict[str, tuple[str, ...]]] = {
    POLICY_DENY: ("deny",), POLICY_READ: ("sentinel-read",),
    POLICY_WRITE: ("sentinel-read", "sentinel-submit", "sentinel-delete")}

#: acl/policy.go `validNamespace`, `validVolume`, `validNodePool`.
_VALID_NAMESPACE: Final = re.compile(r"[a-zA-Z0-9*-]{1,128}")
_VALID_HOST_VOLUME: Final = _VALID_NAMESPACE
_VALID_NODE_POOL: Final = re.compile(r"[a-zA-Z0-9_*-]{1,128}")

#: Bounds on the HCL parse tree before anything recursive walks it.
_MAX_TREE_DEPTH: Final = 64
_MAX_TREE_NODES: Final = 200_000


@final
class PolicyError(YurtError):
    """A policy that cannot be used: `message` in Nomad's words, at `line`:`column` of the
    policy `name` (0 where unknown)."""

    def __init__(self, name: str, line: int, column: int, message: str) -> None:
        self.name, self.line, self.column, self.message = name, line, column, message
        where = name + (f":{line}" if line else "") + (f":{column}" if line and column else "")
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True)
class VariablesPathPolicy:
    """`path "glob" { capabilities = [...] }` inside a namespace's `variables` block."""

    path: str
    capabilities: tuple[str, ...]


@dataclass(frozen=True)
class NamespacePolicy:
    name: str
    policy: str
    capabilities: tuple[str, ...]
    #: None when the namespace has no `variables` block.
    variables: tuple[VariablesPathPolicy, ...] | None = None


@dataclass(frozen=True)
class NodePoolPolicy:
    name: str
    policy: str
    capabilities: tuple[str, ...]


@dataclass(frozen=True)
class HostVolumePolicy:
    name: str
    policy: str
    capabilities: tuple[str, ...]


@dataclass(frozen=True)
class CapabilityPolicy:
    """`operator` and `sentinel`: a shorthand level and capabilities."""

    policy: str
    capabilities: tuple[str, ...]


@final
@dataclass(frozen=True)
class Policy:
    """One parsed policy. A rule not written is None (or empty for the labelled kinds)."""

    namespaces: tuple[NamespacePolicy, ...] = ()
    node_pools: tuple[NodePoolPolicy, ...] = ()
    host_volumes: tuple[HostVolumePolicy, ...] = ()
    agent: str | None = None
    node: str | None = None
    operator: CapabilityPolicy | None = None
    sentinel: CapabilityPolicy | None = None
    quota: str | None = None
    plugin: str | None = None
    raw: str = ""

    def is_empty(self) -> bool:
        """acl/policy.go `Policy.IsEmpty`: no rule at all."""
        return not (self.namespaces or self.node_pools or self.host_volumes) and all(
            r is None for r in (self.agent, self.node, self.operator, self.sentinel,
                                self.quota, self.plugin))


def _unique(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def expand_variables_capabilities(caps: Iterable[str]) -> tuple[str, ...]:
    """acl/policy.go `expandVariablesCapabilities`: `deny` alone if present; `read` brings
    `list`."""
    found = _unique(caps)
    if "deny" in found:
        return ("deny",)
    if "read" in found and "list" not in found:
        return (*found, "list")
    return found


# --------------------------------------------------------------------------- reading


class _Fail(Exception):
    """A problem at a source path; turned into a `PolicyError` with a position at the top."""

    def __init__(self, path: PathKey, message: str) -> None:
        self.path, self.message = path, message


_SINGLE_RULES: Final = ("agent", "node", "operator", "sentinel", "quota", "plugin")
_LABELLED_RULES: Final = ("namespace", "node_pool", "host_volume")


@dataclass
class _Block:
    """A block as both formats give it: its label (None if unlabelled), its body, and the
    source path of the block and a function from a body key to that key's source path."""

    label: str | None
    body: dict[str, Any]
    path: PathKey
    key_path: Callable[[str], PathKey]


def _under(path: PathKey) -> Callable[[str], PathKey]:
    return lambda key: (*path, key)


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "object"
    return "null" if value is None else "string"


class _Reader:
    """Walks the decoded document. HCL (python-hcl2 with `explicit_blocks`) and JSON differ
    only in how blocks are spelled; `blocks()` hides that, and in how source paths look
    (structural for HCL, key paths for JSON), which `_Block.key_path` hides."""

    def __init__(self, is_json: bool) -> None:
        self.is_json = is_json

    def blocks(self, value: Any, key: str, path: PathKey, labelled: bool) -> list[_Block]:
        if self.is_json:
            return self._json_blocks(value, key, path, labelled)
        return self._hcl_blocks(value, key, path, labelled)

    def _hcl_blocks(self, value: Any, key: str, path: PathKey, labelled: bool) -> list[_Block]:
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise _Fail((*path, key), f"{key}: expected a block, got {_type_name(value)}")
        found = []
        for ordinal, item in enumerate(value):
            where = (*path, key, ordinal)
            if item.get("__is_block__") is True:
                label, body = None, item
            elif len(item) == 1:
                label, body = next(iter(item.items()))
                if not isinstance(body, dict) or body.get("__is_block__") is not True:
                    raise _Fail(where, f"{key}: a block takes at most one label")
            else:
                raise _Fail(where, f"{key}: expected a block, got object")
            if not labelled and label is not None:
                raise _Fail(where, f"{key}: the block takes no label, got {label!r}")
            body = {k: v for k, v in body.items() if k != "__is_block__"}
            found.append(_Block(label, body, where, _under(where)))
        return found

    def _json_blocks(self, value: Any, key: str, path: PathKey, labelled: bool
                     ) -> list[_Block]:
        # HCL's JSON form: `{"namespace": {"a": {...}, "b": {...}}}`, or a list of such
        # objects; an unlabelled block is an object, or a list of one.
        items = value if isinstance(value, list) else [value]
        found = []
        for index, item in enumerate(items):
            where = (*path, key, index) if isinstance(value, list) else (*path, key)
            if not isinstance(item, dict):
                raise _Fail(where, f"{key}: expected an object, got {_type_name(item)}")
            if not labelled:
                found.append(_Block(None, item, where, _under(where)))
                continue
            for label, body in item.items():
                at = (*where, label)
                if not isinstance(body, dict):
                    raise _Fail(at, f"{key} {label!r}: expected an object, got "
                                    f"{_type_name(body)}")
                found.append(_Block(label, body, at, _under(at)))
        return found


def _string(block: _Block, key: str) -> str:
    value = block.body.get(key, "")
    if not isinstance(value, str):
        raise _Fail(block.key_path(key), f"{key}: expected a string, got {_type_name(value)}")
    return value


def _strings(block: _Block, key: str) -> list[str]:
    value = block.body.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _Fail(block.key_path(key), f"{key}: expected a list of strings")
    return value


def _only_keys(block: _Block, allowed: Iterable[str]) -> None:
    for key in block.body:
        if key not in allowed:
            raise _Fail(block.key_path(key), f"Invalid or duplicate policy keys: {key}")


def _read_variables(reader: _Reader, ns_block: _Block, ns: str
                    ) -> tuple[VariablesPathPolicy, ...]:
    blocks = reader.blocks(ns_block.body["variables"], "variables", ns_block.path,
                           labelled=False)
    if len(blocks) > 1:
        raise _Fail(blocks[1].path, "Invalid or duplicate policy keys: variables")
    block = blocks[0]
    _only_keys(block, ("path",))
    paths = (reader.blocks(block.body["path"], "path", block.path, labelled=True)
             if "path" in block.body else [])
    if not paths:
        raise _Fail(block.path, f"Invalid variable policy: no variable paths in namespace {ns}")
    found = []
    for path in paths:
        _only_keys(path, ("capabilities",))
        if not path.label:
            raise _Fail(path.path, f"Invalid missing variable path in namespace {ns}")
        if path.label.startswith("/"):
            raise _Fail(path.path, f"Invalid variable path {json.dumps(path.label)} in "
                                   f"namespace {ns}: cannot start with a leading '/'")
        caps = _strings(path, "capabilities")
        for cap in caps:
            if cap not in VARIABLE_CAPABILITIES:
                raise _Fail(path.key_path("capabilities"),
                            f"Invalid variable capability '{cap}' in namespace {ns}")
        found.append(VariablesPathPolicy(path.label, expand_variables_capabilities(caps)))
    return tuple(found)


def _read_namespace(reader: _Reader, block: _Block) -> NamespacePolicy:
    _only_keys(block, ("policy", "capabilities", "variables"))
    name = block.label or ""
    if not _VALID_NAMESPACE.fullmatch(name):
        raise _Fail(block.path, f"Invalid namespace name: {json.dumps(name)}")
    policy, caps = _string(block, "policy"), _strings(block, "capabilities")
    if policy and policy not in _POLICIES:
        raise _Fail(block.key_path("policy"),
                    f"Invalid namespace policy: {json.dumps(policy)} in namespace {name}")
    for cap in caps:
        if cap not in NAMESPACE_CAPABILITIES:
            raise _Fail(block.key_path("capabilities"),
                        f"Invalid namespace capability '{cap}' in namespace {name}")
    expanded = [*caps, *NAMESPACE_POLICY_CAPABILITIES.get(policy, ())]
    expanded += [c for cap in expanded for c in _IMPLIED_NAMESPACE_CAPABILITIES.get(cap, ())]
    variables = (_read_variables(reader, block, name) if "variables" in block.body else None)
    return NamespacePolicy(name, policy, _unique(expanded), variables)


def _read_named(block: _Block, kind: str, valid_name: re.Pattern[str],
                valid_caps: frozenset[str], expand: dict[str, tuple[str, ...]]
                ) -> tuple[str, str, tuple[str, ...]]:
    """A `node_pool` or `host_volume` rule: (name, policy, expanded capabilities)."""
    _only_keys(block, ("policy", "capabilities"))
    name = block.label or ""
    if not valid_name.fullmatch(name):
        raise _Fail(block.path, f"Invalid {kind} name: {json.dumps(name)}")
    policy, caps = _string(block, "policy"), _strings(block, "capabilities")
    if policy and policy not in _POLICIES:
        raise _Fail(block.key_path("policy"),
                    f"Invalid {kind} policy: {json.dumps(policy)} for {json.dumps(name)}")
    for cap in caps:
        if cap not in valid_caps:
            raise _Fail(block.key_path("capabilities"),
                        f"Invalid {kind} capability '{cap}' for {json.dumps(name)}")
    return name, policy, _unique([*caps, *expand.get(policy, ())])


def _read_single(block: _Block, kind: str) -> str | CapabilityPolicy:
    """`agent`, `node`, `quota`, `plugin` (a level) or `operator`, `sentinel` (with
    capabilities)."""
    with_caps = kind in ("operator", "sentinel")
    _only_keys(block, ("policy", "capabilities") if with_caps else ("policy",))
    policy = _string(block, "policy")
    valid = _PLUGIN_POLICIES if kind == "plugin" else _POLICIES
    # Nomad lets `operator`/`sentinel` leave `policy` out when capabilities are given.
    if not (with_caps and policy == "") and policy not in valid:
        raise _Fail(block.key_path("policy") if "policy" in block.body else block.path,
                    f"Invalid {kind} policy: {json.dumps(policy)}")
    if not with_caps:
        return policy
    caps = _strings(block, "capabilities")
    valid_caps, expand = ((OPERATOR_CAPABILITIES, OPERATOR_POLICY_CAPABILITIES)
                          if kind == "operator"
                          else (SENTINEL_CAPABILITIES, SENTINEL_POLICY_CAPABILITIES))
    for cap in caps:
        if cap not in valid_caps:
            raise _Fail(block.key_path("capabilities"), f"Invalid {kind} capability '{cap}'")
    return CapabilityPolicy(policy, _unique([*caps, *expand.get(policy, ())]))


def _read_policy(doc: dict[str, Any], is_json: bool, raw: str) -> Policy:
    reader = _Reader(is_json)
    rules: dict[str, Any] = {}
    namespaces: list[NamespacePolicy] = []
    pools: list[NodePoolPolicy] = []
    volumes: list[HostVolumePolicy] = []
    for key, value in doc.items():
        if key == "namespace":
            namespaces += (_read_namespace(reader, b)
                           for b in reader.blocks(value, key, (), labelled=True))
        elif key == "node_pool":
            pools += (NodePoolPolicy(*_read_named(b, "node pool", _VALID_NODE_POOL,
                                                  NODE_POOL_CAPABILITIES,
                                                  NODE_POOL_POLICY_CAPABILITIES))
                      for b in reader.blocks(value, key, (), labelled=True))
        elif key == "host_volume":
            volumes += (HostVolumePolicy(*_read_named(b, "host volume", _VALID_HOST_VOLUME,
                                                      HOST_VOLUME_CAPABILITIES,
                                                      HOST_VOLUME_POLICY_CAPABILITIES))
                        for b in reader.blocks(value, key, (), labelled=True))
        elif key in _SINGLE_RULES:
            blocks = reader.blocks(value, key, (), labelled=False)
            if len(blocks) > 1:
                raise _Fail(blocks[1].path, f"Invalid or duplicate policy keys: {key}")
            rules[key] = _read_single(blocks[0], key)
        else:
            raise _Fail((key,), f"Invalid or duplicate policy keys: {key}")
    policy = Policy(tuple(namespaces), tuple(pools), tuple(volumes), raw=raw, **rules)
    if policy.is_empty():
        raise _Fail((), f"Invalid policy: {raw}")
    return policy


# --------------------------------------------------------------------------- the two formats


def _hcl_options() -> SerializationOptions:
    from hcl2 import SerializationOptions

    return SerializationOptions(with_comments=False, explicit_blocks=True,
                                preserve_heredocs=False, strip_string_quotes=True)


def _parse_hcl(text: str, name: str) -> tuple[dict[str, Any], dict[PathKey, Position]]:
    import hcl2
    import lark

    try:
        tree = hcl2.parses_to_tree(text + "\n")  # the grammar wants a final newline
    except lark.exceptions.UnexpectedInput as e:
        if isinstance(e, lark.exceptions.UnexpectedToken) and e.token.type != "$END":
            what = f"unexpected {str(e.token).strip() or e.token.type!r}"
        elif isinstance(e, lark.exceptions.UnexpectedCharacters):
            what = f"unexpected character {e.char!r}"
        else:
            what = "unexpected end of file"
        # The end of the file is on the text's last line, not on the newline added above.
        line = min(getattr(e, "line", 0) or 0, text.count("\n") + 1)
        raise PolicyError(name, line, getattr(e, "column", 0) or 0,
                          f"Failed to parse ACL Policy: {what}") from None
    trouble = hcl_trouble(tree, _MAX_TREE_DEPTH, _MAX_TREE_NODES)
    if trouble is not None:
        (line, column), why = trouble
        raise PolicyError(name, line, column, "Failed to parse ACL Policy: " + (
            "nested too deeply" if why == "depth" else "the policy is too large"))
    try:
        doc = hcl2.transform(tree, discard_comments=True).serialize(options=_hcl_options())
    except lark.exceptions.VisitError as e:
        meta = getattr(e.obj, "meta", None)
        raise PolicyError(name, getattr(meta, "line", 0) or 0, getattr(meta, "column", 0) or 0,
                          f"Failed to parse ACL Policy: {e.orig_exc}") from None
    if not isinstance(doc, dict):
        raise PolicyError(name, 1, 1, "Failed to parse ACL Policy: expected rules")
    _refuse_repeated_attributes(tree, name)
    return doc, hcl_positions(tree)


def _refuse_repeated_attributes(tree: lark.Tree[lark.Token], name: str) -> None:
    """python-hcl2 keeps the last of two same-named attributes in a body; Nomad refuses a
    repeated key, so do we, at the repetition."""
    from lark import Token, Tree

    for body in tree.iter_subtrees():
        if body.data != "body":
            continue
        seen: set[str] = set()
        for node in body.children:
            if not isinstance(node, Tree) or node.data != "attribute":
                continue
            key = "".join(str(t) for t in node.children[0].scan_values(
                lambda v: isinstance(v, Token))) if isinstance(node.children[0], Tree) \
                else str(node.children[0])
            if key in seen:
                raise PolicyError(name, node.meta.line, node.meta.column,
                                  f"Invalid or duplicate policy keys: {key}")
            seen.add(key)


def _parse_json(text: str, name: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise PolicyError(name, e.lineno, e.colno, f"Failed to parse ACL Policy: {e.msg}"
                          ) from None
    except (ValueError, RecursionError):
        raise PolicyError(name, 0, 0, "Failed to parse ACL Policy: unreadable JSON") from None
    assert isinstance(doc, dict)  # the text opens with `{`
    return doc


def parse_policy(text: str, *, name: str = "policy") -> Policy:
    """Nomad's acl/policy.go `Parse` in strict mode: the rules in `text` (HCL, or JSON when it
    opens with `{` as HCL's decoder decides), validated and expanded. `name` names the policy
    in errors. An empty text is the empty policy, as Nomad's hot path; any other text must
    hold at least one rule."""
    if text == "":
        return Policy()
    is_json = text.lstrip().startswith("{")
    if is_json:
        doc, index = _parse_json(text, name), None
    else:
        doc, index = _parse_hcl(text, name)
    try:
        return _read_policy(doc, is_json, text)
    except _Fail as fail:
        if index is None:  # JSON positions are worked out only for an error
            try:
                index = json_positions(text)
            except Exception:  # a JSON text lark cannot index: no position rather than none
                index = {}
        line, column = (0, 0)
        if fail.path:  # a block is indexed by its ordinal, an attribute by its name
            line, column = index.get(fail.path) or locate(index, (*fail.path, 0))
        raise PolicyError(name, line, column, fail.message) from None
