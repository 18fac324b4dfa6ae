"""The `reschedule` block in job files (layer 0): Nomad's defaults per job type, the job-level
block under the group-level one (only the fields given override), Nomad's checks with the
file, line and field of each problem, and the same job in HCL and JSON giving the same struct."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.jobspec_support import hcl, problems_of
from yurt.runtime.errors import SpecProblem
from yurt.runtime.jobspec import load_job, parse_job
from yurt.runtime.jobspec.reschedule import _viable
from yurt.runtime.lib.durations import HOUR, MINUTE, SECOND
from yurt.runtime.structs import ReschedulePolicy

SERVICE_DEFAULT = ReschedulePolicy(attempts=0, interval=0, delay=30 * SECOND,
                                   delay_function="exponential", max_delay=HOUR, unlimited=True)
BATCH_DEFAULT = ReschedulePolicy(attempts=1, interval=24 * HOUR, delay=5 * SECOND,
                                 delay_function="constant", max_delay=0, unlimited=False)


def policies(text: str) -> list[ReschedulePolicy | None]:
    job = parse_job(text)
    assert job.reschedule is None  # folded into the groups, as Nomad's server keeps it
    return [g.reschedule_policy for g in job.task_groups]


def only_problem(text: str, filename: str = "job.nomad.hcl") -> SpecProblem:
    problems = problems_of(text, filename)
    assert len(problems) == 1, problems
    return problems[0]


@pytest.mark.parametrize(("job_type", "expected"), [
    ("service", SERVICE_DEFAULT), ("batch", BATCH_DEFAULT), ("sysbatch", None)])
def test_defaults_per_job_type(job_type: str, expected: ReschedulePolicy | None) -> None:
    assert policies(hcl(job_type)) == [expected, expected]


def test_job_block_applies_to_every_group_and_group_block_overrides_it() -> None:
    text = hcl("batch", 'reschedule {\n delay = "10s"\n delay_function = "fibonacci"\n'
                        ' max_delay = "1m" }',
               'reschedule {\n max_delay = "5m"\n delay = "20s" }')
    api, other = policies(text)
    # batch default ← job block (delay, function, max_delay) ← group block (max_delay, delay)
    assert other == ReschedulePolicy(attempts=1, interval=24 * HOUR, delay=10 * SECOND,
                                     delay_function="fibonacci", max_delay=MINUTE,
                                     unlimited=False)
    assert api == ReschedulePolicy(attempts=1, interval=24 * HOUR, delay=20 * SECOND,
                                   delay_function="fibonacci", max_delay=5 * MINUTE,
                                   unlimited=False)


def test_only_given_fields_override() -> None:
    text = hcl("service", group_block='reschedule { delay = "1m" }')
    api, other = policies(text)
    assert other == SERVICE_DEFAULT
    assert api == ReschedulePolicy(attempts=0, interval=0, delay=MINUTE,
                                   delay_function="exponential", max_delay=HOUR, unlimited=True)


def test_attempts_zero_and_not_unlimited_is_accepted_as_disabled() -> None:
    # Nomad checks nothing else of a disabled policy, not even the delay.
    block = 'reschedule {\n attempts = 0\n unlimited = false\n delay = "1s" }'
    api, _ = policies(hcl("service", group_block=block))
    assert api is not None
    assert (api.attempts, api.unlimited) == (0, False)


def test_hcl_and_json_give_the_same_job() -> None:
    text = hcl("batch", 'reschedule { delay = "10s" }',
               'reschedule {\n attempts = 2\n interval = "1h"\n delay_function = "constant" }')
    doc = {"Job": {"ID": "web", "Type": "batch", "Reschedule": {"Delay": 10 * SECOND},
                   "TaskGroups": [
                       {"Name": "api", "ReschedulePolicy": {
                           "Attempts": 2, "Interval": "1h", "DelayFunction": "constant"},
                        "Tasks": [{"Name": "t", "Driver": "mock_driver"}]},
                       {"Name": "other", "Tasks": [{"Name": "t", "Driver": "mock_driver"}]}]}}
    from_hcl = parse_job(text)
    from_json = parse_job(json.dumps(doc), filename="job.json")
    assert from_hcl == from_json
    assert from_hcl.task_groups[0].reschedule_policy == ReschedulePolicy(
        attempts=2, interval=HOUR, delay=10 * SECOND, delay_function="constant", max_delay=0,
        unlimited=False)


# --------------------------------------------------------------------------- Nomad's checks

GROUP_CASES = [
    # (block body, field, message part)
    ('delay = "2s"', "delay", "must be at least 5s, got 2s"),
    ('delay_function = "linear"', "delay_function",
     'expected one of "constant", "exponential", "fibonacci", got "linear"'),
    ('max_delay = "10s"', "max_delay", "must not be less than delay (30s), got 10s"),
    ('max_delay = "1s"\n delay = "1s"', "delay", "must be at least 5s, got 1s"),
    ('attempts = 3\n interval = "1h"', "unlimited", "attempts = 3 and unlimited = true is "
                                                    "ambiguous"),
    ('attempts = 3\n unlimited = false\n interval = "10s"', "interval",
     "must be at least 15s, got 10s"),
    ('attempts = 3\n unlimited = false\n interval = 0', "interval",
     "must be a non-zero duration when attempts > 0"),
]


@pytest.mark.parametrize(("body", "field", "message"), GROUP_CASES,
                         ids=[c[1] + ":" + c[2][:20] for c in GROUP_CASES])
def test_group_block_problems_name_file_line_and_field(body: str, field: str,
                                                       message: str) -> None:
    problems = problems_of(hcl("service", group_block=f"reschedule {{\n {body} }}"))
    mine = [p for p in problems if p.field == f"job.web.group.api.reschedule.{field}"]
    assert mine, problems
    assert any(message in p.message for p in mine), mine
    assert all(p.line >= 5 for p in mine)  # in the group's block, not on the job
    rendered = mine[0].render("job.nomad.hcl")
    assert rendered.startswith(f"job.nomad.hcl:{mine[0].line}:")


def test_problem_points_at_the_line_of_the_field() -> None:
    block = 'reschedule {\n      delay_function = "linear"\n    }'
    p = only_problem(hcl("service", group_block=block))
    assert (p.line, p.field) == (6, "job.web.group.api.reschedule.delay_function")
    assert p.render("job.nomad.hcl").startswith(
        "job.nomad.hcl:6:7: job.web.group.api.reschedule.delay_function: expected one of")


def test_attempts_that_do_not_fit_the_interval() -> None:
    block = ('reschedule {\n attempts = 10\n interval = "1m"\n delay = "10s"\n'
             ' delay_function = "constant" }')
    p = only_problem(hcl("batch", group_block=block))
    assert p.field == "job.web.group.api.reschedule"
    assert p.message.startswith("only 6 of 10 attempts fit in an interval of 1m0s with "
                                "delay 10s and the constant delay function")
    assert p.message.endswith("set the interval to at least 1m40s")


def test_job_block_problem_is_reported_once_on_the_job() -> None:
    p = only_problem(hcl("batch", 'reschedule { delay = "1s" }'))
    assert (p.line, p.field) == (3, "job.web.reschedule.delay")
    assert p.message == "must be at least 5s, got 1s"


def test_a_job_block_problem_every_group_overrides_is_not_reported() -> None:
    # nomad/structs/structs.go `TaskGroup.Validate` checks each group's merged policy only.
    text = hcl("batch", 'reschedule { delay = "1s" }', 'reschedule { delay = "10s" }')
    text = text.replace('group "other" {', 'group "other" {\n reschedule { delay = "20s" }')
    assert [p.delay if p else None for p in policies(text)] == [10 * SECOND, 20 * SECOND]


def test_sysbatch_jobs_may_not_have_a_reschedule_block() -> None:
    problems = problems_of(hcl("sysbatch", 'reschedule { attempts = 1 }',
                               'reschedule { attempts = 1 }'))
    assert [(p.line, p.field) for p in problems] == [
        (3, "job.web.reschedule"), (5, "job.web.group.api.reschedule")]
    assert all("never rescheduled" in p.message for p in problems)


def test_json_problems_are_placed_on_the_json_lines() -> None:
    text = """{"Job": {
  "ID": "web", "Type": "batch",
  "TaskGroups": [
    {"Name": "api",
     "ReschedulePolicy": {"Attempts": 2, "Interval": 3600000000000,
                          "DelayFunction": "square"},
     "Tasks": [{"Name": "t", "Driver": "mock_driver"}]}
  ]
}}
"""
    p = only_problem(text, filename="job.json")
    assert (p.line, p.field) == (6, "job.web.group.api.reschedule.delay_function")


# --------------------------------------------------------------------------- viable attempts


def test_viable_attempts_follow_nomads_counting() -> None:
    s = SECOND
    assert _viable(3, 30 * s, 10 * s, "constant", 0) == (True, 3, 30 * s)
    assert _viable(4, 30 * s, 10 * s, "constant", 0) == (False, 3, 40 * s)
    # exponential: 10, 20, 40 (capped at 40), then the sum grows by 40 a step
    assert _viable(3, 41 * s, 10 * s, "exponential", 40 * s) == (True, 3, 40 * s)
    assert _viable(5, 100 * s, 10 * s, "exponential", 40 * s) == (False, 4, 120 * s)
    # fibonacci: 10, 10, 20, 30, then the ceiling 40, 80, 120 …
    assert _viable(4, 30 * s, 10 * s, "fibonacci", 40 * s) == (True, 4, 30 * s)
    assert _viable(7, 100 * s, 10 * s, "fibonacci", 40 * s) == (False, 6, 120 * s)
    assert _viable(7, 20 * s, 10 * s, "fibonacci", 40 * s) == (False, 3, 120 * s)


def test_a_huge_attempt_count_is_checked_at_once() -> None:
    block = ('reschedule {\n attempts = 9000000000000000000\n interval = "1h"\n'
             ' delay_function = "fibonacci"\n unlimited = false }')
    p = only_problem(hcl("service", group_block=block))
    assert p.field == "job.web.group.api.reschedule"
    block = block.replace("fibonacci", "exponential")
    assert only_problem(hcl("service", group_block=block)).field == p.field


def test_the_example_job() -> None:
    job = load_job(Path(__file__).parent.parent / "examples/service-reschedule.nomad.hcl")
    web, report = (g.reschedule_policy for g in job.task_groups)
    assert web == ReschedulePolicy(attempts=0, interval=0, delay=10 * SECOND,
                                   delay_function="exponential", max_delay=5 * MINUTE,
                                   unlimited=True)
    assert report == ReschedulePolicy(attempts=2, interval=HOUR, delay=10 * SECOND,
                                      delay_function="constant", max_delay=5 * MINUTE,
                                      unlimited=False)
