"""Job files to `Job` structs: Nomad HCL2 and Nomad JSON, with defaults and validation.

Theory of operation. A job file goes through four stages, and each stage reports *every*
problem it finds before the next one runs, so a user fixes a file in one pass:

1. **Parse** the text. HCL goes through python-hcl2 (lark) once; the raw lark tree gives the
   position index (`sourcemap.hcl_positions`) and is then serialised to plain dicts. JSON goes
   through `json.loads`; its positions are indexed only if there is an error to place. A syntax
   error stops here, with lark's or json's line and column.
2. **Normalise** HCL into the shape of Nomad's API JSON: jobspec names become JSON names
   (`kill_timeout` → `KillTimeout`, `restart` → `RestartPolicy`, `group "x"` → an element of
   `TaskGroups` with `Name: "x"`), single blocks are unwrapped, duration strings become
   nanoseconds and `$${` escapes become `${`. Unknown keys are reported by their HCL name.
   `HCL_SCHEMA` is the one table that says which HCL names exist and where they go.
3. **Check the shape** of the JSON-shaped data against the structs' own type annotations
   (`_FieldSpec`, derived from msgspec's field info, so the structs stay the single source
   of truth): unknown fields, wrong types, nulls (dropped: in Nomad's JSON null means "unset").
   Then `msgspec.convert` builds the `Job`; it cannot fail on checked data, but if it does the
   error is still reported as a `JobSpecError`.
4. **Validate** the rules Nomad enforces (restart policy, lifecycle hooks, one leader, unique
   names, known drivers and their configs, resources, log storage against the ephemeral disk),
   then **canonicalise**: fill the job-type-dependent restart policy and merge task restart
   blocks over their group's.

Every problem carries two paths: the *display path* (`job.web.group.api.task.server.restart.mode`,
the jobspec's vocabulary, shown to the user and used to find HCL positions) and the *key path*
(`TaskGroups/0/Tasks/1/RestartPolicy/Mode`, used to find JSON positions). The same job written in
HCL and in JSON therefore yields equal structs and equivalent errors.

A job file is untrusted input (the HTTP API parses what any client sends), so before stage 1
ends the text is bounded: its size, its nesting (JSON depth, HCL parse-tree depth, both checked
iteratively before anything recursive runs), its number of values, and its Unicode (a lone
surrogate cannot be printed or stored). NaN and Infinity, which Python's `json` accepts, are
refused as JSON refuses them. The checks stop after `MAX_PROBLEMS`. Whatever the input, the
only exception out of `parse_job` is a `JobSpecError` with positions.

Not supported (reported as such, never ignored silently): Nomad features that need a scheduler
or network stack yurt does not have (`service`, `network`, `constraint`, `template`, …), HCL
variables, locals and functions (`${var.x}` stays literal text).
"""

from __future__ import annotations

import difflib
import json
import re
import signal
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Final, Literal

import hcl2
import lark
import msgspec
from hcl2 import SerializationOptions

from yurt.runtime.drivers import TASK_CONFIG
from yurt.runtime.durations import SECOND, format_duration, parse_duration
from yurt.runtime.errors import JobSpecError, SpecProblem
from yurt.runtime.sourcemap import (
    PathKey,
    Position,
    hcl_positions,
    hcl_trouble,
    json_positions,
    json_trouble,
    locate,
)
from yurt.runtime.structs import (
    DEFAULT_RESTART_POLICY,
    JOB_TYPES,
    LIFECYCLE_HOOKS,
    RESTART_MODES,
    EphemeralDisk,
    Job,
    Lifecycle,
    LogConfig,
    RequestedDevice,
    Resources,
    RestartPolicy,
    Task,
    TaskGroup,
)

Format = Literal["hcl", "json"]

#: python-hcl2 v8 options that give plain values (reference: ecosystem notes §7).
_HCL_OPTIONS: Final = SerializationOptions(
    with_comments=False, explicit_blocks=False, preserve_heredocs=False, strip_string_quotes=True
)

#: Nomad's minimum restart interval.
MIN_RESTART_INTERVAL: Final = 5 * SECOND

# Limits on what a job file may be. A job file is untrusted input (the HTTP API parses what
# any client sends), and every stage below is plain Python: recursive (lark's transformer, the
# position index, the shape checks) or linear with a large constant (a close-match hint per
# unknown key). Without limits one deep or wide document costs a RecursionError or minutes of
# CPU. The limits are far above any real job and are checked before the expensive stages.

#: Largest job text, in characters. lark reads HCL at about 10 µs a character: 1 Mi takes
#: seconds, the largest real jobs are a few KiB.
MAX_JOB_CHARS: Final = 1 << 20
#: Deepest nesting of objects and lists (JSON) a job may have; real jobs stay under ~10.
MAX_DEPTH: Final = 64
#: Deepest lark parse tree an HCL job may have. One HCL nesting level (a block, a list, a
#: parenthesis) is several tree levels, and lark's transformer recurses two frames a level.
MAX_HCL_TREE_DEPTH: Final = 240
#: Values (JSON: objects, lists, scalars) a job may hold; HCL: parse-tree nodes, about ten a
#: value. A large real job holds a few hundred.
MAX_VALUES: Final = 20_000
MAX_HCL_NODES: Final = 10 * MAX_VALUES
#: Problems reported before the checks stop: a user reads the first ones and fixes them.
MAX_PROBLEMS: Final = 100
#: Instances of one group. yurt runs on one node; Nomad caps `count` per group too.
MAX_COUNT: Final = 1000
#: Task names become file names (`<task>/`, `.<task>.stderr.fifo`, `<task>.stdout.<n>`):
#: leave room for the longest suffix under the usual 255-byte NAME_MAX.
MAX_NAME_BYTES: Final = 200
#: Go's int, the type of every integer field of a Nomad job.
INT_MIN: Final = -(2**63)
INT_MAX: Final = 2**63 - 1


@dataclass(frozen=True)
class HclField:
    """Where an HCL name goes: the struct attribute, and for labelled blocks the attribute
    that receives the label."""

    attr: str
    label: str | None = None


def _same(*names: str) -> dict[str, HclField]:
    return {n: HclField(n) for n in names}


#: The jobspec's HCL vocabulary, per struct. Anything not listed is an error.
HCL_SCHEMA: Final[dict[type[msgspec.Struct], dict[str, HclField]]] = {
    Job: {
        **_same("region", "namespace", "name", "type", "priority", "datacenters", "meta"),
        "group": HclField("task_groups", label="name"),
    },
    TaskGroup: {
        **_same("count", "meta", "ephemeral_disk"),
        "task": HclField("tasks", label="name"),
        "restart": HclField("restart_policy"),
    },
    Task: {
        **_same("driver", "user", "config", "env", "meta", "leader", "lifecycle",
                "kill_timeout", "kill_signal", "shutdown_delay", "resources"),
        "restart": HclField("restart_policy"),
        "logs": HclField("log_config"),
    },
    Resources: {**_same("cpu", "memory", "memory_max"), "device": HclField("devices", "name")},
    RequestedDevice: _same("count"),
    LogConfig: _same("max_files", "max_file_size", "disabled"),
    EphemeralDisk: _same("sticky", "migrate", "size"),
    RestartPolicy: _same("attempts", "interval", "delay", "mode", "render_templates"),
    Lifecycle: _same("hook", "sidecar"),
}

#: Nomad jobspec features yurt knows of but does not implement (HCL and JSON spellings).
#: Left unset (or at Nomad's zero value, as `nomad job run -output` writes them) they are
#: accepted; set to anything else they are an error, never silently ignored.
UNSUPPORTED: Final = frozenset({
    "affinity", "all_at_once", "artifact", "check_restart", "constraint", "consul",
    "csi_plugin", "disconnect", "dispatch_payload", "identity", "kind", "max_client_disconnect",
    "migrate", "multiregion", "network", "node_pool", "numa", "parameterized", "periodic",
    "reschedule", "scaling", "service", "spread", "stop_after_client_disconnect", "template",
    "update", "vault", "volume", "volume_mount", "cores", "disk", "iops",
    "Affinities", "AllAtOnce", "Artifacts", "CSIPluginConfig", "Constraints", "Consul",
    "ConsulNamespace", "ConsulToken", "Cores", "DiskMB", "DispatchPayload", "Disconnect",
    "Identities", "Identity", "IOPS", "Kind", "MaxClientDisconnect", "Migrate", "Multiregion",
    "NUMA", "Networks", "NodePool", "ParameterizedJob", "Periodic", "Reschedule",
    "ReschedulePolicy", "Scaling", "ScalingPolicies", "Services", "Spreads",
    "StopAfterClientDisconnect", "Templates", "Update", "Vault", "VaultNamespace",
    "VaultToken", "VolumeMounts", "Volumes", "Dispatched", "DispatchIdempotencyToken",
    "NomadTokenID", "ParentID", "Payload", "Stable", "UI", "VersionTag",
})


def _is_zero(value: Any) -> bool:
    """Nomad's encoding of "not set" for a field: null, "", 0, false, [] or {}."""
    return value is None or (not isinstance(value, int | float) and not value) or (
        isinstance(value, int | float) and value == 0)


# --------------------------------------------------------------------------- field specs

Kind = Literal["struct", "struct_list", "str_map", "any_map", "duration", "int", "float", "str",
               "bool", "str_list", "any"]


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


def _unknown_message(key: str, valid: list[str]) -> str:
    if key in UNSUPPORTED:
        return f'"{key}" is a Nomad feature yurt does not support'
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


# --------------------------------------------------------------------------- stage 2: HCL

#: Marks a value that failed its check and is left out of the output.
_INVALID: Final = object()


def _unescape(value: Any) -> Any:
    """HCL's `$${` and `%%{` escapes; python-hcl2 keeps them verbatim."""
    if isinstance(value, str):
        return value.replace("$${", "${").replace("%%{", "%{")
    if isinstance(value, list):
        return [_unescape(v) for v in value]
    if isinstance(value, dict):
        return {k: _unescape(v) for k, v in value.items()}
    return value


def _as_blocks(value: Any) -> list[Any]:
    """A block in python-hcl2's output is a list of bodies; a map attribute is one dict."""
    if isinstance(value, dict):
        return [value]
    if isinstance(value, list):
        return value
    return [value]


def _stringify(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return value


@dataclass
class _HclNormaliser:
    """Stage 2. Also builds `positions`, keyed by key path, from the structural HCL index."""

    hcl_index: dict[PathKey, Position]
    problems: _Problems
    positions: dict[PathKey, Position]

    def _mark(self, at: _At, spath: PathKey) -> None:
        pos = self.hcl_index.get(spath)
        if pos is not None:
            self.positions.setdefault(at.k, pos)

    def job(self, data: dict[str, Any]) -> tuple[dict[str, Any], _At]:
        """Unwrap `job "id" { … }` and normalise it; the root `_At` names the job."""
        root = _At((), ())
        for key in data:
            if key != "job":
                at = _At((key,), (key,))
                self._mark(at, (key, 0))
                self._mark(at, (key,))
                self.problems.add(at, f'unexpected top-level "{key}": a job file holds one '
                                      'job "<id>" { … } block')
        jobs = _as_blocks(data.get("job", []))
        if len(jobs) != 1 or not isinstance(jobs[0], dict) or len(jobs[0]) != 1:
            extra = _At(("job",), ("job",))
            self._mark(extra, ("job", 1))
            self.problems.add(extra, f'expected exactly one job "<id>" {{ … }} block, '
                                     f"found {len(jobs)}")
            if not jobs or not isinstance(jobs[0], dict) or not jobs[0]:
                return {}, root
        job_id, body = next(iter(jobs[0].items()))
        at = _At(("job", job_id), ())
        self._mark(at, ("job", 0))
        out = self.body(Job, body if body is not None else {}, at, ("job", 0))
        out["ID"] = job_id
        return out, at

    def body(self, struct: type[msgspec.Struct], body: Any, at: _At,
             spath: PathKey) -> dict[str, Any]:
        if not isinstance(body, dict):
            self.problems.add(at, f"expected a block, got {_type_name(body)}")
            return {}
        schema = HCL_SCHEMA[struct]
        specs = _by_attr(struct)
        out: dict[str, Any] = {}
        for key, value in body.items():
            hf = schema.get(key)
            json_name = specs[hf.attr].json_name if hf is not None else key
            here = _At((*at.d, key), (*at.k, json_name))
            self._mark(here, (*spath, key))
            self._mark(here, (*spath, key, 0))
            if hf is None:
                if not (key in UNSUPPORTED and _is_zero(value)):
                    self.problems.add(here, _unknown_message(key, sorted(schema)))
                continue
            result = self.value(specs[hf.attr], key, value, here, spath)
            if result is not _INVALID:
                out[json_name] = result
        return out

    def value(self, spec: _FieldSpec, key: str, value: Any, here: _At, spath: PathKey) -> Any:
        if spec.kind == "struct":
            assert spec.struct is not None
            blocks = _as_blocks(value)
            if len(blocks) != 1:
                self.problems.add(here, f"at most one {key} block is allowed, "
                                        f"found {len(blocks)}")
            return self.body(spec.struct, blocks[0], here, (*spath, key, 0))
        if spec.kind == "struct_list":
            assert spec.struct is not None
            assert spec.label_json is not None
            items: list[dict[str, Any]] = []
            for i, block in enumerate(_as_blocks(value)):
                item_spath = (*spath, key, i)
                if not (isinstance(block, dict) and len(block) == 1):
                    bad = _At(here.d, (*here.k, i))
                    self._mark(bad, item_spath)
                    self.problems.add(bad, f'{key} blocks need one label, as in '
                                           f'{key} "name" {{ … }}')
                    continue
                label, inner = next(iter(block.items()))
                item_at = _At((*here.d, label), (*here.k, len(items)))
                self._mark(item_at, item_spath)
                item = self.body(spec.struct, inner if inner is not None else {}, item_at,
                                 item_spath)
                item[spec.label_json] = label
                items.append(item)
            return items
        if spec.kind in ("str_map", "any_map"):
            merged: dict[str, Any] = {}
            for block in _as_blocks(value):
                if isinstance(block, dict):
                    merged.update(block)
                else:
                    self.problems.add(here, f"expected a block or a map, got {_type_name(block)}")
            for k in merged:
                self._mark(_At((*here.d, k), (*here.k, k)), (*spath, key, 0, k))
            if spec.kind == "str_map":
                merged = {k: _stringify(v) for k, v in merged.items()}
            return _unescape(merged)
        if spec.kind == "duration":
            if not isinstance(value, str):
                self.problems.add(here, f'expected a duration string such as "15s", '
                                        f"got {_type_name(value)}")
                return _INVALID
            try:
                return parse_duration(value)
            except ValueError as e:
                self.problems.add(here, str(e))
                return _INVALID
        return _unescape(value)


# --------------------------------------------------------------------------- stage 3: shape


def _check_shape(struct: type[msgspec.Struct], data: Any, at: _At,
                 problems: _Problems) -> dict[str, Any]:
    """Type-check JSON-shaped `data` for `struct`, collecting problems; drop nulls."""
    if not isinstance(data, dict):
        problems.add(at, f"expected an object, got {_type_name(data)}")
        return {}
    specs = _field_specs(struct)
    out: dict[str, Any] = {}
    for key, value in data.items():
        if value is None:
            continue
        spec = specs.get(key)
        if spec is None:
            if not (key in UNSUPPORTED and _is_zero(value)):
                problems.add(_At((*at.d, key), (*at.k, key)),
                             _unknown_message(key, sorted(specs)))
            continue
        here = _At((*at.d, spec.hcl_name), (*at.k, key))
        checked = _check_value(spec, value, here, problems)
        if checked is not _INVALID:
            out[key] = checked
    return out


_SCALAR_CHECKS: Final[dict[str, tuple[Callable[[Any], bool], str]]] = {
    "int": (lambda v: isinstance(v, int) and not isinstance(v, bool), "a whole number"),
    "float": (lambda v: isinstance(v, int | float) and not isinstance(v, bool), "a number"),
    "str": (lambda v: isinstance(v, str), "a string"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "any_map": (lambda v: isinstance(v, dict), "an object"),
    "any": (lambda v: True, "anything"),
}


def _check_value(spec: _FieldSpec, value: Any, at: _At, problems: _Problems) -> Any:
    if spec.kind == "struct":
        assert spec.struct is not None
        return _check_shape(spec.struct, value, at, problems)
    if spec.kind == "struct_list":
        assert spec.struct is not None
        if not isinstance(value, list):
            problems.add(at, f"expected a list, got {_type_name(value)}")
            return _INVALID
        items = []
        for i, item in enumerate(value):
            label = item.get(spec.label_json) if isinstance(item, dict) else None
            name = label if isinstance(label, str) and label else str(i)
            items.append(_check_shape(spec.struct, item, _At((*at.d, name), (*at.k, i)),
                                      problems))
        return items
    if spec.kind == "duration":
        if isinstance(value, str):
            try:
                return parse_duration(value)
            except ValueError as e:
                problems.add(at, str(e))
                return _INVALID
        if isinstance(value, int) and not isinstance(value, bool) and INT_MIN <= value <= INT_MAX:
            return value
        problems.add(at, f"expected a duration (nanoseconds, or a string such as \"15s\"), "
                         f"got {_type_name(value)}")
        return _INVALID
    if spec.kind in ("str_map", "str_list"):
        if not isinstance(value, dict if spec.kind == "str_map" else list):
            what = "an object of strings" if spec.kind == "str_map" else "a list of strings"
            problems.add(at, f"expected {what}, got {_type_name(value)}")
            return _INVALID
        members: list[tuple[str | int, Any]] = list(
            value.items() if isinstance(value, dict) else enumerate(value))
        ok = True
        for k, v in members:
            if not isinstance(v, str):
                problems.add(_At((*at.d, str(k)), (*at.k, k)),
                             f"expected a string, got {_type_name(v)}")
                ok = False
        return value if ok else _INVALID
    check, expected = _SCALAR_CHECKS[spec.kind]
    if not check(value):
        shown = json.dumps(value)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        problems.add(at, f"expected {expected}, got {_type_name(value)} {shown}")
        return _INVALID
    if spec.kind == "int" and not INT_MIN <= value <= INT_MAX:
        problems.add(at, "must be a 64-bit integer (between -2^63 and 2^63-1)")
        return _INVALID
    return value


# --------------------------------------------------------------------------- stage 4: rules


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
_MSGSPEC_FIELD: Final = re.compile(r"^Object (?P<what>contains unknown|missing required) field "
                                   r"`(?P<name>[^`]+)`$")


def _check_driver_config(driver: str, config: dict[str, Any], at: _At,
                         problems: _Problems) -> None:
    """Decode `config` with the driver's schema; place msgspec's one error on its field."""
    schema = TASK_CONFIG[driver]
    try:
        msgspec.convert(config, schema)
    except msgspec.ValidationError as e:
        m = _MSGSPEC_AT.match(str(e))
        assert m is not None  # the pattern matches any string
        msg, where = m["msg"], at
        for part in re.findall(r"\.(\w+)|\[(\d+)\]", m["path"] or ""):
            key: str | int = part[0] or int(part[1])
            where = _At((*where.d, str(key)), (*where.k, key))
        field_m = _MSGSPEC_FIELD.match(msg)
        if field_m and field_m["what"] == "contains unknown":
            name = field_m["name"]
            where = _At((*where.d, name), (*where.k, name))
            msg = _unknown_message(name, sorted(schema.__struct_fields__))
        elif field_m:
            msg = f'{driver} needs "{field_m["name"]}"'
        elif ": " in msg and m["path"] is None and msg.split(": ", 1)[0] in config:
            name, msg = msg.split(": ", 1)  # a __post_init__ check names its field
            where = _At((*where.d, name), (*where.k, name))
        else:
            msg = msg[0].lower() + msg[1:]
        problems.add(where, msg)


def _check_task(group: TaskGroup, task: Task, group_policy: RestartPolicy,
                at: _At, problems: _Problems) -> None:
    name_problem = _file_name_problem(task.name)
    if name_problem:
        problems.add(at, f"task name {name_problem}")
    if not task.driver:
        problems.add(at.field(Task, "driver"), "missing driver")
    elif task.driver not in TASK_CONFIG:
        known = ", ".join(sorted(TASK_CONFIG))
        problems.add(at.field(Task, "driver"), f'unknown driver "{task.driver}"; yurt has {known}')
    else:
        _check_driver_config(task.driver, task.config, at.field(Task, "config"), problems)
    if task.lifecycle is not None and task.lifecycle.hook not in LIFECYCLE_HOOKS:
        problems.add(at.field(Task, "lifecycle").field(Lifecycle, "hook"),
                     f"expected one of {', '.join(map(json.dumps, LIFECYCLE_HOOKS))}, "
                     f'got "{task.lifecycle.hook}"')
    if task.restart_policy is not None:
        # Problems the task merely inherits are reported once, on the group.
        inherited = {msg for _, msg in _check_restart(group_policy, at)}
        for where, msg in _check_restart(merge_restart(group_policy, task.restart_policy),
                                         at.field(Task, "restart_policy")):
            if msg not in inherited:
                problems.add(where, msg)
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
    if res.cpu < 1:
        problems.add(res_at.field(Resources, "cpu"), f"minimum CPU value is 1, got {res.cpu}")
    if res.memory < 10:
        problems.add(res_at.field(Resources, "memory"),
                     f"minimum memory value is 10 MB, got {res.memory}")
    if res.memory_max and res.memory_max < res.memory:
        problems.add(res_at.field(Resources, "memory_max"),
                     f"memory_max ({res.memory_max} MB) must be at least memory "
                     f"({res.memory} MB)")
    for i, dev in enumerate(res.devices):
        dev_at = res_at.item(Resources, "devices", i, dev.name)
        parts = dev.name.split("/")
        if not dev.name or len(parts) > 3 or not all(parts):
            problems.add(dev_at, f'device name must be "type", "vendor/type" or '
                                 f'"vendor/type/name", got "{dev.name}"')
        if dev.count < 1:
            problems.add(dev_at.field(RequestedDevice, "count"),
                         f"must be at least 1, got {dev.count}")

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


def _file_name_problem(name: str) -> str | None:
    """Why `name` cannot be a task's file name, or None (an empty name is reported apart)."""
    if "/" in name or "\0" in name:
        return 'must not contain "/" or NUL characters'
    if name in (".", ".."):
        return f'must not be "{name}"'
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
    if not job.task_groups:
        problems.add(root, 'a job needs at least one group "<name>" { … }')

    def group_at(i: int) -> _At:
        return root.item(Job, "task_groups", i, job.task_groups[i].name or str(i))

    _check_unique([g.name for g in job.task_groups], group_at, "group", problems)
    for gi, group in enumerate(job.task_groups):
        g_at = group_at(gi)
        if not 0 <= group.count <= MAX_COUNT:
            problems.add(g_at.field(TaskGroup, "count"),
                         f"must be between 0 and {MAX_COUNT}, got {group.count}")
        if len(group.name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
            problems.add(g_at, f"group name must be at most {MAX_NAME_BYTES} bytes")
        if group.ephemeral_disk.size < 10:
            problems.add(g_at.field(TaskGroup, "ephemeral_disk").field(EphemeralDisk, "size"),
                         f"minimum ephemeral_disk size is 10 MB, got {group.ephemeral_disk.size}")
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
        for ti, task in enumerate(group.tasks):
            _check_task(group, task, group_policy, task_at(ti), problems)


def canonicalize(job: Job) -> Job:
    """Fill what depends on context, in place: job name, and every restart policy (group
    over job-type default, task over group), so runners never see a `None` policy field."""
    if not job.name:
        job.name = job.id
    for group in job.task_groups:
        group.restart_policy = merge_restart(_default_restart(job), group.restart_policy)
        for task in group.tasks:
            task.restart_policy = merge_restart(group.restart_policy, task.restart_policy)
    return job


# --------------------------------------------------------------------------- entry points


def _syntax_problem(e: lark.exceptions.UnexpectedInput) -> SpecProblem:
    line, column = getattr(e, "line", 0) or 0, getattr(e, "column", 0) or 0
    if isinstance(e, lark.exceptions.UnexpectedToken):
        token = e.token
        got = "end of file" if token.type == "$END" else repr(str(token).strip() or str(token))
        expected = sorted(e.expected)
        hint = f"; expected {', '.join(expected[:6])}" if len(expected) <= 6 else ""
        return SpecProblem(line, column, "syntax", f"unexpected {got}{hint}")
    if isinstance(e, lark.exceptions.UnexpectedCharacters):
        return SpecProblem(line, column, "syntax", f"unexpected character {e.char!r}")
    return SpecProblem(line, column, "syntax", "unexpected end of file")


def detect_format(filename: str, text: str) -> Format:
    """`.json` files, and text that starts with `{`, are JSON; everything else is HCL."""
    if filename.endswith(".json") or text.lstrip().startswith("{"):
        return "json"
    return "hcl"


def parse_job(text: str, *, filename: str = "<job>", format: Format | None = None) -> Job:
    """Parse, validate and canonicalise a job.

    Args:
        text: the job file's contents, Nomad HCL2 or Nomad JSON (`{"Job": {…}}`).
        filename: used in error messages.
        format: "hcl" or "json"; guessed by `detect_format` when omitted.

    Returns:
        The canonical `Job`: defaults filled, restart policies merged.

    Raises:
        JobSpecError: listing every problem found, each with line, column and field path.
    """
    try:
        return _parse_job(text, filename, format or detect_format(filename, text))
    except RecursionError:
        # The depth limits keep every stage far from the recursion limit; should one still be
        # reached, it is the input's fault and is reported as such, never as a traceback.
        raise JobSpecError(filename, [SpecProblem(0, 0, "syntax", "the job is nested too "
                                                  "deeply to be read")]) from None


def _lone_surrogate(text: str) -> Position | None:
    """Where `text` holds a lone surrogate (not Unicode text: it cannot be encoded)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        before = text[:e.start]
        return before.count("\n") + 1, e.start - (before.rfind("\n") + 1) + 1
    return None


def json_value_trouble(doc: Any) -> tuple[PathKey, str] | None:
    """The key path of the first value nested deeper than `MAX_DEPTH`, or past the first
    `MAX_VALUES` values, or holding a string that is not Unicode text (a `\\ud800` escape
    decodes to a lone surrogate), and why."""
    stack: list[tuple[Any, PathKey]] = [(doc, ())]
    values = 0
    while stack:
        value, path = stack.pop()
        values += 1
        if values > MAX_VALUES:
            return (), f"the job is too large (more than {MAX_VALUES} values)"
        if len(path) > MAX_DEPTH:
            return path, f"nested more than {MAX_DEPTH} levels deep"
        if isinstance(value, str):
            if _lone_surrogate(value) is not None:
                return path, "not valid Unicode text (a lone surrogate such as \\ud800)"
        elif isinstance(value, dict):
            for k, v in value.items():
                if _lone_surrogate(k) is not None:
                    return path, "a key is not valid Unicode text (a lone surrogate)"
                stack.append((v, (*path, k)))
        elif isinstance(value, list):
            stack.extend((v, (*path, i)) for i, v in enumerate(value))
    return None


class _NotJsonConstant(Exception):
    """`NaN`, `Infinity`: Python's `json` accepts them, JSON (and Nomad) do not."""


def _refuse_constant(name: str) -> Any:
    raise _NotJsonConstant(name)


def _load_json(text: str, filename: str) -> Any:
    """`json.loads` with JSON's own rules and the depth limit; positions for every refusal."""

    def fail(position: Position, message: str) -> JobSpecError:
        return JobSpecError(filename, [SpecProblem(*position, "syntax", message)])

    try:
        doc = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as e:
        raise fail((e.lineno, e.colno), e.msg) from None
    except ValueError as e:  # Python's own limit: integers of more than 4300 digits
        raise fail((0, 0), f"unreadable number: {str(e).split(';')[0]}") from None
    except (_NotJsonConstant, RecursionError):
        trouble = json_trouble(text, MAX_DEPTH)
        where = trouble[0] if trouble else (0, 0)
        if trouble is None or trouble[1] == "depth":
            raise fail(where, f"nested more than {MAX_DEPTH} levels deep") from None
        raise fail(where, "NaN and Infinity are not JSON numbers") from None
    trouble_path = json_value_trouble(doc)
    if trouble_path is not None:
        path, message = trouble_path
        found = json_trouble(text, MAX_DEPTH)
        if found is not None and found[1] == "depth":
            where = found[0]
        elif not path:
            where = (1, 1)
        else:
            where = locate(json_positions(text), path)
        raise fail(where, message)
    return doc


def _load_hcl(text: str, filename: str) -> tuple[dict[str, Any], lark.Tree[lark.Token]]:
    """python-hcl2's parse and transform, with the depth limit; positions for every refusal."""
    try:
        tree = hcl2.parses_to_tree(text)
    except lark.exceptions.UnexpectedInput as e:
        raise JobSpecError(filename, [_syntax_problem(e)]) from None
    trouble = hcl_trouble(tree, MAX_HCL_TREE_DEPTH, MAX_HCL_NODES)
    if trouble is not None:
        where, why = trouble
        message = ("blocks, lists or expressions are nested too deeply" if why == "depth"
                   else f"the job is too large (more than about {MAX_VALUES} values)")
        raise JobSpecError(filename, [SpecProblem(*where, "syntax", message)])
    try:
        raw = hcl2.transform(tree, discard_comments=True).serialize(options=_HCL_OPTIONS)
    except lark.exceptions.VisitError as e:
        # python-hcl2 checks some syntax (string templates) while transforming.
        meta = getattr(e.obj, "meta", None)
        line = getattr(e.obj, "line", None) or getattr(meta, "line", 0)
        column = getattr(e.obj, "column", None) or getattr(meta, "column", 0)
        message = str(e.orig_exc).strip() or type(e.orig_exc).__name__
        raise JobSpecError(filename, [SpecProblem(line or 0, column or 0, "syntax",
                                                  message[:1].lower() + message[1:])]) from None
    if not isinstance(raw, dict):
        raise JobSpecError(filename, [SpecProblem(1, 1, "syntax", "expected a job block")])
    return raw, tree


def _parse_job(text: str, filename: str, fmt: Format) -> Job:
    if len(text) > MAX_JOB_CHARS:
        raise JobSpecError(filename, [SpecProblem(0, 0, "file", f"the job is larger than "
                                                  f"{MAX_JOB_CHARS >> 20} MiB")])
    surrogate = _lone_surrogate(text)
    if surrogate is not None:
        raise JobSpecError(filename, [SpecProblem(*surrogate, "syntax", "not valid Unicode "
                                                  "text (a lone surrogate)")])
    problems = _Problems([])
    positions: Callable[[], dict[PathKey, Position]]
    key_prefix: PathKey = ()
    job: Job | None = None
    try:
        if fmt == "hcl":
            raw, tree = _load_hcl(text, filename)
            hcl_keyed: dict[PathKey, Position] = {}
            positions = lambda: hcl_keyed  # noqa: E731 - same signature as the lazy JSON index
            data, root = _HclNormaliser(hcl_positions(tree), problems, hcl_keyed).job(raw)
        else:
            doc = _load_json(text, filename)
            if isinstance(doc, dict) and set(doc) == {"Job"}:
                doc, key_prefix = doc["Job"], ("Job",)
            elif not (isinstance(doc, dict) and ("ID" in doc or "TaskGroups" in doc)):
                raise JobSpecError(filename, [SpecProblem(1, 1, "job", 'expected Nomad API JSON, '
                                                          '{"Job": {"ID": …, "TaskGroups": […]}}')])
            data = doc
            job_id = doc.get("ID") if isinstance(doc, dict) else None
            root = _At(("job", job_id if isinstance(job_id, str) else "?"), ())
            positions = lambda: json_positions(text)  # noqa: E731

        checked = _check_shape(Job, data, root, problems)
        try:
            # Values that failed their check were left out, so this succeeds and the rules
            # below still run: one pass reports shape and rule problems together.
            job = msgspec.convert(checked, Job)
        except msgspec.ValidationError as e:  # pragma: no cover - _check_shape should catch it
            problems.add(root, str(e))
        if job is not None:
            _check_job(job, _At(("job", job.id), ()), problems)
    except _TooManyProblems:
        pass

    if problems.items:
        index = positions()
        out = []
        for at, message in problems.items:
            line, column = locate(index, (*key_prefix, *at.k))
            out.append(SpecProblem(line, column, ".".join(str(p) for p in at.d), message))
        if len(problems.items) >= MAX_PROBLEMS:
            out.append(SpecProblem(0, 0, "job", f"stopped after {MAX_PROBLEMS} problems"))
        raise JobSpecError(filename, out)
    if job is None:  # pragma: no cover - a failed convert always adds a problem
        raise JobSpecError(filename, [SpecProblem(0, 0, "job", "the job could not be read")])
    return canonicalize(job)


def load_job(path: str | Path) -> Job:
    """Read and parse a job file; unreadable files are a `JobSpecError` too."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise JobSpecError(name, [SpecProblem(0, 0, "file", f"cannot read: {reason}")]) from None
    return parse_job(text, filename=name)


def encode_job(job: Job) -> bytes:
    """The job as Nomad API JSON, `{"Job": {…}}`, as `nomad job run -output` prints it."""
    return msgspec.json.format(msgspec.json.encode({"Job": job}), indent=2)
