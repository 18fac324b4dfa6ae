"""The expression evaluator proper: one lark node of python-hcl2's grammar to a value.

What lives here: `eval_node`, a recursive walk over the rules of `hcl2.lark` that can appear in
an expression (literals, strings and heredocs with interpolations, references, indexes and
splats, operators, conditionals, tuples, objects, for-expressions, function calls); and the
entry points from text, `render` (a serialised job), `render_string` (one template, its
`%{…}` directives through template.py) and `evaluate` (one expression).

Invariants: the tree has been bounded in depth by the parser's caller (syntax.py
`hcl_trouble` checks the whole file before any expression is evaluated); operators check their
operands' types as HCL does (arithmetic on numbers, `&&`/`||`/`!` on bools) and raise
`EvalError` otherwise; a root reference that is not `var`, `local` or an iterator raises
`_Unknown`, which `render_string` below turns back into text.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from yurt.runtime.jobspec.evaluate import (
    EvalError,
    Scope,
    _has_directive,
    _split_template,
    _Unknown,
    number,
    parse_expression,
    to_string,
    type_name,
)
from yurt.runtime.jobspec.template import render_directives

if TYPE_CHECKING:
    from lark import Token, Tree

_SKIP = {"new_line_or_comment"}


def _kids(node: Tree[Token]) -> list[Any]:
    from lark import Token, Tree

    out: list[Any] = []
    for c in node.children:
        if isinstance(c, Tree):
            if c.data not in _SKIP:
                out.append(c)
        elif isinstance(c, Token):
            out.append(c)
    return out


def _trees(node: Tree[Token]) -> list[Tree[Token]]:
    from lark import Tree

    return [c for c in _kids(node) if isinstance(c, Tree)]


def _num(v: Any, op: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        raise EvalError(f"unsupported operand for {op}: a number is required, got {type_name(v)}")
    if isinstance(v, str):
        try:
            return float(v) if any(c in v for c in ".eE") else int(v)
        except ValueError:
            raise EvalError(f"unsupported operand for {op}: a number is required, "
                            f"got {v!r}") from None
    return v


def _bool(v: Any, op: str) -> bool:
    if isinstance(v, bool):
        return v
    if v in ("true", "false"):
        return bool(v == "true")
    raise EvalError(f"unsupported operand for {op}: a bool is required, got {type_name(v)}")


def _binary(op: str, a: Any, b: Any) -> Any:
    if op == "==":
        return _equal(a, b)
    if op == "!=":
        return not _equal(a, b)
    if op in ("&&", "||"):
        p, q = _bool(a, op), _bool(b, op)
        return (p and q) if op == "&&" else (p or q)
    x: float = _num(a, op)
    y: float = _num(b, op)
    if op == "+":
        return number(x + y)
    if op == "-":
        return number(x - y)
    if op == "*":
        return number(x * y)
    if op in ("/", "%"):
        if y == 0:
            raise EvalError("division by zero")
        if op == "/":
            return number(x / y)
        return number(x - y * int(x / y))  # HCL's modulo truncates toward zero
    return {"<": x < y, ">": x > y, "<=": x <= y, ">=": x >= y}[op]


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b if isinstance(a, bool) and isinstance(b, bool) else False
    return bool(a == b) and type_name(a) == type_name(b)


def _index(value: Any, key: Any) -> Any:
    if isinstance(value, list):
        if isinstance(key, str) and key.lstrip("-").isdigit():
            key = int(key)
        if isinstance(key, bool) or not isinstance(key, int | float) or key != int(key):
            raise EvalError(f"invalid index: a list is indexed by a whole number, "
                            f"got {type_name(key)}")
        if not 0 <= int(key) < len(value):
            raise EvalError(f"invalid index: {int(key)} is out of range for a list of "
                            f"{len(value)} elements")
        return value[int(key)]
    if isinstance(value, dict):
        k = to_string(key)
        if k not in value:
            raise EvalError(f'invalid index: the object has no element "{k}"')
        return value[k]
    if value is None:
        raise EvalError("attempt to index a null value")
    raise EvalError(f"cannot index a {type_name(value)}")


def _attr(value: Any, name: str) -> Any:
    if isinstance(value, dict):
        if name not in value:
            raise EvalError(f'unsupported attribute: the object has no attribute "{name}"')
        return value[name]
    if value is None:
        raise EvalError(f'attempt to get attribute "{name}" from a null value')
    raise EvalError(f'unsupported attribute "{name}": a {type_name(value)} has no attributes')


def _step(value: Any, op: Tree[Token], scope: Scope) -> Any:
    """One `.name`, `[i]` or `.0` applied to a value."""
    if op.data == "get_attr":
        name = str(_kids(op)[-1].children[0]) if _trees(op) else str(_kids(op)[-1])
        return _attr(value, name)
    if op.data == "short_index":
        return _index(value, int(str(_kids(op)[-1])))
    if op.data == "braces_index":
        return _index(value, eval_node(_trees(op)[0], scope))
    raise EvalError(f"unsupported expression {op.data}")


def _root(name: str, scope: Scope) -> Any:
    if name in scope.names:
        return scope.names[name]
    if name == "var":
        return scope.variables
    if name == "local":
        if scope.locals is None:
            raise EvalError("locals cannot be used here")
        return scope.locals
    raise _Unknown(name)


def _root_name(node: Tree[Token]) -> str | None:
    """`var` for the expression `var` (an identifier alone in its term), else None."""
    trees = _trees(node)
    if node.data == "expr_term" and len(node.children) == 1 and trees and \
            trees[0].data == "identifier":
        return str(trees[0].children[0])
    return None


def _call(node: Tree[Token], scope: Scope) -> Any:
    kids = _kids(node)
    name = str(_trees(node)[0].children[0])
    args: list[Any] = []
    expand = False
    if name in ("try", "can") and name in scope.functions:  # arguments evaluated lazily
        return scope.functions[name](*[_Lazy(a, scope) for t in _trees(node)[1:]
                                        for a in _trees(t)])
    for t in _trees(node)[1:]:
        if t.data == "arguments":
            args = [eval_node(a, scope) for a in _trees(t)]
            expand = any(str(k) == "..." for k in _kids(t) if not hasattr(k, "data"))
    if any(str(k) == "::" for k in kids if not hasattr(k, "data")):
        raise EvalError(f"unknown function {name!r}: namespaced functions are not available")
    if expand:
        if not args or not isinstance(args[-1], list):
            raise EvalError(f"{name}: the argument expanded with ... must be a list")
        args = [*args[:-1], *args[-1]]
    fn = scope.functions.get(name)
    if fn is None:
        raise EvalError(f'call to unknown function "{name}"')
    try:
        return scope.built(fn(*args))
    except EvalError as e:
        raise EvalError(f"{name}(): {e}") from None
    except TypeError as e:
        raise EvalError(f"{name}(): wrong number or kind of arguments ({e})") from None
    except _Unknown:
        raise
    except RecursionError:
        raise  # parse.py `parse_job` reports it as too deep a job
    except Exception as e:  # a function failing on any input is the input's fault
        raise EvalError(f"{name}(): {e}") from None


class _Lazy:
    """An argument of `try`/`can`, evaluated when the function asks for it."""

    def __init__(self, node: Tree[Token], scope: Scope) -> None:
        self.node, self.scope = node, scope

    def value(self) -> Any:
        return eval_node(self.node, self.scope)


def _for(node: Tree[Token], scope: Scope) -> Any:
    trees = _trees(node)
    intro, body = trees[0], trees[1:]
    names = [str(t.children[0]) for t in _trees(intro) if t.data == "identifier"]
    coll = eval_node(next(t for t in _trees(intro) if t.data != "identifier"), scope)
    cond = body[-1] if body and body[-1].data == "for_cond" else None
    exprs = [t for t in body if t.data != "for_cond"]
    grouped = any(str(k) == "..." for k in _kids(node) if not hasattr(k, "data"))
    if isinstance(coll, dict):
        pairs: list[tuple[Any, Any]] = list(coll.items())
    elif isinstance(coll, list):
        pairs = list(enumerate(coll))
    else:
        raise EvalError(f"a for expression iterates over a list or a map, got {type_name(coll)}")
    tuple_out: list[Any] = []
    obj_out: dict[str, Any] = {}
    for k, v in pairs:
        scope.spend()
        inner = scope.child({names[0]: v} if len(names) == 1 else {names[0]: k, names[1]: v})
        if cond is not None and not _bool(eval_node(_trees(cond)[0], inner), "if"):
            continue
        if node.data == "for_tuple_expr":
            tuple_out.append(eval_node(exprs[0], inner))
            continue
        key = to_string(eval_node(exprs[0], inner))
        val = eval_node(exprs[1], inner)
        if grouped:
            obj_out.setdefault(key, []).append(val)
        elif key in obj_out:
            raise EvalError(f'duplicate object key "{key}" in a for expression (use ... '
                            'to group)')
        else:
            obj_out[key] = val
    return tuple_out if node.data == "for_tuple_expr" else obj_out


def _string(node: Tree[Token], scope: Scope) -> Any:
    from lark import Token

    raw: list[str] = []
    for part in _trees(node):
        for c in part.children:
            if isinstance(c, Token):
                raw.append(_unquote(str(c)))
            elif c.data == "interpolation":
                value = eval_node(_trees(c)[0], scope)
                raw.append(to_string(value).replace("${", "$${"))
            else:
                raise EvalError("template directives (%{ … }) are not supported in "
                                "expressions")
    return scope.built("".join(raw))


def _unquote(text: str) -> str:
    if "\\" not in text:
        return text
    try:
        return str(json.loads('"' + text.replace("\\$", "$") + '"'))
    except ValueError:
        return text


def eval_node(node: Tree[Token], scope: Scope) -> Any:
    data = node.data
    kids = _trees(node)
    if data == "expr_term":
        if len(kids) == 1:
            return eval_node(kids[0], scope)
        raise EvalError("empty expression")
    if data == "int_lit":
        return int(str(node.children[0]))
    if data == "float_lit":
        return number(float(str(node.children[0])))
    if data == "literal_value":
        return {"true": True, "false": False, "null": None}[str(node.children[0])]
    if data == "identifier":
        name = str(node.children[0])
        if name in scope.names:
            return scope.names[name]
        if name in ("var", "local"):
            return _root(name, scope)
        raise _Unknown(name)
    if data == "string":
        return _string(node, scope)
    if data in ("heredoc_template", "heredoc_template_trim"):
        text = str(node.children[0])
        body = text.split("\n", 1)[1] if "\n" in text else ""
        body = body.rsplit("\n", 1)[0] + "\n" if "\n" in body else ""
        if data == "heredoc_template_trim":
            lines = body.split("\n")
            indent = min((len(s) - len(s.lstrip()) for s in lines if s.strip()), default=0)
            body = "\n".join(s[indent:] for s in lines)
        return render_string(body, scope) if "${" in body or "%{" in body else body
    if data in ("get_attr_expr_term", "index_expr_term"):
        base = eval_node(kids[0], scope)
        root = _root_name(kids[0])
        if data == "get_attr_expr_term" and root in ("var", "local") and \
                root not in scope.names:
            name = str(_kids(kids[1])[-1].children[0])
            if isinstance(base, dict) and name not in base:
                if root == "var":
                    raise EvalError(f'undefined variable "var.{name}": declare it with '
                                    f'variable "{name}" {{ … }}')
                raise EvalError(f'undefined local "local.{name}": define it in a locals '
                                "block")
        return _step(base, kids[1], scope)
    if data in ("attr_splat_expr_term", "full_splat_expr_term"):
        base = eval_node(kids[0], scope)
        items = [] if base is None else base if isinstance(base, list) else [base]
        out = []
        for item in items:
            for op in _trees(kids[1]):
                item = _step(item, op, scope)
            out.append(item)
        return out
    if data == "function_call":
        return _call(node, scope)
    if data == "tuple":
        return [eval_node(k, scope) for k in kids]
    if data == "object":
        obj: dict[str, Any] = {}
        for elem in kids:
            key_node, value_node = _trees(elem)
            inner = _trees(key_node)[0]
            if inner.data == "expr_term" and _trees(inner) and _trees(inner)[0].data == \
                    "identifier" and len(inner.children) == 1:
                key = str(_trees(inner)[0].children[0])
            else:
                key = to_string(eval_node(inner, scope))
            obj[key] = eval_node(value_node, scope)
        return obj
    if data == "conditional":
        cond = eval_node(kids[0], scope)
        if cond is None:
            raise EvalError("the condition of a conditional expression is null")
        return eval_node(kids[1] if _bool(cond, "?:") else kids[2], scope)
    if data == "binary_op":
        left = eval_node(kids[0], scope)
        term = _trees(kids[1])
        operator = str(term[0].children[0])
        if operator == "&&" and left is False:
            return False
        if operator == "||" and left is True:
            return True
        return _binary(operator, left, eval_node(term[1], scope))
    if data == "unary_op":
        sign = str(node.children[0])
        value = eval_node(kids[0], scope)
        return (not _bool(value, "!")) if sign == "!" else number(-_num(value, "-"))
    if data in ("for_tuple_expr", "for_object_expr"):
        return _for(node, scope)
    raise EvalError(f"unsupported expression ({data})")


# --- templates and expressions from text: the entry points (evaluate.py holds the parts)

def render_string(text: str, scope: Scope) -> Any:
    if _has_directive(text):
        return render_directives(text, scope, evaluate)
    parts = list(_split_template(text))
    if len(parts) == 1 and parts[0][0]:
        try:
            return evaluate(parts[0][1], scope)
        except _Unknown:
            return text
    out: list[str] = []
    for is_expr, part in parts:
        if not is_expr:
            out.append(part)
            continue
        try:
            out.append(to_string(evaluate(part, scope)))
        except _Unknown:
            out.append("${" + part + "}")
    return scope.built("".join(out))


def render(value: Any, scope: Scope) -> Any:
    """Every template in a serialised HCL value replaced by its value (keys too)."""
    if isinstance(value, str):
        return render_string(value, scope) if "${" in value or "%{" in value else value
    if isinstance(value, list):
        return [render(v, scope) for v in value]
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for k, v in value.items():
            key = render(k, scope) if isinstance(k, str) else k
            out[key if isinstance(key, str) else to_string(key)] = render(v, scope)
        return out
    return value


def evaluate(text: str, scope: Scope) -> Any:
    try:
        return eval_node(parse_expression(text), scope)
    except (EvalError, _Unknown, RecursionError):
        raise
    except Exception as e:  # an operand no rule foresaw (1e999 as an index): still the input's
        raise EvalError(f"cannot evaluate {text.strip()!r}: {e}") from None
