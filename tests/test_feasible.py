"""Placement feasibility (layer 0): Nomad's target resolution and operator tables (the cases of
scheduler/feasible/feasible_test.go), go-version and semver constraints, and the filter reason
one node gets for constraints, drivers, `distinct_hosts` and `distinct_property`."""

from __future__ import annotations

import pytest

from yurt.runtime.lib.goversion import (
    VersionError,
    compare,
    parse_version,
    satisfies,
    semver_constraint,
    version_constraint,
)
from yurt.runtime.server.scheduler.feasible import (
    FILTER_MISSING_DRIVERS,
    check_constraint,
    check_order,
    check_regexp,
    filter_reason,
    has_drivers,
    meets,
    resolve_target,
    set_contains_any,
)
from yurt.runtime.structs import Allocation, DriverInfo, Job, Node, Task, TaskGroup
from yurt.runtime.structs.constraint import Constraint


def node(**changes: object) -> Node:
    base = Node(id="9f1c6a9e-0000-4000-8000-000000000001", name="box", datacenter="dc1",
                node_class="linux-medium-pci", node_pool="default",
                attributes={"kernel.name": "linux", "arch": "x86", "nomad.version": "0.5.0",
                            "driver.exec": "1", "cpu.numcores": "4"},
                meta={"pci-dss": "true", "database": "mysql,postgres,redis"})
    for key, value in changes.items():
        setattr(base, key, value)
    return base


# --------------------------------------------------------------------------- targets

@pytest.mark.parametrize(("target", "value", "found"), [
    ("${node.unique.id}", "9f1c6a9e-0000-4000-8000-000000000001", True),
    ("${node.datacenter}", "dc1", True),
    ("${node.unique.name}", "box", True),
    ("${node.class}", "linux-medium-pci", True),
    ("${node.pool}", "default", True),
    ("${node.foo}", "", False),
    ("${attr.kernel.name}", "linux", True),
    ("${attr.rand}", "", False),
    ("${meta.pci-dss}", "true", True),
    ("${meta.rand}", "", False),
    ("literal", "literal", True),
])
def test_resolve_target(target: str, value: str, found: bool) -> None:
    assert resolve_target(target, node()) == (value, found)


def test_constraint_checker_nodes() -> None:
    """TestConstraintChecker: all five must hold; each node breaks a different one."""
    constraints = [Constraint("${node.datacenter}", "dc1", "="),
                   Constraint("${attr.kernel.name}", "linux", "is"),
                   Constraint("${node.class}", "linux-medium-pci", "!="),
                   Constraint("${node.pool}", "prod", "!="),
                   Constraint("${attr.foo}", "", "is_set")]
    freebsd = node(attributes={"kernel.name": "freebsd", "foo": "bar"})
    dc2 = node(datacenter="dc2", attributes={"kernel.name": "linux", "foo": "bar"})
    large = node(node_class="large", attributes={"kernel.name": "linux", "foo": "bar"})
    prod = node(node_class="large", node_pool="prod",
                attributes={"kernel.name": "linux", "foo": "bar"})
    results = [all(meets(c, n) for c in constraints) for n in (freebsd, dc2, large, prod)]
    assert results == [False, False, True, False]


# --------------------------------------------------------------------------- operators

@pytest.mark.parametrize(("op", "left", "right", "result"), [
    ("=", "foo", "foo", True),
    ("is", "foo", "foo", True),
    ("==", "foo", "foo", True),
    ("==", "foo", None, False),
    ("==", None, "foo", False),
    ("==", None, None, False),
    ("!=", "foo", "foo", False),
    ("!=", "foo", "bar", True),
    ("!=", None, "foo", True),
    ("!=", "foo", None, True),
    ("!=", None, None, False),
    ("not", "foo", "bar", True),
    ("version", "1.2.3", "~> 1.0", True),
    ("version", None, "~> 1.0", False),
    ("regexp", "foobarbaz", "[\\w]+", True),
    ("regexp", None, "[\\w]+", False),
    ("<", "foo", "bar", False),
    ("<", None, "bar", False),
    ("set_contains", "foo,bar,baz", "foo,  bar  ", True),
    ("set_contains", "foo,bar,baz", "foo,bam", False),
    ("set_contains_all", "foo,bar,baz", "foo,bam", False),
    ("set_contains_any", "foo,bar,baz", "bam,  baz", True),
    ("set_contains_any", "foo,bar,baz", "bam", False),
    ("is_set", "foo", None, True),
    ("is_set", None, None, False),
    ("is_not_set", None, None, True),
    ("is_not_set", "foo", None, False),
    ("semver", "1.3.0-beta1", ">= 0.6.1", True),
    ("distinct_hosts", None, None, True),  # checked against allocations, not the node
    ("distinct_property", None, None, True),
    ("near", "a", "a", False),  # unknown operators never match
])
def test_check_constraint(op: str, left: str | None, right: str | None, result: bool) -> None:
    assert check_constraint(op, left, right, left is not None, right is not None) is result


@pytest.mark.parametrize(("op", "left", "right", "result"), [
    ("<", "bar", "foo", True),
    ("<=", "foo", "foo", True),
    (">", "bar", "foo", False),
    (">=", "bar", "bar", True),
    (">", "1", "foo", False),
    ("<", "10", "1", False),  # as integers, not lexically
    ("<", "1", "10", True),
    ("<", "10.5", "1.5", False),  # as floats
    ("<", "1.5", "10.5", True),
    ("<", "2", "10.0", True),  # int and float: both parse as floats
    ("<", "9", "1e1", True),
    ("<", " 2", "10", True),  # Go's parsers refuse spaces: compared lexically
    ("<", "1_0", "9", True),  # Go's ParseInt(…, 10, …) refuses "_": lexical
    ("<", "1e400", "2", True),  # a float overflow is an error in Go: lexical
    ("=", "1", "1", False),  # not an order operator
])
def test_check_order(op: str, left: str, right: str, result: bool) -> None:
    assert check_order(op, left, right) is result


@pytest.mark.parametrize(("value", "pattern", "result"), [
    ("foobar", "bar", True),
    ("foobar", "^foo", True),
    ("foobar", "^bar", False),
    ("zipzap", "foo", False),
    ("foobar", "[unclosed", False),  # does not compile: never matches
    ("x" * 16381 + "foo", "^x+fo{2}$", True),  # an ordinary pattern: any value up to the cap
    ("web-01.dc1", "(?i)^[\\p{L}-]+[0-9]{2}\\.dc[0-9]$", True),
])
def test_check_regexp(value: str, pattern: str, result: bool) -> None:
    assert check_regexp(value, pattern) is result


def test_set_contains_any_trims() -> None:
    assert set_contains_any("a", "a")
    assert set_contains_any("a,b", "a")
    assert set_contains_any("  a,b  ", "a ")
    assert not set_contains_any("b", "a")


# --------------------------------------------------------------------------- versions

@pytest.mark.parametrize(("version", "constraint", "result"), [
    ("1.2.3", "~> 1.0", True),
    ("1.2.3", ">= 1.0, < 1.4", True),
    ("2.0.1", "~> 1.0", False),
    ("1.4", ">= 1.0, < 1.4", False),
    ("1", "~> 1.0", True),
    ("1.3.0-beta1", ">= 0.6.1", False),  # pre-releases never > final releases
    ("1.7.0-alpha1", ">= 1.6.0-beta1", False),  # pre-release X.Y.Z must match
    ("1.3.0-beta1+ent", "= 1.3.0-beta1", True),  # metadata is ignored
    ("1.2.4", "~> 1.2.3", True),
    ("1.3.0", "~> 1.2.3", False),
    ("1.9", "~> 1.2", True),
    ("v1.2.3", "1.2.3", True),  # no operator is `=`, a `v` prefix is allowed
    ("1.2.3.4", "> 1.2.3", True),  # more than three segments
    ("1.2", "!= 1.2.0", False),  # 1.2 is 1.2.0
    ("1.2.0beta", ">= 1.2.0beta", True),  # go-version's loose pre-release without "-"
    ("garbage", ">= 1.0", False),
    ("1.0", "garbage", False),
])
def test_version_constraint(version: str, constraint: str, result: bool) -> None:
    assert satisfies(version, constraint) is result


@pytest.mark.parametrize(("version", "constraint", "result"), [
    ("1.2.3", "~> 1.0", False),  # no pessimistic operator in semver: malformed, never met
    ("1.2.3", ">= 1.0, < 1.4", True),
    ("2.0.1", "~> 1.0", False),
    ("1.4", ">= 1.0, < 1.4", False),
    ("1", "~> 1.0", False),
    ("1.3.0-beta1", ">= 0.6.1", True),
    ("1.7.0-alpha1", ">= 1.6.0-beta1", True),
    ("1.7.0-beta", ">= 1.7.0", False),
    ("1.7.0", ">= 1.7.0-dev", True),
    ("1.7.0-beta.1", ">= 1.7.0-a", True),
    ("1.7.0-rc.1", ">= 1.7.0-dev", True),
    ("1.3.0-beta1+ent", "= 1.3.0-beta1", True),
])
def test_semver_constraint(version: str, constraint: str, result: bool) -> None:
    assert satisfies(version, constraint, semver=True) is result


@pytest.mark.parametrize(("low", "high"), [
    # SemVer 2.0's precedence example, 1.0.0-alpha < … < 1.0.0
    ("1.0.0-alpha", "1.0.0-alpha.1"),
    ("1.0.0-alpha.1", "1.0.0-alpha.beta"),
    ("1.0.0-alpha.beta", "1.0.0-beta"),
    ("1.0.0-beta", "1.0.0-beta.2"),
    ("1.0.0-beta.2", "1.0.0-beta.11"),
    ("1.0.0-beta.11", "1.0.0-rc.1"),
    ("1.0.0-rc.1", "1.0.0"),
    ("1.9.0", "1.10.0"),
    ("1.2", "1.2.0.1"),
])
def test_version_ordering(low: str, high: str) -> None:
    a, b = parse_version(low), parse_version(high)
    assert (compare(a, b), compare(b, a), compare(a, a)) == (-1, 1, 0)


def test_malformed_constraints_name_the_part() -> None:
    cases = [(version_constraint, ">= 1.0,< x", "Malformed constraint: < x"),
             (version_constraint, "", "Malformed constraint: "),
             # semver needs "-" before a pre-release
             (semver_constraint, ">= 1.2.0beta", "Malformed constraint: >= 1.2.0beta"),
             # Go's \s has no vertical tab, Python's has
             (version_constraint, "1.0\v", "Malformed constraint: 1.0\v")]
    for parse, text, message in cases:
        with pytest.raises(VersionError) as info:
            parse(text)
        assert str(info.value) == message
    assert satisfies("1.0", " >= 1.0\n")


# --------------------------------------------------------------------------- filter reasons

def job_with(job_constraints: list[Constraint] | None = None,
             group_constraints: list[Constraint] | None = None,
             task_constraints: list[Constraint] | None = None, count: int = 1) -> Job:
    task = Task(name="t", driver="exec", constraints=task_constraints or [])
    group = TaskGroup(name="g", count=count, tasks=[task], constraints=group_constraints or [])
    other = TaskGroup(name="other", tasks=[Task(name="t", driver="exec")])
    return Job(id="web", task_groups=[group, other], constraints=job_constraints or [])


def alloc_of(job: Job, group: str, job_id: str | None = None) -> Allocation:
    return Allocation(id=f"a-{group}", job_id=job_id or job.id, namespace=job.namespace,
                      task_group=group, job=job)


def test_constraints_from_job_group_and_task_are_anded_in_nomad_order() -> None:
    wrong_dc = Constraint("${node.datacenter}", "dc9", "=")
    old_kernel = Constraint("${attr.nomad.version}", ">= 1.0", "version")
    no_meta = Constraint("${meta.rack}", "", "is_set")
    job = job_with([wrong_dc], [old_kernel], [no_meta])
    group = job.task_groups[0]
    assert filter_reason(job, group, node(), []) == "${node.datacenter} = dc9"
    job.constraints = []
    assert filter_reason(job, group, node(), []) == "${attr.nomad.version} version >= 1.0"
    group.constraints = []
    assert filter_reason(job, group, node(), []) == "${meta.rack} is_set "
    group.tasks[0].constraints = []
    assert filter_reason(job, group, node(), []) is None


def test_distinct_hosts_on_the_job_counts_every_group() -> None:
    job = job_with([Constraint("", "true", "distinct_hosts")])
    group = job.task_groups[0]
    assert filter_reason(job, group, node(), []) is None
    assert filter_reason(job, group, node(), [alloc_of(job, "other")]) == "distinct_hosts"
    # Another job's allocations do not collide, nor do the same ID's in another namespace.
    assert filter_reason(job, group, node(), [alloc_of(job, "g", job_id="db")]) is None
    foreign = alloc_of(job, "g")
    foreign.namespace = "prod"
    assert filter_reason(job, group, node(), [foreign]) is None


def test_distinct_hosts_on_a_group_counts_only_that_group() -> None:
    job = job_with(group_constraints=[Constraint("", "", "distinct_hosts")])
    group = job.task_groups[0]
    assert filter_reason(job, group, node(), [alloc_of(job, "other")]) is None
    assert filter_reason(job, group, node(), [alloc_of(job, "g")]) == "distinct_hosts"


@pytest.mark.parametrize(("value", "enforced"), [
    ("", True), ("true", True), ("1", True), ("T", True), ("yes", True),  # unparsable: on
    ("false", False), ("0", False), ("F", False), ("FALSE", False),
])
def test_distinct_hosts_value_as_go_parses_a_bool(value: str, enforced: bool) -> None:
    job = job_with([Constraint("", value, "distinct_hosts")])
    reason = filter_reason(job, job.task_groups[0], node(), [alloc_of(job, "g")])
    assert (reason == "distinct_hosts") is enforced


def test_distinct_property_counts_against_the_allowed_number() -> None:
    job = job_with([Constraint("${meta.pci-dss}", "2", "distinct_property")])
    group = job.task_groups[0]
    one, two = alloc_of(job, "g"), alloc_of(job, "other")
    assert filter_reason(job, group, node(), [one]) is None
    assert filter_reason(job, group, node(), [one, two]) == (
        "distinct_property: ${meta.pci-dss}=true used by 2 allocs")
    job.constraints = [Constraint("${meta.rack}", "", "distinct_property")]
    assert filter_reason(job, group, node(), []) == 'missing property "${meta.rack}"'


def test_distinct_property_on_a_group_counts_only_that_group() -> None:
    job = job_with(group_constraints=[Constraint("${node.datacenter}", "",
                                                 "distinct_property")])
    group = job.task_groups[0]
    assert filter_reason(job, group, node(), [alloc_of(job, "other")]) is None
    assert filter_reason(job, group, node(), [alloc_of(job, "g")]) == (
        "distinct_property: ${node.datacenter}=dc1 used by 1 allocs")


# --------------------------------------------------------------------------- drivers

def test_a_node_without_the_groups_driver_is_filtered_as_missing_drivers() -> None:
    job = job_with()
    group = job.task_groups[0]
    group.tasks.append(Task(name="side", driver="docker"))
    assert filter_reason(job, group, node(), []) == FILTER_MISSING_DRIVERS == "missing drivers"
    docker = node(attributes={"driver.exec": "1", "driver.docker": "true"})
    assert filter_reason(job, group, docker, []) is None
    off = node(attributes={"driver.exec": "1", "driver.docker": "0"})
    assert filter_reason(job, group, off, []) == "missing drivers"


def test_the_drivers_map_decides_before_the_attribute() -> None:
    group = job_with().task_groups[0]
    unhealthy = DriverInfo(detected=True, healthy=False)
    assert not has_drivers(node(drivers={"exec": unhealthy}), group)
    assert has_drivers(node(drivers={"exec": DriverInfo(detected=True, healthy=True)},
                            attributes={}), group)
    assert not has_drivers(node(drivers={"raw_exec": DriverInfo(detected=True, healthy=True)},
                                attributes={}), group)


def test_job_constraints_come_before_drivers_and_group_constraints_after() -> None:
    wrong_dc = Constraint("${node.datacenter}", "dc9", "=")
    job = job_with(job_constraints=[wrong_dc], group_constraints=[wrong_dc])
    group = job.task_groups[0]
    group.tasks[0].driver = "docker"
    assert filter_reason(job, group, node(), []) == "${node.datacenter} = dc9"
    job.constraints = []
    assert filter_reason(job, group, node(), []) == "missing drivers"


def test_a_node_that_reports_no_driver_has_not_fingerprinted_and_passes() -> None:
    group = job_with().task_groups[0]
    assert has_drivers(node(attributes={"kernel.name": "linux"}), group)
