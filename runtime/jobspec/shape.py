"""Stage 3: check JSON-shaped data against the structs' annotations, before msgspec converts it.

What lives here: `_check_shape` and the per-kind value checks. Unknown fields, wrong types and
integers outside Go's int are reported, each on its own path; nulls are dropped (in Nomad's
JSON null means "unset"); duration strings become nanoseconds.

Invariant: what `_check_shape` returns holds only values that passed their check, so
`msgspec.convert` to a `Job` cannot fail on it, and the rules of stage 4 still run in the same
pass: a user sees shape and rule problems together.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final

import msgspec

from yurt.runtime.jobspec.fields import (
    _INVALID,
    SERVER_SET,
    _At,
    _field_specs,
    _FieldSpec,
    _is_zero,
    _nomad_only,
    _Problems,
    _type_name,
    _unknown_message,
)
from yurt.runtime.jobspec.limits import INT_MAX, INT_MIN
from yurt.runtime.lib.durations import parse_duration


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
            if key in SERVER_SET:
                continue
            if not (_nomad_only(struct, key) and _is_zero(value)):
                problems.add(_At((*at.d, key), (*at.k, key)),
                             _unknown_message(key, sorted(specs), struct))
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
    if spec.kind == "struct_map":
        assert spec.struct is not None
        if not isinstance(value, dict):
            problems.add(at, f"expected an object, got {_type_name(value)}")
            return _INVALID
        return {k: _check_shape(spec.struct, v, _At((*at.d, k), (*at.k, k)), problems)
                for k, v in value.items()}
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
