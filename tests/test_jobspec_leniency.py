"""What Nomad accepts and yurt once refused (layer 0): a job-level `task` wrapped in a group of
its name (jobspec2/parse_job.go `normalizeJob`), HCL2's conversion of numeric and boolean
strings to a field's type and of numbers to strings (go-cty `convert`), and a
`provider = "consul"` service, registered in yurt's native catalogue."""

from __future__ import annotations

import pytest

from yurt.runtime.client.checks.registration import expected_checks, nomad_services
from yurt.runtime.errors import JobSpecError
from yurt.runtime.jobspec import parse_job
from yurt.runtime.structs import Allocation
from yurt.runtime.structs.node import NodeDeviceResource


def test_a_job_level_task_becomes_a_group_of_its_name_before_the_groups() -> None:
    job = parse_job('job "solo" {\n  task "t" {\n    driver = "mock_driver"\n  }\n'
                    '  group "g" {\n    task "u" {\n      driver = "mock_driver"\n    }\n  }\n}\n')
    assert [(g.name, [t.name for t in g.tasks]) for g in job.task_groups] == [
        ("t", ["t"]), ("g", ["u"])]
    assert job.task_groups[0].count == 1


def test_a_problem_in_a_lone_task_keeps_its_line() -> None:
    with pytest.raises(JobSpecError) as info:
        parse_job('job "solo" {\n  task "t" {\n    driver = "mock_driver"\n'
                  '    kill_timeout = "soon"\n  }\n}\n')
    (problem,) = info.value.problems
    assert (problem.line, problem.field) == (4, "job.solo.group.t.task.t.kill_timeout")


def test_hcl_converts_strings_and_numbers_to_the_fields_type() -> None:
    job = parse_job('''job "n" {
  priority = "70"
  group "g" {
    count = "2"
    task "t" {
      driver = "mock_driver"
      leader = "true"
      resources {
        cpu    = "500"
        memory = "256"
      }
      service {
        port = 8080
      }
    }
  }
}
''')
    task = job.task_groups[0].tasks[0]
    assert (job.priority, job.task_groups[0].count) == (70, 2)
    assert (task.resources.cpu, task.resources.memory, task.leader) == (500, 256, True)
    assert task.services[0].port == "8080"


def test_a_non_numeric_string_is_still_refused_in_the_jobspecs_words() -> None:
    with pytest.raises(JobSpecError) as info:
        parse_job('job "n" {\n  group "g" {\n    task "t" {\n      driver = "mock_driver"\n'
                  '      resources {\n        cpu = "5.5"\n      }\n    }\n  }\n}\n')
    (problem,) = info.value.problems
    assert problem.message == 'expected a whole number, got a string "5.5"'


def test_a_consul_service_goes_to_the_native_catalogue_with_the_checks_yurt_runs() -> None:
    job = parse_job('''job "c" {
  group "g" {
    network {
      port "http" {}
    }
    service {
      provider = "consul"
      name     = "web"
      port     = "http"
      check {
        type     = "http"
        path     = "/health"
        interval = "10s"
        timeout  = "2s"
      }
      check {
        type     = "grpc"
        interval = "10s"
        timeout  = "2s"
      }
    }
    task "t" {
      driver = "mock_driver"
    }
  }
}
''')
    group = job.task_groups[0]
    (service,) = nomad_services(group.services)
    assert (service.name, [c.type for c in service.checks]) == ("web", ["http"])
    alloc = Allocation(id="a", name="c.g[0]", job_id="c", task_group="g", job=job)
    assert expected_checks(alloc) == 1


def test_a_device_count_of_zero_is_valid_as_in_nomad() -> None:
    job = parse_job('job "d" {\n  group "g" {\n    task "t" {\n      driver = "mock_driver"\n'
                    '      resources {\n        device "nvidia/gpu" {\n          count = 0\n'
                    '        }\n      }\n    }\n  }\n}\n')
    (device,) = job.task_groups[0].tasks[0].resources.devices
    assert device.count == 0


def _resources(body: str) -> str:
    return ('job "r" {\n  group "g" {\n    task "t" {\n      driver = "mock_driver"\n'
            f'      resources {{\n        {body}\n      }}\n    }}\n  }}\n}}\n')


def test_memory_max_minus_one_means_no_limit_as_in_nomad() -> None:
    # structs.go `Resources.Validate`: -1 is `MemoryNoLimit`, not a size below `memory`.
    job = parse_job(_resources("memory = 256\n        memory_max = -1"))
    assert job.task_groups[0].tasks[0].resources.memory_max == -1
    with pytest.raises(JobSpecError) as info:
        parse_job(_resources("memory = 256\n        memory_max = -2"))
    (problem,) = info.value.problems
    assert problem.message == "memory_max (-2 MB) must be at least memory (256 MB)"


@pytest.mark.parametrize(("secrets", "message"), [
    (300, "SecretsMB value (300) cannot be larger than MemoryMB value (256)"),
    (-1, "SecretsMB value (-1) cannot be negative"),
])
def test_secrets_size_follows_nomads_bounds(secrets: int, message: str) -> None:
    with pytest.raises(JobSpecError) as info:
        parse_job(_resources(f"memory = 256\n        secrets = {secrets}"))
    (problem,) = info.value.problems
    assert (problem.field, problem.message) == ("job.r.group.g.task.t.resources.secrets",
                                                message)
    assert parse_job(_resources("memory = 256\n        secrets = 256"))


def test_any_device_name_registers_and_splits_in_three_as_in_nomad() -> None:
    # structs.go `RequestedDevice.Validate` refuses only an empty name; `ID` splits the
    # name in at most three parts, so the device's own name may hold a "/".
    job = parse_job(_resources('device "nvidia/gpu/a100/80g" {}\n        device "x//y" {}'))
    wanted, odd = job.task_groups[0].tasks[0].resources.devices
    device = NodeDeviceResource(vendor="nvidia", type="gpu", name="a100/80g")
    assert device.matches(wanted.name)
    assert not device.matches("nvidia/gpu/a100")
    assert not device.matches(odd.name)
