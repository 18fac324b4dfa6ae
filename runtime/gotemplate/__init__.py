"""Go's text/template for Python: the template language Nomad's `template` block renders
(consul-template syntax, Go text/template semantics).

Why written here: PyPI has no maintained pure-Python Go template engine (the packages that
exist wrap Go through cgo), and Jinja2's semantics differ where Nomad users notice: pipelines
feed the last argument, `.Field`/`$`/`$x :=` scoping, Go truthiness, `range` over maps in key
order, `{{-`/`-}}` trimming, `printf` with Go verbs. The package is pure and synchronous:
`lex` (Go's lexer state machine, over `tokens`) → `parse` (recursive descent, with Go's
literals in `literals`, building `nodes`) → `exec` (the evaluator), with Go's builtins in
`builtins` and Go's value printing in `gofmt`. The consul-template functions
Nomad offers live in `consul`, on top of this.

Usage: `Template("name", text, funcs={...}).execute(data)`; errors are `TemplateError`.
An execution is bounded by `limits.Limits` (steps, output, nesting): a template cannot make
the caller spin or allocate without end, whoever wrote it. Nesting deeper than Python's stack
(in the parser or the evaluator) is a `TemplateError` too, never a RecursionError.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from yurt.runtime.gotemplate import nodes
from yurt.runtime.gotemplate.builtins import BUILTINS
from yurt.runtime.gotemplate.exec import (
    MISSING_KEY_MODES,
    ArgTypeError,
    Executor,
    FuncError,
    is_true,
)
from yurt.runtime.gotemplate.gofmt import NO_VALUE, go_type, sprint, sprint_value, sprintf
from yurt.runtime.gotemplate.limits import Limits
from yurt.runtime.gotemplate.parse import TemplateError, parse

__all__ = [
    "NO_VALUE",
    "ArgTypeError",
    "FuncError",
    "Limits",
    "Template",
    "TemplateError",
    "go_type",
    "is_true",
    "sprint",
    "sprint_value",
    "sprintf",
]

_DEFAULT_DELIMS: Final = ("{{", "}}")


class Template:
    """One parsed template (with the templates it defines), ready to execute many times.

    Args:
        name: the name errors cite (Nomad uses the destination path).
        text: the template source.
        funcs: functions beside Go's builtins (a later name overrides a builtin, as
            `Funcs` does in Go).
        left, right: custom delimiters; empty means `{{` / `}}`.
        missing_key: "default"/"invalid" (print "<no value>"), "zero" (nil) or "error".

    Raises:
        TemplateError: the text does not parse.
    """

    def __init__(
        self,
        name: str,
        text: str,
        funcs: Mapping[str, Callable[..., Any]] | None = None,
        *,
        left: str = "",
        right: str = "",
        missing_key: str = "default",
    ) -> None:
        if missing_key not in MISSING_KEY_MODES:
            raise ValueError(f"unrecognized option: missingkey={missing_key}")
        self.name = name
        self.text = text
        self.funcs: dict[str, Callable[..., Any]] = {**BUILTINS, **(funcs or {})}
        self.missing_key = missing_key
        try:
            self.trees: dict[str, nodes.ListNode] = parse(
                name, text, self.funcs, left or _DEFAULT_DELIMS[0], right or _DEFAULT_DELIMS[1]
            )
        except RecursionError:
            # Go's parser stops at 10000 nested parentheses ("max expression depth
            # exceeded"); Python's stack ends sooner, on any kind of nesting.
            raise TemplateError(f"template: {name}: max nesting depth exceeded") from None

    def execute(
        self,
        data: Any = None,
        name: str | None = None,
        *,
        funcs: Mapping[str, Callable[..., Any]] | None = None,
        limits: Limits | None = None,
    ) -> str:
        """Render the main template (or the defined template `name`) over `data`.

        Args:
            funcs: functions for this execution only, over the ones given at parse time (a
                caller binds per-execution state this way, leaving the template shareable).
            limits: this execution's bounds; the defaults of `limits` when None.

        Raises:
            TemplateError: evaluation failed or exceeded a bound; the text is Go's, with
                line:col.
        """
        which = self.name if name is None else name
        tree = self.trees.get(which)
        if tree is None:
            raise TemplateError(
                f'template: no template "{which}" associated with template "{self.name}"')
        table = self.funcs if funcs is None else {**self.funcs, **funcs}
        executor = Executor(which, self.text, self.trees, table, self.missing_key, limits)
        try:
            return executor.run(tree, data)
        except RecursionError:
            # Template calls stop at `Limits.depth`; nesting within one template (or data a
            # function walks) can still outgrow Python's stack first.
            raise TemplateError(
                f'template: {which}: executing "{which}": exceeded maximum nesting depth'
            ) from None
