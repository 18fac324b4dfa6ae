"""The trees of Nomad's filter expressions (go-bexpr's grammar/ast.go): what `bexpr.parse`
builds and `bexpr_eval.Filter` walks, and `BexprError`, a filter that does not parse.

Invariants: immutable (frozen dataclasses); no import beyond the standard library.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: go-bexpr's MatchOperator, as yurt spells it (`contains` is `in`, reversed: grammar.peg).
MatchOp = Literal["==", "!=", "in", "not in", "is empty", "is not empty", "matches",
                  "not matches", "is nil", "is not nil"]


class BexprError(ValueError):
    """A filter that does not parse; `str()` is go-bexpr's message."""


@dataclass(frozen=True, slots=True)
class Selector:
    path: tuple[str, ...]
    pointer: bool = False  # written as a quoted JSON pointer

    def __str__(self) -> str:  # grammar/ast.go `Selector.String`
        return ("/" if self.pointer else ".").join(self.path)


@dataclass(frozen=True, slots=True)
class Match:
    selector: Selector
    op: MatchOp
    value: str | None  # the raw text; None for the `is …` operators


@dataclass(frozen=True, slots=True)
class Not:
    operand: Expr


@dataclass(frozen=True, slots=True)
class Binary:
    op: Literal["and", "or"]
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class Collection:
    """`any|all SELECTOR as BINDING { EXPR }`: `index`/`value` name what each item binds."""
    op: Literal["any", "all"]
    selector: Selector
    index: str
    value: str
    default: str
    inner: Expr


Expr = Match | Not | Binary | Collection
