"""HCL2 `variable` and `locals` blocks, their values, and the job rendered with them.

What lives here: `VarInputs` (values from NOMAD_VAR_* in the environment, var files and
`-var name=value`), type constraints (`string`, `number`, `bool`, `any`, `list(T)`, `set(T)`,
`map(T)`, `object({…})`, `tuple([…])`) with cty's conversions, and `resolve`, which takes
python-hcl2's serialised file, evaluates variables then locals, and renders the job block.

Invariants, as Nomad's jobspec2 (types.variables.go `collectInputVariableValues`,
types.config.go `decodeBody`):
- Precedence: default < environment < var files (in order) < `-var` (in order).
- A `-var`/environment value for a `string`, `number` or untyped variable is the literal
  text, converted to the type; for other types it is an HCL expression.
- An undeclared variable given by a var file or `-var` is an error when `strict` (the CLI),
  ignored otherwise (the HTTP API); an undeclared NOMAD_VAR_* is always ignored.
- A variable without a value, a value that does not convert, a failed `validation` (its
  `error_message`), an undefined `var.`/`local.`, all raise one `JobSpecError` naming
  file:line and what was expected.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from yurt.runtime.jobspec.evaluate import (
    EvalError,
    Scope,
    parse_expression,
    to_string,
    type_name,
)
from yurt.runtime.jobspec.evaluate_tree import evaluate, render
from yurt.runtime.lib.sourcemap import PathKey, Position

ENV_PREFIX: Final = "NOMAD_VAR_"

Type = tuple[Any, ...]  # ("string",), ("list", T), ("object", {name: T}), ("tuple", [T])
_PRIMITIVES: Final = {"string", "number", "bool", "any"}


@dataclass(frozen=True)
class VarInputs:
    """Where variable values come from, besides defaults."""

    env: Mapping[str, str] = field(default_factory=dict)
    var_files: tuple[tuple[str, str], ...] = ()  # (name, text): HCL, or JSON by name/shape
    args: tuple[str, ...] = ()  # "name=value", as `-var` takes them
    strict: bool = True
    allow_fs: bool = False
    base_dir: str | None = None


def parse_type(text: Any) -> Type:
    """A `type =` constraint (python-hcl2 gives it as "${list(string)}")."""
    if isinstance(text, str) and text in _PRIMITIVES:  # a bare keyword serialises as text
        return (text,)
    if not isinstance(text, str) or not text.startswith("${") or not text.endswith("}"):
        raise EvalError(f"a type such as string, list(string) or map(number) is required, "
                        f"got {text!r}")
    return _type_of(parse_expression(text[2:-1]))


def _type_of(node: Any) -> Type:
    from yurt.runtime.jobspec.evaluate_tree import _trees

    while node.data == "expr_term" and len(_trees(node)) == 1:
        node = _trees(node)[0]
    if node.data == "identifier" and str(node.children[0]) in _PRIMITIVES:
        return (str(node.children[0]),)
    if node.data == "function_call":
        name = str(_trees(node)[0].children[0])
        args = [a for t in _trees(node)[1:] for a in _trees(t)]
        if name in ("list", "set", "map", "optional") and len(args) == 1:
            return (name, _type_of(args[0]))
        if name == "object" and len(args) == 1:
            obj = args[0]
            while obj.data == "expr_term":
                obj = _trees(obj)[0]
            if obj.data == "object":
                attrs = {}
                for elem in _trees(obj):
                    key_node, value_node = _trees(elem)
                    key = to_string(evaluate_key(key_node))
                    attrs[key] = _type_of(value_node)
                return ("object", attrs)
        if name == "tuple" and len(args) == 1:
            tup = args[0]
            while tup.data == "expr_term":
                tup = _trees(tup)[0]
            if tup.data == "tuple":
                return ("tuple", [_type_of(t) for t in _trees(tup)])
    raise EvalError("a type such as string, number, bool, any, list(string), map(number) or "
                    "object({…}) is required")


def evaluate_key(node: Any) -> Any:
    from yurt.runtime.jobspec.evaluate_tree import _trees, eval_node

    inner = _trees(node)[0]
    if len(inner.children) == 1 and _trees(inner) and _trees(inner)[0].data == "identifier":
        return str(_trees(inner)[0].children[0])
    return eval_node(inner, Scope())


def type_text(t: Type) -> str:
    if len(t) == 1:
        return str(t[0])
    if t[0] == "object":
        return "object({" + ", ".join(f"{k} = {type_text(v)}" for k, v in t[1].items()) + "})"
    if t[0] == "tuple":
        return "tuple([" + ", ".join(type_text(v) for v in t[1]) + "])"
    return f"{t[0]}({type_text(t[1])})"


def convert(value: Any, t: Type) -> Any:
    """`value` as type `t`, as cty's `convert.Convert` does; EvalError says why not."""
    kind = t[0]
    if value is None or kind == "any":
        return value
    if kind == "optional":
        return convert(value, t[1])
    if kind == "string":
        if isinstance(value, list | dict):
            raise EvalError(f"string required, got {type_name(value)}")
        return to_string(value)
    if kind == "number":
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value
        if isinstance(value, str):
            try:
                n = float(value) if any(c in value for c in ".eE") else int(value)
            except ValueError:
                raise EvalError(f"a number is required, got {value!r}") from None
            return n
        raise EvalError(f"number required, got {type_name(value)}")
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if value in ("true", "false"):
            return value == "true"
        raise EvalError(f"bool required, got {type_name(value)}"
                        + (f" {value!r}" if isinstance(value, str) else ""))
    if kind in ("list", "set"):
        if not isinstance(value, list):
            raise EvalError(f"{kind} of {type_text(t[1])} required, got {type_name(value)}")
        items = [_at(i, convert, v, t[1]) for i, v in enumerate(value)]
        if kind == "set":
            items = [v for i, v in enumerate(items) if v not in items[:i]]
        return items
    if kind == "map":
        if not isinstance(value, dict):
            raise EvalError(f"map of {type_text(t[1])} required, got {type_name(value)}")
        return {k: _at(k, convert, v, t[1]) for k, v in value.items()}
    if kind == "object":
        if not isinstance(value, dict):
            raise EvalError(f"object required, got {type_name(value)}")
        out = {}
        for k, at in t[1].items():
            if k not in value and at[0] != "optional":
                raise EvalError(f'attribute "{k}" is required')
            out[k] = _at(k, convert, value.get(k), at)
        return out
    if kind == "tuple":
        if not isinstance(value, list) or len(value) != len(t[1]):
            raise EvalError(f"tuple of {len(t[1])} elements required")
        return [_at(i, convert, v, et) for i, (v, et) in enumerate(zip(value, t[1], strict=True))]
    raise EvalError(f"unknown type {kind}")  # pragma: no cover - parse_type refuses it


def _at(where: Any, fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except EvalError as e:
        raise EvalError(f"element {json.dumps(where)}: {e}") from None


@dataclass
class _Declared:
    name: str
    type: Type | None
    value: Any
    has_value: bool
    source: str  # where the winning value came from, for messages
    validations: list[dict[str, Any]]
    at: Position


def _literal_or_expression(text: str, t: Type | None) -> Any:
    if t is None or t[0] in ("string", "number"):
        return text
    return evaluate(text, Scope())


def _load_var_file(name: str, text: str) -> tuple[dict[str, Any], dict[PathKey, Position]]:
    if name.endswith(".json") or text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError as e:
            raise EvalError(f"{name}: not valid JSON ({e})") from None
        if not isinstance(doc, dict):
            raise EvalError(f"{name}: a JSON var file holds one object")
        return doc, {}
    from yurt.runtime.jobspec.syntax import _load_hcl
    from yurt.runtime.lib.sourcemap import hcl_positions

    raw, tree = _load_hcl(text, name)
    if "variable" in raw:
        raise EvalError(f"{name}: variable declaration in a var file; a var file assigns "
                        "values (name = value) to variables declared in the job file")
    return {k: render(v, Scope()) for k, v in raw.items()}, hcl_positions(tree)
