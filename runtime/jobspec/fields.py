"""The jobspec's vocabulary: which fields exist, how each is spelled, and where a problem is.

What lives here: `HCL_SCHEMA` (the HCL names per struct), `UNSUPPORTED` and `NOMAD_ONLY`
(Nomad features yurt refuses rather than ignores; a user is told "not supported yet", never
"unknown field", for a field Nomad's own block has), the field specs derived from the
structs' own annotations, and the problem bookkeeping every stage shares (`_At`, `_Problems`,
the common messages).

Invariants: the msgspec structs are the single source of truth for field names and types;
`HCL_SCHEMA` only adds the HCL spelling where it differs and the labels of labelled blocks.
Every problem carries a display path (jobspec vocabulary) and a key path (JSON keys), so a job
gives equivalent errors in HCL and in JSON. `_Problems.add` raises `_TooManyProblems` once
`MAX_PROBLEMS` are known, which the entry point catches.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, Final, Literal

import msgspec

from yurt.runtime.jobspec.limits import MAX_PROBLEMS
from yurt.runtime.jobspec.shorthand import affinity_shorthand, constraint_shorthand
from yurt.runtime.lib.sourcemap import PathKey
from yurt.runtime.structs import (
    DispatchPayloadConfig,
    EphemeralDisk,
    Job,
    Lifecycle,
    LogConfig,
    MigrateStrategy,
    ParameterizedJobConfig,
    PeriodicConfig,
    RequestedDevice,
    ReschedulePolicy,
    Resources,
    RestartPolicy,
    Task,
    TaskGroup,
)
from yurt.runtime.structs.artifact import TaskArtifact
from yurt.runtime.structs.constraint import Affinity, Constraint, Spread, SpreadTarget
from yurt.runtime.structs.identity import JobUIConfig, JobUILink, WorkloadIdentity
from yurt.runtime.structs.job import DisconnectStrategy
from yurt.runtime.structs.network import DNSConfig, NetworkResource, Port
from yurt.runtime.structs.service import CheckRestart, Service, ServiceCheck
from yurt.runtime.structs.template import ChangeScript, Template, WaitConfig
from yurt.runtime.structs.update import UpdateStrategy
from yurt.runtime.structs.volume import ScalingPolicy, TaskAction, VolumeMount, VolumeRequest


@dataclass(frozen=True)
class HclField:
    """Where an HCL name goes: the struct attribute, and for labelled blocks the attribute
    that receives the label."""

    attr: str
    label: str | None = None


def _same(*names: str) -> dict[str, HclField]:
    return {n: HclField(n) for n in names}


#: `constraint` and `affinity` blocks, repeatable and unlabelled, at job, group and task level.
_PLACEMENT: Final = {"constraint": HclField("constraints"), "affinity": HclField("affinities")}

#: The jobspec's HCL vocabulary, per struct. Anything not listed is an error.
HCL_SCHEMA: Final[dict[type[msgspec.Struct], dict[str, HclField]]] = {
    Job: {
        **_same("region", "namespace", "id", "name", "type", "priority", "datacenters",
                "meta", "node_pool"),
        "group": HclField("task_groups", label="name"),
        "periodic": HclField("periodic"),
        "parameterized": HclField("parameterized"),
        "reschedule": HclField("reschedule"),
        "update": HclField("update"),
        "migrate": HclField("migrate"),
        **_PLACEMENT,
        "spread": HclField("spreads"),
        "ui": HclField("ui"),
        **_same("all_at_once", "multiregion"),
    },
    TaskGroup: {
        **_same("count", "meta", "ephemeral_disk", "migrate", "update",
                "max_client_disconnect", "disconnect"),
        "network": HclField("networks"),
        "task": HclField("tasks", label="name"),
        "restart": HclField("restart_policy"),
        "reschedule": HclField("reschedule_policy"),
        **_PLACEMENT,
        "spread": HclField("spreads"),
        "service": HclField("services"),
        **_same("shutdown_delay", "max_run_duration", "scaling",
                "stop_after_client_disconnect", "prevent_reschedule_on_lost"),
        "volume": HclField("volumes"),
    },
    Task: {
        **_same("driver", "user", "config", "env", "meta", "leader", "lifecycle",
                "kill_timeout", "kill_signal", "shutdown_delay", "resources"),
        "restart": HclField("restart_policy"),
        "logs": HclField("log_config"),
        "dispatch_payload": HclField("dispatch_payload"),
        **_PLACEMENT,
        "identity": HclField("identities"),
        "template": HclField("templates"),
        "artifact": HclField("artifacts"),
        "service": HclField("services"),
        "volume_mount": HclField("volume_mounts"),
        "action": HclField("actions", label="name"),
        "scaling": HclField("scaling_policies", label="type"),
        "csi_plugin": HclField("csi_plugin_config"),
        "secret": HclField("secrets"),
        "schedule": HclField("schedule"),
    },
    Resources: {**_same("cpu", "memory", "memory_max", "cores", "disk", "iops", "numa",
                        "secrets"),
                "device": HclField("devices", "name"), "network": HclField("networks")},
    RequestedDevice: {**_same("count"), **_PLACEMENT},
    LogConfig: _same("max_files", "max_file_size", "disabled", "enabled"),
    EphemeralDisk: _same("sticky", "migrate", "size"),
    RestartPolicy: _same("attempts", "interval", "delay", "mode", "render_templates"),
    ReschedulePolicy: _same("attempts", "interval", "delay", "delay_function", "max_delay",
                            "unlimited"),
    Lifecycle: _same("hook", "sidecar"),
    PeriodicConfig: _same("cron", "crons", "prohibit_overlap", "time_zone", "enabled"),
    ParameterizedJobConfig: _same("payload", "meta_required", "meta_optional"),
    DispatchPayloadConfig: _same("file"),
    MigrateStrategy: _same("max_parallel", "health_check", "min_healthy_time",
                           "healthy_deadline"),
    DisconnectStrategy: _same("lost_after", "stop_on_client_after", "replace", "reconcile"),
    VolumeRequest: _same("type", "source", "read_only", "sticky", "access_mode",
                         "attachment_mode", "mount_options", "per_alloc"),
    VolumeMount: _same("volume", "destination", "read_only", "propagation_mode",
                       "selinux_label"),
    ScalingPolicy: _same("min", "max", "policy", "enabled", "type"),
    TaskAction: _same("command", "args"),
    Service: {**_same("name", "task", "port", "address_mode", "address", "enable_tag_override",
                      "tags", "canary_tags", "check_restart", "meta", "canary_meta",
                      "tagged_addresses", "on_update", "provider", "cluster", "kind"),
              "check": HclField("checks")},
    ServiceCheck: _same("name", "type", "command", "args", "path", "protocol", "port",
                        "expose", "address_mode", "interval", "timeout", "initial_status",
                        "notes", "tls_server_name", "tls_skip_verify", "method", "header",
                        "check_restart", "grpc_service", "grpc_use_tls", "task",
                        "success_before_passing", "failures_before_critical",
                        "failures_before_warning", "body", "on_update"),
    CheckRestart: _same("limit", "grace", "ignore_warnings"),
    Template: _same("source", "destination", "data", "change_mode", "change_signal",
                    "change_script", "once", "splay", "perms", "uid", "gid", "left_delimiter",
                    "right_delimiter", "env", "vault_grace", "wait", "error_on_missing_key"),
    ChangeScript: _same("command", "args", "timeout", "fail_on_error", "run_on_first_render"),
    WaitConfig: _same("min", "max"),
    UpdateStrategy: _same("max_parallel", "health_check", "min_healthy_time",
                          "healthy_deadline", "progress_deadline", "auto_revert",
                          "auto_promote", "canary", "stagger"),
    # `port "http" { static = 80 }`: every port block lands in dynamic_ports; a static one
    # moves to reserved_ports when the job is canonicalized (rules_network.py), as Nomad's
    # HCL parser does.
    NetworkResource: {**_same("mode", "hostname", "mbits", "cidr", "device", "ip", "cni"),
                      "dns": HclField("dns"),
                      "port": HclField("dynamic_ports", label="label"),
                      "reserved_ports": HclField("reserved_ports", label="label")},
    Port: {**_same("to", "host_network", "ignore_collision"), "static": HclField("value")},
    DNSConfig: _same("servers", "searches", "options"),
    # The shorthands (`distinct_hosts = true`, `version = ">= 1.2"`, …) are rewritten into
    # these three by HCL_REWRITES before the schema is consulted.
    Constraint: _same("attribute", "value", "operator"),
    Affinity: _same("attribute", "value", "operator", "weight"),
    Spread: {**_same("attribute", "weight"), "target": HclField("target", label="value")},
    SpreadTarget: _same("percent"),
    WorkloadIdentity: _same("name", "aud", "change_mode", "change_signal", "env", "file",
                            "filepath", "service_name", "ttl", "extra_claims"),
    JobUIConfig: _same("description", "link"),
    JobUILink: _same("label", "url"),
    TaskArtifact: {"source": HclField("getter_source"), "options": HclField("getter_options"),
                   "headers": HclField("getter_headers"), "mode": HclField("getter_mode"),
                   "insecure": HclField("getter_insecure"),
                   "destination": HclField("relative_dest"), "chown": HclField("chown")},
}

#: HCL-only spellings a block is rewritten from before its fields are read (jobspec2's
#: decodeConstraint/decodeAffinity): block struct → function of the body returning the
#: rewritten body and the problems found, as (HCL key, message) pairs.
HCL_REWRITES: Final[dict[type[msgspec.Struct], Callable[[dict[str, Any]], tuple[
    dict[str, Any], list[tuple[str, str]]]]]] = {
    Constraint: constraint_shorthand,
    Affinity: affinity_shorthand,
}

#: Nomad jobspec features yurt knows of but does not implement (HCL and JSON spellings).
#: Left unset (or at Nomad's zero value, as `nomad job run -output` writes them) they are
#: accepted; set to anything else they are an error, never silently ignored. Only Consul- and
#: Vault-only parts remain (their message says what yurt offers instead, `CONSUL_VAULT`).
UNSUPPORTED: Final = frozenset({
    "consul", "vault", "Consul", "Vault", "ConsulNamespace",
    "ConsulToken", "VaultNamespace", "VaultToken",
    # Consul-only parts of a service and its checks.
    "connect", "weights", "advertise", "Connect", "Weights", "Advertise",
})

#: What yurt offers instead of a Consul- or Vault-only field (its message in full).
_CONSUL: Final = ("is Consul's: yurt has no Consul; register services with yurt's native "
                  'service discovery (service { provider = "nomad" }) instead')
_VAULT: Final = ("is Vault's: yurt has no Vault; keep secrets in Nomad Variables and read them "
                 "with a template's nomadVar instead")
CONSUL_VAULT: Final[dict[str, str]] = {
    **dict.fromkeys(("consul", "Consul", "consul_token", "ConsulToken", "ConsulNamespace",
                     "connect", "Connect", "weights", "Weights", "advertise", "Advertise",
                     "kind", "Kind", "identity", "Identity"), _CONSUL),
    **dict.fromkeys(("vault", "Vault", "vault_token", "VaultToken", "VaultNamespace"),
                    _VAULT),
}


#: JSON fields of a job the server sets and a register ignores (command/agent/job_endpoint.go
#: `ApiJobToStructJob` does not copy them): dropped wherever they appear, as `nomad job
#: inspect` output carries them.
SERVER_SET: Final = frozenset({"NomadTokenID", "Stable"})


def _nomad(*pairs: str) -> frozenset[str]:
    """HCL and JSON names, given as "hcl_name JsonName" pairs."""
    return frozenset(name for pair in pairs for name in pair.split())


#: Nomad's own fields of each block (HCL and JSON names, from Nomad's `api` package) that yurt's
#: structs do not have: valid Nomad, so never "unknown field". Like `UNSUPPORTED`, a zero value
#: is accepted (`nomad job run -output` writes them all).
NOMAD_ONLY: Final[dict[type[msgspec.Struct], frozenset[str]]] = {
    Job: _nomad("vault_token VaultToken", "consul_token ConsulToken"),
    TaskGroup: _nomad("consul Consul"),
    Task: _nomad("vault Vault", "consul Consul", "kind Kind"),
    Service: _nomad("connect Connect", "identity Identity", "weights Weights"),
}

#: How the user calls each block in a message.
_BLOCK_NAMES: Final[dict[type[msgspec.Struct], str]] = {
    Job: "job", TaskGroup: "group", Task: "task", Resources: "resources", LogConfig: "logs",
    NetworkResource: "network", Service: "service",
}


def _nomad_only(struct: type[msgspec.Struct], key: str) -> bool:
    """Whether `key` is a Nomad feature (of this block, or anywhere) yurt does not have."""
    return key in UNSUPPORTED or key in NOMAD_ONLY.get(struct, ())


def _is_zero(value: Any) -> bool:
    """Nomad's encoding of "not set" for a field: null, "", 0, false, [] or {}."""
    return value is None or (not isinstance(value, int | float) and not value) or (
        isinstance(value, int | float) and value == 0)


# --------------------------------------------------------------------------- field specs

Kind = Literal["struct", "struct_list", "struct_map", "str_map", "any_map", "duration", "int",
               "float", "str", "bool", "str_list", "any"]


@dataclass(frozen=True)
class _FieldSpec:
    attr: str
    json_name: str
    hcl_name: str
    kind: Kind
    struct: type[msgspec.Struct] | None = None
    label_json: str | None = None  # struct_list: the JSON field that holds the HCL label


def _classify(tp: Any) -> tuple[Kind, type[msgspec.Struct] | None]:
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return _classify(inner)
    if origin is typing.Annotated:
        base, *meta = typing.get_args(tp)
        if any(getattr(m, "extra", None) == {"yurt_kind": "duration"} for m in meta):
            return "duration", None
        return _classify(base)
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return "struct", tp
    if origin is list:
        (item,) = typing.get_args(tp)
        if isinstance(item, type) and issubclass(item, msgspec.Struct):
            return "struct_list", item
        return "str_list", None
    if origin is dict:
        _, value = typing.get_args(tp)
        if isinstance(value, type) and issubclass(value, msgspec.Struct):
            return "struct_map", value  # labelled blocks keyed by label (`volume "x" {}`)
        return ("str_map" if value is str else "any_map"), None
    simple: dict[Any, Kind] = {int: "int", float: "float", str: "str", bool: "bool"}
    return simple.get(tp, "any"), None


@cache
def _field_specs(struct: type[msgspec.Struct]) -> dict[str, _FieldSpec]:
    """The struct's fields keyed by JSON name, each with its HCL name and kind."""
    hcl_by_attr = {f.attr: (name, f.label) for name, f in HCL_SCHEMA.get(struct, {}).items()}
    specs: dict[str, _FieldSpec] = {}
    for info in msgspec.structs.fields(struct):
        kind, sub = _classify(info.type)
        hcl_name, label_attr = hcl_by_attr.get(info.name, (info.name, None))
        label_json = None
        if label_attr is not None and sub is not None:
            label_json = next(f.encode_name for f in msgspec.structs.fields(sub)
                              if f.name == label_attr)
        specs[info.encode_name] = _FieldSpec(info.name, info.encode_name, hcl_name, kind, sub,
                                             label_json)
    return specs


def _by_attr(struct: type[msgspec.Struct]) -> dict[str, _FieldSpec]:
    return {s.attr: s for s in _field_specs(struct).values()}


# --------------------------------------------------------------------------- problems


@dataclass(frozen=True)
class _At:
    """A place in the job: display path (HCL vocabulary) and key path (JSON keys)."""

    d: PathKey
    k: PathKey

    def field(self, struct: type[msgspec.Struct], attr: str) -> _At:
        spec = _by_attr(struct)[attr]
        return _At((*self.d, spec.hcl_name), (*self.k, spec.json_name))

    def item(self, struct: type[msgspec.Struct], attr: str, index: int, label: str) -> _At:
        spec = _by_attr(struct)[attr]
        return _At((*self.d, spec.hcl_name, label), (*self.k, spec.json_name, index))


class _TooManyProblems(Exception):
    """Stops the checks once `MAX_PROBLEMS` are known (caught in `parse_job`)."""


@dataclass
class _Problems:
    items: list[tuple[_At, str]]

    def add(self, at: _At, message: str) -> None:
        self.items.append((at, message))
        if len(self.items) >= MAX_PROBLEMS:
            raise _TooManyProblems


def _unknown_message(key: str, valid: list[str],
                     struct: type[msgspec.Struct] | None = None) -> str:
    only = NOMAD_ONLY.get(struct, frozenset()) if struct is not None else frozenset()
    if key in CONSUL_VAULT and (key in UNSUPPORTED or key in only):
        return f'"{key}" {CONSUL_VAULT[key]}'
    if struct is not None and key in NOMAD_ONLY.get(struct, ()):
        return (f'"{key}" is a Nomad {_BLOCK_NAMES.get(struct, "block")} field yurt does not '
                f"support yet")
    if key in UNSUPPORTED:
        return f'"{key}" is a Nomad feature yurt does not support yet'
    msg = f'unknown field "{key}"'
    close = difflib.get_close_matches(key, valid, n=1)
    if close:
        msg += f'; did you mean "{close[0]}"?'
    return msg


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a bool", int: "a number", float: "a number", str: "a string",
            list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


#: Marks a value that failed its check and is left out of the output.
_INVALID: Final = object()
