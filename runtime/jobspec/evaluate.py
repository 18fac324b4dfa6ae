"""HCL2 expressions and string templates, evaluated over python-hcl2's lark tree.

What lives here: `Scope` (the variables an expression sees: `var`, `local`, for-expression
iterators, and the function table), `EvalError`, the value helpers (`to_string`, `number`,
`type_name`), template splitting and `parse_expression`: the parts. The entry points that
walk python-hcl2's serialised job (`render`, `render_string`, `evaluate`: strings that hold
`${…}` are HCL templates, replaced by their values) are in evaluate_tree.py, beside the
evaluator they call, so that no module here imports one that imports it back.
Values are plain Python: str, int or float (HCL's number), bool, None, list, dict.

Invariants, as Nomad's jobspec2 (jobspec2/types.config.go `EvalContext`):
- A template that is exactly one `${expr}` yields the expression's value, not a string.
- A reference whose root is not `var`, `local` or an iterator (`${attr.kernel.name}`,
  `${NOMAD_ALLOC_DIR}`, `${meta.x}`, `${env["X"]}`) is not HCL's: it stays as the text
  `${…}` for the client to interpolate at run time (Nomad's `UndefinedVariable` callback).
- `$${` is left verbatim here; the HCL normaliser (hcl.py `_unescape`) turns it into `${`.
  `%{` template directives are rendered by template.py.
- The only exception out of `render`/`evaluate` is `EvalError`, with a message that names
  what was expected.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from lark import Token, Tree

Function = Callable[..., Any]

#: Iterations all for expressions and template loops of one job file may take together; built
#: values are charged against the same budget (`Scope.built`).
MAX_ITERATIONS: Final = 100_000


class EvalError(Exception):
    """An expression that cannot be evaluated; the message says what was expected."""


class _Unknown(Exception):
    """A reference HCL does not resolve (attr.x, NOMAD_x): kept as text for run time."""


@dataclass
class Scope:
    variables: dict[str, Any] = field(default_factory=dict)
    locals: dict[str, Any] | None = None
    functions: dict[str, Function] = field(default_factory=dict)
    names: dict[str, Any] = field(default_factory=dict)  # for-expression iterators
    #: Iterations left (for expressions, %{ for }): shared by child scopes, so a job file
    #: (which the HTTP API takes from anyone) cannot make evaluation run unbounded.
    budget: list[int] = field(default_factory=lambda: [MAX_ITERATIONS])

    def child(self, names: dict[str, Any]) -> Scope:
        return Scope(self.variables, self.locals, self.functions, {**self.names, **names},
                     self.budget)

    def spend(self, units: int = 1) -> None:
        self.budget[0] -= units
        if self.budget[0] < 0:
            raise EvalError(f"the job's expressions iterate more than {MAX_ITERATIONS} times "
                            "or build too large a value")

    def built(self, value: Any) -> Any:
        """Charge a built value to the budget (an element, or 100 characters, a unit), so
        doubling it through locals or functions cannot grow it without bound."""
        if isinstance(value, str):
            self.spend(len(value) // 100)
        elif isinstance(value, list | dict):
            self.spend(len(value))
        return value


def type_name(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int | float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "list"
    if isinstance(v, dict):
        return "object"
    return type(v).__name__


def number(v: Any) -> int | float:
    """HCL's number: integral values are ints, so `10 / 2` prints `5`."""
    if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
        return int(v)
    return v  # type: ignore[no-any-return]


def to_string(v: Any) -> str:
    """A value inside a string template, converted as cty converts primitives."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        n = number(v)
        return str(n) if isinstance(n, int) else repr(n)
    if isinstance(v, str):
        return v
    if v is None:
        raise EvalError("cannot include null in a string template")
    raise EvalError(f"cannot include a {type_name(v)} in a string template: string required")


# --- templates ---------------------------------------------------------------------------------

def _split_template(text: str) -> Iterator[tuple[bool, str]]:
    """(is_expression, text) parts of a template; `$${` stays literal."""
    i, start, n = 0, 0, len(text)
    while i < n:
        if text.startswith("$${", i):
            i += 3
            continue
        if text.startswith("${", i):
            end = _matching_brace(text, i + 2)
            if end < 0:
                raise EvalError(f"unterminated template interpolation in {text!r}")
            if i > start:
                yield False, text[start:i]
            yield True, text[i + 2:end]
            i = start = end + 1
            continue
        i += 1
    if start < n:
        yield False, text[start:]


def _matching_brace(text: str, i: int) -> int:
    depth, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            i += 1
            while i < n and text[i] != '"':
                if text[i] == "\\":
                    i += 1
                elif text.startswith("${", i):
                    i = _matching_brace(text, i + 2)
                    if i < 0:
                        return -1
                i += 1
        elif c == "{":
            depth += 1
        elif c == "}":
            if depth == 0:
                return i
            depth -= 1
        i += 1
    return -1


def has_template(value: str) -> bool:
    return any(is_expr for is_expr, _ in _split_template(value))


def _has_directive(text: str) -> bool:
    return "%{" in text.replace("%%{", "")


# --- expressions -------------------------------------------------------------------------------

@lru_cache(maxsize=512)
def parse_expression(text: str) -> Tree[Token]:
    """The lark tree of one HCL expression (parsed as the value of an attribute)."""
    import lark

    from yurt.runtime.jobspec.grammar import parse_hcl

    try:
        tree = parse_hcl("x = " + text.strip())
    except lark.exceptions.UnexpectedInput as e:
        raise EvalError(f"invalid expression {text.strip()!r} (column "
                        f"{max(1, (getattr(e, 'column', 5) or 5) - 4)})") from None
    body = tree.children[0]
    attr = body.children[0]  # type: ignore[union-attr]
    return attr.children[-1]  # type: ignore[union-attr,return-value]
