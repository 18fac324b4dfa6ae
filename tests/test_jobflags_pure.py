"""The pure parts of the job verbs' flags (layer 0): `job stop`'s answers to its question,
`job scale`'s group choice, `eval list`/`eval status` tables, `dispatch -wait`'s summary
table, and the scheduler's forced reschedule (`job eval -force-reschedule`)."""

from __future__ import annotations

import msgspec
import pytest

from yurt.runtime.cli.dispatch_wait import task_groups_table
from yurt.runtime.cli.eval_status import (
    failure_status,
    format_eval_list,
    format_plan_annotations,
    status_text,
)
from yurt.runtime.cli.job_actions import group_to_scale
from yurt.runtime.cli.job_stop import answer_code
from yurt.runtime.server.scheduler.reschedule import decide, force_reschedulable
from yurt.runtime.structs import (
    Allocation,
    DesiredTransition,
    Job,
    ReschedulePolicy,
    TaskGroup,
)


def test_job_stop_answers_as_nomads_get_confirmation() -> None:
    assert answer_code("y") == (0, True, "")
    assert answer_code("") == (0, False, "Cancelling job stop")
    assert answer_code("No") == (0, False, "Cancelling job stop")
    assert answer_code("yes")[:2] == (0, False)
    assert "exact ‘y’" in answer_code("Yes")[2]
    assert answer_code("Y") == (1, False, "No confirmation detected. For confirmation, an "
                                          "exact 'y' is required.")
    assert answer_code(None) == (1, False, "Failed to parse answer: EOF")


def test_job_scale_picks_the_group_as_nomad() -> None:
    assert group_to_scale({"g": {}}, "") == "g"
    assert group_to_scale({"a": {}, "b": {}}, "b") == "b"
    with pytest.raises(SystemExit) as e:
        group_to_scale({"a": {}, "b": {}}, "")
    assert e.value.code == 1
    with pytest.raises(SystemExit):
        group_to_scale({"g": {}}, "h")


EVAL = {"ID": "0123456789abcdef-0000-0000-0000-000000000000"[:36], "Priority": 50,
        "TriggeredBy": "node-update", "JobID": "web", "Namespace": "default",
        "NodeID": "fedcba98-7654-3210-0000-000000000000", "Status": "blocked",
        "StatusDescription": "", "Type": "service", "CreateTime": 0, "ModifyTime": 0,
        "FailedTGAllocs": {"g": {"NodesEvaluated": 1, "NodesExhausted": 1,
                                 "CoalescedFailures": 1}},
        "BlockedEval": "11111111-2222-3333-4444-555555555555"}


def test_eval_list_columns_and_lengths() -> None:
    short = format_eval_list([EVAL], False).splitlines()
    assert short[0].split() == ["ID", "Priority", "Triggered", "By", "Job", "ID", "Namespace",
                                "Node", "ID", "Status", "Placement", "Failures"]
    assert short[1].split()[:6] == ["01234567", "50", "node-update", "web", "default",
                                    "fedcba98"]
    assert short[1].endswith("N/A - In Progress")  # Nomad's evalFailureStatus when blocked
    assert format_eval_list([EVAL], True).splitlines()[1].split()[0] == EVAL["ID"]
    assert failure_status({**EVAL, "Status": "complete"}) == "true"
    assert failure_status({"Status": "complete"}) == "false"


def test_eval_status_sections() -> None:
    text = status_text(EVAL, [], False, now=0)
    assert "ID                 = 01234567\n" in text
    assert "Node ID            = fedcba98-7654-3210-0000-000000000000" in text  # the trigger
    assert "Status Description = blocked" in text  # empty: the status, as Nomad's
    assert "\nFailed Placements\nTask Group \"g\" (failed to place 2 allocations):" in text
    assert 'Evaluation "11111111" waiting for additional capacity' in text
    assert "Placed Allocations" not in text


def test_plan_annotations_show_optional_columns_only_when_used() -> None:
    updates = {"g": {"Ignore": 1, "Place": 2, "Canary": 1}, "a": {"Stop": 3}}
    lines = format_plan_annotations(updates, False).splitlines()
    assert lines[0].split() == ["Task", "Group", "Ignore", "Place", "Stop", "InPlace",
                                "Destructive", "Canary"]
    assert [line.split()[0] for line in lines[1:]] == ["a", "g"]
    verbose = format_plan_annotations(updates, True).splitlines()[0]
    assert verbose.split()[-2:] == ["Disconnect", "Reconnect"]


def test_dispatch_wait_summary_table() -> None:
    lines = task_groups_table({"b": {"Complete": 1}, "a": {"Failed": 2}}).splitlines()
    assert lines[0].split() == ["Task", "Group", "Queued", "Complete", "Failed", "Running",
                                "Starting", "Lost", "Unknown"]
    assert lines[1].split() == ["a", "0", "0", "2", "0", "0", "0", "0"]


def _job(policy: ReschedulePolicy | None) -> Job:
    return Job(id="j", type="service", task_groups=[TaskGroup(name="g", reschedule_policy=policy)])


def test_force_reschedule_marks_and_replaces_now() -> None:
    policy = ReschedulePolicy(attempts=1, interval=3_600_000_000_000,
                              delay=3_600_000_000_000, delay_function="constant")
    failed = Allocation(id="f", name="j.g[0]", job_id="j", task_group="g",
                        client_status="failed", modify_time=10)
    replaced = msgspec.structs.replace(failed, id="r", next_allocation="n")
    running = msgspec.structs.replace(failed, id="u", client_status="running")
    job = _job(policy)
    assert force_reschedulable(job, [failed, replaced, running]) == [failed]
    off = ReschedulePolicy(attempts=0, unlimited=False)
    assert force_reschedulable(_job(off), [failed]) == []  # its policy is off: Nomad skips
    # An alloc-failure evaluation waits the policy's hour; a forced one replaces it now.
    assert decide(job, [failed], 20, user_asked=False).later
    forced = msgspec.structs.replace(
        failed, desired_transition=DesiredTransition(force_reschedule=True))
    assert force_reschedulable(job, [forced]) == []  # marked once
    assert set(decide(job, [forced], 20, user_asked=False).now) == {"j.g[0]"}
