"""Job-file problems in the user's words (layer 0, and `yurt job validate` as a process).

A driver's `config` block is checked field by field, every problem at once and never in
msgspec's words; an empty file is one problem; a field Nomad has and yurt does not is "not
supported yet", not "unknown"; the same job in Nomad JSON gets the same messages.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.jobspec_support import problems_of
from tests.test_agent_e2e import YURT
from yurt.runtime.jobspec import parse_job

CONFIG = '''job "w" {
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command  = 5
        args     = "--verbose"
        comand   = "/bin/true"
        work_dir = ["/tmp"]
      }
    }
    task "m" {
      driver = "mock_driver"
      config {
        run_for    = "soon"
        exit_code  = "3"
        kill_after = "later"
      }
    }
  }
}
'''

CONFIG_PROBLEMS = [
    (6, 9, "job.w.group.g.task.t.config.command", "must be a string, got a number 5"),
    (7, 9, "job.w.group.g.task.t.config.args",
     'must be a list of strings, got a string "--verbose"'),
    (8, 9, "job.w.group.g.task.t.config.comand", 'unknown field "comand"; did you mean "command"?'),
    (9, 9, "job.w.group.g.task.t.config.work_dir", "must be a string, got a list"),
    (15, 9, "job.w.group.g.task.m.config.run_for",
     'expected a duration such as "15s", "1m30s" or "100ms", got "soon"'),
    (16, 9, "job.w.group.g.task.m.config.exit_code", 'must be a whole number, got a string "3"'),
    (17, 9, "job.w.group.g.task.m.config.kill_after",
     'expected a duration such as "15s", "1m30s" or "100ms", got "later"'),
]


def test_every_problem_of_a_config_block_is_reported_in_words() -> None:
    problems = problems_of(CONFIG)
    assert [(p.line, p.column, p.field, p.message) for p in problems] == CONFIG_PROBLEMS
    assert not any("`" in p.message for p in problems)  # none of msgspec's wording


def test_a_list_item_of_the_wrong_type_is_named_by_its_index() -> None:
    (problem,) = problems_of(CONFIG.replace('"--verbose"', '["-v", 2]').replace(
        "command  = 5", 'command = "/bin/ls"').replace('        comand   = "/bin/true"\n', "")
        .replace('["/tmp"]', '"/tmp"').split('    task "m"')[0] + "  }\n}\n")
    assert (problem.line, problem.field, problem.message) == (
        7, "job.w.group.g.task.t.config.args.1", "must be a string, got a number 2")


def test_the_same_config_in_json_gets_the_same_messages() -> None:
    doc = {"Job": {"ID": "w", "TaskGroups": [{"Name": "g", "Tasks": [
        {"Name": "t", "Driver": "raw_exec",
         "Config": {"command": 5, "args": "--verbose", "comand": "/bin/true",
                    "work_dir": ["/tmp"]}},
        {"Name": "m", "Driver": "mock_driver",
         "Config": {"run_for": "soon", "exit_code": "3", "kill_after": "later"}}]}]}}
    problems = problems_of(json.dumps(doc, indent=2), "job.json")
    assert [(p.field, p.message) for p in problems] == [(f, m) for _, _, f, m in
                                                        CONFIG_PROBLEMS]
    assert all(p.line > 1 for p in problems)  # placed on their keys


@pytest.mark.parametrize(("name", "text"), [
    ("job.nomad.hcl", ""), ("job.nomad.hcl", "\n  \n\t\n"), ("job.json", ""),
    ("job.json", "   \n"),
])
def test_an_empty_file_is_one_clear_problem(name: str, text: str) -> None:
    (problem,) = problems_of(text, name)
    assert (problem.field, problem.line) == ("file", 0)
    assert problem.message.startswith("the file is empty; a job file holds one job")


def test_a_file_of_comments_only_is_one_problem() -> None:
    (problem,) = problems_of("# a job will go here\n// and here\n")
    assert problem.message == 'expected exactly one job "<id>" { … } block, found 0'


GROUP_FIELDS = '''job "w" {
  group "g" {
    shutdown_delay   = "5s"
    max_run_duration = "1h"
    task "t" {
      driver = "mock_driver"
      secret "db" {
        provider = "vault"
      }
      resources {
        cores = 2
      }
    }
  }
}
'''


def test_valid_nomad_fields_parse_and_meet_nomads_rules() -> None:
    # shutdown_delay, secret and cores are accepted; max_run_duration is Nomad's batch-only
    # field (structs.go `TaskGroup.Validate`), refused on this service job in Nomad's words.
    assert [(p.line, p.field, p.message) for p in problems_of(GROUP_FIELDS)] == [
        (4, "job.w.group.g.max_run_duration",
         'Job type "service" does not allow max_run_duration'),
    ]
    batch = parse_job(GROUP_FIELDS.replace('job "w" {', 'job "w" {\n  type = "batch"'),
                      filename="w.nomad.hcl")
    group = batch.task_groups[0]
    assert (group.shutdown_delay, group.max_run_duration) == (5 * 10**9, 3600 * 10**9)
    assert group.tasks[0].resources.cores == 2
    assert group.tasks[0].resources.cpu == 0  # cores without cpu: api/resources.go


def test_a_misspelt_field_is_still_unknown() -> None:
    (problem,) = problems_of(GROUP_FIELDS.replace(
        '    shutdown_delay   = "5s"\n    max_run_duration = "1h"\n', '    cuont = 2\n')
        .replace('      secret "db" {\n        provider = "vault"\n      }\n', "")
        .replace("        cores = 2\n", ""))
    assert problem.message == 'unknown field "cuont"; did you mean "count"?'


def test_json_spellings_of_nomad_only_fields_and_their_zero_values() -> None:
    def job(group: dict[str, object]) -> str:
        return json.dumps({"Job": {"ID": "w", "TaskGroups": [
            {"Name": "g", **group, "Tasks": [{"Name": "t", "Driver": "mock_driver"}]}]}})

    (problem,) = problems_of(job({"ShutdownDelay": -1}), "job.json")
    assert (problem.field, problem.message) == (
        "job.w.group.g.shutdown_delay", "ShutdownDelay must be a positive value")
    (problem,) = problems_of(job({"Consul": {"Namespace": "x"}}), "job.json")
    assert problem.message.startswith('"Consul" is Consul\'s: yurt has no Consul')
    # `nomad job run -output` writes every field: unset ones (zero) are accepted.
    parse_job(job({"ShutdownDelay": 0, "PreventRescheduleOnLost": False}), filename="job.json")


def test_yurt_job_validate_prints_them_all_and_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "job.nomad.hcl"
    path.write_text(CONFIG)
    out = subprocess.run([YURT, "job", "validate", str(path)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2
    assert out.stderr.splitlines() == [f"{path}:{line}:{col}: {field}: {message}"
                                       for line, col, field, message in CONFIG_PROBLEMS]
    empty = tmp_path / "empty.nomad.hcl"
    empty.write_text("")
    out = subprocess.run([YURT, "job", "validate", str(empty)], capture_output=True, text=True,
                         timeout=60)
    assert (out.returncode, len(out.stderr.splitlines())) == (2, 1)


def test_a_job_without_a_usable_id_is_called_job_in_paths() -> None:
    no_id = problems_of(json.dumps({"Job": {"TaskGroups": []}}), "job.json")
    assert {p.field for p in no_id} == {"job"}
    bad_id = problems_of(json.dumps({"Job": {"ID": 5}}), "job.json")
    assert "job.id" in {p.field for p in bad_id}
    assert not any(p.field.startswith(("job.?", "job.")) and p.field != "job.id"
                   for p in bad_id)


def test_a_truncated_file_names_the_brace_it_misses() -> None:
    (problem,) = problems_of('job "x" {\n  group "g" {\n')
    assert problem.message == 'unexpected end of file; expected "}"'
