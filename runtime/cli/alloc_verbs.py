"""`alloc restart`, `alloc signal`, `alloc stop`: what they ask the agent, as Nomad's
command/alloc_restart.go, alloc_signal.go and alloc_stop.go `Run` ask it.

Shared by the three: the allocation is found by prefix (`resolve_alloc`; `-verbose` lists
an ambiguous prefix's matches with whole IDs, as Nomad's `length`), and a task named by
`-task` (which wins over the TASK argument) or by the argument must be one of the
allocation's group (Nomad's `validateTaskExistsInAllocation`, with its text; exit 1).
`alloc stop` then follows the stop's evaluation with Nomad's monitor
(runtime/cli/job_monitor.py `monitor`, IDs shortened unless `-verbose`), or with `-detach`
prints the evaluation's ID and returns; `-no-shutdown-delay` is Nomad's
`?no_shutdown_delay=true`, which the client honours (`DesiredTransition.NoShutdownDelay`).

Loaded only when one of these runs; nothing heavy at module level.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from yurt.runtime.cli.api_client import api, call, resolve_alloc
from yurt.runtime.cli.job_monitor import FULL_ID, SHORT_ID, monitor
from yurt.runtime.cli.output import echo, fail, short
from yurt.runtime.errors import EXIT_FAILED, EXIT_USAGE

if TYPE_CHECKING:
    from yurt.runtime.cli.http import AgentConnection


def group_tasks(alloc: dict[str, Any]) -> list[str]:
    """The task names of the allocation's group, in the job's order ([] when the job is not
    in the answer)."""
    for group in (alloc.get("Job") or {}).get("TaskGroups") or []:
        if group.get("Name") == alloc.get("TaskGroup"):
            return [str(t.get("Name", "")) for t in group.get("Tasks") or []]
    return []


def missing_task_text(task: str, alloc: dict[str, Any]) -> str | None:
    """Nomad's `validateTaskExistsInAllocation`: None when the group has `task`, else its
    message (the group's tasks, one a line)."""
    if not (alloc.get("Job") or {}).get("TaskGroups"):
        return None  # no job in the answer: the agent judges the name
    tasks = group_tasks(alloc)
    if task in tasks:
        return None
    if not tasks:
        return f"Could not find allocation task group: {alloc.get('TaskGroup', '')}"
    return f"Could not find task named: {task}, found:\n" + "\n".join(tasks)


def _allocation(client: AgentConnection, prefix: str, verbose: bool,
                task: str) -> dict[str, Any]:
    """The allocation `prefix` names, with `task` (if any) checked against its group."""
    alloc: dict[str, Any] = call(client, "GET", "/v1/allocation/"
                                 + resolve_alloc(client, prefix, full_ids=verbose))
    if task:
        problem = missing_task_text(task, alloc)
        if problem is not None:
            fail(problem, EXIT_FAILED)
    return alloc


def restart(prefix: str, task: str, all_tasks: bool, verbose: bool) -> None:
    """Nomad's `alloc restart`: one task, the running tasks, or with `all_tasks` every task."""
    if all_tasks and task:
        fail("The -all-tasks option is not allowed when restarting a specific task.",
             EXIT_USAGE)
    with api() as client:
        alloc = _allocation(client, prefix, verbose, task)
        call(client, "POST", f"/v1/client/allocation/{alloc['ID']}/restart",
             json={"TaskName": task, "AllTasks": all_tasks})
    echo(f"Allocation {alloc['ID'] if verbose else short(alloc['ID'])} restarted")


def signal(prefix: str, task: str, sig: str, verbose: bool) -> None:
    """Nomad's `alloc signal`: `sig` (canonical already) to one task or to every task."""
    with api() as client:
        alloc = _allocation(client, prefix, verbose, task)
        call(client, "POST", f"/v1/client/allocation/{alloc['ID']}/signal",
             json={"Task": task, "Signal": sig})
    ident = alloc["ID"] if verbose else short(alloc["ID"])
    echo(f"Sent {sig} to allocation {ident}{f' task {task}' if task else ''}")


def stop(prefix: str, *, detach: bool, no_shutdown_delay: bool, verbose: bool) -> int:
    """Nomad's `alloc stop`; returns the exit code (the monitor's, or 0 detached)."""
    with api() as client:
        alloc = _allocation(client, prefix, verbose, "")
        params = {"no_shutdown_delay": "true"} if no_shutdown_delay else None
        answer = call(client, "POST", f"/v1/allocation/{alloc['ID']}/stop", params=params)
        eval_id = str(answer["EvalID"])
        if detach:
            echo(eval_id)
            return 0
        return monitor(client, eval_id, FULL_ID if verbose else SHORT_ID)
