"""`constraint`, `affinity` and `spread` in job files (layer 0): the HCL forms (three fields and
jobspec2's shorthands), Nomad's JSON names, the same job from HCL and from JSON, and Nomad's
validation messages, each on the file, line and block it is about."""

from __future__ import annotations

import json

import msgspec
import pytest

from tests.jobspec_support import problems_of
from yurt.runtime.jobspec import encode_job, parse_job
from yurt.runtime.structs.constraint import Affinity, Constraint, Spread, SpreadTarget


def hcl(job_block: str = "", group_block: str = "", task_block: str = "") -> str:
    """A job whose line 2 holds `job_block`, line 4 `group_block`, line 7 `task_block`."""
    return f'''job "web" {{
  {job_block}
  group "api" {{
    {group_block}
    task "t" {{
      driver = "mock_driver"
      {task_block}
    }}
  }}
}}
'''


def messages(text: str) -> list[tuple[int, str, str]]:
    return [(p.line, p.field, p.message) for p in problems_of(text)]


def test_three_field_form_at_every_level_in_nomad_json_names() -> None:
    job = parse_job(hcl(
        'constraint {\n attribute = "${attr.kernel.name}"\n value = "linux"\n }',
        'constraint {\n attribute = "${meta.rack}"\n operator = "!="\n value = "r1"\n }',
        'constraint {\n attribute = "${attr.cpu.numcores}"\n operator = ">="\n value = 2\n }'))
    assert job.constraints == [Constraint("${attr.kernel.name}", "linux", "=")]
    group = job.task_groups[0]
    assert group.constraints == [Constraint("${meta.rack}", "r1", "!=")]
    # HCL turns a number given for a string attribute into its text, as Nomad's decoder does.
    assert group.tasks[0].constraints == [Constraint("${attr.cpu.numcores}", "2", ">=")]
    encoded = json.loads(encode_job(job))["Job"]
    assert encoded["Constraints"] == [
        {"LTarget": "${attr.kernel.name}", "RTarget": "linux", "Operand": "="}]


@pytest.mark.parametrize(("body", "expected"), [
    ("distinct_hosts = true", Constraint("", "true", "distinct_hosts")),
    ("distinct_hosts = false", Constraint("", "false", "distinct_hosts")),
    ('distinct_property = "${meta.rack}"', Constraint("${meta.rack}", "", "distinct_property")),
    ('distinct_property = "${meta.rack}"\n value = "2"',
     Constraint("${meta.rack}", "2", "distinct_property")),
    ('attribute = "${attr.v}"\n version = ">= 1.2, < 2"',
     Constraint("${attr.v}", ">= 1.2, < 2", "version")),
    ('attribute = "${attr.v}"\n semver = ">= 1.2.0-rc.1"',
     Constraint("${attr.v}", ">= 1.2.0-rc.1", "semver")),
    ('attribute = "${attr.h}"\n regexp = "^web-[0-9]+$"',
     Constraint("${attr.h}", "^web-[0-9]+$", "regexp")),
    ('attribute = "${meta.tags}"\n set_contains = "a,b"',
     Constraint("${meta.tags}", "a,b", "set_contains")),
    ('attribute = "${meta.tags}"\n set_contains_any = "a,b"',
     Constraint("${meta.tags}", "a,b", "set_contains_any")),
    ('is_set = "${meta.rack}"', Constraint("${meta.rack}", "", "is_set")),
    ('is_not_set = "${meta.rack}"', Constraint("${meta.rack}", "", "is_not_set")),
    # A shorthand wins over an explicit operator, as jobspec2 applies it after.
    ('attribute = "${attr.v}"\n operator = "="\n version = "1.0"',
     Constraint("${attr.v}", "1.0", "version")),
])
def test_constraint_shorthands(body: str, expected: Constraint) -> None:
    job = parse_job(hcl(group_block=f"constraint {{\n {body}\n }}"))
    assert job.task_groups[0].constraints == [expected]


def test_affinity_and_spread_with_nomad_defaults() -> None:
    job = parse_job(hcl(
        'affinity {\n attribute = "${node.datacenter}"\n value = "dc1"\n }\n'
        '  spread {\n attribute = "${node.datacenter}"\n'
        '    target "dc1" { percent = 60 }\n target "dc2" { percent = 40 }\n }',
        'affinity {\n attribute = "${meta.rack}"\n regexp = "^r"\n weight = -30\n }'))
    # An unset weight is 50, as Nomad's API canonicalizes it.
    assert job.affinities == [Affinity("${node.datacenter}", "dc1", "=", 50)]
    assert job.spreads == [Spread("${node.datacenter}", 50, [SpreadTarget("dc1", 60),
                                                              SpreadTarget("dc2", 40)])]
    assert job.task_groups[0].affinities == [Affinity("${meta.rack}", "^r", "regexp", -30)]
    encoded = json.loads(encode_job(job))["Job"]
    assert encoded["Spreads"] == [{"Attribute": "${node.datacenter}", "Weight": 50,
                                   "SpreadTarget": [{"Value": "dc1", "Percent": 60},
                                                    {"Value": "dc2", "Percent": 40}]}]
    assert encoded["Affinities"] == [{"LTarget": "${node.datacenter}", "RTarget": "dc1",
                                      "Operand": "=", "Weight": 50}]


def test_hcl_and_its_json_give_the_same_job() -> None:
    job = parse_job(hcl('constraint { distinct_hosts = true }\n'
                        '  affinity {\n attribute = "${node.class}"\n value = "big"\n }',
                        'spread { attribute = "${meta.rack}" }',
                        'constraint {\n attribute = "${attr.os.name}"\n value = "ubuntu"\n }'))
    again = parse_job(encode_job(job).decode(), filename="job.json")
    assert again == job
    # Nomad's -output writes null for an empty list: accepted.
    doc = json.loads(encode_job(job))
    doc["Job"]["TaskGroups"][0]["Affinities"] = None
    assert parse_job(json.dumps(doc)).task_groups[0].affinities == []


def test_json_without_operand_is_refused_as_nomad_does() -> None:
    doc = json.loads(encode_job(parse_job(hcl())))
    doc["Job"]["Constraints"] = [{"LTarget": "${attr.a}", "RTarget": "x"}]
    problems = problems_of(json.dumps(doc))
    assert [(p.field, p.message) for p in problems] == [
        ("job.web.constraint.0", "Missing constraint operand"),
        ("job.web.constraint.0", 'Unknown constraint type ""')]


@pytest.mark.parametrize(("body", "message"), [
    ('attribute = "${attr.a}"\n operator = "~"\n value = "x"', 'Unknown constraint type "~"'),
    ('attribute = "${attr.a}"', 'Operator "=" requires an RTarget'),
    ('attribute = "${attr.a}"\n operator = "set_contains_any"',
     "Set contains constraint requires an RTarget"),
    ('attribute = "${attr.a}"\n operator = "is_set"\n value = "x"',
     'Operator "is_set" does not support an RTarget'),
    ('attribute = "${attr.a}"\n version = ">= x"',
     "Version constraint is invalid: Malformed constraint: >= x"),
    ('attribute = "${attr.a}"\n semver = "~> 1.2"',
     "Semver constraint is invalid: Malformed constraint: ~> 1.2"),
    ('attribute = "${attr.a}"\n semver = ">= 1.2.0beta"',
     "Semver constraint is invalid: Malformed constraint: >= 1.2.0beta"),
    ('distinct_property = "${meta.rack}"\n value = "0"',
     "Distinct Property must have an allowed count of 1 or greater: 0 < 1"),
    ('distinct_property = "${meta.rack}"\n value = "two"',
     'Failed to convert RTarget "two" to uint64: strconv.ParseUint: parsing "two": '
     "invalid syntax"),
    ('operator = "="\n value = "x"', "no attribute provided but is required by operator"),
    ('attribute = "$attr.a"\n value = "x"', 'attribute "$attr.a" is missing an opening brace'),
    ('attribute = "${node.rack}"\n value = "x"', 'unsupported attribute "${node.rack}"'),
])
def test_constraint_validation_messages(body: str, message: str) -> None:
    assert messages(hcl(f"constraint {{\n {body}\n }}")) == [(2, "job.web.constraint.0",
                                                                message)]


def test_unclosed_attribute_from_json() -> None:
    doc = json.loads(encode_job(parse_job(hcl())))
    doc["Job"]["TaskGroups"][0]["Constraints"] = [
        {"LTarget": "${attr.a", "RTarget": "x", "Operand": "="}]
    ((field, message),) = [(p.field, p.message) for p in problems_of(json.dumps(doc))]
    assert (field, message) == ("job.web.group.api.constraint.0",
                                'attribute "${attr.a" is missing a closing brace')


def test_regexp_that_does_not_compile() -> None:
    ((line, field, message),) = messages(hcl(group_block='constraint {\n attribute = '
                                                         '"${attr.a}"\n regexp = "[a"\n }'))
    assert (line, field) == (4, "job.web.group.api.constraint.0")
    assert message.startswith("Regular expression failed to compile: ")


@pytest.mark.parametrize(("body", "expected"), [
    ('attribute = "${attr.a}"\n value = "x"\n weight = 0', ["Affinity weight cannot be zero"]),
    ('attribute = "${attr.a}"\n value = "x"\n weight = 101',
     ["Affinity weight must be within the range [-100,100]"]),
    ('value = "x"', ["No LTarget provided but is required"]),
    ('attribute = "${attr.a}"\n operator = "is_set"', ['Unknown affinity operator "is_set"']),
    ('attribute = "${attr.a}"\n operator = "set_contains"',
     ["Set contains operators require an RTarget"]),
    ('attribute = "${attr.a}"\n version = "~> x"',
     ["Version affinity is invalid: Malformed constraint: ~> x"]),
])
def test_affinity_validation_messages(body: str, expected: list[str]) -> None:
    found = messages(hcl(task_block=f"affinity {{\n {body}\n }}"))
    assert found == [(7, "job.web.group.api.task.t.affinity.0", m) for m in expected]


def test_spread_validation_messages() -> None:
    found = messages(hcl(group_block='spread {\n weight = 0\n target "a" { percent = 80 }\n'
                                     ' target "a" { percent = 30 }\n target "b" '
                                     '{ percent = 101 }\n }'))
    assert sorted(m for _, _, m in found) == sorted([
        "Missing spread attribute",
        "Spread block must have a positive weight from 0 to 100",
        'Spread target value "a" already defined',
        'Spread target percentage for value "b" must be between 0 and 100',
        "Sum of spread target percentages must not be greater than 100%; got 211%"])
    assert {(line, field) for line, field, _ in found} == {(4, "job.web.group.api.spread.0")}


def test_distinct_constraints_are_refused_at_task_level() -> None:
    found = messages(hcl(task_block="constraint { distinct_hosts = true }\n"
                                    '      constraint { distinct_property = "${meta.r}" }'))
    assert [(f, m) for _, f, m in found] == [
        ("job.web.group.api.task.t.constraint.0.operator",
         "Constraint 1 has disallowed Operand at task level: distinct_hosts"),
        ("job.web.group.api.task.t.constraint.1.operator",
         "Constraint 2 has disallowed Operand at task level: distinct_property")]


def test_system_jobs_have_no_affinity_or_spread() -> None:
    # nomad/structs/structs.go Job, TaskGroup and Task `Validate`: refused, not validated.
    affinity = 'affinity {\n attribute = "${node.class}"\n value = "a"\n }'
    spread = 'spread { attribute = "${node.datacenter}" }'
    text = hcl(job_block=f'type = "system"\n {affinity}', group_block=spread,
               task_block=affinity)
    assert [(f, m) for _, f, m in messages(text)] == [
        ("job.web.affinity.0", "System jobs may not have an affinity block"),
        ("job.web.group.api.spread.0", "System jobs may not have a spread block"),
        ("job.web.group.api.task.t.affinity.0", "System jobs may not have an affinity block")]
    job = parse_job(text.replace('"system"', '"sysbatch"'))
    assert len(job.affinities) == len(job.task_groups[0].spreads) == 1


def test_bad_shorthand_values_and_unknown_fields() -> None:
    found = messages(hcl(group_block='constraint { distinct_hosts = "maybe" }\n'
                                     '    constraint { attribute = "${attr.a}"\n'
                                     '  value = "x"\n  operatr = "=" }'))
    assert found == [
        (4, "job.web.group.api.constraint.0.distinct_hosts", "expected true or false, got 'maybe'"),
        (7, "job.web.group.api.constraint.1.operatr",
         'unknown field "operatr"; did you mean "operator"?')]


def test_task_has_no_spread_block() -> None:
    ((_, field, message),) = messages(hcl(task_block='spread { attribute = "${meta.r}" }'))
    assert (field, message) == ("job.web.group.api.task.t.spread", 'unknown field "spread"')


def test_placement_blocks_round_trip_through_msgspec() -> None:
    c = Constraint("${attr.a}", "1", "<")
    assert msgspec.json.decode(msgspec.json.encode(c), type=Constraint) == c
    assert str(c) == "${attr.a} < 1"  # Nomad's Constraint.String, the filter reason
