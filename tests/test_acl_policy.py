"""Nomad's ACL policy language, read by `yurt.runtime.server.acl.policy.parse_policy`.

Theory. A policy (Nomad's acl/policy.go `Policy`) is a list of rules, each granting
capabilities on one kind of object: labelled rules (`namespace "glob"`, `node_pool "glob"`,
`host_volume "glob"`, any number of each) and single rules (`agent`, `node`, `operator`,
`sentinel`, `quota`, `plugin`, one each). `policy = "deny|read|write|scale"` is shorthand,
expanded at parse time into capabilities by Nomad's `expandNamespacePolicy` and its siblings,
after which `expandNamespaceCapabilities` adds what host-volume capabilities imply and
`expandVariablesCapabilities` lets a path that may `read` also `list` (and makes `deny` stand
alone). Parsing is strict (`Parse(rules, PolicyParseStrict)`): unknown or repeated keys are
errors, worded as Nomad words them, and every error carries the line of the offending text.
The same rules written in HCL's JSON form parse to the same `Policy`.

Layer 0: pure functions, no I/O, no clock. The cases are our own, pinned to the behaviours
Nomad's acl/policy_test.go `TestParse` checks.
"""

from __future__ import annotations

import json

import pytest

from yurt.runtime.server.acl.policy import (
    HOST_VOLUME_POLICY_CAPABILITIES,
    NAMESPACE_CAPABILITIES,
    NAMESPACE_POLICY_CAPABILITIES,
    CapabilityPolicy,
    HostVolumePolicy,
    NamespacePolicy,
    NodePoolPolicy,
    Policy,
    PolicyError,
    VariablesPathPolicy,
    expand_variables_capabilities,
    parse_policy,
)

READ = ("list-jobs", "parse-job", "read-job", "csi-list-volume", "csi-read-volume",
        "read-job-scaling", "list-scaling-policies", "read-scaling-policy", "host-volume-read")
WRITE = (*READ, "scale-job", "submit-job", "dispatch-job", "read-logs", "read-fs",
         "alloc-exec", "alloc-lifecycle", "csi-mount-volume", "csi-write-volume",
         "submit-recommendation", "host-volume-create")
SCALE = ("list-scaling-policies", "read-scaling-policy", "read-job-scaling", "scale-job",
         "read-job", "submit-recommendation")


def without_raw(policy: Policy) -> Policy:
    return Policy(policy.namespaces, policy.node_pools, policy.host_volumes, policy.agent,
                  policy.node, policy.operator, policy.sentinel, policy.quota, policy.plugin)


# --------------------------------------------------------------------------- expansion tables


@pytest.mark.parametrize(("level", "expected"), [
    ("deny", ("deny",)), ("read", READ), ("write", WRITE), ("scale", SCALE)])
def test_namespace_policy_expands_as_nomad(level: str, expected: tuple[str, ...]) -> None:
    policy = parse_policy(f'namespace "default" {{ policy = "{level}" }}')
    assert policy.namespaces == (NamespacePolicy("default", level, expected),)
    assert NAMESPACE_POLICY_CAPABILITIES[level] == expected


def test_shorthand_adds_to_explicit_capabilities_in_nomad_order() -> None:
    policy = parse_policy('namespace "default" {\n  policy = "read"\n'
                          '  capabilities = ["submit-job", "read-job"]\n}')
    assert policy.namespaces[0].capabilities == ("submit-job", "read-job", *[
        c for c in READ if c != "read-job"])


@pytest.mark.parametrize(("given", "implied"), [
    ("host-volume-write", ("host-volume-register", "host-volume-create", "host-volume-delete",
                           "host-volume-read")),
    ("host-volume-register", ("host-volume-create", "host-volume-read")),
    ("host-volume-create", ("host-volume-read",)),
    ("host-volume-read", ()),
    ("host-volume-delete", ()),
])
def test_host_volume_capabilities_imply_others(given: str, implied: tuple[str, ...]) -> None:
    policy = parse_policy(f'namespace "ns" {{ capabilities = ["{given}"] }}')
    assert policy.namespaces[0].capabilities == (given, *implied)


def test_every_nomad_namespace_capability_is_accepted() -> None:
    caps = sorted(NAMESPACE_CAPABILITIES)
    assert len(caps) == 45
    policy = parse_policy(f'namespace "ns" {{ capabilities = {json.dumps(caps)} }}')
    assert set(policy.namespaces[0].capabilities) == set(caps)


@pytest.mark.parametrize(("caps", "expected"), [
    (["read"], ("read", "list")),
    (["read", "list"], ("read", "list")),
    (["write", "read"], ("write", "read", "list")),
    (["list"], ("list",)),
    (["destroy", "deny", "read"], ("deny",)),
    ([], ()),
])
def test_variables_capabilities_expand_as_nomad(caps: list[str],
                                                expected: tuple[str, ...]) -> None:
    assert expand_variables_capabilities(caps) == expected
    text = (f'namespace "ns" {{ variables {{ path "a/b" {{ capabilities = {json.dumps(caps)} }}'
            " } }")
    assert parse_policy(text).namespaces[0].variables == (VariablesPathPolicy("a/b", expected),)


@pytest.mark.parametrize(("level", "expected"), [
    ("deny", ("deny",)), ("read", ("mount-readonly",)),
    ("write", ("mount-readonly", "mount-readwrite")), ("scale", ())])
def test_host_volume_policy_expands(level: str, expected: tuple[str, ...]) -> None:
    policy = parse_policy(f'host_volume "v-*" {{ policy = "{level}" }}')
    assert policy.host_volumes == (HostVolumePolicy("v-*", level, expected),)
    assert HOST_VOLUME_POLICY_CAPABILITIES.get(level, ()) == expected


@pytest.mark.parametrize(("level", "expected"), [
    ("deny", ("deny",)), ("read", ("read",)), ("write", ("delete", "read", "write"))])
def test_node_pool_policy_expands(level: str, expected: tuple[str, ...]) -> None:
    policy = parse_policy(f'node_pool "prod_*" {{ policy = "{level}" }}')
    assert policy.node_pools == (NodePoolPolicy("prod_*", level, expected),)


@pytest.mark.parametrize(("kind", "level", "expected"), [
    ("operator", "read", ("license-read", "keyring-read")),
    ("operator", "write", ("snapshot-save", "license-read", "keyring-rotate", "keyring-read",
                           "keyring-delete")),
    ("operator", "deny", ("deny",)),
    ("sentinel", "read", ("sentinel-read",)),
    ("sentinel", "write", ("sentinel-read", "sentinel-submit", "sentinel-delete")),
])
def test_operator_and_sentinel_policies_expand(kind: str, level: str,
                                               expected: tuple[str, ...]) -> None:
    policy = parse_policy(f'{kind} {{ policy = "{level}" }}')
    assert getattr(policy, kind) == CapabilityPolicy(level, expected)


def test_operator_capabilities_without_a_policy() -> None:
    policy = parse_policy('operator { capabilities = ["snapshot-save", "keyring-read"] }')
    assert policy.operator == CapabilityPolicy("", ("snapshot-save", "keyring-read"))


# --------------------------------------------------------------------------- every rule kind

FULL_HCL = """
# a comment
namespace "default" {
  policy       = "read"
  capabilities = ["submit-job", "alloc-node-exec"]
}
namespace "prod-*" {
  policy = "deny"
  variables {
    path "nomad/jobs/*" { capabilities = ["read"] }
    path "secret" { capabilities = ["write", "destroy"] }
  }
}
node_pool "gpu" { policy = "write" }
host_volume "data-*" {
  policy       = "read"
  capabilities = ["mount-readwrite"]
}
agent    { policy = "read" }
node     { policy = "write" }
operator { policy = "read" }
sentinel { capabilities = ["sentinel-read"] }
quota    { policy = "deny" }
plugin   { policy = "list" }
"""

FULL_JSON = {
    "namespace": {
        "default": {"policy": "read", "capabilities": ["submit-job", "alloc-node-exec"]},
        "prod-*": {"policy": "deny", "variables": {"path": {
            "nomad/jobs/*": {"capabilities": ["read"]},
            "secret": {"capabilities": ["write", "destroy"]}}}},
    },
    "node_pool": {"gpu": {"policy": "write"}},
    "host_volume": {"data-*": {"policy": "read", "capabilities": ["mount-readwrite"]}},
    "agent": {"policy": "read"},
    "node": {"policy": "write"},
    "operator": {"policy": "read"},
    "sentinel": {"capabilities": ["sentinel-read"]},
    "quota": {"policy": "deny"},
    "plugin": {"policy": "list"},
}

FULL_POLICY = Policy(
    namespaces=(
        NamespacePolicy("default", "read", ("submit-job", "alloc-node-exec", *READ)),
        NamespacePolicy("prod-*", "deny", ("deny",), (
            VariablesPathPolicy("nomad/jobs/*", ("read", "list")),
            VariablesPathPolicy("secret", ("write", "destroy")))),
    ),
    node_pools=(NodePoolPolicy("gpu", "write", ("delete", "read", "write")),),
    host_volumes=(HostVolumePolicy("data-*", "read", ("mount-readwrite", "mount-readonly")),),
    agent="read", node="write",
    operator=CapabilityPolicy("read", ("license-read", "keyring-read")),
    sentinel=CapabilityPolicy("", ("sentinel-read",)),
    quota="deny", plugin="list",
)


def test_every_rule_kind_in_hcl() -> None:
    policy = parse_policy(FULL_HCL)
    assert without_raw(policy) == FULL_POLICY
    assert policy.raw == FULL_HCL


def test_json_parses_to_the_same_policy_as_hcl() -> None:
    assert without_raw(parse_policy(json.dumps(FULL_JSON, indent=2))) == FULL_POLICY


def test_json_accepts_lists_of_labelled_objects() -> None:
    text = json.dumps({"namespace": [{"a": {"policy": "read"}}, {"b": {"policy": "write"}}],
                       "agent": [{"policy": "read"}]})
    policy = parse_policy(text)
    assert [n.name for n in policy.namespaces] == ["a", "b"]
    assert policy.agent == "read"


def test_repeated_labelled_rules_are_kept_apart() -> None:
    policy = parse_policy('namespace "a" { policy = "read" }\n'
                          'namespace "a" { capabilities = ["deny"] }')
    assert [(n.name, n.capabilities) for n in policy.namespaces] == [
        ("a", READ), ("a", ("deny",))]


def test_empty_text_is_the_empty_policy() -> None:
    assert parse_policy("") == Policy()
    assert parse_policy("").is_empty()


@pytest.mark.parametrize("level", ["deny", "read", "list", "write"])
def test_plugin_levels(level: str) -> None:
    assert parse_policy(f'plugin {{ policy = "{level}" }}').plugin == level


@pytest.mark.parametrize("kind", ["agent", "node", "quota"])
@pytest.mark.parametrize("level", ["deny", "read", "write", "scale"])
def test_single_rule_levels(kind: str, level: str) -> None:
    assert getattr(parse_policy(f'{kind} {{ policy = "{level}" }}'), kind) == level


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(("text", "line", "message"), [
    ("   ", 0, "Invalid policy:    "),
    ("# only a comment\n", 0, "Invalid policy: # only a comment\n"),
    ('namespace "default" {\n  policy = "foo"\n}', 2,
     'Invalid namespace policy: "foo" in namespace default'),
    ('namespace "default" {\n  capabilities = ["deny", "foo"]\n}', 2,
     "Invalid namespace capability 'foo' in namespace default"),
    ('namespace "has space" { policy = "read" }', 1, 'Invalid namespace name: "has space"'),
    ('namespace "a/b" { policy = "read" }', 1, 'Invalid namespace name: "a/b"'),
    (f'namespace "{"n" * 129}" {{ policy = "read" }}', 1,
     f'Invalid namespace name: "{"n" * 129}"'),
    ('\nnamespace { policy = "read" }', 2, 'Invalid namespace name: ""'),
    ('namespace "ns" {\n  variables {}\n}', 2,
     "Invalid variable policy: no variable paths in namespace ns"),
    ('namespace "ns" {\n  variables {\n    path { capabilities = ["read"] }\n  }\n}', 3,
     "Invalid missing variable path in namespace ns"),
    ('namespace "ns" {\n  variables {\n    path "/abs" { capabilities = ["read"] }\n  }\n}', 3,
     "Invalid variable path \"/abs\" in namespace ns: cannot start with a leading '/'"),
    ('namespace "ns" {\n  variables {\n    path "a" {\n      capabilities = ["sudo"]\n'
     '    }\n  }\n}', 4, "Invalid variable capability 'sudo' in namespace ns"),
    ('node_pool "bad pool" { policy = "read" }', 1, 'Invalid node pool name: "bad pool"'),
    ('node_pool "p" {\n  policy = "all"\n}', 2, 'Invalid node pool policy: "all" for "p"'),
    ('node_pool "p" {\n  capabilities = ["mount"]\n}', 2,
     "Invalid node pool capability 'mount' for \"p\""),
    ('host_volume "v_1" { policy = "read" }', 1, 'Invalid host volume name: "v_1"'),
    ('host_volume "v" {\n  policy = "list"\n}', 2, 'Invalid host volume policy: "list" for "v"'),
    ('host_volume "v" {\n  capabilities = ["mount"]\n}', 2,
     "Invalid host volume capability 'mount' for \"v\""),
    ('agent {\n  policy = "list"\n}', 2, 'Invalid agent policy: "list"'),
    ("\nagent {}", 2, 'Invalid agent policy: ""'),
    ('node { policy = "foo" }', 1, 'Invalid node policy: "foo"'),
    ('quota { policy = "foo" }', 1, 'Invalid quota policy: "foo"'),
    ('plugin { policy = "scale" }', 1, 'Invalid plugin policy: "scale"'),
    ('operator { policy = "foo" }', 1, 'Invalid operator policy: "foo"'),
    ('operator {\n  capabilities = ["license-write"]\n}', 2,
     "Invalid operator capability 'license-write'"),
    ('sentinel { policy = "list" }', 1, 'Invalid sentinel policy: "list"'),
    ('sentinel {\n  capabilities = ["sentinel-write"]\n}', 2,
     "Invalid sentinel capability 'sentinel-write'"),
    # Strict mode: unknown and repeated keys.
    ('namespace "a" { policy = "read" }\n\nfoo { policy = "read" }', 3,
     "Invalid or duplicate policy keys: foo"),
    ('namespace "a" { policy = "read" }\nfoo = "bar"', 2, "Invalid or duplicate policy keys: foo"),
    ('namespace "a" {\n  policy = "read"\n  polcy = "write"\n}', 3,
     "Invalid or duplicate policy keys: polcy"),
    ('namespace "a" {\n  policy = "read"\n  policy = "write"\n}', 3,
     "Invalid or duplicate policy keys: policy"),
    ('agent { policy = "read" }\nagent { policy = "write" }', 2,
     "Invalid or duplicate policy keys: agent"),
    ('namespace "a" {\n  variables {\n    path "x" {\n      capabilities = ["read"]\n'
     '      policy = "read"\n    }\n  }\n}', 5, "Invalid or duplicate policy keys: policy"),
    ('namespace "a" {\n  variables { path "x" {} }\n  variables { path "y" {} }\n}', 3,
     "Invalid or duplicate policy keys: variables"),
    ('agent {\n  policy = "read"\n  capabilities = ["read"]\n}', 3,
     "Invalid or duplicate policy keys: capabilities"),
    # Shapes and types.
    ('namespace "a" "b" { policy = "read" }', 1, "namespace: a block takes at most one label"),
    ('agent "x" { policy = "read" }', 1, "agent: the block takes no label, got 'x'"),
    ('namespace "a" {\n  policy = true\n}', 2, "policy: expected a string, got bool"),
    ('namespace "a" {\n  capabilities = "read-job"\n}', 2,
     "capabilities: expected a list of strings"),
    ('agent = "read"', 1, "agent: expected a block, got string"),
    # Syntax.
    ('namespace "a" {\n  policy = "read"\n', 3,
     "Failed to parse ACL Policy: unexpected end of file"),
    ('namespace "a" {\n  policy = \n}', 2, "Failed to parse ACL Policy: unexpected '}'"),
])
def test_hcl_errors(text: str, line: int, message: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy(text, name="ops")
    assert (caught.value.message, caught.value.line) == (message, line)
    assert caught.value.name == "ops"
    assert str(caught.value) == (f"ops:{line}:{caught.value.column}: {message}" if line
                                 else f"ops: {message}")


@pytest.mark.parametrize(("doc", "line", "message"), [
    ('{\n  "namespace": {\n    "a": {\n      "policy": "nope"\n    }\n  }\n}', 4,
     'Invalid namespace policy: "nope" in namespace a'),
    ('{\n  "agent": {"policy": "read"},\n  "nope": {}\n}', 3,
     "Invalid or duplicate policy keys: nope"),
    ('{\n  "namespace": {\n    "a": "read"\n  }\n}', 3,
     "namespace 'a': expected an object, got string"),
    ('{\n  "namespace": {\n    "a": {"capabilities": ["x"]}\n  }\n}', 3,
     "Invalid namespace capability 'x' in namespace a"),
    ('{"agent": {"policy": "read"}', 1, "Failed to parse ACL Policy: Expecting ',' delimiter"),
    ("{}", 0, "Invalid policy: {}"),
])
def test_json_errors(doc: str, line: int, message: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy(doc)
    assert (caught.value.message, caught.value.line) == (message, line)


def test_only_text_opening_with_a_brace_is_json() -> None:
    """As HCL's decoder decides: `[1]` is read as (bad) HCL."""
    with pytest.raises(PolicyError, match="Failed to parse ACL Policy: unexpected"):
        parse_policy("[1]")
