"""Pure parts of `job run|plan|allocs|restart` (layer 1): the register's `-check-index` and
`-preserve-counts` checks with Nomad's texts, the plan diff's annotations and its text,
Nomad's relative times, and which allocations `job restart` picks."""

from __future__ import annotations

import msgspec
import pytest

from yurt.runtime.api.jobs import _register_check, enforce_index
from yurt.runtime.api.request import ApiError
from yurt.runtime.cli.job_diff import format_job_diff
from yurt.runtime.cli.job_restart_run import Options, parse_options, select
from yurt.runtime.cli.statusfmt import pretty_time_diff
from yurt.runtime.jobspec import parse_job
from yurt.runtime.server.jobdiff import annotate_plan, job_diff

JOB = '''job "web" {
  group "g" {
    count = %d
    task "t" {
      driver = "mock_driver"
      kill_timeout = "%s"
      config { run_for = "%s" }
    }
  }
}
'''


def test_enforce_index_texts_are_nomads() -> None:
    registered = msgspec.structs.replace(parse_job(JOB % (1, "5s", "1h")), job_modify_index=7)
    enforce_index(None, 0)  # a new job with index 0: allowed
    enforce_index(registered, 7)
    with pytest.raises(ApiError, match=r"^Enforcing job modify index 0: job already exists$"):
        enforce_index(registered, 0)
    with pytest.raises(ApiError, match=r"^Enforcing job modify index 5: job exists with "
                       r"conflicting job modify index: 7$"):
        enforce_index(registered, 5)
    with pytest.raises(ApiError, match=r"^Enforcing job modify index 3: job does not exist$"):
        enforce_index(None, 3)


def test_preserve_counts_keeps_the_current_counts() -> None:
    current, new = parse_job(JOB % (4, "5s", "1h")), parse_job(JOB % (1, "5s", "2h"))
    check = _register_check({"PreserveCounts": True}, new)
    assert check is not None
    kept = check(current)
    assert kept is not None
    assert kept.task_groups[0].count == 4
    assert check(None) is None  # a new job: as given
    bigger = msgspec.structs.replace(current, task_groups=[msgspec.structs.replace(
        current.task_groups[0], tasks=[msgspec.structs.replace(
            current.task_groups[0].tasks[0], resources=msgspec.structs.replace(
                current.task_groups[0].tasks[0].resources, memory=999))])])
    resources = _register_check({"PreserveResources": True}, new)
    assert resources is not None
    kept_resources = resources(bigger)
    assert kept_resources is not None
    assert kept_resources.task_groups[0].tasks[0].resources.memory == 999
    assert kept_resources.task_groups[0].count == 1  # counts only with PreserveCounts
    assert _register_check({}, new) is None
    with pytest.raises(ApiError, match="eval priority must be between 1 and 100"):
        _register_check({"EvalPriority": 101}, new)


def test_plan_annotations_and_short_diff() -> None:
    new = parse_job(JOB % (1, "5s", "1h"))
    added = annotate_plan(job_diff(None, new, {"g": {"create": 1}}))
    assert format_job_diff(added) == ('+ Job: "web"\n+ Task Group: "g" (1 create)\n'
                                      '  + Task: "t" (forces create)')
    verbose = format_job_diff(added, verbose=True).splitlines()
    assert len(verbose) > 10
    assert '  + Task: "t" (forces create)' in verbose
    # A changed kill timeout alone is in place; a changed config forces a replacement.
    in_place = annotate_plan(job_diff(new, parse_job(JOB % (1, "9s", "1h"))))
    assert in_place["TaskGroups"][0]["Tasks"][0]["Annotations"] == ["forces in-place update"]
    destructive = annotate_plan(job_diff(new, parse_job(JOB % (3, "5s", "2h")),
                                         {"g": {"create": 2, "create/destroy update": 1}}))
    text = format_job_diff(destructive)
    assert 'Task Group: "g" (2 create, 1 create/destroy update)' in text
    assert '  +/- Count: "1" => "3" (forces create)' in text
    assert '  +/- Task: "t" (forces create/destroy update)' in text


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0s ago"), (5, "5s ago"), (65, "1m5s ago"), (3 * 3600 + 61, "3h1m ago"),
    (-30, "30s from now"), (40 * 86400, "1mo10d ago")])
def test_pretty_time_diff(seconds: int, text: str) -> None:
    now = 1_700_000_000.0
    assert pretty_time_diff(int((now - seconds) * 1e9), int(now * 1e9)) == text


def test_restart_picks_running_unreplaced_allocations_of_the_groups_asked() -> None:
    allocs = [
        {"ID": "a" * 36, "ClientStatus": "running", "DesiredStatus": "run", "TaskGroup": "g",
         "TaskStates": {"t": {}}, "JobVersion": 0},
        {"ID": "b" * 36, "ClientStatus": "complete", "DesiredStatus": "stop",
         "TaskGroup": "g", "JobVersion": 0},
        {"ID": "c" * 36, "ClientStatus": "running", "DesiredStatus": "run", "TaskGroup": "g",
         "NextAllocation": "d" * 36, "JobVersion": 0},
        {"ID": "e" * 36, "ClientStatus": "pending", "DesiredStatus": "run", "TaskGroup": "h",
         "TaskStates": {}, "JobVersion": 0},
    ]
    versions = {0: {"TaskGroups": [{"Name": "h", "Tasks": [{"Name": "u"}]}]}}
    assert [a["ID"][0] for a in select(allocs, Options(), versions)] == ["a", "e"]
    assert [a["ID"][0] for a in select(allocs, Options(groups=frozenset({"h"})),
                                       versions)] == ["e"]
    # A task not yet in the task states is looked up in the job version (Nomad's HasTask).
    assert [a["ID"][0] for a in select(allocs, Options(tasks=frozenset({"u"})),
                                       versions)] == ["e"]


def test_restart_options_refused_with_nomads_texts() -> None:
    import click

    def parse(**kw: object) -> Options:
        args: dict[str, object] = {
            "batch_size": "1", "batch_wait": "0s", "on_error": "fail", "all_tasks": False,
            "tasks": (), "groups": (), "reschedule": False, "yes": False, "verbose": False,
            "interactive": False, **kw}
        return parse_options(**args)  # type: ignore[arg-type]

    assert parse(batch_size="50%").batch_percent
    with pytest.raises(click.UsageError, match="batch size must be an integer or a percent"):
        parse(batch_size="1x")
    with pytest.raises(click.UsageError, match="number value must be greater than zero"):
        parse(batch_size="0")
    with pytest.raises(click.UsageError, match='"ask" cannot be used when terminal is not'):
        parse(on_error="ask")
    assert parse(on_error="ask", yes=True).on_error == "ask"
    with pytest.raises(click.UsageError, match='valid options are "ask" and "fail"'):
        parse(on_error="later")
    with pytest.raises(click.UsageError, match="-all-tasks option cannot be used with -task"):
        parse(all_tasks=True, tasks=("t",))
    assert parse(batch_wait="1m30s").batch_wait == 90
