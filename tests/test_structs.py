"""The data model speaks Nomad's JSON (layer 0)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from yurt.runtime.structs import (
    Allocation,
    Job,
    RestartPolicy,
    Task,
    TaskEvent,
    TaskGroup,
    TaskState,
)

# A client allocation as Nomad's API returns it (trimmed to the fields yurt models, every one
# of them present), with a task state carrying a full task event.
NOMAD_ALLOCATION: dict[str, Any] = {
    "ID": "5d7b3d4e-43b2-8f3e-1a7a-1d0c5e2f9a11", "Namespace": "default",
    "EvalID": "e1", "Name": "web.frontend[0]", "NodeID": "n1", "NodeName": "box",
    "JobID": "web", "Job": None, "TaskGroup": "frontend",
    "TaskResources": {"server": {"CpuShares": 500, "MemoryMB": 256, "MemoryMaxMB": 0,
                                 "Devices": [{"Vendor": "nvidia", "Type": "gpu",
                                              "Name": "T4", "DeviceIDs": ["GPU-1"]}],
                                 "ReservedCores": [2]}},
    "DesiredStatus": "run", "DesiredDescription": "", "ClientStatus": "running",
    "ClientDescription": "Tasks are running",
    "TaskStates": {"server": {
        "State": "running", "Failed": False, "Restarts": 1,
        "LastRestart": "2026-11-30T10:00:05.5Z", "StartedAt": "2026-11-30T10:00:06Z",
        "FinishedAt": "0001-01-01T00:00:00Z",
        "Events": [{
            "Type": "Restarting", "Time": 1795946405500000123, "Message": "",
            "DisplayMessage": "Task restarting in 15.587610296s",
            "Details": {"restart_reason": "Restart within policy", "start_delay": "15587610296"},
            "FailsTask": False, "RestartReason": "Restart within policy", "SetupError": "",
            "DriverError": "", "ExitCode": 0, "Signal": 0, "KillReason": "", "KillTimeout": 0,
            "KillError": "", "StartDelay": 15587610296, "DownloadError": "",
            "ValidationError": "", "DiskLimit": 0, "FailedSibling": "", "VaultError": "",
            "TaskSignalReason": "", "TaskSignal": "", "DriverMessage": "", "GenericSource": "",
        }],
    }},
    "DeploymentID": "d1",
    "DeploymentStatus": {"Healthy": True, "Timestamp": "2026-11-30T10:00:07Z", "Canary": False,
                         "ModifyIndex": 9},
    "NetworkStatus": None, "PreviousAllocation": "", "NextAllocation": "",
    "PreemptedAllocations": [], "PreemptedByAllocation": "",
    "CreateIndex": 10, "ModifyIndex": 12, "AllocModifyIndex": 10,
    "CreateTime": 1795946400000000000, "ModifyTime": 1795946406000000000,
    "RescheduleTracker": {"Events": [{"RescheduleTime": 1795946300000000000,
                                      "PrevAllocID": "0a1b", "PrevNodeID": "n1",
                                      "Delay": 30000000000}]},
    "FollowupEvalID": "",
    "DesiredTransition": {"Migrate": True, "Reschedule": None, "ForceReschedule": None,
                          "NoShutdownDelay": None},
}


def test_nomad_allocation_json_round_trips_exactly() -> None:
    alloc = msgspec.json.decode(json.dumps(NOMAD_ALLOCATION), type=Allocation)
    assert alloc.task_states["server"].events[0].time == 1795946405500000123
    assert alloc.task_states["server"].restarts == 1
    again = json.loads(msgspec.json.encode(alloc))
    # Go prints "…05.5Z"; Python prints "…05.500000Z": the same instant.
    again["TaskStates"]["server"]["LastRestart"] = "2026-11-30T10:00:05.5Z"
    # yurt's own stored placement facts; the API answers them inside AllocatedResources.
    assert again.pop("AllocatedShared") is None
    assert again == NOMAD_ALLOCATION


def test_field_names_are_nomads() -> None:
    job = Job(id="web", task_groups=[TaskGroup(name="g", tasks=[Task(name="t")])])
    encoded = json.loads(msgspec.json.encode(job))
    assert encoded["ID"] == "web"
    task = encoded["TaskGroups"][0]["Tasks"][0]
    assert task["KillTimeout"] == 5_000_000_000  # durations are nanoseconds
    assert task["Resources"] == {"CPU": 100, "MemoryMB": 300, "MemoryMaxMB": 0, "Devices": [],
                                 "Cores": 0, "DiskMB": 0, "IOPS": 0, "Networks": [],
                                 "NUMA": None, "SecretsMB": 0}
    assert task["LogConfig"] == {"MaxFiles": 10, "MaxFileSizeMB": 10, "Disabled": False,
                                 "Enabled": None}
    assert encoded["TaskGroups"][0]["EphemeralDisk"] == {"Sticky": False, "Migrate": False,
                                                         "SizeMB": 300}


def test_zero_times_encode_as_gos_zero_time() -> None:
    encoded = json.loads(msgspec.json.encode(TaskState()))
    assert encoded["StartedAt"] == "0001-01-01T00:00:00Z"
    assert encoded["FinishedAt"] == "0001-01-01T00:00:00Z"


def test_terminal_status() -> None:
    assert not Allocation(client_status="running").is_terminal()
    assert Allocation(client_status="failed").is_terminal()
    assert Allocation(client_status="running", desired_status="stop").is_terminal()


_names = st.text(alphabet="abcdefghij-_", min_size=1, max_size=8)
_policies = st.builds(RestartPolicy, attempts=st.none() | st.integers(0, 10),
                      interval=st.none() | st.integers(0, 10**13),
                      mode=st.none() | st.sampled_from(["delay", "fail"]))
_tasks = st.builds(Task, name=_names, driver=st.sampled_from(["raw_exec", "mock_driver"]),
                   env=st.dictionaries(_names, st.text(max_size=5), max_size=3),
                   leader=st.booleans(), restart_policy=st.none() | _policies,
                   kill_timeout=st.integers(0, 10**11))
_jobs = st.builds(Job, id=_names, type=st.sampled_from(["service", "batch"]),
                  priority=st.integers(1, 100),
                  task_groups=st.lists(st.builds(TaskGroup, name=_names, count=st.integers(0, 5),
                                                 tasks=st.lists(_tasks, max_size=3)),
                                       max_size=3))


@given(_jobs)
def test_any_job_round_trips_through_json(job: Job) -> None:
    assert msgspec.json.decode(msgspec.json.encode(job), type=Job) == job


@given(st.builds(TaskEvent, type=_names, time=st.integers(0, 2**63 - 1),
                 details=st.dictionaries(_names, st.text(max_size=5), max_size=3)))
def test_any_task_event_round_trips(event: TaskEvent) -> None:
    assert msgspec.json.decode(msgspec.json.encode(event), type=TaskEvent) == event
