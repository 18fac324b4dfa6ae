"""The `periodic`, `parameterized` and `dispatch_payload` stanzas: defaults, rules, positions."""

from __future__ import annotations

import json

import pytest

from tests.jobspec_support import problems_of
from yurt.runtime.errors import JobSpecError
from yurt.runtime.jobspec import encode_job, parse_job
from yurt.runtime.structs import DispatchPayloadConfig, ParameterizedJobConfig, PeriodicConfig


def hcl(job_body: str, task_body: str = "", job_type: str = "batch") -> str:
    return f'''job "nightly" {{
  type = "{job_type}"
{job_body}
  group "g" {{
    task "t" {{
      driver = "raw_exec"
      config {{
        command = "/bin/true"
      }}
{task_body}
    }}
  }}
}}
'''


def test_periodic_block_with_nomad_defaults() -> None:
    job = parse_job(hcl('  periodic {\n    crons = ["*/15 * * * *", "0 3 * * *"]\n  }'))
    assert job.periodic == PeriodicConfig(crons=["*/15 * * * *", "0 3 * * *"])
    assert job.periodic.enabled
    assert job.periodic.time_zone == "UTC"
    assert not job.periodic.prohibit_overlap
    assert job.periodic.spec_type == "cron"
    paris = parse_job(hcl('  periodic {\n    cron = "@daily"\n    time_zone = "Europe/Paris"\n'
                          '    prohibit_overlap = true\n    enabled = false\n  }')).periodic
    assert paris == PeriodicConfig(enabled=False, cron="@daily", prohibit_overlap=True,
                                   time_zone="Europe/Paris")


def test_periodic_json_names_are_nomads() -> None:
    text = json.dumps({"Job": {
        "ID": "nightly", "Type": "batch",
        "Periodic": {"Enabled": True, "Spec": "30 2 * * *", "SpecType": "cron",
                     "ProhibitOverlap": True, "TimeZone": "America/New_York"},
        "TaskGroups": [{"Name": "g", "Tasks": [{
            "Name": "t", "Driver": "raw_exec", "Config": {"command": "/bin/true"},
            "DispatchPayload": {"File": "input.txt"}}]}],
        "ParameterizedJob": {"Payload": "", "MetaRequired": ["a"], "MetaOptional": ["b"]}}})
    job = parse_job(text)
    assert job.periodic == PeriodicConfig(cron="30 2 * * *", prohibit_overlap=True,
                                          time_zone="America/New_York")
    assert job.parameterized == ParameterizedJobConfig(payload="optional", meta_required=["a"],
                                                       meta_optional=["b"])
    assert job.task_groups[0].tasks[0].dispatch_payload == DispatchPayloadConfig(file="input.txt")
    encoded = json.loads(encode_job(job))["Job"]
    assert encoded["Periodic"]["Spec"] == "30 2 * * *"
    assert encoded["ParameterizedJob"]["MetaRequired"] == ["a"]
    assert encoded["ParentID"] == ""
    assert encoded["Dispatched"] is False
    assert encoded["Payload"] is None
    assert parse_job(encode_job(job).decode()) == job


def test_parameterized_and_dispatch_payload_in_hcl() -> None:
    job = parse_job(hcl('  parameterized {\n    payload = "required"\n'
                        '    meta_required = ["who"]\n  }',
                        '      dispatch_payload {\n        file = "in/data.json"\n      }'))
    assert job.parameterized == ParameterizedJobConfig(payload="required", meta_required=["who"])
    assert job.task_groups[0].tasks[0].dispatch_payload == DispatchPayloadConfig("in/data.json")


def test_periodic_problems_name_file_line_and_field() -> None:
    problems = problems_of(hcl('  periodic {\n    cron = "61 * * * *"\n'
                               '    time_zone = "Mars/Olympus"\n  }', job_type="service"))
    by_field = {p.field: p for p in problems}
    assert set(by_field) == {"job.nightly.periodic", "job.nightly.periodic.cron",
                             "job.nightly.periodic.time_zone"}
    assert by_field["job.nightly.periodic"].message == (
        'periodic can only be used with "batch" or "sysbatch" jobs, not "service"')
    assert by_field["job.nightly.periodic.cron"].line == 4
    assert by_field["job.nightly.periodic.cron"].message.startswith(
        'invalid cron spec "61 * * * *"')
    assert by_field["job.nightly.periodic.time_zone"].line == 5
    assert "job.nomad.hcl:5" in JobSpecError("job.nomad.hcl", problems).render()


@pytest.mark.parametrize(("body", "message"), [
    ('    cron = "@daily"\n    crons = ["@hourly"]', "only one of cron or crons may be used"),
    ('    time_zone = "UTC"', "must specify a cron spec (cron or crons)"),
])
def test_periodic_spec_rules(body: str, message: str) -> None:
    (p,) = problems_of(hcl(f"  periodic {{\n{body}\n  }}"))
    assert (p.field, p.message) == ("job.nightly.periodic", message)


def test_disabled_periodic_is_not_checked_as_nomad() -> None:
    job = parse_job(hcl('  periodic {\n    cron = "not a cron"\n    enabled = false\n  }',
                        job_type="service"))
    assert job.periodic is not None
    assert not job.periodic.enabled


@pytest.mark.parametrize("spec", ["*/5 * * * *", "0 0 3 * * * *", "0 3 * * * 2030",
                                  "@weekly", "0 0 L * ?", "0 9 * * MON-FRI"])
def test_cron_forms_nomad_accepts(spec: str) -> None:
    job = parse_job(hcl(f'  periodic {{\n    cron = "{spec}"\n  }}'))
    assert job.periodic is not None
    assert job.periodic.cron == spec


@pytest.mark.parametrize("spec", ["* * * *", "@midnightly", "0 0 32 * *", "a b c d e"])
def test_cron_forms_nomad_refuses(spec: str) -> None:
    (p,) = problems_of(hcl(f'  periodic {{\n    cron = "{spec}"\n  }}'))
    assert p.field == "job.nightly.periodic.cron"


def test_parameterized_rules() -> None:
    problems = problems_of(hcl('  parameterized {\n    payload = "sometimes"\n'
                               '    meta_required = ["a", "b"]\n    meta_optional = ["b"]\n  }',
                               job_type="service"))
    assert {(p.field, p.message) for p in problems} == {
        ("job.nightly.parameterized",
         'parameterized can only be used with "batch" or "sysbatch" jobs, not "service"'),
        ("job.nightly.parameterized.payload",
         'unknown payload requirement "sometimes"; expected one of "optional", "required", '
         '"forbidden"'),
        ("job.nightly.parameterized",
         "required and optional meta keys should be disjoint; these are in both: b"),
    }


@pytest.mark.parametrize(("file", "ok"), [("in.txt", True), ("/abs.txt", True),
                                          ("../../alloc.txt", True), ("../../../out", False),
                                          ("a/../../../../x", False)])
def test_dispatch_payload_file_must_stay_in_the_allocation(file: str, ok: bool) -> None:
    text = hcl('  parameterized {}', f'      dispatch_payload {{\n        file = "{file}"\n'
                                     '      }')
    if ok:
        assert parse_job(text).task_groups[0].tasks[0].dispatch_payload is not None
    else:
        (p,) = problems_of(text)
        assert p.field == "job.nightly.group.g.task.t.dispatch_payload.file"
        assert p.message == f'"{file}" escapes the allocation directory'
