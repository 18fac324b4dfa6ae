"""The `update` block in job files (layer 0): Nomad's defaults, the job's block merged into each
group's (as Nomad's API canonicalization does), Nomad's `UpdateStrategy.Validate` messages with
the file, line and field of each problem, and HCL and JSON giving the same Job."""

from __future__ import annotations

import json

import pytest

from tests.jobspec_support import hcl, problems_of
from yurt.runtime.jobspec import parse_job
from yurt.runtime.jobspec.parse import encode_job
from yurt.runtime.lib.durations import MINUTE, SECOND
from yurt.runtime.structs.update import UpdateStrategy


def strategies(text: str) -> list[UpdateStrategy | None]:
    return [g.update for g in parse_job(text).task_groups]


def test_no_update_block_means_no_strategy() -> None:
    job = parse_job(hcl())
    assert job.update is None
    assert strategies(hcl()) == [None, None]


def test_an_empty_block_gets_nomads_defaults() -> None:
    want = UpdateStrategy(stagger=30 * SECOND, max_parallel=1, health_check="checks",
                          min_healthy_time=10 * SECOND, healthy_deadline=5 * MINUTE,
                          progress_deadline=10 * MINUTE, auto_revert=False,
                          auto_promote=False, canary=0)
    assert strategies(hcl(group_block="update {}")) == [want, None]
    assert strategies(hcl(job_block="update {}")) == [want, want]


def test_the_job_block_is_merged_under_the_groups() -> None:
    text = hcl(job_block='update { max_parallel = 2\n auto_revert = true }',
               group_block='update { canary = 1\n min_healthy_time = "3s" }')
    job = parse_job(text)
    api, other = (g.update for g in job.task_groups)
    assert api == UpdateStrategy(max_parallel=2, auto_revert=True, canary=1,
                                 min_healthy_time=3 * SECOND)
    assert other == UpdateStrategy(max_parallel=2, auto_revert=True)
    # The job keeps its own block as written.
    assert job.update == UpdateStrategy(max_parallel=2, auto_revert=True)


def test_max_parallel_zero_at_job_level_leaves_groups_without_rollout() -> None:
    # api/jobs.go `UpdateStrategy.Empty`: an empty job block is not inherited at all.
    assert strategies(hcl(job_block="update { max_parallel = 0 }")) == [None, None]
    assert strategies(hcl(job_block="update { max_parallel = 0 }",
                          group_block="update { canary = 1 }")) == [
        UpdateStrategy(max_parallel=0, canary=1), None]


@pytest.mark.parametrize("job_type", ["batch", "sysbatch"])
def test_an_empty_job_block_is_accepted_on_a_batch_job(job_type: str) -> None:
    job = parse_job(hcl(job_type, job_block="update { max_parallel = 0 }"))
    assert [g.update for g in job.task_groups] == [None, None]


def test_a_job_block_problem_every_group_overrides_is_not_reported() -> None:
    # nomad/structs/structs.go `TaskGroup.Validate` checks the merged strategies only.
    text = hcl(job_block='update { min_healthy_time = "6m" }',
               group_block='update { healthy_deadline = "8m" }')
    (problem,) = problems_of(text)  # the group "other" inherits the job's block as it is
    assert (problem.line, problem.field, problem.message) == (
        3, "job.web.update.min_healthy_time",
        "Minimum healthy time must be less than healthy deadline: 6m0s > 5m0s")
    text = text.replace('group "other" {', 'group "other" {\n update { healthy_deadline = "9m" }')
    api, other = strategies(text)
    assert api == UpdateStrategy(min_healthy_time=6 * MINUTE, healthy_deadline=8 * MINUTE)
    assert other == UpdateStrategy(min_healthy_time=6 * MINUTE, healthy_deadline=9 * MINUTE)


def test_json_from_nomad_job_run_output_parses_to_the_same_job() -> None:
    text = hcl(job_block='update { max_parallel = 2\n healthy_deadline = "3m" }',
               group_block='update { canary = 1\n auto_promote = true }')
    job = parse_job(text)
    doc = json.loads(encode_job(job))
    assert doc["Job"]["TaskGroups"][0]["Update"]["Canary"] == 1
    assert doc["Job"]["Update"]["HealthyDeadline"] == 3 * MINUTE
    assert parse_job(json.dumps(doc)) == job
    # Nomad's `-output` writes nulls for fields the block does not set, as in its api structs.
    doc["Job"]["TaskGroups"][1]["Update"] = {"MaxParallel": None, "Canary": None,
                                             "HealthCheck": "task_states"}
    other = parse_job(json.dumps(doc)).task_groups[1].update
    assert other == UpdateStrategy(max_parallel=2, healthy_deadline=3 * MINUTE,
                                   health_check="task_states")


@pytest.mark.parametrize(("block", "field", "message"), [
    ('health_check = "nope"', "health_check", 'Invalid health check given: "nope"'),
    ("max_parallel = -1", "max_parallel", "Max parallel can not be less than zero: -1 < 0"),
    ("canary = -2", "canary", "Canary count can not be less than zero: -2 < 0"),
    ("auto_promote = true", "auto_promote",
     "Auto Promote requires a Canary count greater than zero"),
    ('healthy_deadline = "5s"', "min_healthy_time",
     "Minimum healthy time must be less than healthy deadline: 10s > 5s"),
    ('progress_deadline = "1m"', "healthy_deadline",
     "Healthy deadline must be less than progress deadline: 5m0s > 1m0s"),
    ('stagger = "0s"', "stagger", "Stagger must be greater than zero: 0s"),
])
def test_nomads_messages_on_the_group_block(block: str, field: str, message: str) -> None:
    (problem,) = problems_of(hcl(group_block=f"update {{ {block} }}"))
    assert (problem.line, problem.field, problem.message) == (
        5, f"job.web.group.api.update.{field}", message)


def test_a_progress_deadline_of_zero_is_allowed() -> None:
    (api, _) = strategies(hcl(group_block='update { progress_deadline = "0s" }'))
    assert api == UpdateStrategy(progress_deadline=0)


def test_a_problem_inherited_from_the_job_block_is_reported_once() -> None:
    (problem,) = problems_of(hcl(job_block='update { health_check = "x" }',
                                 group_block="update { canary = 1 }"))
    assert (problem.line, problem.field) == (3, "job.web.update.health_check")


@pytest.mark.parametrize("job_type", ["batch", "sysbatch"])
def test_batch_jobs_do_not_allow_update(job_type: str) -> None:
    (problem,) = problems_of(hcl(job_type, group_block="update {}"))
    assert (problem.line, problem.field, problem.message) == (
        5, "job.web.group.api.update", f'Job type "{job_type}" does not allow update block')
    (problem,) = problems_of(hcl(job_type, job_block="update {}"))
    assert (problem.line, problem.message) == (
        3, f'Job type "{job_type}" does not allow update block')


def test_unknown_field_in_the_block_is_named() -> None:
    (problem,) = problems_of(hcl(group_block="update { max_paralel = 1 }"))
    assert problem.field == "job.web.group.api.update.max_paralel"
    assert 'did you mean "max_parallel"' in problem.message


def test_a_kill_timeout_past_the_progress_deadline_is_refused_in_service_jobs() -> None:
    # nomad/structs/structs.go `Task.Validate` (its message's spelling is Nomad's).
    block = 'update { healthy_deadline = "30s"\n progress_deadline = "1m" }'
    text = hcl(group_block=block).replace(
        'driver = "mock_driver"', 'driver = "mock_driver"\n      kill_timeout = "2m"', 1)
    (problem,) = problems_of(text)
    assert (problem.field, problem.message) == (
        "job.web.group.api.task.t.kill_timeout",
        "KillTimout (2m0s) longer than the group's ProgressDeadline (1m0s)")
    parse_job(text.replace('"1m"', '"0s"'))  # no deadline
    parse_job(text.replace('"1m"', '"2m"'))  # equal is fine
