"""Stage 4: the rules Nomad enforces on a well-typed `Job`, then its canonical form.

What lives here: validation (restart policy, lifecycle hooks, one leader, unique names, known
drivers and their configs, resources, log storage against the ephemeral disk, names that must
be file names; the reschedule block's rules live in reschedule.py) and `canonicalize` (the
job-type-dependent restart policy, task restart blocks merged over their group's, every group's
reschedule policy).

Invariants: the checks read a `Job` that stage 3 made well-typed and never change it; they
report every problem through `_Problems`. Only the group's restart policy is checked, as
Nomad's `TaskGroup.Validate` does; a task's own restart block never is (Nomad's
`Task.Validate`). `canonicalize` runs only on a job without problems and leaves no `None` in
any restart policy field.
"""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Callable
from typing import Any, Final

import msgspec

from yurt.runtime.client.drivers.configs import TASK_CONFIG
from yurt.runtime.jobspec.fields import _At, _Problems
from yurt.runtime.jobspec.limits import MAX_JOB_COUNT, MAX_NAME_BYTES, job_count_problem
from yurt.runtime.jobspec.reschedule import check_job_reschedule, fold_reschedule
from yurt.runtime.jobspec.rules_artifact import canonicalize_artifacts, check_artifacts
from yurt.runtime.jobspec.rules_constraint import check_job_placement
from yurt.runtime.jobspec.rules_identity import canonicalize_identities, check_job_identities
from yurt.runtime.jobspec.rules_network import check_job_networks, fold_networks
from yurt.runtime.jobspec.rules_service import canonicalize_services, check_services
from yurt.runtime.jobspec.rules_template import check_job_templates
from yurt.runtime.jobspec.rules_update import check_job_update, fold_update
from yurt.runtime.jobspec.rules_volume import check_job_extras, fold_extras
from yurt.runtime.lib.cron import CronError, check_spec, load_zone
from yurt.runtime.lib.durations import SECOND, format_duration, parse_duration
from yurt.runtime.lib.structcheck import Problem, Vocabulary, check
from yurt.runtime.structs import (
    DEFAULT_RESTART_POLICY,
    DISPATCH_PAYLOAD_MODES,
    JOB_TYPES,
    LIFECYCLE_HOOKS,
    PERIODIC_SPEC_CRON,
    RESTART_MODES,
    DispatchPayloadConfig,
    EphemeralDisk,
    Job,
    Lifecycle,
    LogConfig,
    MigrateStrategy,
    ParameterizedJobConfig,
    PeriodicConfig,
    RequestedDevice,
    Resources,
    RestartPolicy,
    Task,
    TaskGroup,
)

#: Nomad's minimum restart interval.
MIN_RESTART_INTERVAL: Final = 5 * SECOND


def merge_restart(base: RestartPolicy, override: RestartPolicy | None) -> RestartPolicy:
    """`override`'s set fields over `base`'s (a task's restart block over its group's)."""
    if override is None:
        return msgspec.structs.replace(base)
    changes = {f: getattr(override, f) for f in override.__struct_fields__
               if getattr(override, f) is not None}
    return msgspec.structs.replace(base, **changes)


def _default_restart(job: Job) -> RestartPolicy:
    return DEFAULT_RESTART_POLICY.get(job.type, DEFAULT_RESTART_POLICY["service"])


def _check_restart(policy: RestartPolicy, at: _At) -> list[tuple[_At, str]]:
    """Nomad's `RestartPolicy.Validate`, on a fully merged policy."""
    problems = _Problems([])
    attempts, interval = policy.attempts or 0, policy.interval or 0
    delay, mode = policy.delay or 0, policy.mode
    mode_at = at.field(RestartPolicy, "mode")
    if mode not in RESTART_MODES:
        problems.add(mode_at, f'expected "delay" or "fail", got "{mode}"')
    elif attempts == 0 and mode != "fail":
        problems.add(mode_at, f'restart policy "{mode}" with 0 attempts is ambiguous; '
                              'use mode "fail" for a task that must not restart')
    if attempts < 0:
        problems.add(at.field(RestartPolicy, "attempts"), f"must be 0 or more, got {attempts}")
    if interval < MIN_RESTART_INTERVAL:
        problems.add(at.field(RestartPolicy, "interval"),
                     f"must be at least {format_duration(MIN_RESTART_INTERVAL)}, "
                     f"got {format_duration(interval)}")
    elif attempts * delay > interval:
        problems.add(at, f"cannot restart {attempts} times in an interval of "
                         f"{format_duration(interval)} with a delay of {format_duration(delay)} "
                         f"(attempts × delay must not exceed interval)")
    return problems.items


def _check_unique(names: list[str], at_of: Callable[[int], _At], what: str,
                  problems: _Problems) -> None:
    seen: set[str] = set()
    for i, name in enumerate(names):
        if not name:
            problems.add(at_of(i), f"{what} name must not be empty")
        elif name in seen:
            problems.add(at_of(i), f'{what} name "{name}" is used more than once')
        seen.add(name)


_MSGSPEC_AT: Final = re.compile(r"^(?P<msg>.*?)(?: - at `\$(?P<path>[^`]*)`)?$")


#: A jobspec's words for `structcheck`: fields in blocks.
_JOBSPEC: Final = Vocabulary(key="field", mapping="a block")


def _check_driver_config(driver: str, config: dict[str, Any], at: _At,
                         problems: _Problems) -> None:
    """Check `config` against the driver's schema: every problem at once, on its field, in
    the jobspec's words (never msgspec's "expected `array`, got `str`")."""
    schema = TASK_CONFIG[driver]
    found = check(config, schema, _JOBSPEC)
    for problem in found:
        where = at
        for step in problem.path:
            where = _At((*where.d, str(step)), (*where.k, step))
        # An unknown field's message is already the jobspec's (`unknown field "x"; did you
        # mean "y"?`); a missing one says which driver needs it.
        message = problem.message
        if message.startswith("missing the required field "):
            message = f"{driver} needs {message.removeprefix('missing the required field ')}"
        problems.add(where, message)
    # Duration options are strings to the schema; each is parsed here so all bad ones show.
    for name in getattr(schema, "DURATIONS", ()):
        value = config.get(name)
        if isinstance(value, str) and value:
            try:
                parse_duration(value)
            except ValueError as e:
                problems.add(_At((*at.d, name), (*at.k, name)), str(e))
                found.append(Problem((name,), str(e)))
    if found:
        return
    try:  # whatever `check` does not look at (a `__post_init__` of a future schema)
        msgspec.convert(config, schema)
    except (msgspec.ValidationError, ValueError) as e:
        m = _MSGSPEC_AT.match(str(e))
        assert m is not None  # the pattern matches any string
        msg, where = m["msg"], at
        for part in re.findall(r"\.(\w+)|\[(\d+)\]", m["path"] or ""):
            key: str | int = part[0] or int(part[1])
            where = _At((*where.d, str(key)), (*where.k, key))
        if ": " in msg and m["path"] is None and msg.split(": ", 1)[0] in config:
            name, msg = msg.split(": ", 1)  # a __post_init__ check names its field
            where = _At((*where.d, name), (*where.k, name))
        problems.add(where, msg[0].lower() + msg[1:])


def _check_task(group: TaskGroup, task: Task, at: _At, problems: _Problems) -> None:
    name_problem = _file_name_problem(task.name)
    if name_problem:
        problems.add(at, f"task name {name_problem}")
    if not task.driver:
        problems.add(at.field(Task, "driver"), "missing driver")
    elif task.driver in TASK_CONFIG:
        # Any other driver's `config` is opaque here, as to Nomad's jobspec and server (its
        # driver validates it on the client); placement says which nodes lack the driver
        # (server/scheduler/feasible.py `missing_drivers`).
        _check_driver_config(task.driver, task.config, at.field(Task, "config"), problems)
    if task.lifecycle is not None and task.lifecycle.hook not in LIFECYCLE_HOOKS:
        problems.add(at.field(Task, "lifecycle").field(Lifecycle, "hook"),
                     f"expected one of {', '.join(map(json.dumps, LIFECYCLE_HOOKS))}, "
                     f'got "{task.lifecycle.hook}"')
    # A task's own `restart` block is not checked: Nomad's `Task.Validate` validates no
    # restart policy (only `TaskGroup.Validate` does, the group's), so a task block whose
    # attempts × delay exceed its interval runs under Nomad and here alike.
    for attr in ("kill_timeout", "shutdown_delay"):
        if getattr(task, attr) < 0:
            problems.add(at.field(Task, attr), "must not be negative")
    if task.kill_signal:
        try:
            signal.Signals[task.kill_signal.upper()]
        except KeyError:
            problems.add(at.field(Task, "kill_signal"),
                         f'unknown signal "{task.kill_signal}"; expected a name such as "SIGTERM"')

    res, res_at = task.resources, at.field(Task, "resources")
    if res.cpu < 1 and res.cores == 0:  # structs.go `MeetsMinResources`
        problems.add(res_at.field(Resources, "cpu"), f"minimum CPU value is 1, got {res.cpu}")
    if res.memory < 10:
        problems.add(res_at.field(Resources, "memory"),
                     f"minimum memory value is 10 MB, got {res.memory}")
    # structs.go `Resources.Validate`: 0 and -1 (`MemoryNoLimit`) are sentinels, not sizes.
    if res.memory_max not in (0, -1) and res.memory_max < res.memory:
        problems.add(res_at.field(Resources, "memory_max"),
                     f"memory_max ({res.memory_max} MB) must be at least memory "
                     f"({res.memory} MB)")
    if res.secrets > res.memory:
        problems.add(res_at.field(Resources, "secrets"), f"SecretsMB value ({res.secrets}) "
                                                         "cannot be larger than MemoryMB value "
                                                         f"({res.memory})")
    if res.secrets < 0:
        problems.add(res_at.field(Resources, "secrets"),
                     f"SecretsMB value ({res.secrets}) cannot be negative")
    for i, dev in enumerate(res.devices):
        dev_at = res_at.item(Resources, "devices", i, dev.name)
        if not dev.name:  # structs.go `RequestedDevice.Validate`: any other name is kept
            problems.add(dev_at, "device name must be given as one of the following: type, "
                                 "vendor/type, or vendor/type/name")
        if dev.count < 0:  # Nomad: a uint64, 0 accepted (RequestedDevice.Validate)
            problems.add(dev_at.field(RequestedDevice, "count"),
                         f"must be 0 or more, got {dev.count}")

    check_artifacts(task, at, problems)
    if task.dispatch_payload is not None:
        _check_dispatch_payload(task.dispatch_payload, at.field(Task, "dispatch_payload"),
                                problems)

    logs, logs_at = task.log_config, at.field(Task, "log_config")
    if logs.max_files < 1:
        problems.add(logs_at.field(LogConfig, "max_files"), f"must be at least 1, got "
                                                            f"{logs.max_files}")
    if logs.max_file_size < 1:
        problems.add(logs_at.field(LogConfig, "max_file_size"),
                     f"must be at least 1 MB, got {logs.max_file_size}")
    log_mb = logs.max_files * logs.max_file_size
    if log_mb >= group.ephemeral_disk.size and not logs.disabled:
        problems.add(logs_at, f"log storage ({logs.max_files} × {logs.max_file_size} MB = "
                              f"{log_mb} MB) must be less than the group's ephemeral_disk size "
                              f"({group.ephemeral_disk.size} MB)")


#: Names a task's directory would share with the allocation's own: `alloc` is the shared
#: dir (a task named so would be handed its tmp and put its secrets in it).
RESERVED_TASK_NAMES: Final = frozenset({"alloc"})


def _file_name_problem(name: str) -> str | None:
    """Why `name` cannot be a task's file name, or None (an empty name is reported apart)."""
    if "/" in name or "\0" in name:
        return 'must not contain "/" or NUL characters'
    if name in (".", ".."):
        return f'must not be "{name}"'
    if name in RESERVED_TASK_NAMES:
        return f'must not be "{name}": the allocation directory uses that name'
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return f"must be at most {MAX_NAME_BYTES} bytes"
    return None


def _check_job(job: Job, root: _At, problems: _Problems) -> None:
    if not job.id:
        problems.add(root, "missing job ID")
    elif " " in job.id or "\0" in job.id:
        problems.add(root, "job ID must not contain spaces or NUL characters")
    elif len(job.id.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        problems.add(root, f"job ID must be at most {MAX_NAME_BYTES} bytes")
    if job.type not in JOB_TYPES:
        problems.add(root.field(Job, "type"),
                     f"expected one of {', '.join(map(json.dumps, JOB_TYPES))}, got "
                     f'"{job.type}"')
    if not 1 <= job.priority <= 100:
        problems.add(root.field(Job, "priority"), f"must be between 1 and 100, got "
                                                  f"{job.priority}")
    if not job.datacenters:  # structs.go `Job.Validate` (no multiregion here)
        problems.add(root.field(Job, "datacenters"), "Missing job datacenters")
    elif "" in job.datacenters:
        problems.add(root.field(Job, "datacenters"), "Job datacenter must be non-empty string")
    if not job.task_groups:
        problems.add(root, 'a job needs at least one group "<name>" { … }')
    _check_periodic(job, root, problems)
    _check_parameterized(job, root, problems)

    def group_at(i: int) -> _At:
        return root.item(Job, "task_groups", i, job.task_groups[i].name or str(i))

    _check_unique([g.name for g in job.task_groups], group_at, "group", problems)
    check_job_reschedule(job, root, group_at, problems)
    check_job_update(job, root, group_at, problems)
    check_job_placement(job, root, group_at, problems)
    check_job_identities(job, root, group_at, problems)
    check_job_networks(job, group_at, problems)
    check_job_extras(job, group_at, problems)
    check_job_templates(job, group_at, problems)
    check_services(job, group_at, problems)
    too_many = job_count_problem(sum(max(g.count, 0) for g in job.task_groups))
    running = 0  # the total so far: the cap is reported once, where it is crossed
    for gi, group in enumerate(job.task_groups):
        g_at = group_at(gi)
        running += max(group.count, 0)
        if group.count < 0:
            problems.add(g_at.field(TaskGroup, "count"),
                         f"must be 0 or more, got {group.count}")
        elif too_many and running > MAX_JOB_COUNT >= running - group.count:
            problems.add(g_at.field(TaskGroup, "count"), too_many)
        if job.type == "system" and group.count > 1:  # structs.go `Job.Validate`
            problems.add(g_at.field(TaskGroup, "count"),
                         f"Job task group {group.name} has count {group.count}. Count cannot "
                         "exceed 1 with system scheduler")
        if len(group.name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
            problems.add(g_at, f"group name must be at most {MAX_NAME_BYTES} bytes")
        if group.ephemeral_disk.size < 10:
            problems.add(g_at.field(TaskGroup, "ephemeral_disk").field(EphemeralDisk, "size"),
                         f"minimum ephemeral_disk size is 10 MB, got {group.ephemeral_disk.size}")
        if group.migrate is not None:
            _check_migrate(job.type, group.migrate, g_at.field(TaskGroup, "migrate"),
                           problems)
        group_policy = merge_restart(_default_restart(job), group.restart_policy)
        if group.restart_policy is not None:
            for where, msg in _check_restart(group_policy, g_at.field(TaskGroup, "restart_policy")):
                problems.add(where, msg)
        if not group.tasks:
            problems.add(g_at, 'a group needs at least one task "<name>" { … }')

        def task_at(i: int, g_at: _At = g_at, group: TaskGroup = group) -> _At:
            return g_at.item(TaskGroup, "tasks", i, group.tasks[i].name or str(i))

        _check_unique([t.name for t in group.tasks], task_at, "task", problems)
        leaders = [i for i, t in enumerate(group.tasks) if t.leader]
        for i in leaders[1:]:
            problems.add(task_at(i).field(Task, "leader"),
                         f'only one task may be marked as leader; "{group.tasks[leaders[0]].name}"'
                         " already is")
        if group.tasks and all(t.lifecycle is not None and t.lifecycle.hook
                               for t in group.tasks):  # structs.go `TaskGroup.Validate`
            problems.add(g_at, f"Task group {group.name} must have at least one main task")
        for ti, task in enumerate(group.tasks):
            _check_task(group, task, task_at(ti), problems)


_BATCH_TYPES: Final = ("batch", "sysbatch")
_MIGRATE_HEALTH_CHECKS: Final = ("checks", "task_states")


def _check_migrate(job_type: str, migrate: MigrateStrategy, at: _At,
                   problems: _Problems) -> None:
    """Nomad's `TaskGroup.Validate` for `migrate` (service jobs only) and
    `MigrateStrategy.Validate`, with Nomad's messages (nomad/structs/structs.go)."""
    if job_type != "service":
        problems.add(at, f'Job type "{job_type}" does not allow migrate block')
        return
    if migrate.max_parallel < 0:
        problems.add(at.field(MigrateStrategy, "max_parallel"),
                     f"MaxParallel must be >= 0 but found {migrate.max_parallel}")
    if not migrate.health_check:
        if migrate.max_parallel > 0:
            problems.add(at.field(MigrateStrategy, "health_check"), "Missing HealthCheck")
    elif migrate.health_check not in _MIGRATE_HEALTH_CHECKS:
        problems.add(at.field(MigrateStrategy, "health_check"),
                     f"Invalid HealthCheck: {json.dumps(migrate.health_check)}")
    if migrate.min_healthy_time < 0:
        problems.add(at.field(MigrateStrategy, "min_healthy_time"),
                     f"MinHealthyTime is {format_duration(migrate.min_healthy_time)} and must "
                     "be >= 0")
    if migrate.healthy_deadline < 0:
        problems.add(at.field(MigrateStrategy, "healthy_deadline"),
                     f"HealthyDeadline is {format_duration(migrate.healthy_deadline)} and must "
                     "be >= 0")
    if migrate.min_healthy_time > migrate.healthy_deadline:
        problems.add(at.field(MigrateStrategy, "min_healthy_time"),
                     "MinHealthyTime must be less than HealthyDeadline")


def _check_periodic(job: Job, root: _At, problems: _Problems) -> None:
    """Nomad's `Job.Validate` for `periodic` and `PeriodicConfig.Validate` (only when
    enabled, as Nomad: a disabled block is kept and never looked at)."""
    periodic = job.periodic
    if periodic is None or not periodic.enabled:
        return
    at = root.field(Job, "periodic")
    if job.type not in _BATCH_TYPES:
        problems.add(at, 'periodic can only be used with "batch" or "sysbatch" jobs, '
                         f'not "{job.type}"')
    if periodic.cron and periodic.crons:
        problems.add(at, "only one of cron or crons may be used")
    if not periodic.cron and not periodic.crons:
        problems.add(at, "must specify a cron spec (cron or crons)")
    if periodic.time_zone:
        try:
            load_zone(periodic.time_zone)
        except CronError as e:
            problems.add(at.field(PeriodicConfig, "time_zone"),
                         f'invalid time zone "{periodic.time_zone}": {e}')
    if periodic.spec_type != PERIODIC_SPEC_CRON:
        problems.add(at.field(PeriodicConfig, "spec_type"),
                     f'unknown periodic specification type "{periodic.spec_type}"')
        return
    specs = [("cron", periodic.cron)] if periodic.cron else [("crons", s) for s in periodic.crons]
    for attr, spec in specs:
        try:
            check_spec(spec)
        except CronError as e:
            problems.add(at.field(PeriodicConfig, attr), f'invalid cron spec "{spec}": {e}')


def _check_parameterized(job: Job, root: _At, problems: _Problems) -> None:
    """Nomad's `Job.Validate` for `parameterized` and `ParameterizedJobConfig.Validate`."""
    params = job.parameterized
    if params is None or job.dispatched:
        return
    at = root.field(Job, "parameterized")
    if job.type not in _BATCH_TYPES:
        problems.add(at, 'parameterized can only be used with "batch" or "sysbatch" jobs, '
                         f'not "{job.type}"')
    if params.payload and params.payload not in DISPATCH_PAYLOAD_MODES:
        problems.add(at.field(ParameterizedJobConfig, "payload"),
                     f"unknown payload requirement \"{params.payload}\"; expected one of "
                     f"{', '.join(map(json.dumps, DISPATCH_PAYLOAD_MODES))}")
    both = sorted(set(params.meta_required) & set(params.meta_optional))
    if both:
        problems.add(at, "required and optional meta keys should be disjoint; these are in "
                         f"both: {', '.join(both)}")


def _check_dispatch_payload(config: DispatchPayloadConfig, at: _At,
                            problems: _Problems) -> None:
    """Nomad's `DispatchPayloadConfig.Validate`: the file stays inside the task's `local/`
    (written as `task/local/<file>`, it must not climb out of the allocation directory; a
    leading `/` is relative to `local/` too, as Go's `filepath.Join` reads it)."""
    depth = 2  # `task/local/`: two levels below the allocation directory
    for part in config.file.split("/"):
        depth += -1 if part == ".." else 0 if part in ("", ".") else 1
        if depth < 0:
            break
    if depth < 0 or "\0" in config.file:
        problems.add(at.field(DispatchPayloadConfig, "file"),
                     f'"{config.file}" escapes the allocation directory')


def canonicalize(job: Job) -> Job:
    """Fill what depends on context, in place: job name, every group's reschedule policy
    (reschedule.py), and every restart policy (group over job-type default, task over
    group), so runners never see a `None` policy field."""
    if not job.name:
        job.name = job.id
    if job.parameterized is not None and not job.parameterized.payload:
        job.parameterized.payload = "optional"
    fold_reschedule(job)
    fold_update(job)
    fold_extras(job)
    fold_networks(job)
    canonicalize_artifacts(job)
    canonicalize_services(job)
    for group in job.task_groups:
        group.restart_policy = merge_restart(_default_restart(job), group.restart_policy)
        for task in group.tasks:
            task.restart_policy = merge_restart(group.restart_policy, task.restart_policy)
    canonicalize_identities(job)
    return job
