"""The evaluator: walks a parsed template over Python data with Go's `text/template` semantics
(Go's `text/template/exec.go`).

What Go fixes and this follows:
- a pipeline's value feeds the LAST argument of the next command (`x | f a` is `f a x`);
- `.A.B` looks up a method, then a map key, then a struct field; a missing map key gives
  Go's invalid value (printed "<no value>"), nil (`missingkey=zero`) or an error (`=error`);
- truth is Go's: false, 0, nil, and empty strings/slices/maps are false, structs true;
- `range` over a map walks its keys in sorted order; `$` is the data the render started with;
  variables declared inside `if`/`range`/`with` end with that block;
- `and`/`or` stop at the first deciding argument and return it (not a bool).
Errors read `template: <name>:<line>:<col>: executing "<name>" at <<node>>: <msg>`.

Bounds (see `limits`): every statement, pipeline and call is a step against `Limits.steps`,
and a call also costs a step per `DATA_PER_STEP` characters of its arguments and result;
printed text counts against `Limits.output`, and so does any one string a function returns;
`range` walks its operand lazily (`range 1000000000` allocates nothing: the step budget ends
it). Exceeding a bound is a `TemplateError` at the node that crossed it, like any Go error.
A step costs one comparison: the budget and `Limits.stop` are looked at only when the count
reaches `next_check`, the nearer of the budget's end and `STOP_CHECK_EVERY` steps on, whether
it got there by one step or by a function's charge.

Variables: a name maps to the stack of its live declarations (`values`; the innermost is
last), and `names` lists the declarations in order, so that a block's end pops its own. A
lookup is one dict access whatever the number of variables in scope; a scan from the
innermost declaration (Go's) would cost the render a loop per lookup that the step budget
counts as one step.

Values: str, int, float, bool, None (nil), `NO_VALUE`, list/tuple, dict, and objects whose
capitalised attributes are fields and whose capitalised methods are Go methods.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, NoReturn

from yurt.runtime.gotemplate import nodes as n
from yurt.runtime.gotemplate.gofmt import NO_VALUE, go_type, sprint_value
from yurt.runtime.gotemplate.limits import DATA_PER_STEP, STOP_CHECK_EVERY, Limits, charging
from yurt.runtime.gotemplate.parse import TemplateError

_NOFINAL: Final = object()
MISSING_KEY_MODES: Final = ("default", "invalid", "zero", "error")


class FuncError(Exception):
    """Raised by a template function; rendered as Go's "error calling <name>: <msg>"."""


def execute_template(*args: Any) -> str:
    """consul-template's `executeTemplate NAME [DATA]` (template/funcs.go
    `executeTemplateFunc`): in a function table it stands for the executor's own
    `Executor.execute_template`, which renders a template the text `define`d."""
    raise FuncError("executeTemplate runs only inside a template")


class ArgTypeError(Exception):
    """A function argument of the wrong type; rendered without "error calling" as Go does."""


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


def is_true(value: Any) -> bool:
    """Go's template truth: false, 0, nil, no value and empty strings/slices/maps are false;
    any other value (a struct) is true."""
    if value is NO_VALUE or value is None:
        return False
    if isinstance(value, (bool, int, float, str, list, tuple, dict, bytes)):
        return bool(value)
    return True


def _arity(fn: Callable[..., Any]) -> tuple[int, int | None]:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return 0, None
    low, high = 0, 0
    for p in sig.parameters.values():
        if p.kind is p.VAR_POSITIONAL:
            return low, None
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            high += 1
            if p.default is p.empty:
                low += 1
    return low, high


class Executor:
    def __init__(
        self,
        name: str,
        text: str,
        trees: Mapping[str, n.ListNode],
        funcs: Mapping[str, Callable[..., Any]],
        missing_key: str = "default",
        limits: Limits | None = None,
    ) -> None:
        self.name = name
        self.text = text
        self.trees = trees
        self.funcs = funcs
        self.missing_key = missing_key
        self.out: list[str] = []
        self.names: list[str] = []  # declarations in scope, in order
        self.values: dict[str, list[Any]] = {}  # name -> its declarations' values
        self.node: n.Node | None = None
        self.depth = 0
        self.limits = limits if limits is not None else Limits()
        self.steps = self.limits.spent
        self.next_check = self.steps  # look at the budget and `stop` at the first step
        self.size = 0  # characters in `out`
        self._arity: dict[str, tuple[int, int | None]] = {}

    # -- errors --------------------------------------------------------------------------
    def errorf(self, msg: str) -> NoReturn:
        if self.node is None:
            raise TemplateError(f"template: {self.name}: {msg}")
        pos = self.node.pos
        line = self.text.count("\n", 0, pos) + 1
        col = pos - (self.text.rfind("\n", 0, pos) + 1)
        context = str(self.node)
        if len(context) > 20:
            context = context[:20] + "..."
        raise TemplateError(
            f'template: {self.name}:{line}:{col}: executing "{self.name}" at <{context}>: {msg}'
        )

    # -- bounds --------------------------------------------------------------------------
    def step(self) -> None:
        self.steps += 1
        if self.steps >= self.next_check:
            self.check()

    def charge(self, steps: int) -> None:
        """Count work beyond one step (a function's, by the size of its data)."""
        self.steps += steps
        if self.steps >= self.next_check:
            self.check()

    def afford(self, steps: int) -> None:
        """Refuse work that may cost `steps` when less than that remains of the budget."""
        if self.steps + steps > self.limits.steps:
            self.errorf(f"exceeded the render budget of {self.limits.steps} steps")

    def check(self) -> None:
        """The look at the bounds that `step` and `charge` make every `STOP_CHECK_EVERY`
        steps and at the budget's end."""
        if self.limits.stop.is_set():
            self.errorf("render abandoned")
        if self.steps > self.limits.steps:
            self.errorf(f"exceeded the render budget of {self.limits.steps} steps")
        self.next_check = min(self.steps + STOP_CHECK_EVERY, self.limits.steps + 1)

    def emit(self, text: str) -> None:
        self.size += len(text)
        if self.size > self.limits.output:
            self.errorf(f"rendered text exceeds {self.limits.output} characters")
        self.out.append(text)

    # -- variables -----------------------------------------------------------------------
    def push(self, name: str, value: Any) -> None:
        self.names.append(name)
        self.values.setdefault(name, []).append(value)

    def pop_to(self, mark: int) -> None:
        """End the declarations made since `len(self.names)` was `mark`."""
        names, values = self.names, self.values
        while len(names) > mark:
            name = names.pop()
            stack = values[name]
            stack.pop()
            if not stack:
                del values[name]

    def set_var(self, name: str, value: Any) -> None:
        stack = self.values.get(name)
        if not stack:
            self.errorf(f"undefined variable: {name}")
        stack[-1] = value

    def var_value(self, name: str) -> Any:
        stack = self.values.get(name)
        if not stack:
            self.errorf(f"undefined variable: {name}")
        return stack[-1]

    # -- statements ----------------------------------------------------------------------
    def run(self, tree: n.ListNode, dot: Any) -> str:
        self.push("$", dot)
        try:
            with charging(self):
                self.walk(dot, tree)
        finally:
            self.limits.spent = self.steps  # counted here, in an attribute, for speed
        return "".join(self.out)

    def walk(self, dot: Any, node: n.Node) -> None:
        self.node = node
        self.step()
        if isinstance(node, n.Text):
            self.emit(node.text)
        elif isinstance(node, n.ListNode):
            for child in node.nodes:
                self.walk(dot, child)
        elif isinstance(node, n.Action):
            value = self.eval_pipeline(dot, node.pipe)
            if not node.pipe.decl:
                self.print_value(node, value)
        elif isinstance(node, n.Branch):
            if node.kind == "range":
                self.walk_range(dot, node)
            else:
                self.walk_if_or_with(dot, node)
        elif isinstance(node, n.TemplateCall):
            self.walk_template(dot, node)
        elif isinstance(node, n.Break):
            raise _Break
        elif isinstance(node, n.Continue):
            raise _Continue
        else:
            self.errorf(f"unknown node: {node}")

    def print_value(self, node: n.Node, value: Any) -> None:
        self.node = node
        if callable(value) and not hasattr(value, "String"):
            self.errorf(f"can't print {node} of type {go_type(value)}")
        self.emit(sprint_value(value))

    def walk_if_or_with(self, dot: Any, node: n.Branch) -> None:
        mark = len(self.names)
        value = self.eval_pipeline(dot, node.pipe)
        if is_true(value):
            self.walk(value if node.kind == "with" else dot, node.body)
        elif node.else_body is not None:
            self.walk(dot, node.else_body)
        self.pop_to(mark)

    def walk_range(self, dot: Any, node: n.Branch) -> None:
        self.node = node
        mark = len(self.names)
        value = self.eval_pipeline(dot, node.pipe)
        decl = node.pipe.decl
        pairs: Iterable[tuple[Any, Any]]
        if value is NO_VALUE or value is None:
            pairs = ()
        elif isinstance(value, (list, tuple)):
            pairs = enumerate(value)
        elif isinstance(value, dict):
            pairs = ((k, value[k]) for k in _sorted_keys(value))
        elif isinstance(value, int) and not isinstance(value, bool):
            if len(decl) > 1:
                self.errorf(f"can't use {value} to iterate over more than one variable")
            pairs = ((i, i) for i in range(value))  # lazy: the step budget bounds the walk
        else:
            self.errorf(f"range can't iterate over {sprint_value(value)}")
        inner = len(self.names)
        empty = True
        for index, elem in pairs:
            empty = False
            if decl:
                if node.pipe.is_assign:
                    self.set_var(decl[0].idents[0], index if len(decl) > 1 else elem)
                    if len(decl) > 1:
                        self.set_var(decl[1].idents[0], elem)
                else:
                    # The index first: declared twice under one name, the element is seen.
                    if len(decl) > 1:
                        self.values[self.names[-2]][-1] = index
                    self.values[self.names[-1]][-1] = elem
            try:
                self.walk(elem, node.body)
            except _Continue:
                pass
            except _Break:
                self.pop_to(inner)
                break
            self.pop_to(inner)
        if empty and node.else_body is not None:
            self.walk(dot, node.else_body)
        self.pop_to(mark)

    def walk_template(self, dot: Any, node: n.TemplateCall) -> None:
        tree = self.trees.get(node.name)
        if tree is None:
            self.errorf(f'template "{node.name}" not defined')
        new_dot = NO_VALUE if node.pipe is None else self.eval_pipeline(dot, node.pipe)
        if self.depth >= self.limits.depth:
            self.errorf(f"exceeded maximum template depth ({self.limits.depth})")
        saved = self.names, self.values
        self.names, self.values = ["$"], {"$": [new_dot]}
        self.depth += 1
        try:
            self.walk(new_dot, tree)
        finally:
            self.depth -= 1
            self.names, self.values = saved

    # -- expressions ---------------------------------------------------------------------
    def eval_pipeline(self, dot: Any, pipe: n.Pipe) -> Any:
        self.node = pipe
        self.step()
        value: Any = NO_VALUE
        final: Any = _NOFINAL
        for cmd in pipe.cmds:
            value = self.eval_command(dot, cmd, final)
            final = value
        for var in pipe.decl:
            if pipe.is_assign:
                self.set_var(var.idents[0], value)
            else:
                self.push(var.idents[0], value)
        return value

    def not_a_function(self, args: list[n.Node], final: Any) -> None:
        if len(args) > 1 or final is not _NOFINAL:
            self.errorf(f"can't give argument to non-function {args[0]}")

    def eval_command(self, dot: Any, cmd: n.Command, final: Any) -> Any:
        first = cmd.args[0]
        if isinstance(first, n.Field):
            return self.eval_field_chain(dot, dot, first, first.idents, cmd.args, final)
        if isinstance(first, n.Chain):
            return self.eval_chain(dot, first, cmd.args, final)
        if isinstance(first, n.Identifier):
            return self.eval_function(dot, first, cmd.args, final)
        if isinstance(first, n.Pipe):
            self.not_a_function(cmd.args, final)
            return self.eval_pipeline(dot, first)
        if isinstance(first, n.Variable):
            return self.eval_variable(dot, first, cmd.args, final)
        self.node = first
        self.not_a_function(cmd.args, final)
        if isinstance(first, (n.Bool, n.Number)):
            return first.value
        if isinstance(first, n.String):
            return first.value
        if isinstance(first, n.Dot):
            return dot
        if isinstance(first, n.Nil):
            self.errorf("nil is not a command")
        self.errorf(f"can't evaluate command {first}")

    def eval_arg(self, dot: Any, node: n.Node) -> Any:
        self.node = node
        if isinstance(node, n.Dot):
            return dot
        if isinstance(node, n.Nil):
            return None
        if isinstance(node, n.Field):
            return self.eval_field_chain(dot, dot, node, node.idents, [node], _NOFINAL)
        if isinstance(node, n.Variable):
            return self.eval_variable(dot, node, [node], _NOFINAL)
        if isinstance(node, n.Pipe):
            return self.eval_pipeline(dot, node)
        if isinstance(node, n.Identifier):
            return self.eval_function(dot, node, [node], _NOFINAL)
        if isinstance(node, n.Chain):
            return self.eval_chain(dot, node, [node], _NOFINAL)
        if isinstance(node, (n.Bool, n.Number, n.String)):
            return node.value
        self.errorf(f"can't handle {node} for arg")

    def eval_chain(self, dot: Any, chain: n.Chain, args: list[n.Node], final: Any) -> Any:
        receiver = self.eval_arg(dot, chain.node)
        return self.eval_field_chain(dot, receiver, chain, chain.fields, args, final)

    def eval_variable(self, dot: Any, var: n.Variable, args: list[n.Node], final: Any) -> Any:
        self.node = var
        value = self.var_value(var.idents[0])
        if len(var.idents) == 1:
            self.not_a_function(args, final)
            return value
        return self.eval_field_chain(dot, value, var, var.idents[1:], args, final)

    def eval_field_chain(
        self, dot: Any, receiver: Any, node: n.Node, idents: list[str], args: list[n.Node],
        final: Any,
    ) -> Any:
        for ident in idents[:-1]:
            receiver = self.eval_field(dot, ident, node, [], _NOFINAL, receiver)
        return self.eval_field(dot, idents[-1], node, args, final, receiver)

    def eval_field(
        self, dot: Any, name: str, node: n.Node, args: list[n.Node], final: Any, receiver: Any
    ) -> Any:
        self.node = node
        has_args = len(args) > 1 or final is not _NOFINAL
        if receiver is NO_VALUE:
            if self.missing_key == "error":
                self.errorf(f'nil data; no entry for key "{name}"')
            return NO_VALUE
        if receiver is None:
            self.errorf(f"nil pointer evaluating interface {{}}.{name}")
        basic = isinstance(receiver, (str, int, float, list, tuple, bytes))
        if not basic and type(receiver) is not dict:
            method = getattr(type(receiver), name, None)
            if callable(method) and name[:1].isupper():
                return self.eval_call(dot, getattr(receiver, name), node, name, args, final)
        if isinstance(receiver, dict):
            if has_args:
                self.errorf(f"{name} is not a method but has arguments")
            if name in receiver:
                return receiver[name]
            if self.missing_key == "error":
                self.errorf(f'map has no entry for key "{name}"')
            return None if self.missing_key == "zero" else NO_VALUE
        if not basic and name[:1].isupper():
            try:
                value = getattr(receiver, name)
            except AttributeError:
                pass
            else:
                if has_args:
                    self.errorf(f"{name} has arguments but cannot be invoked as function")
                return value
        self.errorf(f"can't evaluate field {name} in type {go_type(receiver)}")

    def eval_function(self, dot: Any, ident: n.Identifier, args: list[n.Node], final: Any) -> Any:
        self.node = ident
        fn = self.funcs.get(ident.name)
        if fn is None:
            self.errorf(f'"{ident.name}" is not a defined function')
        if ident.name in ("and", "or"):
            return self.eval_and_or(dot, ident, args[1:], final)
        if fn is execute_template:
            fn = self.execute_template
        return self.eval_call(dot, fn, ident, ident.name, args, final)

    def execute_template(self, *args: Any) -> str:
        """The text of the defined template `args[0]` over `args[1]` (no value without it),
        rendered with this execution's functions, budget and template depth."""
        if not args:
            raise FuncError("executeTemplate: missing template name")
        if len(args) > 2:
            raise FuncError(f"executeTemplate: wrong number of arguments, expected 1 or 2, "
                            f"but got {len(args)}")
        name = args[0]
        if not isinstance(name, str):
            raise ArgTypeError(f"wrong type for value; expected string; got {go_type(name)}")
        tree = self.trees.get(name)
        if tree is None:
            raise FuncError(f'template: no template "{name}" associated with template '
                            f'"{self.name}"')
        if self.depth >= self.limits.depth:
            self.errorf(f"exceeded maximum template depth ({self.limits.depth})")
        dot = args[1] if len(args) == 2 else NO_VALUE
        saved = self.out, self.names, self.values
        self.out, self.names, self.values = [], ["$"], {"$": [dot]}
        self.depth += 1
        try:
            self.walk(dot, tree)
            return "".join(self.out)
        finally:
            self.depth -= 1
            self.out, self.names, self.values = saved

    def eval_and_or(self, dot: Any, ident: n.Identifier, args: list[n.Node], final: Any) -> Any:
        count = len(args) + (final is not _NOFINAL)
        if count < 1:
            self.node = ident
            self.errorf(f"wrong number of args for {ident.name}: want at least 1 got 0")
        want = ident.name == "or"
        value: Any = NO_VALUE
        for arg in args:
            value = self.eval_arg(dot, arg)
            if is_true(value) is want:
                return value
        if final is not _NOFINAL:
            value = final
        return value

    def eval_call(
        self, dot: Any, fn: Callable[..., Any], node: n.Node, name: str, args: list[n.Node],
        final: Any,
    ) -> Any:
        self.step()
        argv = [self.eval_arg(dot, a) for a in args[1:]]
        if final is not _NOFINAL:
            argv.append(final)
        self.node = node
        low, high = self._arity.get(name) or self._arity.setdefault(name, _arity(fn))
        if high is None and len(argv) < low:
            self.errorf(f"wrong number of args for {name}: want at least {low} got {len(argv)}")
        if high is not None and not low <= len(argv) <= high:
            want = low if low == high else high
            self.errorf(f"wrong number of args for {name}: want {want} got {len(argv)}")
        try:
            result = fn(*argv)
        except ArgTypeError as exc:
            self.node = node
            self.errorf(str(exc))
        except TemplateError:
            raise
        except Exception as exc:  # Go recovers a function's panic into this error too
            self.node = node
            self.errorf(f"error calling {name}: {exc}")
        self.node = node
        if isinstance(result, str) and len(result) > self.limits.output:
            self.errorf(f"error calling {name}: result exceeds {self.limits.output} characters")
        weight = _weight(result) + sum(map(_weight, argv))
        if weight >= DATA_PER_STEP:
            self.charge(weight // DATA_PER_STEP)
        return result


def _weight(value: Any) -> int:
    """How much data a value is, for the budget: its length when it has one."""
    return len(value) if isinstance(value, (str, bytes, list, tuple, dict)) else 0


def _sorted_keys(value: dict[Any, Any]) -> list[Any]:
    try:
        return sorted(value)
    except TypeError:
        return sorted(value, key=str)
