"""The `service`, `check` and `check_restart` blocks: Nomad's canonical form and its rules
(stage 4), at group and task level.

What lives here: `canonicalize_services` (Nomad's `api.Service.Canonicalize` and
`structs.Service.Canonicalize`: default and interpolated names, `address_mode = "auto"`,
`on_update = "require_healthy"`, a check's `check_restart` merged over its service's with a
1s grace, the job's namespace) and `check_services` (`Service.Validate`, `validateNomad`,
`TaskGroup.validateServices` and the task's `validateServices`, with Nomad's messages).

Deliberate differences from Nomad, because yurt has no Consul: `provider` defaults to
`"nomad"` (Nomad's default is `"consul"`), a `provider = "consul"` service is accepted and
registered in yurt's native catalogue instead (client/checks/registration.py), and
`script` checks are accepted with the Nomad provider (Nomad allows them only with Consul; yurt
runs them through the task's exec path).

Invariants: the checks never change the job they read (they canonicalize a copy, so check
names in messages are Nomad's defaults); `canonicalize_services` runs only on a job without
problems and leaves every service with a provider, an address mode and an on_update, and
every check with a name, an on_update and, when any is given, a merged `check_restart`.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable
from typing import Final

import msgspec

from yurt.runtime.jobspec.fields import _At, _Problems
from yurt.runtime.lib.durations import SECOND, format_duration
from yurt.runtime.structs import Job, Task, TaskGroup
from yurt.runtime.structs.service import (
    CHECK_HTTP,
    CHECK_SCRIPT,
    CHECK_TCP,
    ON_UPDATE_IGNORE,
    ON_UPDATE_IGNORE_WARNINGS,
    ON_UPDATE_REQUIRE_HEALTHY,
    SERVICE_PROVIDER_CONSUL,
    SERVICE_PROVIDER_NOMAD,
    CheckRestart,
    Service,
    ServiceCheck,
)

MIN_CHECK_INTERVAL: Final = SECOND
MIN_CHECK_TIMEOUT: Final = SECOND
#: The check types the Nomad provider runs here (Nomad's are tcp and http; see above).
NOMAD_CHECK_TYPES: Final = (CHECK_TCP, CHECK_HTTP, CHECK_SCRIPT)
_ON_UPDATE: Final = ("", ON_UPDATE_IGNORE, ON_UPDATE_REQUIRE_HEALTHY, ON_UPDATE_IGNORE_WARNINGS)
_SERVICE_NAME: Final = re.compile(r"(?i:[a-z0-9]|[a-z0-9][a-z0-9\-]{0,61}[a-z0-9])")
_ENV_VAR: Final = re.compile(r"\$\{[^}]*\}")
_HTTP_METHODS: Final = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "CONNECT", "OPTIONS",
                        "TRACE")
DEFAULT_GRACE: Final = SECOND


def _merge_check_restart(base: CheckRestart | None,
                         over: CheckRestart | None) -> CheckRestart | None:
    """Nomad's `CheckRestart.Merge`: the check's set fields over the service's."""
    if base is None:
        return over
    merged = msgspec.structs.replace(base)
    if over is not None:
        if over.limit > 0:
            merged.limit = over.limit
        if over.grace is not None:
            merged.grace = over.grace
        if over.ignore_warnings:
            merged.ignore_warnings = True
    return merged


def canonical_service(service: Service, job: Job, group: TaskGroup,
                      task: Task | None) -> Service:
    """A canonical copy of `service` (see the module header)."""
    s = msgspec.structs.replace(service, checks=[msgspec.structs.replace(c)
                                                 for c in service.checks])
    task_name = task.name if task is not None else "group"
    job_name = job.name or job.id
    if not s.name:
        s.name = (f"{job_name}-{group.name}-{task.name}" if task is not None
                  else f"{job_name}-{group.name}")
    if task is not None and not s.task:
        s.task = task.name
    for var, value in (("JOB", job_name), ("TASKGROUP", group.name), ("TASK", task_name),
                       ("BASE", f"{job_name}-{group.name}-{task_name}")):
        s.name = s.name.replace("${" + var + "}", value)
    s.address_mode = s.address_mode or "auto"
    s.on_update = s.on_update or ON_UPDATE_REQUIRE_HEALTHY
    s.provider = s.provider or SERVICE_PROVIDER_NOMAD
    s.cluster = s.cluster or "default"
    if s.provider == SERVICE_PROVIDER_NOMAD:
        s.namespace = job.namespace
    for c in s.checks:
        c.check_restart = _merge_check_restart(s.check_restart, c.check_restart)
        if c.check_restart is not None and c.check_restart.grace is None:
            c.check_restart = msgspec.structs.replace(c.check_restart, grace=DEFAULT_GRACE)
        c.success_before_passing = max(c.success_before_passing, 0)
        c.failures_before_critical = max(c.failures_before_critical, 0)
        c.failures_before_warning = max(c.failures_before_warning, 0)
        c.on_update = c.on_update or s.on_update
        if not c.name:
            c.name = f'service: "{s.name}" check'
        if not c.task and task is not None:
            c.task = task.name
    return s


def canonicalize_services(job: Job) -> None:
    """Every service of the job in its canonical form, in place."""
    for group in job.task_groups:
        group.services = [canonical_service(s, job, group, None) for s in group.services]
        for task in group.tasks:
            task.services = [canonical_service(s, job, group, task) for s in task.services]


# --------------------------------------------------------------------------- rules


def _check_problem(check: ServiceCheck) -> str | None:
    """Nomad's `ServiceCheck.validateCommon` and `validateNomad`: the first problem."""
    kind = check.type.lower()
    if kind not in NOMAD_CHECK_TYPES:
        return (f'invalid check type ("{kind}"), must be one of '
                f'{", ".join(NOMAD_CHECK_TYPES)}')
    if kind == CHECK_HTTP:
        if not check.path:
            return "http type must have http path"
        try:
            scheme = urllib.parse.urlsplit(check.path).scheme
        except ValueError:  # Go's url.Parse fails too (an unclosed "[" host)
            return "http type must have valid http path"
        if scheme:
            return "http type must have relative http path"
    if kind == CHECK_SCRIPT and not check.command:
        return "script type must have a valid script path"
    if check.interval == 0:
        return (f"missing required value interval. Interval cannot be less than "
                f"{format_duration(MIN_CHECK_INTERVAL)}")
    if check.interval < MIN_CHECK_INTERVAL:
        return (f"interval ({format_duration(check.interval)}) cannot be lower than "
                f"{format_duration(MIN_CHECK_INTERVAL)}")
    if check.timeout == 0:
        return (f"missing required value timeout. Timeout cannot be less than "
                f"{format_duration(MIN_CHECK_TIMEOUT)}")
    if check.timeout < MIN_CHECK_TIMEOUT:
        return (f"timeout ({format_duration(check.timeout)}) is lower than required minimum "
                f"timeout {format_duration(MIN_CHECK_TIMEOUT)}")
    if check.initial_status not in ("", "passing", "warning", "critical"):
        return (f"invalid initial check state ({check.initial_status}), must be one of "
                f'"passing", "warning", "critical" or empty')
    if check.address_mode == "auto":
        return 'invalid address_mode "auto" - auto only valid for services'
    if check.address_mode not in ("", "host", "driver", "alloc", "alloc_ipv6"):
        return f'invalid address_mode "{check.address_mode}"'
    if check.on_update not in _ON_UPDATE:
        return (f'on_update must be "require_healthy", "ignore_warnings", or "ignore"; '
                f'got "{check.on_update}"')
    restart = check.check_restart
    if restart is not None:
        if check.on_update == ON_UPDATE_IGNORE:
            return f'on_update value "{check.on_update}" is not compatible with check_restart'
        if not restart.ignore_warnings and check.on_update == ON_UPDATE_IGNORE_WARNINGS:
            return (f'on_update value "{check.on_update}" not supported with check_restart '
                    f'ignore_warnings value "false"')
        if restart.limit < 0:
            return f"limit must be greater than or equal to 0 but found {restart.limit}"
        if restart.grace is not None and restart.grace < 0:
            return f"grace period must be greater than or equal to 0 but found {restart.grace}"
    if check.expose:
        return "expose may only be set for Consul service checks"
    if check.on_update == ON_UPDATE_IGNORE_WARNINGS:
        return "on_update may only be set to ignore_warnings for Consul service checks"
    if restart is not None and restart.ignore_warnings:
        return "ignore_warnings on check_restart only supported for Consul service checks"
    if check.address_mode == "driver":
        return "address_mode = driver may only be set for Consul service checks"
    if kind == CHECK_HTTP and check.method and check.method not in _HTTP_METHODS:
        return f'method type "{check.method}" not supported in Nomad http check'
    for name in ("success_before_passing", "failures_before_critical",
                 "failures_before_warning", "tls_server_name"):
        if getattr(check, name):
            return f"{name} may only be set for Consul service checks"
    return None


def _check_service(s: Service, at: _At, problems: _Problems) -> None:
    """Nomad's `Service.Validate` on a canonical service."""
    if not _SERVICE_NAME.fullmatch(_ENV_VAR.sub("ENV-VAR", s.name)):
        problems.add(at.field(Service, "name"),
                     "Service name must be valid per RFC 1123 and can contain only "
                     "alphanumeric characters or dashes and must be no longer than 63 "
                     f'characters: "{s.name}"')
    if s.address_mode in ("host", "driver", "alloc", "alloc_ipv6"):
        if s.address:
            problems.add(at.field(Service, "address"),
                         'Service address_mode must be "auto" if address is set')
    elif s.address_mode != "auto":
        problems.add(at.field(Service, "address_mode"),
                     f'Service address_mode must be "auto", "host", or "driver"; '
                     f'not "{s.address_mode}"')
    if s.on_update not in _ON_UPDATE:
        problems.add(at.field(Service, "on_update"),
                     f'Service on_update must be "require_healthy", "ignore_warnings", or '
                     f'"ignore"; not "{s.on_update}"')
    if s.provider == SERVICE_PROVIDER_CONSUL:
        # Valid, as in Nomad. yurt has no Consul: the client registers such a service in its
        # native catalogue instead (client/checks/registration.py `nomad_services`), where
        # `nomadService` finds it; Consul's own checks (grpc, connect) are not run.
        return
    if s.provider != SERVICE_PROVIDER_NOMAD:
        problems.add(at.field(Service, "provider"),
                     f'Service provider must be "consul", or "nomad"; not "{s.provider}"')
        return
    for ci, check in enumerate(s.checks):
        c_at = at.item(Service, "checks", ci, check.name)
        if not s.port and not check.port and check.requires_port():
            problems.add(c_at, f"Check {check.name} invalid: check requires a port but "
                               f'neither check nor service "{s.name}" have a port')
            continue
        problem = _check_problem(check)
        if problem is not None:
            problems.add(c_at, problem)


def _port_labels(group: TaskGroup) -> set[str]:
    if not group.networks:
        return set()
    net = group.networks[0]
    return {p.label for p in (*net.reserved_ports, *net.dynamic_ports)}


def _note(seen: set[tuple[str, str, str]], duplicates: list[str], name: str, owner: str,
          port: str) -> None:
    """Nomad's uniqueness of (service, task or "group", port) within a group."""
    if (name, owner, port) in seen:
        duplicates.append(f"{owner}->{name}" + (f":{port}" if port else ""))
    seen.add((name, owner, port))


def check_services(job: Job, group_at: Callable[[int], _At], problems: _Problems) -> None:
    """Every service of the job, Nomad's group and task rules (see the module header)."""
    for gi, group in enumerate(job.task_groups):
        g_at = group_at(gi)
        task_names = {t.name for t in group.tasks}
        labels = _port_labels(group)
        seen: set[tuple[str, str, str]] = set()
        duplicates: list[str] = []

        for ti, task in enumerate(group.tasks):
            t_at = g_at.item(TaskGroup, "tasks", ti, task.name)
            known: set[str] = set()
            missing: dict[str, set[str]] = {}
            for si, raw in enumerate(task.services):
                s = canonical_service(raw, job, group, task)
                s_at = t_at.item(Task, "services", si, s.name)
                _check_service(s, s_at, problems)
                _note(seen, duplicates, s.name, task.name, s.port)
                if raw.task and raw.task != task.name:
                    problems.add(s_at, f"Service {s.name} is invalid: may only specify task "
                                       f'the service belongs to, got "{raw.task}"')
                if s.name + s.port in known:
                    problems.add(s_at, f'service "{s.name}" is duplicate')
                known.add(s.name + s.port)
                check_names: set[str] = set()
                for ci, check in enumerate(s.checks):
                    c_at = s_at.item(Service, "checks", ci, check.name)
                    if check.task != task.name:
                        problems.add(c_at, f"Check {check.name} is invalid: may only specify "
                                           f'task the check belongs to, got "{check.task}"')
                    if check.name in check_names:
                        problems.add(c_at, f'check "{check.name}" is duplicate')
                    check_names.add(check.name)
                    port = check.port or s.port
                    if check.requires_port() and port and not port.isdigit():
                        missing.setdefault(port, set()).add(s.name)
                if s.port and not s.port.isdigit():
                    missing.setdefault(s.port, set()).add(s.name)
            for label in sorted(missing):
                if label not in labels:
                    problems.add(t_at, f'port label "{label}" referenced by services '
                                       f'{", ".join(sorted(missing[label]))} does not exist')
        for si, raw in enumerate(group.services):
            s = canonical_service(raw, job, group, None)
            s_at = g_at.item(TaskGroup, "services", si, s.name)
            _note(seen, duplicates, s.name, "group", s.port)
            _check_service(s, s_at, problems)
            for ci, check in enumerate(s.checks):
                if check.task and check.task not in task_names:
                    problems.add(s_at.item(Service, "checks", ci, check.name),
                                 f"Check {check.name} invalid: refers to non-existent task "
                                 f"{check.task}")
            for label in (s.port, *(c.port for c in s.checks if c.requires_port())):
                if label and not label.isdigit() and label not in labels:
                    problems.add(s_at, f'port label "{label}" referenced by services '
                                       f"{s.name} does not exist")
        if duplicates:
            problems.add(g_at, f"Services are not unique: {', '.join(sorted(duplicates))}")
