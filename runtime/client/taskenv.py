"""A task's environment: Nomad's `NOMAD_*` variables, and `${…}` interpolation.

`build_env` computes the variables a task sees (Nomad's `client/taskenv/env.go`
`Builder.Build`) in Nomad's precedence order: Nomad variables (the group network's ports among
them, `port_env`), then task meta as `NOMAD_META_*`, then the task's own `env` block (itself
interpolated), then hook-provided variables in hook order (applied by the task runner).
`interpolate` replaces `${NOMAD_…}`, `${node.…}`, `${attr.…}` and `${meta.…}` in strings, lists
and maps (driver config, args, env); an unknown reference is left as written, as Nomad does.
`interpolate_service` applies it to a service's and its checks' fields as Nomad's
client/taskenv/services.go does; `alloc_env` is the environment group services see (no task).
Port labels and meta keys are cleaned in the variables' names (`product-api` → `product_api`),
as Nomad's `buildEnv` does.

`inherited_env` is what a task without isolation (raw_exec) takes from the agent's own
environment. It is an allow-list, not a deny-list (Nomad's `env.denylist` has the same purpose):
an agent started from a shell, a CI job or a unit file carries credentials
(`AWS_SECRET_ACCESS_KEY`, tokens) that no deny-list can foresee, so only what is named passes.
The default keeps what programs need to behave like in a login shell.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from fnmatch import translate
from pathlib import Path
from typing import Any, Final

import msgspec

from yurt.runtime.structs import Allocation, Node, Task
from yurt.runtime.structs.service import Service, ServiceCheck

_REF: Final = re.compile(r"\$\{([^}]+)\}")
_INDEX: Final = re.compile(r"\[(\d+)\]$")

#: The agent's variables a task inherits unless the agent config names others (shell
#: patterns: `LC_*`).
DEFAULT_ENV_ALLOW: Final = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE",
                            "LC_*", "TZ", "TERM", "TMPDIR")
#: The agent's own secrets: never inherited, whatever the allow-list says.
PRIVATE_ENV: Final = frozenset({"YURT_AGENT_TOKEN", "YURT_TOKEN", "NOMAD_TOKEN"})


def inherited_env(environ: Mapping[str, str], allow: Iterable[str]) -> dict[str, str]:
    """The variables of `environ` whose names match a pattern of `allow` (case-sensitive)."""
    allowed = _matcher(tuple(allow))
    return {k: v for k, v in environ.items() if k not in PRIVATE_ENV and allowed(k)}


@functools.lru_cache(maxsize=16)
def _matcher(patterns: tuple[str, ...]) -> Callable[[str], re.Match[str] | None]:
    """Whether a name matches one of `patterns`, as `fnmatchcase` against each would say, in
    one compiled regex: every task start filters the agent's environment, and one match per
    variable costs a fraction of one `fnmatchcase` call per variable and pattern."""
    if not patterns:
        return lambda name: None
    return re.compile("|".join(f"(?:{translate(p)})" for p in patterns)).match


def alloc_index(name: str) -> int:
    """The index in `job.group[N]`, 0 if the name has none."""
    m = _INDEX.search(name)
    return int(m.group(1)) if m else 0


def node_values(node: Node | None) -> dict[str, str]:
    if node is None:
        return {}
    values = {"node.unique.id": node.id, "node.unique.name": node.name,
              "node.class": node.node_class, "node.datacenter": node.datacenter,
              "node.pool": node.node_pool, "node.region": "global"}
    values.update({f"attr.{k}": v for k, v in node.attributes.items()})
    values.update({f"meta.{k}": v for k, v in node.meta.items()})
    return values


def task_dir_env(task_dir: Path) -> dict[str, str]:
    """Where the task finds its directories (`NOMAD_TASK_DIR` and friends)."""
    return {"NOMAD_ALLOC_DIR": str(task_dir.parent / "alloc"),
            "NOMAD_TASK_DIR": str(task_dir / "local"),
            "NOMAD_SECRETS_DIR": str(task_dir / "secrets")}


def _join_host_port(host: str, port: int) -> str:
    """Go's net.JoinHostPort: an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def port_env(alloc: Allocation) -> dict[str, str]:
    """The variables of the group network's ports (Nomad's taskenv addPorts), per label:
    NOMAD_PORT_x and NOMAD_ALLOC_PORT_x are the port the task is meant to listen on: `to`
    when the port block sets it, else the host port. raw_exec shares the host's network, so
    a task that sets `to` must listen on NOMAD_HOST_PORT_x to be reachable, as under Nomad.
    NOMAD_IP_x / NOMAD_HOST_IP_x are the node address the port was assigned on, and
    NOMAD_ADDR_x / NOMAD_HOST_ADDR_x join that address with the host port."""
    shared = alloc.allocated_shared
    env: dict[str, str] = {}
    for p in shared.ports if shared is not None else []:
        addr = _join_host_port(p.host_ip, p.value)
        task_port = str(p.to if p.to > 0 else p.value)
        env.update({f"NOMAD_ADDR_{p.label}": addr, f"NOMAD_HOST_ADDR_{p.label}": addr,
                    f"NOMAD_IP_{p.label}": p.host_ip, f"NOMAD_HOST_IP_{p.label}": p.host_ip,
                    f"NOMAD_PORT_{p.label}": task_port,
                    f"NOMAD_ALLOC_PORT_{p.label}": task_port,
                    f"NOMAD_HOST_PORT_{p.label}": str(p.value)})
    return env


#: The prefixes whose variables Nomad's env builder cleans (client/taskenv/env.go `buildEnv`,
#: "Clean keys"): a port label or meta key such as `product-api` becomes `product_api`.
_CLEANED_PREFIXES: Final = ("NOMAD_ADDR_", "NOMAD_IP_", "NOMAD_PORT_", "NOMAD_HOST_PORT_",
                            "NOMAD_META_")
_INVALID_ENV_CHAR: Final = re.compile(r"[^A-Za-z0-9_.]")


def clean_env_name(name: str) -> str:
    """Nomad's helper/funcs.go `CleanEnvVar(name, '_')`: every character other than a letter,
    `_`, `.` or a non-leading digit becomes `_`."""
    cleaned = _INVALID_ENV_CHAR.sub("_", name)
    return "_" + cleaned[1:] if cleaned[:1].isdigit() else cleaned


def _clean_keys(env: dict[str, str]) -> dict[str, str]:
    return {clean_env_name(k) if k.startswith(_CLEANED_PREFIXES) else k: v
            for k, v in env.items()}


def _identity_env(alloc: Allocation, node: Node | None) -> dict[str, str]:
    job = alloc.job
    assert job is not None
    env: dict[str, str] = {
        "NOMAD_ALLOC_ID": alloc.id,
        "NOMAD_SHORT_ALLOC_ID": alloc.id[:8],
        "NOMAD_ALLOC_NAME": alloc.name,
        "NOMAD_ALLOC_INDEX": str(alloc_index(alloc.name)),
        "NOMAD_GROUP_NAME": alloc.task_group,
        "NOMAD_JOB_ID": job.id,
        "NOMAD_JOB_NAME": job.name,
        "NOMAD_JOB_PARENT_ID": "",
        "NOMAD_NAMESPACE": alloc.namespace,
        "NOMAD_REGION": job.region,
        "NOMAD_DC": node.datacenter if node is not None else "dc1",
    }
    return env


def alloc_env(alloc: Allocation, node: Node | None) -> dict[str, str]:
    """The variables of the allocation alone (Nomad's builder without a task, as the group
    service hook builds it): identity, job, namespace, region, datacenter, group meta and ports,
    port and meta names cleaned."""
    job = alloc.job
    assert job is not None
    group = job.lookup_group(alloc.task_group)
    env = _identity_env(alloc, node)
    env.update(port_env(alloc))
    _add_meta(env, {**job.meta, **(group.meta if group else {})}, node_values(node))
    return _clean_keys(env)


def _add_meta(env: dict[str, str], meta: dict[str, str], nodes: dict[str, str]) -> None:
    lookup = {**nodes, **env}
    for key, value in meta.items():  # interpolated as Nomad's env builder does (`${node.*}`)
        key, value = interpolate(key, lookup), interpolate(value, lookup)
        env[f"NOMAD_META_{key}"] = value
        env[f"NOMAD_META_{key.upper()}"] = value


def build_env(alloc: Allocation, task: Task, *, task_dir: Path | None, node: Node | None
              ) -> dict[str, str]:
    """The task's environment before hook variables (those the task runner merges last)."""
    job = alloc.job
    assert job is not None
    group = job.lookup_group(alloc.task_group)
    env = _identity_env(alloc, node)
    env.update({"NOMAD_TASK_NAME": task.name, "NOMAD_CPU_LIMIT": str(task.resources.cpu),
                "NOMAD_MEMORY_LIMIT": str(task.resources.memory)})
    if task.resources.memory_max:
        env["NOMAD_MEMORY_MAX_LIMIT"] = str(task.resources.memory_max)
    if task_dir is not None:
        env.update(task_dir_env(task_dir))
    env.update(port_env(alloc))
    nodes = node_values(node)
    _add_meta(env, {**job.meta, **(group.meta if group else {}), **task.meta}, nodes)
    env = _clean_keys(env)
    lookup = {**nodes, **env}
    for key, value in task.env.items():
        env[key] = interpolate(value, lookup)
    return env


def interpolate(value: Any, lookup: dict[str, str]) -> Any:
    """`${name}` → `lookup[name]` in strings, recursively in lists and maps."""
    if isinstance(value, str):
        return _REF.sub(lambda m: lookup.get(m.group(1).strip(), m.group(0)), value)
    if isinstance(value, list):
        return [interpolate(v, lookup) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v, lookup) for k, v in value.items()}
    return value


def interpolate_check(check: ServiceCheck, lookup: dict[str, str]) -> ServiceCheck:
    """The check's fields Nomad's client/taskenv/services.go `InterpolateService` replaces."""
    def sub(v: str) -> str:
        return str(interpolate(v, lookup))
    return msgspec.structs.replace(
        check, name=sub(check.name), type=sub(check.type), command=sub(check.command),
        args=[sub(a) for a in check.args], path=sub(check.path), protocol=sub(check.protocol),
        port=sub(check.port), initial_status=sub(check.initial_status), notes=sub(check.notes),
        method=sub(check.method), grpc_service=sub(check.grpc_service),
        header={sub(k): [sub(v) for v in vs] for k, vs in check.header.items()})


def interpolate_service(service: Service, lookup: dict[str, str]) -> Service:
    """A copy of `service` with `${…}` replaced in the fields Nomad's client/taskenv/services.go
    `InterpolateService` replaces (name, port label, address, tags, canary tags, meta, canary
    meta, tagged addresses, and each check's), the rest as written."""
    def sub(v: str) -> str:
        return str(interpolate(v, lookup))

    def sub_map(m: dict[str, str]) -> dict[str, str]:
        return {sub(k): sub(v) for k, v in m.items()}
    return msgspec.structs.replace(
        service, name=sub(service.name), port=sub(service.port), address=sub(service.address),
        tags=[sub(t) for t in service.tags], canary_tags=[sub(t) for t in service.canary_tags],
        meta=sub_map(service.meta), canary_meta=sub_map(service.canary_meta),
        tagged_addresses=sub_map(service.tagged_addresses),
        checks=[interpolate_check(c, lookup) for c in service.checks])
