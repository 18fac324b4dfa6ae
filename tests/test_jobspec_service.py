"""The `service`, `check` and `check_restart` blocks in job files (layer 0): Nomad's canonical
form (names, defaults, check_restart merged over the service's), Nomad's Validate messages
with the file, line and field of each, and the same job in HCL and JSON giving the same
struct."""

from __future__ import annotations

import json

import pytest

from tests.jobspec_support import problems_of
from yurt.runtime.jobspec import parse_job
from yurt.runtime.lib.durations import SECOND
from yurt.runtime.structs.service import CheckRestart


def hcl(group_block: str = "", task_block: str = "") -> str:
    """A job whose line 3 holds `group_block` and line 6 `task_block`."""
    return f'''job "web" {{
  group "api" {{
    {group_block}
    task "t" {{
      driver = "mock_driver"
      {task_block}
    }}
  }}
}}
'''


def messages(text: str) -> list[str]:
    return [p.message for p in problems_of(text)]


CHECK = 'check { type = "http" path = "/health" interval = "10s" timeout = "2s" }'


def test_group_and_task_services_take_nomads_canonical_form() -> None:
    job = parse_job(hcl(
        f'service {{ port = "8080" tags = ["a"] check_restart {{ limit = 3 }} {CHECK} }}',
        'service { port = "9090" }'))
    (group_service,) = job.task_groups[0].services
    assert group_service.name == "web-api"
    assert group_service.provider == "nomad"  # yurt's default: there is no Consul
    assert group_service.address_mode == "auto"
    assert group_service.on_update == "require_healthy"
    assert group_service.namespace == "default"
    (check,) = group_service.checks
    assert check.name == 'service: "web-api" check'
    assert check.task == ""  # a group check runs in no task
    assert check.on_update == "require_healthy"
    assert check.check_restart == CheckRestart(limit=3, grace=SECOND)
    (task_service,) = job.task_groups[0].tasks[0].services
    assert task_service.name == "web-api-t"
    assert task_service.task == "t"


def test_a_checks_check_restart_is_merged_over_its_services() -> None:
    job = parse_job(hcl(
        'service {\n port = "80"\n check_restart { limit = 3 grace = "9s" }\n'
        ' check {\n type = "tcp"\n interval = "10s"\n timeout = "2s"\n'
        ' check_restart { limit = 5 }\n }\n }'))
    (check,) = job.task_groups[0].services[0].checks
    assert check.check_restart == CheckRestart(limit=5, grace=9 * SECOND)


def test_service_names_interpolate_job_group_and_task() -> None:
    job = parse_job(hcl(task_block='service { name = "${BASE}-x" port = "1" }'))
    assert job.task_groups[0].tasks[0].services[0].name == "web-api-t-x"


def test_consul_provider_is_valid_as_in_nomad() -> None:
    """Nomad accepts it; yurt's native catalogue stands in for Consul's at run time."""
    job = parse_job(hcl('service {\n provider = "consul"\n port = "1"\n check {\n'
                        ' type = "grpc"\n interval = "10s"\n timeout = "1s"\n }\n }'))
    (service,) = job.task_groups[0].services
    assert service.provider == "consul"


@pytest.mark.parametrize(("check", "message"), [
    ('type = "grpc" interval = "10s" timeout = "1s"',
     'invalid check type ("grpc"), must be one of tcp, http, script'),
    ('type = "http" interval = "10s" timeout = "1s"', "http type must have http path"),
    ('type = "http" path = "http://x/y" interval = "10s" timeout = "1s"',
     "http type must have relative http path"),
    ('type = "http" path = "//[x" interval = "10s" timeout = "1s"',
     "http type must have valid http path"),
    ('type = "script" interval = "10s" timeout = "1s"',
     "script type must have a valid script path"),
    ('type = "tcp" timeout = "1s"',
     "missing required value interval. Interval cannot be less than 1s"),
    ('type = "tcp" interval = "500ms" timeout = "1s"',
     "interval (500ms) cannot be lower than 1s"),
    ('type = "tcp" interval = "5s"',
     "missing required value timeout. Timeout cannot be less than 1s"),
    ('type = "tcp" interval = "5s" timeout = "10ms"',
     "timeout (10ms) is lower than required minimum timeout 1s"),
    ('type = "tcp" interval = "5s" timeout = "1s" address_mode = "auto"',
     'invalid address_mode "auto" - auto only valid for services'),
    ('type = "tcp" interval = "5s" timeout = "1s" on_update = "ignore" '
     'check_restart { limit = 1 }',
     'on_update value "ignore" is not compatible with check_restart'),
    ('type = "tcp" interval = "5s" timeout = "1s" check_restart { limit = -1 }',
     "limit must be greater than or equal to 0 but found -1"),
    ('type = "tcp" interval = "5s" timeout = "1s" check_restart { ignore_warnings = true }',
     "ignore_warnings on check_restart only supported for Consul service checks"),
    ('type = "tcp" interval = "5s" timeout = "1s" on_update = "ignore_warnings"',
     "on_update may only be set to ignore_warnings for Consul service checks"),
    ('type = "http" path = "/" interval = "5s" timeout = "1s" method = "FETCH"',
     'method type "FETCH" not supported in Nomad http check'),
    ('type = "tcp" interval = "5s" timeout = "1s" success_before_passing = 2',
     "success_before_passing may only be set for Consul service checks"),
])
def test_check_rules_give_nomads_messages(check: str, message: str) -> None:
    (problem,) = problems_of(hcl(f'service {{ port = "80" check {{ {check} }} }}'))
    assert problem.message == message
    assert problem.line == 3


def test_a_check_needing_a_port_without_one() -> None:
    assert messages(hcl('service { check { type = "tcp" interval = "5s" timeout = "1s" } }')) \
        == ['Check service: "web-api" check invalid: check requires a port but neither '
            'check nor service "web-api" have a port']


def test_service_rules_give_nomads_messages() -> None:
    assert messages(hcl('service {\n name = "a_b"\n address_mode = "host"\n address = "x"\n'
                        ' on_update = "never"\n provider = "etcd"\n }')) == [
        'Service name must be valid per RFC 1123 and can contain only alphanumeric characters '
        'or dashes and must be no longer than 63 characters: "a_b"',
        'Service address_mode must be "auto" if address is set',
        'Service on_update must be "require_healthy", "ignore_warnings", or "ignore"; '
        'not "never"',
        'Service provider must be "consul", or "nomad"; not "etcd"']


def test_duplicates_and_unknown_ports() -> None:
    assert messages(hcl('service { port = "1" }\nservice { port = "1" }',
                        'service { port = "db" }')) == [
        "Services are not unique: group->web-api:1",
        'port label "db" referenced by services web-api-t does not exist']
    assert messages(hcl(task_block='service { port = "1" }\nservice { port = "1" }')) == [
        "Services are not unique: t->web-api-t:1", 'service "web-api-t" is duplicate']


def test_a_group_check_naming_a_missing_task() -> None:
    assert messages(hcl('service { port = "1" check { type = "script" command = "x" '
                        'interval = "5s" timeout = "1s" task = "nope" } }')) == [
        'Check service: "web-api" check invalid: refers to non-existent task nope']


def test_json_as_nomad_writes_it_parses_to_the_same_job() -> None:
    text = hcl(f'service {{ name = "redis-cache" port = "6379" tags = ["global", "cache"] '
               f'provider = "nomad" {CHECK} }}')
    service = {"Name": "redis-cache", "TaskName": "", "PortLabel": "6379", "AddressMode": "",
               "Address": "", "EnableTagOverride": False, "Tags": ["global", "cache"],
               "CanaryTags": None, "CheckRestart": None, "Connect": None, "Meta": None,
               "CanaryMeta": None, "TaggedAddresses": None, "OnUpdate": "", "Identity": None,
               "Weights": None, "Provider": "nomad", "Cluster": "", "Kind": "",
               "Checks": [{"Type": "http", "Path": "/health", "Interval": 10 * SECOND,
                           "Timeout": 2 * SECOND, "Header": None, "Args": None,
                           "CheckRestart": None, "Advertise": "", "Expose": False}]}
    body = {"Job": {"ID": "web", "TaskGroups": [
        {"Name": "api", "Services": [service],
         "Tasks": [{"Name": "t", "Driver": "mock_driver"}]}]}}
    assert parse_job(json.dumps(body), filename="job.json") == parse_job(text)
