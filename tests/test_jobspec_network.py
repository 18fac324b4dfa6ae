"""The group `network` block in job files (layer 0): labelled `port` blocks split into static
and dynamic ports as Nomad's HCL parser splits them, the same job from `nomad job run -output`
JSON, and Nomad's checks with the file, line and field of each problem."""

from __future__ import annotations

import json

import pytest

from tests.jobspec_support import problems_of
from yurt.runtime.errors import JobSpecError
from yurt.runtime.jobspec import parse_job
from yurt.runtime.structs.network import NetworkResource, Port


def hcl(network: str) -> str:
    """A job whose network block starts on line 3."""
    return f'''job "web" {{
  group "api" {{
    {network}
    task "t" {{
      driver = "mock_driver"
    }}
  }}
}}
'''


TWO_PORTS = '''network {
      mode = "host"
      port "http" {}
      port "db" {
        static = 6379
        to     = 6379
      }
    }'''

#: As `nomad job run -output` writes the group's network of TWO_PORTS.
OUTPUT_JSON = {"Job": {"ID": "web", "TaskGroups": [{
    "Name": "api",
    "Networks": [{"Mode": "host", "Device": "", "CIDR": "", "IP": "", "Hostname": "",
                  "MBits": None, "DNS": None, "CNI": None,
                  "ReservedPorts": [{"Label": "db", "Value": 6379, "To": 6379,
                                     "HostNetwork": "", "IgnoreCollision": False}],
                  "DynamicPorts": [{"Label": "http", "Value": 0, "To": 0,
                                    "HostNetwork": "", "IgnoreCollision": False}]}],
    "Tasks": [{"Name": "t", "Driver": "mock_driver"}]}]}}


def test_port_blocks_split_into_static_and_dynamic_ports() -> None:
    (network,) = parse_job(hcl(TWO_PORTS)).task_groups[0].networks
    assert network == NetworkResource(
        mode="host",
        reserved_ports=[Port(label="db", value=6379, to=6379, host_network="default")],
        dynamic_ports=[Port(label="http", host_network="default")])


def test_nomads_json_output_gives_the_same_job() -> None:
    assert parse_job(json.dumps(OUTPUT_JSON), filename="web.json") == parse_job(hcl(TWO_PORTS))


def test_an_unset_mode_is_host_and_dns_is_kept() -> None:
    (network,) = parse_job(hcl('network {\n port "http" { to = -1 }\n dns {\n'
                               ' servers = ["1.1.1.1"]\n }\n }')).task_groups[0].networks
    assert network.mode == "host"
    assert network.dns is not None
    assert network.dns.servers == ["1.1.1.1"]
    assert network.dynamic_ports[0].to == -1


def test_bridge_and_cni_modes_are_valid_as_in_nomad() -> None:
    for mode in ("bridge", "cni/mynet", "none"):
        (network,) = parse_job(hcl(f'network {{\n mode = "{mode}"\n port "http" {{ to = 8080 }}'
                                   '\n }')).task_groups[0].networks
        assert network.mode == mode


CASES = [
    # (network block, line, field, message)
    ('network {\n port "http" {}\n port "http" { static = 80 }\n }', 5,
     "job.web.group.api.network.0.port.http", "Port label http already in use by taskgroup "
                                              "network"),
    ('network {\n port "a" { static = 80 }\n port "b" { static = 80 }\n }', 5,
     "job.web.group.api.network.0.port.b.static",
     "Static port 80 already reserved by taskgroup network:a"),
    ('network {\n port "a" { static = 70000 }\n }', 4,
     "job.web.group.api.network.0.port.a.static", "Port a (70000) cannot be greater than 65535"),
    ('network {\n port "a" { static = -2 }\n }', 4,
     "job.web.group.api.network.0.port.a.static", "Port a (-2) cannot be less than 0"),
    ('network {\n port "a" { to = -2 }\n }', 4,
     "job.web.group.api.network.0.port.a.to",
     'Port "a" cannot be mapped to negative value -2'),
    ('network {\n port "a" { to = 65536 }\n }', 4,
     "job.web.group.api.network.0.port.a.to",
     'Port "a" cannot be mapped to a port (65536) greater than 65535'),
    ('network {\n hostname = "not a name"\n }', 4,
     "job.web.group.api.network.0.hostname", "Hostname is not a valid DNS name"),
    ('network {}\n network {}', 4, "job.web.group.api.network.1",
     "only one network block per group is supported (Nomad assigns the first one only)"),
    ('network {\n port "a" { statc = 1 }\n }', 4,
     "job.web.group.api.network.0.port.a.statc", 'unknown field "statc"; did you mean '
                                                 '"static"?'),
]


@pytest.mark.parametrize(("block", "line", "field", "message"), CASES,
                         ids=[c[3][:30] for c in CASES])
def test_problems_name_file_line_and_field(block: str, line: int, field: str,
                                           message: str) -> None:
    (problem,) = problems_of(hcl(block))
    assert (problem.line, problem.field, problem.message) == (line, field, message)


def test_ignore_collision_allows_a_static_port_twice() -> None:
    job = parse_job(hcl('network {\n port "a" { static = 80 }\n'
                        ' port "b" {\n static = 80\n ignore_collision = true\n }\n }'))
    assert [p.value for p in job.task_groups[0].networks[0].reserved_ports] == [80, 80]


def test_json_problems_are_named_in_the_jobspecs_words() -> None:
    doc = json.loads(json.dumps(OUTPUT_JSON))
    doc["Job"]["TaskGroups"][0]["Networks"][0]["ReservedPorts"][0]["To"] = -3
    with pytest.raises(JobSpecError) as info:
        parse_job(json.dumps(doc, indent=1), filename="web.json")
    (problem,) = info.value.problems
    assert problem.field == "job.web.group.api.network.0.reserved_ports.db.to"
    assert problem.message == 'Port "db" cannot be mapped to negative value -3'
    assert problem.line > 1


def test_a_task_level_network_moves_to_the_group() -> None:
    job = parse_job('''job "web" {
  group "api" {
    task "t" {
      driver = "mock_driver"
      resources {
        network {
          port "http" {}
          port "admin" { static = 8081 }
        }
      }
    }
  }
}
''', filename="web.nomad.hcl")
    group = job.task_groups[0]
    assert group.tasks[0].resources.networks == []
    (network,) = group.networks
    assert [p.label for p in network.dynamic_ports] == ["http"]
    assert [(p.label, p.value) for p in network.reserved_ports] == [("admin", 8081)]
