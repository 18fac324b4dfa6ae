"""The compiled ACL: `compile_acl` merging policies and `Acl.allow_*` answering checks.

Theory. A token carries policies; Nomad's acl/acl.go `NewACL` merges them into one `ACL`.
Labelled rules (namespaces, node pools, host volumes, and variables paths keyed by
`namespace NUL path`) are kept per label in two tables, exact labels and globs (a label holding
`*`). Rules on the same label union their capabilities, except that `deny` wins: once a set
holds `deny` it is `{deny}`, whichever policy came first. Single rules (`agent`, `node`,
`operator`, `quota`, `plugin`, `sentinel`) keep the highest level, `deny` beating all
(`maxPrivilege`). A check looks the name up in the exact table first, an empty set included,
else takes the closest matching glob (`findClosestMatchingGlob`): the smallest
`len(name) - len(glob) + count("*")`, i.e. the glob that spells out most of the name, ties
going to the glob last in byte order. `*` (ryanuber/go-glob) matches any run of characters.
A management ACL allows everything; anything not granted is denied.

Layer 0: pure functions, no I/O, no clock. The cases are our own, pinned to the behaviours
Nomad's acl/acl_test.go checks (`TestACLMerge`, `TestAllowNamespace`,
`TestWildcardNamespaceMatching`, `TestVariablesMatching`, `TestMaxPrivilege`, …).
"""

from __future__ import annotations

import pytest

from yurt.runtime.server.acl import MANAGEMENT_ACL, Acl, AclClaim, compile_acl, parse_policy
from yurt.runtime.server.acl.acl import closest_glob, glob_match, max_privilege


def acl(*texts: str) -> Acl:
    return compile_acl([parse_policy(t) for t in texts])


SIMPLE_CHECKS = ("allow_agent_read", "allow_agent_write", "allow_node_read", "allow_node_write",
                 "allow_operator_read", "allow_operator_write", "allow_quota_read",
                 "allow_quota_write", "allow_plugin_read", "allow_plugin_list",
                 "allow_node_pool_search")


# --------------------------------------------------------------------------- management


def test_management_allows_everything_whatever_its_policies() -> None:
    for a in (MANAGEMENT_ACL, compile_acl([parse_policy('namespace "*" { policy = "deny" }')],
                                          management=True)):
        assert a.is_management()
        assert all(getattr(a, check)() for check in SIMPLE_CHECKS)
        assert a.allow_namespace_operation("any", "alloc-node-exec")
        assert a.allow_namespace("*")
        assert a.allow_variable_operation("any", "a/b", "destroy")
        assert a.allow_variable_search("any")
        assert a.allow_host_volume_operation("v", "mount-readwrite")
        assert a.allow_host_volume("v")
        assert a.allow_node_pool_operation("p", "delete")
        assert a.allow_node_pool("p")
        assert a.allow_operator_operation("snapshot-save")
        assert a.allow_sentinel_operation("sentinel-submit")


def test_no_policies_allow_nothing() -> None:
    a = compile_acl([])
    assert not a.is_management()
    assert not any(getattr(a, check)() for check in SIMPLE_CHECKS)
    assert not a.allow_namespace_operation("default", "read-job")
    assert not a.allow_namespace("*")
    assert not a.allow_variable_operation("default", "a", "read")
    assert not a.allow_variable_search("*")
    assert not a.allow_host_volume("v")
    assert not a.allow_operator_operation("license-read")


# --------------------------------------------------------------------------- single rules


@pytest.mark.parametrize(("a", "b", "expected"), [
    ("", "", ""), ("deny", "write", "deny"), ("write", "deny", "deny"), ("read", "write", "write"),
    ("list", "read", "read"), ("", "list", "list"), ("scale", "", ""), ("scale", "read", "read"),
])
def test_max_privilege(a: str, b: str, expected: str) -> None:
    assert max_privilege(a, b) == expected


@pytest.mark.parametrize(("kind", "levels", "read", "write"), [
    ("agent", ["read"], True, False),
    ("agent", ["read", "write"], True, True),
    ("agent", ["write", "deny"], False, False),
    ("agent", ["scale"], False, False),
    ("node", ["write"], True, True),
    ("node", ["deny", "read"], False, False),
    ("operator", ["read"], True, False),
    ("operator", ["write", "read"], True, True),
    ("quota", ["read"], True, False),
    ("quota", ["write"], True, True),
    ("quota", ["deny"], False, False),
])
def test_read_write_rules_merge_to_the_highest_level(kind: str, levels: list[str],
                                                     read: bool, write: bool) -> None:
    a = acl(*(f'{kind} {{ policy = "{level}" }}' for level in levels))
    assert (getattr(a, f"allow_{kind}_read")(), getattr(a, f"allow_{kind}_write")()) == (
        read, write)


@pytest.mark.parametrize(("level", "read", "list_"), [
    ("read", True, True), ("list", False, True), ("deny", False, False),
    # Nomad's AllowPluginRead/AllowPluginList name only `read` and `list`.
    ("write", False, False),
])
def test_plugin_levels(level: str, read: bool, list_: bool) -> None:
    a = acl(f'plugin {{ policy = "{level}" }}')
    assert (a.allow_plugin_read(), a.allow_plugin_list()) == (read, list_)


@pytest.mark.parametrize(("policies", "op", "allowed"), [
    (['operator { capabilities = ["snapshot-save"] }'], "snapshot-save", True),
    (['operator { capabilities = ["snapshot-save"] }'], "keyring-rotate", False),
    (['operator { policy = "read" }'], "keyring-read", True),
    (['operator { policy = "read" }'], "snapshot-save", False),
    (['operator { policy = "write" }'], "anything", True),
    (['operator { capabilities = ["deny"] }', 'operator { capabilities = ["license-read"] }'],
     "license-read", False),
    (['operator { capabilities = ["license-read"] }', 'operator { capabilities = ["deny"] }'],
     "license-read", False),
])
def test_operator_operation(policies: list[str], op: str, allowed: bool) -> None:
    assert acl(*policies).allow_operator_operation(op) is allowed


@pytest.mark.parametrize(("policies", "op", "allowed"), [
    (['sentinel { policy = "read" }'], "sentinel-read", True),
    (['sentinel { policy = "read" }'], "sentinel-submit", False),
    (['sentinel { policy = "write" }'], "sentinel-delete", True),
    (['sentinel { capabilities = ["deny"] }', 'sentinel { policy = "read" }'], "sentinel-read",
     False),
])
def test_sentinel_operation(policies: list[str], op: str, allowed: bool) -> None:
    assert acl(*policies).allow_sentinel_operation(op) is allowed


# --------------------------------------------------------------------------- namespaces


def test_policies_merge_capabilities_and_deny_wins_in_either_order() -> None:
    a = acl('namespace "default" { policy = "read" }\nnamespace "dev" { policy = "write" }',
            'namespace "default" { capabilities = ["alloc-node-exec"] }\n'
            'namespace "dev" { policy = "deny" }')
    assert a.allow_namespace_operation("default", "read-job")
    assert a.allow_namespace_operation("default", "alloc-node-exec")
    assert not a.allow_namespace_operation("default", "submit-job")
    assert a.namespace_capabilities("dev") == {"deny"}
    b = acl('namespace "dev" { policy = "deny" }', 'namespace "dev" { policy = "write" }')
    assert b.namespace_capabilities("dev") == {"deny"}
    c = acl('namespace "dev" {\n  policy = "write"\n  capabilities = ["deny"]\n}')
    assert c.namespace_capabilities("dev") == {"deny"}


@pytest.mark.parametrize(("policy", "ns", "allowed"), [
    ('namespace "foo" {}', "foo", False),
    ('namespace "foo" { policy = "deny" }', "foo", False),
    ('namespace "foo" { capabilities = ["deny"] }', "foo", False),
    ('namespace "foo" { capabilities = ["list-jobs"] }', "foo", True),
    ('namespace "foo" { policy = "read" }', "foo", True),
    ('namespace "foo" { policy = "read" }', "bar", False),
    ('namespace "foo" {}', "*", False),
    ('namespace "foo" { policy = "deny" }', "*", False),
    ('namespace "foo" { capabilities = ["list-jobs"] }', "*", True),
    ('namespace "foo" { policy = "read" }', "*", True),
    ('agent { policy = "read" }', "*", False),
])
def test_allow_namespace(policy: str, ns: str, allowed: bool) -> None:
    assert acl(policy).allow_namespace(ns) is allowed


@pytest.mark.parametrize(("policy", "ns", "allowed"), [
    ('namespace "prod-api-*" { policy = "write" }', "prod-api-services", True),
    ('namespace "prod-api" { policy = "write" }', "prod-api-services", False),
    # an exact rule beats any glob, whichever comes first
    ('namespace "prod-api-services" { policy = "deny" }\n'
     'namespace "prod-api-*" { policy = "write" }', "prod-api-services", False),
    ('namespace "prod-api-*" { policy = "deny" }\n'
     'namespace "prod-api-services" { policy = "write" }', "prod-api-services", True),
    # the glob spelling out more of the name wins: 8 characters against 4
    ('namespace "*-api-services" { policy = "deny" }\n'
     'namespace "prod-api-*" { policy = "write" }', "prod-api-services", False),
    ('namespace "prod-api-*" { policy = "write" }\n'
     'namespace "*-api-services" { policy = "deny" }', "prod-api-services", False),
    # `*` asks whether any namespace allows
    ('namespace "prod-api-*" { policy = "deny" }\n'
     'namespace "prod-api-services" { policy = "write" }', "*", True),
    # an empty exact rule still shadows a glob
    ('namespace "*" { policy = "write" }\nnamespace "dev" {}', "dev", False),
    ('namespace "*" { policy = "write" }', "anything", True),
])
def test_namespace_globs(policy: str, ns: str, allowed: bool) -> None:
    assert acl(policy).allow_namespace(ns) is allowed


@pytest.mark.parametrize(("policy", "ns", "op", "allowed"), [
    ('namespace "default" { policy = "read" }', "default", "read-job", True),
    ('namespace "default" { policy = "read" }', "default", "submit-job", False),
    ('namespace "default" { policy = "write" }', "default", "alloc-node-exec", False),
    ('namespace "default" { policy = "scale" }', "default", "scale-job", True),
    ('namespace "default" { policy = "scale" }', "default", "list-jobs", False),
    ('namespace "default" { policy = "deny" }', "default", "deny", True),
    ('namespace "a" { policy = "read" }\nnamespace "b" { policy = "write" }', "*", "submit-job",
     True),
    ('namespace "a" { policy = "read" }', "*", "submit-job", False),
    ('namespace "dev-*" { capabilities = ["read-logs"] }', "dev-1", "read-logs", True),
    ('namespace "dev-*" { capabilities = ["read-logs"] }', "prod-1", "read-logs", False),
])
def test_namespace_operation(policy: str, ns: str, op: str, allowed: bool) -> None:
    assert acl(policy).allow_namespace_operation(ns, op) is allowed


def test_namespace_operation_any_of() -> None:
    a = acl('namespace "default" { capabilities = ["read-fs"] }')
    assert a.allow_namespace_operation_any_of("default", "read-logs", "read-fs")
    assert not a.allow_namespace_operation_any_of("default", "read-logs", "alloc-exec")


# --------------------------------------------------------------------------- globs


@pytest.mark.parametrize(("pattern", "name", "matches"), [
    ("*", "", True), ("*", "anything", True), ("", "", True), ("", "a", False),
    ("abc", "abc", True), ("abc", "abcd", False),
    ("a*", "a", True), ("a*", "ba", False), ("*a", "ba", True), ("*a", "ab", False),
    ("a*b", "ab", True), ("a*b", "axxb", True), ("a*b", "axxbc", False),
    ("a*a", "a", False), ("ab*ba", "aba", False), ("ab*ba", "abba", True),
    ("*admin*", "production-admin-api", True), ("a**b", "ab", True),
    ("a*b*c", "acb", False), ("a*b*c", "acbc", True), ("a*b*c", "abxbc", True),
    # no other wildcard: brackets and question marks are literal
    ("a?c", "abc", False), ("[ab]", "a", False), ("[ab]", "[ab]", True),
    # `*` spans `/` and the NUL between namespace and path
    ("ns\x00*", "ns\x00a/b/c", True), ("*", "ns\x00path", True),
])
def test_glob_match(pattern: str, name: str, matches: bool) -> None:
    assert glob_match(pattern, name) is matches


@pytest.mark.parametrize(("globs", "name", "closest"), [
    (["production-*"], "production-api", "production-*"),
    (["prod-*"], "production-api", None),
    (["production-*", "production-*-api"], "production-admin-api", "production-*-api"),
    (["*", "*admin*", "production-**"], "production-admin-api", "production-**"),
    (["*", "*admin*"], "production-admin-api", "*admin*"),
    # a tie goes to the glob last in byte order
    (["*/bar", "foo/*"], "foo/bar", "foo/*"),
    (["foo/*", "*/bar"], "foo/bar", "foo/*"),
    (["a*", "*b"], "ab", "a*"),
])
def test_closest_glob(globs: list[str], name: str, closest: str | None) -> None:
    assert closest_glob(globs, name) == closest


# --------------------------------------------------------------------------- variables

OWN = AclClaim(namespace="ns", job="example", group="foo", task="bar")


def variables(*paths: str, ns: str = "ns") -> str:
    return f'namespace "{ns}" {{\n  variables {{\n' + "".join(
        f"    {p}\n" for p in paths) + "  }\n}\n"


@pytest.mark.parametrize(("policy", "ns", "path", "op", "claim", "allowed"), [
    (variables('path "foo/bar" { capabilities = ["read"] }'), "ns", "foo/bar", "read", None,
     True),
    (variables('path "foo/bar" { capabilities = ["read"] }'), "ns", "foo/bar", "list", None,
     True),
    (variables('path "foo/bar" { capabilities = ["read"] }'), "ns", "foo/bar", "write", None,
     False),
    (variables('path "foo/*" { capabilities = ["read"] }'), "ns", "foo/bar", "read", None, True),
    (variables('path "*/bar" { capabilities = ["read"] }'), "ns", "foo/bar", "read", None, True),
    (variables('path "*/bar" { capabilities = ["list"] }',
               'path "foo/*" { capabilities = ["write"] }'), "ns", "foo/bar", "write", None,
     True),
    (variables('path "*/bar" { capabilities = ["list"] }',
               'path "foo/*" { capabilities = ["write"] }'), "ns", "foo/bar", "list", None,
     False),
    (variables('path "*" { capabilities = ["read"] }',
               'path "foo/*" { capabilities = ["read"] }',
               'path "foo/bar" { capabilities = ["list"] }'), "ns", "foo/bar", "read", None,
     False),
    (variables('path "bar" { capabilities = ["read"] }'), "ns", "foo/bar", "read", None, False),
    (variables('path "*/foo" { capabilities = ["read"] }'), "ns", "foo/bar", "read", None,
     False),
    (variables('path "foo/bar" { capabilities = ["read"] }', ns="*"), "ns", "foo/bar", "read",
     None, True),
    (variables('path "bar" { capabilities = ["read"] }', ns="*"), "ns", "foo/bar", "read", None,
     False),
    (variables('path "foo/bar" { capabilities = ["read"] }'), "ns", "*", "read", None, False),
    (variables('path "foo/bar" { capabilities = ["read"] }'), "ns*", "bar", "read", None, False),
    (variables('path "foo/bar" { capabilities = ["read"] }'), "other", "foo/bar", "read", None,
     False),
    (variables('path "*" { capabilities = ["list"] }',
               'path "system/*" { capabilities = ["deny"] }'), "ns", "system/x", "list", None,
     False),
    (variables('path "*" { capabilities = ["list"] }',
               'path "system/*" { capabilities = ["deny"] }')
     + variables('path "*" { capabilities = ["list"] }', ns="prod"), "prod", "system/x", "list",
     None, True),
    # a workload reads its own job's variables unless an exact rule says otherwise
    (variables('path "nomad/jobs/example" { capabilities = ["deny"] }'), "ns",
     "nomad/jobs/example", "read", OWN, False),
    (variables('path "nomad/jobs" { capabilities = ["deny"] }'), "ns", "nomad/jobs/example",
     "read", OWN, True),
    (variables('path "nomad/jobs/*" { capabilities = ["deny"] }'), "ns", "nomad/jobs/example",
     "read", OWN, True),
    (variables('path "x" { capabilities = ["read"] }'), "ns", "nomad/jobs/example/foo/bar",
     "list", OWN, True),
    (variables('path "x" { capabilities = ["read"] }'), "ns", "nomad/jobs/example/foo/bar",
     "write", OWN, False),
    (variables('path "x" { capabilities = ["read"] }'), "ns", "nomad/jobs/other", "read", OWN,
     False),
    (variables('path "x" { capabilities = ["read"] }'), "other", "nomad/jobs", "read", OWN,
     False),
])
def test_variables_matching(policy: str, ns: str, path: str, op: str, claim: AclClaim | None,
                            allowed: bool) -> None:
    assert acl(policy).allow_variable_operation(ns, path, op, claim) is allowed


def test_variables_survive_a_denied_namespace() -> None:
    """Nomad's NewACL records a namespace's variables before its deny check."""
    a = acl('namespace "ns" {\n  policy = "deny"\n'
            '  variables { path "a" { capabilities = ["read"] } }\n}')
    assert not a.allow_namespace("ns")
    assert a.allow_variable_operation("ns", "a", "read")


def test_variables_deny_wins_across_policies() -> None:
    """Unlike Nomad's NewACL, which unions a path's sets, a path's deny stays deny."""
    a = acl(variables('path "secret" { capabilities = ["deny"] }'),
            variables('path "secret" { capabilities = ["read", "write"] }'))
    assert not a.allow_variable_operation("ns", "secret", "read")
    b = acl(variables('path "secret" { capabilities = ["read"] }'),
            variables('path "secret" { capabilities = ["write"] }'))
    assert b.variable_capabilities("ns", "secret") == {"read", "list", "write"}


@pytest.mark.parametrize(("policy", "ns", "allowed"), [
    (variables('path "a" { capabilities = ["read"] }'), "ns", True),
    (variables('path "a" { capabilities = ["read"] }'), "n", True),  # a prefix, as Nomad
    (variables('path "a" { capabilities = ["read"] }'), "other", False),
    (variables('path "a" { capabilities = ["read"] }'), "*", True),
    (variables('path "a/*" { capabilities = ["read"] }'), "ns", True),
    ('namespace "ns" { policy = "write" }', "ns", False),
    ('namespace "ns" { policy = "write" }', "*", False),
])
def test_variable_search(policy: str, ns: str, allowed: bool) -> None:
    assert acl(policy).allow_variable_search(ns) is allowed


# --------------------------------------------------------------------------- volumes, pools


@pytest.mark.parametrize(("policy", "name", "op", "allowed", "any_allowed"), [
    ('host_volume "prod-api-*" { policy = "write" }', "prod-api-services", "mount-readwrite",
     True, True),
    ('host_volume "prod-api-*" { policy = "read" }', "prod-api-services", "mount-readwrite",
     False, True),
    ('host_volume "prod-api-*" { policy = "read" }', "prod-api-services", "mount-readonly",
     True, True),
    ('host_volume "prod-api" { policy = "write" }', "prod-api-services", "mount-readonly",
     False, False),
    ('host_volume "prod-api-services" { policy = "deny" }\n'
     'host_volume "prod-api-*" { policy = "write" }', "prod-api-services", "mount-readonly",
     False, False),
    ('host_volume "*-api-services" { policy = "deny" }\n'
     'host_volume "prod-api-*" { policy = "write" }', "prod-api-services", "mount-readonly",
     False, False),
])
def test_host_volumes(policy: str, name: str, op: str, allowed: bool,
                      any_allowed: bool) -> None:
    a = acl(policy)
    assert a.allow_host_volume_operation(name, op) is allowed
    assert a.allow_host_volume(name) is any_allowed


@pytest.mark.parametrize(("policies", "pool", "op", "allowed", "any_allowed"), [
    (['node_pool "gpu" { policy = "read" }'], "gpu", "read", True, True),
    (['node_pool "gpu" { policy = "read" }'], "gpu", "write", False, True),
    (['node_pool "gpu" { policy = "read" }'], "cpu", "read", False, False),
    (['node_pool "gpu-*" { policy = "write" }'], "gpu-a", "delete", True, True),
    (['node_pool "gpu-*" { policy = "write" }', 'node_pool "gpu-a" { policy = "deny" }'],
     "gpu-a", "read", False, False),
    (['node_pool "*" { policy = "write" }', 'node_pool "*" { policy = "deny" }'], "x", "read",
     False, False),
])
def test_node_pools(policies: list[str], pool: str, op: str, allowed: bool,
                    any_allowed: bool) -> None:
    a = acl(*policies)
    assert a.allow_node_pool_operation(pool, op) is allowed
    assert a.allow_node_pool(pool) is any_allowed


@pytest.mark.parametrize(("policy", "allowed"), [
    ('node_pool "a" { policy = "read" }', True),
    ('node_pool "a" { policy = "deny" }', False),
    ('node_pool "a" { policy = "deny" }\nnode_pool "b-*" { policy = "read" }', True),
    ('namespace "a" { policy = "read" }', False),
])
def test_node_pool_search(policy: str, allowed: bool) -> None:
    assert acl(policy).allow_node_pool_search() is allowed
