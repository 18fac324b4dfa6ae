"""HCL shorthands of `constraint {}` and `affinity {}`, rewritten into their three-field form.

Nomad's jobspec lets a constraint name its operator as the attribute (`distinct_hosts = true`,
`version = ">= 1.2"`, `regexp = "^eth"`, `distinct_property = "${meta.rack}"`, …) and fills
`operator = "="` when none is given (jobspec2's decodeConstraint and decodeAffinity). This
module turns such a body into `attribute`/`value`/`operator` only, before the schema reads it,
so the rest of the pipeline (and JSON jobs, which have no shorthands) sees one shape.

Invariants: pure functions of python-hcl2's body dict; the output has only schema keys for
the keys it knows, and unknown keys are passed through for the schema to report. A shorthand
applies in jobspec2's order (a later one wins over an earlier one, and over `operator`).

Deliberate difference: Nomad's HCL schema declares `set_contains_all`, `set_contains_any`,
`is_set` and `is_not_set` on a constraint but ignores their values (the constraint becomes
`=` with no value, which its validation then refuses); here they work as their names say
(`is_set = "${attr.x}"` names the attribute, the set forms give the value).
"""

from __future__ import annotations

from typing import Any, Final

#: Shorthand → (operator, field its value goes to), in the order jobspec2 applies them.
_CONSTRAINT_SHORTHANDS: Final = (
    ("version", "value"), ("semver", "value"), ("regexp", "value"),
    ("set_contains", "value"), ("set_contains_all", "value"), ("set_contains_any", "value"),
    ("is_set", "attribute"), ("is_not_set", "attribute"),
    ("distinct_hosts", "value"), ("distinct_property", "attribute"),
)
_AFFINITY_SHORTHANDS: Final = (
    ("version", "value"), ("semver", "value"), ("regexp", "value"),
    ("set_contains_any", "value"), ("set_contains_all", "value"), ("set_contains", "value"),
)
_STRING_FIELDS: Final = ("attribute", "value", "operator")


def _as_string(value: Any) -> Any:
    """HCL converts a number or a bool given for a string attribute (`value = 3` → "3")."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return value


def _rewrite(body: dict[str, Any], shorthands: tuple[tuple[str, str], ...]
             ) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    out = {k: (_as_string(v) if k in _STRING_FIELDS else v) for k, v in body.items()
           if k not in {name for name, _ in shorthands}}
    problems: list[tuple[str, str]] = []
    for name, target in shorthands:
        if name not in body:
            continue
        value = _as_string(body[name])
        if name == "distinct_hosts":
            if value not in ("true", "false"):
                problems.append((name, f"expected true or false, got {value!r}"))
                out["operator"] = name  # the one problem is the value, not a missing operator
                continue
        elif not isinstance(value, str):
            problems.append((name, f"expected a string, got {type(value).__name__}"))
            continue
        elif not value:
            continue  # jobspec2 ignores an empty shorthand
        out["operator"] = name
        out[target] = value
    out.setdefault("operator", "=")
    if out["operator"] == "":
        out["operator"] = "="
    return out, problems


def constraint_shorthand(body: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """A `constraint {}` body in its three-field form, and (key, message) problems."""
    return _rewrite(body, _CONSTRAINT_SHORTHANDS)


def affinity_shorthand(body: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """An `affinity {}` body in its three-field form, and (key, message) problems."""
    return _rewrite(body, _AFFINITY_SHORTHANDS)
