"""HCL string templates with directives: `%{ if }`/`%{ else }`/`%{ endif }`, `%{ for }`/
`%{ endfor }`, and the `~` strip markers on `${…}` and `%{…}`.

What lives here: `render_directives(text, scope, evaluate)`, used by evaluate_tree.py
`render_string` for a template that holds a `%{`. Interpolations are evaluated by the
`evaluate` it is given (evaluate_tree.py's).

Invariants: `$${` and `%%{` stay verbatim (hcl.py `_unescape` turns them into `${`, `%{`); an
unknown root reference in an interpolation stays as its `${…}` text (for the client), but in a
directive's condition or collection it is an error, as HCL must decide it now; an unbalanced
directive is an `EvalError` naming what was expected.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from yurt.runtime.jobspec.evaluate import (
    EvalError,
    Scope,
    _matching_brace,
    _Unknown,
    to_string,
    type_name,
)

#: How an interpolation or a directive's expression is evaluated (evaluate_tree.py
#: `evaluate`), passed in: the evaluator renders templates with this module, which may not
#: import it back.
Evaluate = Callable[[str, Scope], Any]

_FOR = re.compile(r"for\s+([A-Za-z_][\w-]*)(?:\s*,\s*([A-Za-z_][\w-]*))?\s+in\s+(.+)$", re.S)

Token = tuple[str, str]  # ("text" | "expr" | "if" | "else" | "endif" | "for" | "endfor", body)


def _tokens(text: str) -> list[Token]:
    out: list[Token] = []
    i, start, n = 0, 0, len(text)
    strip_next = False

    def literal(s: str) -> None:
        nonlocal strip_next
        if strip_next:
            s = s.lstrip()
            strip_next = False
        out.append(("text", s))

    while i < n:
        if text.startswith(("$${", "%%{"), i):
            i += 3
            continue
        if not text.startswith(("${", "%{"), i):
            i += 1
            continue
        end = _matching_brace(text, i + 2)
        if end < 0:
            raise EvalError("unterminated template sequence")
        literal(text[start:i])
        body = text[i + 2:end]
        if body.startswith("~"):
            body = body[1:]
            if out and out[-1][0] == "text":
                out[-1] = ("text", out[-1][1].rstrip())
        if body.endswith("~"):
            body, strip_next = body[:-1], True
        if text[i] == "$":
            out.append(("expr", body))
        else:
            word = body.strip().split(None, 1)
            keyword = word[0] if word else ""
            if keyword not in ("if", "else", "endif", "for", "endfor"):
                raise EvalError(f"unknown template directive %{{{body.strip()}}}")
            out.append((keyword, body.strip()))
        i = start = end + 1
    literal(text[start:])
    return out


def render_directives(text: str, scope: Scope, evaluate: Evaluate) -> str:
    tokens = _tokens(text)
    out, pos = _render(tokens, 0, scope, (), evaluate)
    if pos != len(tokens):
        raise EvalError(f"unexpected %{{{tokens[pos][1]}}}")
    return out


def _render(tokens: list[Token], pos: int, scope: Scope, until: tuple[str, ...],
            evaluate: Evaluate) -> tuple[str, int]:
    """Render from `pos` up to (not past) a token whose kind is in `until`."""
    parts: list[str] = []
    while pos < len(tokens):
        kind, body = tokens[pos]
        if kind in until:
            return "".join(parts), pos
        if kind == "text":
            parts.append(body)
        elif kind == "expr":
            try:
                parts.append(to_string(evaluate(body, scope)))
            except _Unknown:
                parts.append("${" + body + "}")
        elif kind == "if":
            cond = _decide(evaluate(body[2:], scope))
            then, pos = _render(tokens, pos + 1, scope, ("else", "endif"), evaluate)
            other = ""
            if pos < len(tokens) and tokens[pos][0] == "else":
                other, pos = _render(tokens, pos + 1, scope, ("endif",), evaluate)
            if pos >= len(tokens):
                raise EvalError("%{ if } without %{ endif }")
            parts.append(then if cond else other)
        elif kind == "for":
            parts.append(_loop(tokens, pos, scope, evaluate))
            pos = _skip(tokens, pos + 1)
            if pos >= len(tokens):
                raise EvalError("%{ for } without %{ endfor }")
        else:
            raise EvalError(f"%{{ {kind} }} without its opening directive")
        pos += 1
    if until:
        raise EvalError(f"missing %{{ {until[-1]} }}")
    return "".join(parts), pos


def _decide(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if value in ("true", "false"):
        return bool(value == "true")
    raise EvalError(f"the %{{ if }} condition must be a bool, got {type_name(value)}")


def _skip(tokens: list[Token], pos: int) -> int:
    """The position of the `endfor` that closes the loop whose body starts at `pos`."""
    depth = 0
    while pos < len(tokens):
        kind = tokens[pos][0]
        if kind == "for":
            depth += 1
        elif kind == "endfor":
            if depth == 0:
                return pos
            depth -= 1
        pos += 1
    return pos


def _loop(tokens: list[Token], pos: int, scope: Scope, evaluate: Evaluate) -> str:
    m = _FOR.match(tokens[pos][1])
    if m is None:
        raise EvalError("expected %{ for NAME in EXPR } or %{ for KEY, VALUE in EXPR }")
    first, second, expr = m.groups()
    collection = evaluate(expr, scope)
    if isinstance(collection, dict):
        pairs: list[tuple[Any, Any]] = list(collection.items())
    elif isinstance(collection, list):
        pairs = list(enumerate(collection))
    else:
        raise EvalError(f"%{{ for }} iterates over a list or a map, got "
                        f"{type_name(collection)}")
    out = []
    for key, value in pairs:
        scope.spend()
        names = {first: value} if second is None else {first: key, second: value}
        body, _ = _render(tokens, pos + 1, scope.child(names), ("endfor",), evaluate)
        out.append(body)
    return "".join(out)
