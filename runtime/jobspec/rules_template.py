"""The `template` block's rules: Nomad's `Template.Validate` (and the task's check that two
templates do not render to one destination), on a well-typed job.

Messages are Nomad's (`nomad/structs/structs.go`), each placed on the template field it is
about. What Nomad checks only at render time (the template's syntax, its functions, a source
file that does not exist, a change signal's name) is left to the template hook, as in Nomad:
a job whose template does not parse registers, and its task fails with "Template failed: …".

Invariant: the checks read the job and never change it (the struct's `__post_init__` already
applied `api/tasks.go`'s canonical defaults, SIGHUP for a signal template included).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable

from yurt.runtime.jobspec.fields import _At, _Problems
from yurt.runtime.lib.durations import format_duration
from yurt.runtime.structs import Job, Task, TaskGroup
from yurt.runtime.structs.template import TEMPLATE_CHANGE_MODES, Template, WaitConfig

INVALID_CHANGE_MODE = ("Invalid change mode. Must be one of the following: "
                       "noop, signal, script, restart")


def escapes_alloc_dir(destination: str) -> bool:
    """escapingfs.PathEscapesAllocViaRelative("task", dest): the destination, joined to a
    task directory, climbs out of the allocation directory."""
    joined = posixpath.normpath(posixpath.join("task", destination.lstrip("/")))
    return joined == ".." or joined.startswith("../")


def _perms_problem(perms: str) -> str | None:
    try:
        value = int(perms, 8)
    except ValueError:
        reason = "invalid syntax"
    else:
        if 0 <= value < 1 << 12 and perms.strip() == perms and perms[:1] not in "+-":
            return None
        reason = "value out of range"
    return f'Failed to parse "{perms}" as octal: strconv.ParseUint: parsing "{perms}": {reason}'


def check_template(tmpl: Template, at: _At, problems: _Problems) -> None:
    """Nomad's `Template.Validate`."""

    def field(attr: str) -> _At:
        return at.field(Template, attr)

    if not tmpl.source and not tmpl.data:
        problems.add(at, "Must specify a source path or have an embedded template")
    if not tmpl.destination:
        problems.add(field("destination"), "Must specify a destination for the template")
    elif escapes_alloc_dir(tmpl.destination):
        problems.add(field("destination"), "destination escapes allocation directory")
    mode = tmpl.change_mode
    if mode not in TEMPLATE_CHANGE_MODES:
        problems.add(field("change_mode"), INVALID_CHANGE_MODE)
    elif mode == "signal":
        # Nomad checks the signal's name only when the task's template manager starts
        # (client/allocrunner/taskrunner/template/template.go `newTaskTemplateManager`):
        # the job registers, the task fails (hooks/template.py `TemplateHook.prestart`).
        if not tmpl.change_signal:
            problems.add(field("change_signal"),
                         "Must specify signal value when change mode is signal")
        if tmpl.env:
            problems.add(field("env"), "cannot use signals with env var templates")
    elif mode == "script":
        if tmpl.change_script is None:
            problems.add(field("change_script"), "must specify change script configuration "
                                                 "value when change mode is script")
        elif not tmpl.change_script.command:
            problems.add(field("change_script"),
                         "must specify script path value when change mode is script")
    if tmpl.splay < 0:
        problems.add(field("splay"), "Must specify positive splay value")
    if tmpl.perms:
        msg = _perms_problem(tmpl.perms)
        if msg is not None:
            problems.add(field("perms"), msg)
    wait = tmpl.wait
    if wait is not None and wait.min is not None and wait.max is not None \
            and wait.min > wait.max:
        problems.add(field("wait").field(WaitConfig, "min"),
                     f"wait min {format_duration(wait.min)} is greater than max "
                     f"{format_duration(wait.max)}")


def check_task_templates(task: Task, at: _At, problems: _Problems) -> None:
    destinations: dict[str, int] = {}
    for i, tmpl in enumerate(task.templates):
        t_at = at.item(Task, "templates", i, str(i))
        check_template(tmpl, t_at, problems)
        other = destinations.get(tmpl.destination)
        if other is not None:
            problems.add(t_at.field(Template, "destination"),
                         f"Template {i + 1} has same destination as {other}")
        else:
            destinations[tmpl.destination] = i + 1


def check_job_templates(job: Job, group_at: Callable[[int], _At], problems: _Problems) -> None:
    """Every task's templates (the one call rules.py makes)."""
    for gi, group in enumerate(job.task_groups):
        for ti, task in enumerate(group.tasks):
            if task.templates:
                task_at = group_at(gi).item(TaskGroup, "tasks", ti, task.name or str(ti))
                check_task_templates(task, task_at, problems)
