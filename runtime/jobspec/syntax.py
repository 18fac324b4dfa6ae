"""Stage 1: job text to plain data, HCL through python-hcl2 (lark), JSON through `json`.

What lives here: the two readers and the translation of their errors. HCL is parsed once; the
raw lark tree is bounded (depth, node count) before anything recursive walks it, then kept for
the position index and serialised to plain dicts. JSON is decoded with JSON's own rules (NaN and
Infinity, which Python's `json` accepts, are refused) and then bounded (depth, values, Unicode).

Invariant: the only exception out of a reader is a `JobSpecError` with a line and column
(0, 0 only where no position exists); a syntax error stops the parse here.
"""

from __future__ import annotations

import json
from functools import cache
from typing import TYPE_CHECKING, Any, Final

from yurt.runtime.errors import JobSpecError, SpecProblem
from yurt.runtime.jobspec.limits import (
    MAX_DEPTH,
    MAX_HCL_NODES,
    MAX_HCL_TREE_DEPTH,
    MAX_VALUES,
    json_value_trouble,
)
from yurt.runtime.lib.sourcemap import Position, hcl_trouble, json_positions, json_trouble, locate

if TYPE_CHECKING:  # python-hcl2 and lark (~4 MiB) load with the first HCL job, not with the
    import lark  # agent: JSON jobs through the API never need them
    from hcl2 import SerializationOptions


@cache
def _hcl_options() -> SerializationOptions:
    """python-hcl2 v8 options that give plain values: by default v8 keeps strings' quotes,
    comments, heredoc markers and `__is_block__` marks."""
    from hcl2 import SerializationOptions

    return SerializationOptions(with_comments=False, explicit_blocks=False,
                                preserve_heredocs=False, strip_string_quotes=True)


#: The grammar's token names as a reader knows them.
_TOKEN_WORDS: Final = {"RBRACE": '"}"', "LBRACE": '"{"', "RSQB": '"]"', "LSQB": '"["',
                       "RPAR": '")"', "LPAR": '"("', "EQ": '"="', "COMMA": '","',
                       "COLON": '":"', "DOT": '"."', "QMARK": '"?"', "DBLQUOTE": "a string",
                       "NL_OR_COMMENT": "a new line", "NAME": "a name",
                       "INT_LITERAL": "a number", "FLOAT_LITERAL": "a number"}


def _syntax_problem(e: lark.exceptions.UnexpectedInput) -> SpecProblem:
    import lark

    line, column = getattr(e, "line", 0) or 0, getattr(e, "column", 0) or 0
    if isinstance(e, lark.exceptions.UnexpectedToken):
        token = e.token
        got = "end of file" if token.type == "$END" else repr(str(token).strip() or str(token))
        expected = sorted(_TOKEN_WORDS.get(name, name) for name in e.expected)
        hint = f"; expected {', '.join(expected[:6])}" if len(expected) <= 6 else ""
        return SpecProblem(line, column, "syntax", f"unexpected {got}{hint}")
    if isinstance(e, lark.exceptions.UnexpectedCharacters):
        return SpecProblem(line, column, "syntax", f"unexpected character {e.char!r}")
    return SpecProblem(line, column, "syntax", "unexpected end of file")


class _NotJsonConstant(Exception):
    """`NaN`, `Infinity`: Python's `json` accepts them, JSON (and Nomad) do not."""


def _refuse_constant(name: str) -> Any:
    raise _NotJsonConstant(name)


def _load_json(text: str, filename: str) -> Any:
    """`json.loads` with JSON's own rules and the depth limit; positions for every refusal."""

    def fail(position: Position, message: str) -> JobSpecError:
        return JobSpecError(filename, [SpecProblem(*position, "syntax", message)])

    try:
        doc = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as e:
        raise fail((e.lineno, e.colno), e.msg) from None
    except ValueError as e:  # Python's own limit: integers of more than 4300 digits
        raise fail((0, 0), f"unreadable number: {str(e).split(';')[0]}") from None
    except (_NotJsonConstant, RecursionError):
        trouble = json_trouble(text, MAX_DEPTH)
        where = trouble[0] if trouble else (0, 0)
        if trouble is None or trouble[1] == "depth":
            raise fail(where, f"nested more than {MAX_DEPTH} levels deep") from None
        raise fail(where, "NaN and Infinity are not JSON numbers") from None
    trouble_path = json_value_trouble(doc)
    if trouble_path is not None:
        path, message = trouble_path
        found = json_trouble(text, MAX_DEPTH)
        if found is not None and found[1] == "depth":
            where = found[0]
        elif not path:
            where = (1, 1)
        else:
            where = locate(json_positions(text), path)
        raise fail(where, message)
    return doc


def _load_hcl(text: str, filename: str) -> tuple[dict[str, Any], lark.Tree[lark.Token]]:
    """python-hcl2's parse and transform, with the depth limit; positions for every refusal."""
    import hcl2
    import lark

    from yurt.runtime.jobspec.grammar import parse_hcl

    try:
        tree = parse_hcl(text)
    except lark.exceptions.UnexpectedInput as e:
        raise JobSpecError(filename, [_syntax_problem(e)]) from None
    trouble = hcl_trouble(tree, MAX_HCL_TREE_DEPTH, MAX_HCL_NODES)
    if trouble is not None:
        where, why = trouble
        message = ("blocks, lists or expressions are nested too deeply" if why == "depth"
                   else f"the job is too large (more than about {MAX_VALUES} values)")
        raise JobSpecError(filename, [SpecProblem(*where, "syntax", message)])
    try:
        raw = hcl2.transform(tree, discard_comments=True).serialize(options=_hcl_options())
    except lark.exceptions.VisitError as e:
        # python-hcl2 checks some syntax (string templates) while transforming.
        meta = getattr(e.obj, "meta", None)
        line = getattr(e.obj, "line", None) or getattr(meta, "line", 0)
        column = getattr(e.obj, "column", None) or getattr(meta, "column", 0)
        message = str(e.orig_exc).strip() or type(e.orig_exc).__name__
        raise JobSpecError(filename, [SpecProblem(line or 0, column or 0, "syntax",
                                                  message[:1].lower() + message[1:])]) from None
    if not isinstance(raw, dict):
        raise JobSpecError(filename, [SpecProblem(1, 1, "syntax", "expected a job block")])
    return raw, tree
