"""Job files: HCL and JSON to structs, Nomad's defaults and rules, errors that point (layer 0)."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from yurt.runtime.errors import JobSpecError, SpecProblem
from yurt.runtime.jobspec import encode_job, load_job, parse_job
from yurt.runtime.lib.durations import HOUR, MILLISECOND, MINUTE, SECOND
from yurt.runtime.structs import Job, RequestedDevice, RestartPolicy

ROOT = Path(__file__).parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.nomad.*"))
DATA = Path(__file__).parent / "data"


def problems_of(text: str, filename: str = "job.nomad.hcl") -> list[SpecProblem]:
    with pytest.raises(JobSpecError) as info:
        parse_job(text, filename=filename)
    assert info.value.file == filename
    return info.value.problems


def only_problem(text: str, filename: str = "job.nomad.hcl") -> SpecProblem:
    problems = problems_of(text, filename)
    assert len(problems) == 1, problems
    return problems[0]


# --------------------------------------------------------------------------- good files


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_validates(path: Path) -> None:
    job = load_job(path)
    assert job.task_groups
    assert all(t.restart_policy is not None for g in job.task_groups for t in g.tasks)


def test_examples_cover_what_the_docs_promise() -> None:
    names = {p.name for p in EXAMPLES}
    assert {"batch-raw-exec.nomad.hcl", "service-leader-sidecar.nomad.hcl",
            "mock.nomad.hcl", "mock.nomad.json"} <= names
    batch = load_job(ROOT / "examples/batch-raw-exec.nomad.hcl")
    hooks = {t.lifecycle.hook if t.lifecycle else "main" for t in batch.task_groups[0].tasks}
    assert batch.type == "batch"
    assert hooks == {"prestart", "main", "poststop"}
    service = load_job(ROOT / "examples/service-leader-sidecar.nomad.hcl")
    tasks = service.task_groups[0].tasks
    assert any(t.leader for t in tasks)
    assert any(t.lifecycle is not None and t.lifecycle.sidecar for t in tasks)


def test_hcl_and_json_of_the_same_job_are_equal() -> None:
    from_hcl = load_job(DATA / "full.nomad.hcl")
    from_json = load_job(DATA / "full.nomad.json")
    assert from_hcl == from_json
    assert load_job(ROOT / "examples/mock.nomad.hcl") == load_job(ROOT / "examples/mock.nomad.json")


def test_full_job_values() -> None:
    job = load_job(DATA / "full.nomad.hcl")
    assert (job.region, job.namespace, job.name, job.priority) == ("eu", "prod", "Full Job", 70)
    assert job.meta == {"owner": "team-a", "tier": "1"}
    group = job.task_groups[0]
    assert group.ephemeral_disk.size == 500
    assert group.ephemeral_disk.sticky
    server = group.tasks[0]
    assert server.kill_timeout == 90 * SECOND
    assert server.shutdown_delay == 250 * MILLISECOND
    assert server.env == {"PORT": "8080", "DEBUG": "false", "NODE": "${node.unique.name}"}
    assert server.config["args"][-1] == "${NOMAD_PORT_http}"  # $${ is HCL's escape for ${
    assert server.resources.devices == [RequestedDevice(name="nvidia/gpu", count=2),
                                        RequestedDevice(name="fpga", count=1)]
    # The task's restart block overrides only what it sets; the rest comes from the group.
    assert server.restart_policy == RestartPolicy(attempts=1, interval=10 * MINUTE,
                                                  delay=30 * SECOND, mode="delay",
                                                  render_templates=True)


MINIMAL = """
job "m" {
  type = "%s"
  group "g" {
    task "t" {
      driver = "mock_driver"
    }
  }
}
"""


@pytest.mark.parametrize(("job_type", "attempts", "interval"), [
    ("service", 2, 30 * MINUTE),
    ("batch", 3, 24 * HOUR),
    ("sysbatch", 3, 24 * HOUR),
])
def test_nomad_defaults(job_type: str, attempts: int, interval: int) -> None:
    job = parse_job(MINIMAL % job_type)
    assert (job.name, job.priority, job.datacenters) == ("m", 50, ["*"])
    group = job.task_groups[0]
    assert group.count == 1
    assert group.ephemeral_disk.size == 300
    expected = RestartPolicy(attempts=attempts, interval=interval, delay=15 * SECOND,
                             mode="fail", render_templates=False)
    assert group.restart_policy == expected
    task = group.tasks[0]
    assert task.restart_policy == expected
    assert task.kill_timeout == 5 * SECOND
    assert (task.log_config.max_files, task.log_config.max_file_size) == (10, 10)
    assert (task.resources.cpu, task.resources.memory) == (100, 300)


def test_parse_output_round_trips() -> None:
    job = load_job(DATA / "full.nomad.hcl")
    encoded = encode_job(job)
    assert json.loads(encoded)["Job"]["ID"] == "full"
    assert parse_job(encoded.decode(), filename="out.json") == job


def test_nomad_null_and_zero_fields_are_accepted() -> None:
    doc = {"Job": {"ID": "j", "Constraints": None, "Dispatched": False, "ParentID": "",
                   "TaskGroups": [{"Name": "g", "Networks": [], "Count": None,
                                   "Tasks": [{"Name": "t", "Driver": "mock_driver",
                                              "Kind": "", "Services": None}]}]}}
    job = parse_job(json.dumps(doc), filename="j.json")
    assert job.task_groups[0].count == 1


def test_bare_job_object_is_accepted_as_json() -> None:
    doc = {"ID": "j", "TaskGroups": [{"Name": "g", "Tasks": [{"Name": "t",
                                                              "Driver": "mock_driver"}]}]}
    assert parse_job(json.dumps(doc), filename="j.json").id == "j"


# --------------------------------------------------------------------------- bad files


BAD_FIELD = """job "web" {
  group "api" {
    task "server" {
      driver = "raw_exec"
      colour = "blue"
      config {
        command = "/bin/true"
      }
    }
  }
}
"""


def test_unknown_field() -> None:
    p = only_problem(BAD_FIELD)
    assert (p.line, p.column) == (5, 7)
    assert p.field == "job.web.group.api.task.server.colour"
    assert p.message == 'unknown field "colour"'
    assert p.render("job.nomad.hcl") == (
        'job.nomad.hcl:5:7: job.web.group.api.task.server.colour: unknown field "colour"')


def test_unknown_field_suggests_the_close_one() -> None:
    p = only_problem(BAD_FIELD.replace("colour", "kill_timout"))
    assert p.message == 'unknown field "kill_timout"; did you mean "kill_timeout"?'


def test_a_vault_block_says_what_yurt_offers_instead() -> None:
    p = only_problem(BAD_FIELD.replace('colour = "blue"', 'vault { role = "x" }'))
    assert p.field == "job.web.group.api.task.server.vault"
    assert p.message == ('"vault" is Vault\'s: yurt has no Vault; keep secrets in Nomad '
                         "Variables and read them with a template's nomadVar instead")
    assert p.line == 5


def test_bad_duration() -> None:
    p = only_problem(BAD_FIELD.replace('colour = "blue"', 'kill_timeout = "5 seconds"'))
    assert (p.line, p.field) == (5, "job.web.group.api.task.server.kill_timeout")
    assert 'expected a duration such as "15s"' in p.message
    assert '"5 seconds"' in p.message


TWO_LEADERS = """job "web" {
  group "api" {
    task "a" {
      driver = "mock_driver"
      leader = true
    }
    task "b" {
      driver = "mock_driver"
      leader = true
    }
  }
}
"""


def test_two_leaders() -> None:
    p = only_problem(TWO_LEADERS)
    assert (p.line, p.column) == (9, 7)
    assert p.field == "job.web.group.api.task.b.leader"
    assert p.message == 'only one task may be marked as leader; "a" already is'


def test_duplicate_task_names_point_at_the_second() -> None:
    p = only_problem(TWO_LEADERS.replace('task "b"', 'task "a"').replace(
        "leader = true\n    }\n  }", "leader = false\n    }\n  }"))
    assert (p.line, p.column) == (7, 5)
    assert p.field == "job.web.group.api.task.a"
    assert p.message == 'task name "a" is used more than once'


RESTART = """job "web" {
  group "api" {
    restart {
      attempts = %s
      delay    = "%s"
      interval = "%s"
      mode     = "%s"
    }
    task "t" {
      driver = "mock_driver"
    }
  }
}
"""


def test_bad_restart_mode() -> None:
    p = only_problem(RESTART % (2, "15s", "1m", "bogus"))
    assert (p.line, p.field) == (7, "job.web.group.api.restart.mode")
    assert p.message == 'expected "delay" or "fail", got "bogus"'


def test_attempts_times_delay_beyond_interval() -> None:
    p = only_problem(RESTART % (3, "30s", "1m", "fail"))
    assert (p.line, p.field) == (3, "job.web.group.api.restart")
    assert p.message == ("cannot restart 3 times in an interval of 1m0s with a delay of 30s "
                         "(attempts × delay must not exceed interval)")


def test_zero_attempts_needs_mode_fail_and_interval_minimum() -> None:
    problems = problems_of(RESTART % (0, "1s", "2s", "delay"))
    assert [(p.line, p.field) for p in problems] == [
        (6, "job.web.group.api.restart.interval"),
        (7, "job.web.group.api.restart.mode"),
    ]
    assert "at least 5s" in problems[0].message
    assert "ambiguous" in problems[1].message


def test_task_restart_problem_inherited_from_group_is_reported_once() -> None:
    text = (RESTART % (3, "30s", "1m", "fail")).replace(
        'driver = "mock_driver"', 'driver = "mock_driver"\n      restart { mode = "delay" }')
    problems = problems_of(text)
    assert [p.field for p in problems] == ["job.web.group.api.restart"]


def test_a_tasks_own_restart_block_is_not_refused() -> None:
    """Nomad's `Task.Validate` checks no restart policy (HashiCorp's getting-started
    pytechco-employee job has a task `restart` of 3 × 30s in a 1m interval)."""
    text = (RESTART % (2, "15s", "30m", "fail")).replace(
        'driver = "mock_driver"', 'driver = "mock_driver"\n      restart {\n'
        '        attempts = 3\n        delay = "30s"\n        interval = "1m"\n      }')
    task = parse_job(text).task_groups[0].tasks[0]
    assert task.restart_policy is not None
    assert (task.restart_policy.attempts, task.restart_policy.interval) == (3, 60 * SECOND)


def test_syntax_error_has_line_and_column() -> None:
    p = only_problem('job "x" {\n  type = \n}\n')
    assert (p.line, p.column, p.field) == (2, 10, "syntax")
    assert p.message.startswith("unexpected")


def test_unterminated_block() -> None:
    p = only_problem('job "x" {\n  group "g" {\n')
    assert p.field == "syntax"
    assert p.line == 3
    assert "end of file" in p.message


def test_many_problems_are_reported_together_in_line_order() -> None:
    text = """job "web" {
  type = "daemon"
  priority = 500
  group "api" {
    count = "two"
    task "server" {
      driver = "podman"
      lifecycle {
        hook = "prestop"
      }
      resources {
        memory = 5
      }
      logs {
        max_files = 40
      }
      config {
        whatever = 1
      }
    }
  }
}
"""
    problems = problems_of(text)
    assert [(p.line, p.field.rsplit(".", 1)[-1]) for p in problems] == [
        (2, "type"), (3, "priority"), (4, "api"), (5, "count"), (9, "hook"), (12, "memory"),
        (14, "logs"),
    ]  # "api": its one task, with a (wrong) lifecycle hook, is no main task, as in Nomad
    assert "log storage (40 × 10 MB = 400 MB)" in problems[-1].message


def test_driver_config_is_checked() -> None:
    text = """job "w" {
  group "g" {
    task "a" {
      driver = "mock_driver"
      config {
        run_for = "3x"
        colour  = "red"
      }
    }
    task "b" {
      driver = "raw_exec"
      config {
        args = ["x"]
      }
    }
  }
}
"""
    problems = problems_of(text)
    assert [(p.line, p.field, p.message) for p in problems] == [  # all of a block's at once
        (6, "job.w.group.g.task.a.config.run_for",
         'expected a duration such as "15s", "1m30s" or "100ms", got "3x"'),
        (7, "job.w.group.g.task.a.config.colour", 'unknown field "colour"'),
        (12, "job.w.group.g.task.b.config", 'raw_exec needs "command"'),
    ]
    bad_duration = only_problem(text.replace('        colour  = "red"\n', "").replace(
        'args = ["x"]', 'command = "/bin/true"'))
    assert (bad_duration.line, bad_duration.field) == (6, "job.w.group.g.task.a.config.run_for")


def test_two_jobs_in_one_file() -> None:
    problems = problems_of(MINIMAL % "batch" + 'job "other" {}\n')
    assert problems[0].message.startswith('expected exactly one job "<id>"')
    assert problems[0].line == 10


# --------------------------------------------------------------------------- JSON errors


def test_json_errors_have_lines_and_jobspec_field_paths() -> None:
    text = """{"Job": {
  "ID": "x",
  "TaskGroups": [
    {"Name": "g", "Count": "3",
     "Tasks": [{"Name": "t", "Driver": "mock_driver",
                "KillTimeout": "abc",
                "VolumeMounts": [{"Volume": 5}]}]}
  ]
}}
"""
    problems = problems_of(text, filename="job.json")
    assert [(p.line, p.field) for p in problems] == [
        (4, "job.x.group.g.count"),
        (6, "job.x.group.g.task.t.kill_timeout"),
        # The mount's volume is dropped as invalid, so Nomad's mount checks see none.
        (7, "job.x.group.g.task.t.volume_mount.0"),
        (7, "job.x.group.g.task.t.volume_mount.0"),
        (7, "job.x.group.g.task.t.volume_mount.0.volume"),
    ]
    assert problems[0].message == 'expected a whole number, got a string "3"'


def test_json_syntax_error() -> None:
    p = only_problem('{"Job": {"ID": "x",\n "TaskGroups": [\n', filename="job.json")
    assert (p.line, p.field) == (3, "syntax")


def test_json_that_is_not_a_nomad_job() -> None:
    p = only_problem('{"job": {"x": {}}}', filename="job.json")
    assert "expected Nomad API JSON" in p.message


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(JobSpecError) as info:
        load_job(tmp_path / "missing.hcl")
    assert "cannot read: No such file or directory" in info.value.render()


def test_encode_is_nomad_api_json() -> None:
    job = parse_job(MINIMAL % "batch")
    doc = json.loads(encode_job(job))
    assert set(doc) == {"Job"}
    assert msgspec.convert(doc["Job"], Job) == job


# --------------------------------------------------------------------------- hostile input


def _json_job(task: str = "t", count: int = 1) -> str:
    return json.dumps({"Job": {"ID": "j", "TaskGroups": [
        {"Name": "g", "Count": count, "Tasks": [{"Name": task, "Driver": "mock_driver"}]}]}})


@pytest.mark.parametrize("name", ["a" * 201, "é" * 101, ".", "..", "a\0b", "a/b", "alloc"])
def test_task_names_must_be_file_names(name: str) -> None:
    problem = only_problem(_json_job(task=name), "job.json")
    assert problem.message.startswith("task name must"), problem
    assert problem.line == 1


def test_the_longest_task_name_still_fits_every_file_it_names() -> None:
    parse_job(_json_job(task="a" * 200), filename="job.json")


@pytest.mark.parametrize("count", [50_001, 10**30, -1])
def test_count_is_capped_as_nomad_does(count: int) -> None:
    assert "count" in only_problem(_json_job(count=count), "job.json").field


def test_the_cap_is_on_the_job_total_as_nomads_job_max_count() -> None:
    assert parse_job(_json_job(count=50_000), filename="job.json").task_groups[0].count == 50_000
    doc = json.loads(_json_job(count=30_000))
    doc["Job"]["TaskGroups"] += [dict(doc["Job"]["TaskGroups"][0], Name=f"g{i}")
                                 for i in (2, 3)]
    problem = only_problem(json.dumps(doc), "job.json")
    assert problem.message == ("total count was greater than configured job_max_count: "
                               "90000 > 50000")
    assert "g2" in problem.field  # where the total crosses the cap


def test_problems_stop_at_a_hundred() -> None:
    doc = json.loads(_json_job())
    doc["Job"]["TaskGroups"][0]["Tasks"][0].update({f"Unknown{i}": 1 for i in range(500)})
    problems = problems_of(json.dumps(doc), "job.json")
    assert len(problems) == 101
    assert "stopped after 100 problems" in [p.message for p in problems]


@pytest.mark.parametrize("fmt", ["json", "hcl"])
def test_a_job_of_too_many_keys_is_refused_at_once(fmt: str) -> None:
    import time

    if fmt == "json":
        doc = json.loads(_json_job())
        doc["Job"]["Meta"] = {f"k{i}": "v" for i in range(30_000)}  # < 1 MiB
        text = json.dumps(doc)
        expected = "too large"
    else:
        text = 'job "j" {\n  meta {\n' + "".join(f"    k{i} = 1\n" for i in range(200_000))
        expected = "larger than 1 MiB"
        text += "  }\n}\n"
    started = time.monotonic()
    problem = only_problem(text, f"job.{fmt}")
    assert expected in problem.message
    assert time.monotonic() - started < 2  # refused before the expensive stages


MIGRATE = """job "web" {
  group "api" {
    migrate {
      max_parallel     = 3
      health_check     = "task_states"
      min_healthy_time = "15s"
      healthy_deadline = "%s"
    }
    task "a" {
      driver = "mock_driver"
    }
  }
}
"""


def test_migrate_stanza_is_read_with_nomads_rules() -> None:
    job = parse_job(MIGRATE % "10m", filename="job.nomad.hcl")
    migrate = job.task_groups[0].migrate
    assert migrate is not None
    assert (migrate.max_parallel, migrate.health_check) == (3, "task_states")
    assert (migrate.min_healthy_time, migrate.healthy_deadline) == (15 * SECOND, 10 * MINUTE)
    p = only_problem(MIGRATE % "10s")
    assert (p.line, p.field) == (6, "job.web.group.api.migrate.min_healthy_time")
    assert p.message == "MinHealthyTime must be less than HealthyDeadline"


def test_migrate_follows_nomads_bounds() -> None:
    # nomad/structs/structs.go `MigrateStrategy.Validate`: a zero deadline (with a zero
    # minimum) is allowed, and no health check is needed when nothing migrates at once.
    zero = MIGRATE.replace('"15s"', '"0s"') % "0s"
    assert parse_job(zero).task_groups[0].migrate.healthy_deadline == 0  # type: ignore[union-attr]
    none = MIGRATE.replace("3", "0").replace('"task_states"', '""') % "1m"
    assert parse_job(none).task_groups[0].migrate.health_check == ""  # type: ignore[union-attr]
    p = only_problem(MIGRATE.replace('"task_states"', '""') % "1m")
    assert (p.field, p.message) == ("job.web.group.api.migrate.health_check",
                                    "Missing HealthCheck")


@pytest.mark.parametrize("job_type", ["batch", "system", "sysbatch"])
def test_only_service_jobs_have_a_migrate_block(job_type: str) -> None:
    p = only_problem((MIGRATE % "1m").replace('job "web" {', f'job "web" {{ type = "{job_type}"'))
    assert (p.line, p.field, p.message) == (
        3, "job.web.group.api.migrate", f'Job type "{job_type}" does not allow migrate block')


JOB_MIGRATE = """\
job "web" {
  migrate {
    max_parallel     = 2
    min_healthy_time = "20s"
  }
  group "api" {
    migrate {
      max_parallel = 4
    }
    task "a" {
      driver = "mock_driver"
    }
  }
  group "db" {
    task "b" {
      driver = "mock_driver"
    }
  }
}
"""


def test_a_job_level_migrate_block_is_every_groups_default_field_by_field() -> None:
    job = parse_job(JOB_MIGRATE, filename="job.nomad.hcl")
    api, db = (g.migrate for g in job.task_groups)
    assert api is not None
    assert db is not None
    # The group's own field wins; the others come from the job's block, then Nomad's defaults.
    assert (api.max_parallel, api.min_healthy_time, api.healthy_deadline) == (
        4, 20 * SECOND, 5 * MINUTE)
    assert (db.max_parallel, db.min_healthy_time) == (2, 20 * SECOND)
    assert job.migrate is None
    same = parse_job(encode_job(job).decode(), filename="job.json")
    assert [g.migrate for g in same.task_groups] == [api, db]


def test_a_group_of_lifecycle_tasks_only_is_refused_as_in_nomad() -> None:
    # nomad/structs/structs.go `TaskGroup.Validate`: no main task, nothing to run.
    text = """job "web" {
  group "api" {
    task "init" {
      driver = "mock_driver"
      lifecycle {
        hook = "prestart"
      }
    }
  }
}
"""
    p = only_problem(text)
    assert (p.line, p.field, p.message) == (
        2, "job.web.group.api", "Task group api must have at least one main task")
    parse_job(text.replace("}\n  }\n}", '}\n    task "main" {\n      driver = "mock_driver"\n'
                                        "    }\n  }\n}"))


def test_a_system_group_runs_once_per_node_and_counts_at_most_one() -> None:
    # nomad/structs/structs.go `Job.Validate`.
    text = 'job "x" {\n  type = "system"\n  group "g" {\n    count = 3\n' \
           '    task "t" {\n      driver = "mock_driver"\n    }\n  }\n}\n'
    p = only_problem(text)
    assert (p.line, p.field, p.message) == (
        4, "job.x.group.g.count",
        "Job task group g has count 3. Count cannot exceed 1 with system scheduler")
    assert parse_job(text.replace("count = 3", "count = 0")).task_groups[0].count == 0


def test_datacenters_may_not_be_empty_as_in_nomad() -> None:
    # nomad/structs/structs.go `Job.Validate`; without the field, Nomad's default ["*"].
    text = 'job "x" {\n  datacenters = %s\n  group "g" {\n' \
           '    task "t" {\n      driver = "mock_driver"\n    }\n  }\n}\n'
    for value, message in (("[]", "Missing job datacenters"),
                            ('["dc1", ""]', "Job datacenter must be non-empty string")):
        p = only_problem(text % value)
        assert (p.line, p.field, p.message) == (2, "job.x.datacenters", message)
    assert parse_job(text.replace("  datacenters = %s\n", "")).datacenters == ["*"]
