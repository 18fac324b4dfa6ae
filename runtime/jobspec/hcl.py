"""Stage 2: HCL, as python-hcl2 serialises it, into the shape of Nomad's API JSON.

What lives here: `_HclNormaliser` and its value helpers. Jobspec names become JSON names
(`kill_timeout` → `KillTimeout`, `restart` → `RestartPolicy`, `group "x"` → an element of
`TaskGroups` with `Name: "x"`), single blocks are unwrapped, duration strings become
nanoseconds and `$${` escapes become `${`. Unknown keys are reported by their HCL name.

Invariants: the output has the same shape a JSON job would have, so stage 3 does not know which
format it reads; while normalising, the structural HCL position index is translated into a
key-path index, so every later problem is located by key path whatever the source format.
A value that fails here is left out (`_INVALID`) and reported, never passed on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from yurt.runtime.jobspec.fields import (
    _INVALID,
    HCL_REWRITES,
    HCL_SCHEMA,
    _At,
    _by_attr,
    _FieldSpec,
    _is_zero,
    _nomad_only,
    _Problems,
    _type_name,
    _unknown_message,
)
from yurt.runtime.lib.durations import parse_duration
from yurt.runtime.lib.sourcemap import PathKey, Position
from yurt.runtime.structs import Job


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


_NUMBER: Final = re.compile(r"\A-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?\Z")


def _convert_scalar(kind: str, value: Any) -> Any:
    """HCL2's conversion of a value to its field's type (go-cty's `convert`, which Nomad's
    jobspec2 decoding applies): a numeric string to a number (`cpu = "500"`), "true"/"false"
    to a bool, a number or bool to a string (`port = 8080`). Anything else is returned as is,
    for the shape check to refuse in the jobspec's words."""
    if kind in ("int", "float") and isinstance(value, str) and _NUMBER.match(value):
        number = float(value)
        if kind == "float":
            return number
        if "." not in value and "e" not in value.lower():
            return int(value)
        return int(number) if number.is_integer() else value
    if kind == "bool" and value in ("true", "false"):
        return value == "true"
    if kind == "str" and isinstance(value, bool):
        return "true" if value else "false"
    if kind == "str" and isinstance(value, int | float):
        return _stringify(value)
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
        if isinstance(body, dict) and "task" in body:
            body = self._wrap_lone_tasks(body)
        out = self.body(Job, body if body is not None else {}, at, ("job", 0))
        out.setdefault("ID", job_id)  # jobspec2 `decode`: an `id` in the body wins
        return out, at

    def _wrap_lone_tasks(self, body: dict[str, Any]) -> dict[str, Any]:
        """Job-level `task "x" { … }` blocks, each wrapped in a group of the same name placed
        before the job's groups, as Nomad's jobspec2/parse_job.go `normalizeJob` does; the
        source positions follow each task to its new place."""
        body = dict(body)
        tasks = [t for t in _as_blocks(body.pop("task")) if isinstance(t, dict) and len(t) == 1]
        groups = _as_blocks(body.get("group", []))
        n = len(tasks)
        moved: dict[PathKey, Position] = {}
        for key, pos in self.hcl_index.items():
            if key[:3] == ("job", 0, "group") and len(key) > 3 and isinstance(key[3], int):
                moved[("job", 0, "group", key[3] + n, *key[4:])] = pos
            elif key[:3] == ("job", 0, "task") and len(key) > 3 and isinstance(key[3], int):
                if len(key) == 4:
                    moved.setdefault(("job", 0, "group", key[3]), pos)
                moved[("job", 0, "group", key[3], "task", 0, *key[4:])] = pos
                moved.setdefault(("job", 0, "group", key[3], "task"), pos)
            else:
                moved.setdefault(key, pos)
        self.hcl_index = moved
        body["group"] = [*({name: {"task": [{name: inner}]}} for t in tasks
                           for name, inner in t.items()), *groups]
        return body

    def body(self, struct: type[msgspec.Struct], body: Any, at: _At,
             spath: PathKey) -> dict[str, Any]:
        if not isinstance(body, dict):
            self.problems.add(at, f"expected a block, got {_type_name(body)}")
            return {}
        schema = HCL_SCHEMA[struct]
        specs = _by_attr(struct)
        out: dict[str, Any] = {}
        if struct in HCL_REWRITES:  # shorthands such as `distinct_hosts = true`
            body, rewrite_problems = HCL_REWRITES[struct](body)
            for key, message in rewrite_problems:
                self._mark(_At((*at.d, key), (*at.k, key)), (*spath, key))
                self.problems.add(_At((*at.d, key), (*at.k, key)), message)
        for key, value in body.items():
            hf = schema.get(key)
            json_name = specs[hf.attr].json_name if hf is not None else key
            here = _At((*at.d, key), (*at.k, json_name))
            self._mark(here, (*spath, key))
            self._mark(here, (*spath, key, 0))
            if hf is None:
                if not (_nomad_only(struct, key) and _is_zero(value)):
                    self.problems.add(here, _unknown_message(key, sorted(schema), struct))
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
        if spec.kind == "struct_list" and spec.label_json is None:
            # Unlabelled repeated blocks (`network { … }`): one struct per block, numbered
            # as the JSON list is, so both formats name a problem the same way.
            assert spec.struct is not None
            unlabelled: list[dict[str, Any]] = []
            for i, block in enumerate(_as_blocks(value)):
                item_at = _At((*here.d, str(i)), (*here.k, i))
                self._mark(item_at, (*spath, key, i))
                unlabelled.append(self.body(spec.struct, block if block is not None else {},
                                            item_at, (*spath, key, i)))
            return unlabelled
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
        if spec.kind == "struct_map":  # `volume "x" { … }`: keyed by label, as Nomad's JSON
            assert spec.struct is not None
            keyed: dict[str, Any] = {}
            for i, block in enumerate(_as_blocks(value)):
                if not (isinstance(block, dict) and len(block) == 1):
                    bad = _At(here.d, here.k)
                    self._mark(bad, (*spath, key, i))
                    self.problems.add(bad, f'{key} blocks need one label, as in '
                                           f'{key} "name" {{ … }}')
                    continue
                label, inner = next(iter(block.items()))
                item_at = _At((*here.d, label), (*here.k, label))
                self._mark(item_at, (*spath, key, i))
                keyed[label] = self.body(spec.struct, inner if inner is not None else {},
                                         item_at, (*spath, key, i))
            return keyed
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
        return _convert_scalar(spec.kind, _unescape(value))
