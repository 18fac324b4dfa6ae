"""The variables-and-locals pass between parsing and normalising an HCL job.

What lives here: `resolve(raw, index, filename, inputs)`, which takes python-hcl2's serialised
file, gathers `variable` blocks and their values (variables.py), evaluates `locals` (in
dependency order, as jobspec2/types.config.go `evaluateLocalVariables` retries until no
progress), renders the `job` block with `var`/`local`/functions (expanding `dynamic`
blocks) and returns the file without its `variable`/`locals` blocks, plus the variables'
values (meant for the job's submission, which is not recorded yet).

Invariant: every problem found is reported together in one `JobSpecError`, each with the
line of the attribute or block it concerns (0, 0 for values from the command line).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from yurt.runtime.errors import JobSpecError, SpecProblem
from yurt.runtime.jobspec.evaluate import EvalError, Scope
from yurt.runtime.jobspec.evaluate_tree import render
from yurt.runtime.jobspec.functions import functions
from yurt.runtime.jobspec.variables import (
    ENV_PREFIX,
    Type,
    VarInputs,
    _Declared,
    _literal_or_expression,
    _load_var_file,
    convert,
    parse_type,
    type_text,
)
from yurt.runtime.lib.sourcemap import PathKey, Position


def _locate(index: dict[PathKey, Position], path: tuple[Any, ...]) -> Position:
    """The position of a serialised path; block labels are not part of the index's keys."""
    prefixes = {key[:n] for key in index for n in range(1, len(key) + 1)}
    spath: PathKey = ()
    best = index.get(spath, (0, 0))
    for part in path:
        if (*spath, part) in prefixes:
            spath = (*spath, part)
            best = index.get(spath, best)
    return best


def _render_at(value: Any, scope: Scope, path: tuple[Any, ...], errors: list[Any]) -> Any:
    """`render`, but an error is recorded with the path of the value that failed."""
    try:
        if isinstance(value, dict):
            out = {k: _render_at(v, scope, (*path, k), errors) for k, v in value.items()
                   if k != "dynamic"}
            for i, block in enumerate(_blocks(value.get("dynamic"))):
                for kind, spec in block.items():
                    where = (*path, "dynamic", i, kind)
                    expanded = _dynamic(kind, spec, scope, where, errors)
                    out[kind] = [*_blocks(out.get(kind)), *expanded]
            return out
        if isinstance(value, list):
            return [_render_at(v, scope, (*path, i), errors) for i, v in enumerate(value)]
        return render(value, scope)
    except EvalError as e:
        errors.append((path, str(e)))
        return None


def resolve(raw: dict[str, Any], index: dict[PathKey, Position], filename: str,
            inputs: VarInputs) -> tuple[dict[str, Any], dict[str, Any]]:
    problems: list[SpecProblem] = []

    def fail(where: Position, path: str, message: str) -> None:
        problems.append(SpecProblem(where[0], where[1], path, message))

    declared: dict[str, _Declared] = {}
    # `variables { name = default }` declares untyped variables (jobspec2/types.config.go
    # `decodeInputVariables`), as a `variable "name" { default = … }` block each.
    plain = [("variables", i, name, {"default": value})
             for i, block in enumerate(_blocks(raw.get("variables")))
             for name, value in block.items()]
    blocks = [("variable", i, name, body)
              for i, block in enumerate(_blocks(raw.get("variable")))
              for name, body in block.items()]
    for kind, i, name, body in [*blocks, *plain]:
        at = index.get((kind, i, name) if kind == "variables" else (kind, i), (0, 0))
        if name in declared:
            fail(at, f"variable.{name}", f'duplicate variable "{name}"')
            continue
        prefix: PathKey = (kind, i) if kind == "variable" else (kind, i, name)
        declared[name] = _declare(name, body if isinstance(body, dict) else {}, at,
                                  {k[-1]: p for k, p in index.items() if k[:-1] == prefix}, fail)

    def assign(name: str, value: Any, source: str, where: Position, literal: bool) -> None:
        d = declared[name]
        try:
            if literal:
                value = _literal_or_expression(value, d.type)
            d.value = convert(value, d.type) if d.type is not None else value
            d.has_value, d.source = True, source
        except EvalError as e:
            expected = type_text(d.type) if d.type else "a value"
            fail(where, f"var.{name}", f"invalid value for var.{name} from {source}: "
                                       f"{expected} required ({e})")

    for key, value in inputs.env.items():
        name = key.removeprefix(ENV_PREFIX)
        if key.startswith(ENV_PREFIX) and name in declared:
            assign(name, value, f"the environment ({key})", (0, 0), True)
    for file_name, text in inputs.var_files:
        try:
            values, positions = _load_var_file(file_name, text)
        except EvalError as e:
            fail((0, 0), file_name, str(e))
            continue
        except JobSpecError as e:
            problems.extend(SpecProblem(p.line, p.column, f"{file_name}: {p.field}", p.message)
                            for p in e.problems)
            continue
        for name, value in values.items():
            where = positions.get((name,), (0, 0))
            if name not in declared:
                if inputs.strict:
                    fail(where, file_name, f'undefined variable: "{name}" is set in '
                         f'{file_name} but not declared; declare it with variable "{name}" '
                         "{ … } in the job file")
                continue
            assign(name, value, file_name, where, False)
    for arg in inputs.args:
        name, sep, value = arg.partition("=")
        if not sep:
            fail((0, 0), "-var", f'invalid -var "{arg}": expected name=value')
            continue
        if name not in declared:
            if inputs.strict:
                fail((0, 0), "-var", f'undefined -var variable: "{name}" was passed on the '
                     f'command line but is not declared; declare it with variable "{name}" '
                     "{ … } in the job file")
            continue
        assign(name, value, "-var", (0, 0), True)

    variables: dict[str, Any] = {}
    for name, d in declared.items():
        if not d.has_value:
            fail(d.at, f"variable.{name}", f'unset variable "{name}": a variable the job '
                 "uses must be set (-var, -var-file, NOMAD_VAR_" + name + ") or have a "
                 "default")
        variables[name] = d.value
    if problems:
        raise JobSpecError(filename, problems)
    _validate(declared, variables, index, fail)
    base = Scope(variables, {}, {})
    base.functions = functions(inputs.base_dir, inputs.allow_fs, base)
    _locals(raw, index, base, fail)
    if problems:
        raise JobSpecError(filename, problems)
    errors: list[Any] = []
    job = _render_at(raw.get("job"), base, ("job",), errors)
    for path, message in errors:
        fail(_locate(index, path), _display(path), message)
    if problems:
        raise JobSpecError(filename, problems)
    rest = {k: v for k, v in raw.items()
            if k not in ("variable", "variables", "locals", "job")}
    if "job" in raw:
        rest["job"] = job
    return rest, variables


def _dynamic(kind: str, spec: Any, scope: Scope, path: tuple[Any, ...],
             errors: list[Any]) -> list[Any]:
    """A `dynamic "kind" { for_each, iterator, labels, content }` block, expanded into
    `kind` blocks as hcl's dynblock extension does (Nomad's jobspec2/parse_job.go
    `decodeJob` runs `dynblock.Expand` over the job body)."""
    if not isinstance(spec, dict) or "for_each" not in spec or "content" not in spec:
        errors.append((path, f'a dynamic "{kind}" block needs for_each and a content block'))
        return []
    collection = render(spec["for_each"], scope)
    if isinstance(collection, dict):
        pairs: list[tuple[Any, Any]] = list(collection.items())
    elif isinstance(collection, list):
        pairs = list(enumerate(collection))
    else:
        errors.append(((*path, "for_each"), "for_each must be a list, set or map, got "
                       f"{type(collection).__name__}"))
        return []
    iterator = spec.get("iterator", kind)
    content = _blocks(spec["content"])
    out: list[Any] = []
    for key, item in pairs:
        scope.spend()
        inner = scope.child({str(iterator): {"key": key, "value": item}})
        labels = render(spec.get("labels", []), inner)
        body: Any = _render_at(content[0] if content else {}, inner, (*path, "content"),
                               errors)
        for label in reversed(labels if isinstance(labels, list) else [labels]):
            body = {str(label): body}
        out.append(body)
    return out


def _declare(name: str, body: dict[str, Any], at: Position, attrs: dict[Any, Position],
             fail: Callable[[Position, str, str], None]) -> _Declared:
    """One `variable` block (`attrs`: its attributes' positions): its type, its default
    converted to it, its validations."""

    def where(key: str) -> Position:
        return attrs.get(key, at)

    for key in sorted(set(body) - {"type", "default", "description", "validation"}):
        fail(where(key), f"variable.{name}", f'unexpected "{key}": a variable takes type, '
             "default, description and validation")
    t = None
    if "type" in body:
        try:
            t = parse_type(body["type"])
        except EvalError as e:
            fail(where("type"), f"variable.{name}.type", str(e))
    d = _Declared(name, t, None, "default" in body, "default",
                  _blocks(body.get("validation")), at)
    if "default" in body:
        try:
            d.value = render(body["default"], Scope())
            if t is not None:
                d.value = convert(d.value, t)
        except EvalError as e:
            fail(where("default"), f"variable.{name}.default", "the default is not "
                 f"compatible with the type {type_text(t or ('any',))}: {e}")
    if d.type is None and d.has_value:
        d.type = _inferred(d.value)
    return d


def _inferred(default: Any) -> Type | None:
    """An untyped variable takes its default's type (jobspec2 types.variables.go
    `decodeVariableBlock`): a primitive converts what it is given; a collection default makes
    given values HCL expressions, kept as written (cty's tuple type would also fix their
    length, which no job file means)."""
    if default is None:
        return None
    if isinstance(default, bool):
        return ("bool",)
    if isinstance(default, int | float):
        return ("number",)
    if isinstance(default, str):
        return ("string",)
    return ("any",)


def _display(path: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in path if not isinstance(p, int))


def _blocks(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, dict):
        return [value]
    return [b for b in value if isinstance(b, dict)] if isinstance(value, list) else []


def _validate(declared: dict[str, _Declared], variables: dict[str, Any],
              index: dict[PathKey, Position], fail: Any) -> None:
    for name, d in declared.items():
        for rule in d.validations:
            scope = Scope({name: variables[name]}, None, {})
            scope.functions = functions(None, False, scope)
            try:
                ok = render(rule.get("condition"), scope)
            except EvalError as e:
                fail(d.at, f"variable.{name}.validation", f"invalid condition: {e}")
                continue
            if not isinstance(ok, bool):
                fail(d.at, f"variable.{name}.validation", "the condition must be true or "
                     f"false, got {ok!r}")
            elif not ok:
                message = str(rule.get("error_message") or "").strip()
                fail(d.at, f"var.{name}", f"invalid value for variable ({d.source}): "
                     f"{message}")


class _LazyLocals(dict[str, Any]):
    """The locals, each evaluated when first named and only once (so their order in the file
    does not matter and no chain of them costs more than its length); a local that names
    itself, through others or not, is an error."""

    def __init__(self, pending: dict[str, Any], scope: Scope) -> None:
        super().__init__()
        self.pending, self.scope = pending, scope
        self.busy: set[str] = set()
        self.failed: set[str] = set()

    def __contains__(self, name: object) -> bool:
        return dict.__contains__(self, name) or name in self.pending

    def __getitem__(self, name: str) -> Any:
        if dict.__contains__(self, name):
            return dict.__getitem__(self, name)
        if name in self.failed:
            raise EvalError(f'local.{name} has an error of its own')
        if name in self.busy:
            raise EvalError(f'local.{name} refers to itself')
        self.busy.add(name)
        try:
            value = render(self.pending[name], self.scope)
        except EvalError:
            self.failed.add(name)
            raise
        finally:
            self.busy.discard(name)
        dict.__setitem__(self, name, value)
        return value


def _locals(raw: dict[str, Any], index: dict[PathKey, Position], scope: Scope,
            fail: Any) -> None:
    """Evaluate every local (jobspec2/types.config.go `evaluateLocalVariables`)."""
    pending: dict[str, Any] = {}
    where: dict[str, Position] = {}
    for i, block in enumerate(_blocks(raw.get("locals"))):
        for name, expr in block.items():
            where[name] = index.get(("locals", i, name), (0, 0))
            if name in pending:
                fail(where[name], f"local.{name}", f'duplicate local "{name}"')
            pending[name] = expr
    scope.locals = _LazyLocals(pending, scope)
    for name in pending:
        try:
            scope.locals[name]
        except EvalError as e:
            fail(where[name], f"local.{name}", str(e))
