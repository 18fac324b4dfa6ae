"""Nomad's filter expressions (hashicorp/go-bexpr), parsed: `parse(text)` → an `Expr` tree, or
`BexprError` with go-bexpr's own message and position.

The parser follows go-bexpr's PEG grammar (grammar/grammar.peg) rule by rule, ordered choice and
backtracking included, so the same texts parse and the same texts fail: keywords are keywords
only where the grammar looks for them (`notes == x` is a selector `notes`), a bare word on the
right of `==` is a value, a quoted selector is a JSON pointer (`"/Meta/a b"`), numbers must end
at a space, `)` or the end. Failures read as pigeon's: `1:COL (OFFSET): no match found, expected:
…` listing what the farthest failing position wanted (literals quoted, character classes as
the grammar writes them, sorted, `EOF` last), or `1:COL (OFFSET): rule "string": Unterminated
string literal` for the grammar's own errors. Rules are memoised per position (packrat), so
nesting costs linear time; nesting deeper than Python's stack allows is refused.

The tree's types live in `bexpr_ast.py`, evaluation against Nomad's JSON objects in
`bexpr_eval.py`. Invariants: pure (no I/O, no
clock), immutable trees, no import beyond the standard library.
"""

from __future__ import annotations

import json
from typing import Final

from yurt.runtime.lib.bexpr_ast import (
    BexprError,
    Binary,
    Collection,
    Expr,
    Match,
    MatchOp,
    Not,
    Selector,
)
from yurt.runtime.lib.goparse import go_unquote

__all__ = [
    "BexprError",
    "Binary",
    "Collection",
    "Expr",
    "Match",
    "MatchOp",
    "Not",
    "Selector",
    "parse",
]

_WS: Final = " \t\r\n"
_FAIL: Final = -1
_SELECTOR_OPS: Final[tuple[tuple[str, MatchOp], ...]] = (
    ("==", "=="), ("!=", "!="), ("contains", "in"), ("not contains", "not in"),
    ("matches", "matches"), ("not matches", "not matches"))
_EMPTY_OPS: Final[tuple[tuple[tuple[str, ...], MatchOp], ...]] = (
    (("is", "empty"), "is empty"), (("is", "not", "empty"), "is not empty"),
    (("is", "nil"), "is nil"), (("is", "not", "nil"), "is not nil"))


def _quote(s: str) -> str:
    return json.dumps(s)  # Go's strconv.Quote, for the ASCII literals of the grammar


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.far = 0
        self.wants: set[str] = set()
        self.invert = False
        self.errors: list[tuple[int, str, str]] = []
        self.memo: dict[tuple[str, int, bool], tuple[int, object]] = {}

    # ---------------------------------------------------------------- pigeon's matchers
    def _mark(self, failed: bool, pos: int, want: str) -> None:
        """pigeon `failAt`: the wants at the farthest position are what an error lists."""
        if failed == self.invert or pos < self.far:
            return
        if pos > self.far:
            self.far, self.wants = pos, set()
        self.wants.add("!" + want if self.invert else want)

    def lit(self, pos: int, s: str) -> int:
        ok = self.text.startswith(s, pos)
        self._mark(not ok, pos, _quote(s))
        return pos + len(s) if ok else _FAIL

    def cls(self, pos: int, want: str, accept: str | None = None, *,
            alpha: bool = False, unicode: bool = False) -> int:
        ch = self.text[pos] if pos < len(self.text) else ""
        ok = bool(ch) and ((accept is not None and ch in accept)
                           or (alpha and ch.isascii() and ch.isalpha())
                           or (unicode and ch.isalnum()))
        self._mark(not ok, pos, want)
        return pos + 1 if ok else _FAIL

    def many(self, pos: int, want: str, accept: str | None = None, *,
             alpha: bool = False, unicode: bool = False) -> int:
        while (nxt := self.cls(pos, want, accept, alpha=alpha, unicode=unicode)) != _FAIL:
            pos = nxt
        return pos

    def ws(self, pos: int) -> int:  # _ <- [ \t\r\n]+
        if self.cls(pos, "[ \\t\\r\\n]", _WS) == _FAIL:
            return _FAIL
        return self.many(pos + 1, "[ \\t\\r\\n]", _WS)

    def ows(self, pos: int) -> int:  # _?
        nxt = self.ws(pos)
        return pos if nxt == _FAIL else nxt

    def eof(self, pos: int) -> bool:  # EOF <- !.
        self.invert = not self.invert
        ok = pos < len(self.text)
        self._mark(not ok, pos, ".")
        self.invert = not self.invert
        return not ok

    def words(self, pos: int, *words: str, trailing: bool) -> int:
        """`_ "w1" _ "w2" … [_]`: an operator spelled in words."""
        for word in words:
            pos = self.ws(pos)
            if pos == _FAIL or (pos := self.lit(pos, word)) == _FAIL:
                return _FAIL
        return self.ws(pos) if trailing else pos

    def error(self, pos: int, rule: str, message: str) -> None:
        """A grammar `&{ … errors.New(…) }`: recorded, and the whole parse then fails."""
        if (pos, rule, message) not in self.errors:
            self.errors.append((pos, rule, message))

    def where(self, pos: int) -> str:
        before = self.text[:pos]
        line = before.count("\n") + 1
        col = pos - (before.rfind("\n") + 1) + 1
        return f"{line}:{col} ({len(before.encode('utf-8', 'surrogatepass'))})"

    def memoised(self, name: str, pos: int, rule: object) -> tuple[int, object]:
        key = (name, pos, self.invert)
        if key not in self.memo:
            self.memo[key] = rule(pos)  # type: ignore[operator]
        return self.memo[key]

    # ---------------------------------------------------------------- the grammar's rules
    def input(self) -> Expr:
        pos = self.lit(self.ows(0), "(")
        if pos != _FAIL:
            end, expr = self.or_expr(self.ows(pos))
            if end != _FAIL and (end := self.lit(self.ows(end), ")")) != _FAIL \
                    and self.eof(self.ows(end)):
                return self.finish(expr)
        end, expr = self.or_expr(self.ows(0))
        if end != _FAIL and self.eof(self.ows(end)):
            return self.finish(expr)
        return self.finish(None)

    def finish(self, expr: object) -> Expr:
        if self.errors:
            raise BexprError("\n".join(f"{self.where(p)}: rule {_quote(r)}: {m}"
                                       for p, r, m in self.errors))
        if expr is None:
            wants = sorted(self.wants - {"!."})
            if "!." in self.wants:
                wants.append("EOF")
            listed = wants[0] if len(wants) == 1 else ", ".join(wants[:-1]) + " or " + wants[-1]
            raise BexprError(f"{self.where(self.far)}: no match found, expected: {listed}")
        assert isinstance(expr, Match | Not | Binary | Collection)
        return expr

    def or_expr(self, pos: int) -> tuple[int, Expr | None]:
        return self.memoised("or", pos, self._or_expr)  # type: ignore[return-value]

    def _or_expr(self, pos: int) -> tuple[int, Expr | None]:
        end, left = self.and_expr(pos)
        if end != _FAIL:
            nxt = self.ws(end)
            if nxt != _FAIL and (nxt := self.lit(nxt, "or")) != _FAIL \
                    and (nxt := self.ws(nxt)) != _FAIL:
                rend, right = self.or_expr(nxt)
                if rend != _FAIL:
                    assert left is not None
                    assert right is not None
                    return rend, Binary("or", left, right)
            return end, left
        return self.collection(pos)

    def and_expr(self, pos: int) -> tuple[int, Expr | None]:
        return self.memoised("and", pos, self._and_expr)  # type: ignore[return-value]

    def _and_expr(self, pos: int) -> tuple[int, Expr | None]:
        end, left = self.not_expr(pos)
        if end == _FAIL:
            return _FAIL, None
        nxt = self.ws(end)
        if nxt != _FAIL and (nxt := self.lit(nxt, "and")) != _FAIL \
                and (nxt := self.ws(nxt)) != _FAIL:
            rend, right = self.and_expr(nxt)
            if rend != _FAIL:
                assert left is not None
                assert right is not None
                return rend, Binary("and", left, right)
        return end, left

    def not_expr(self, pos: int) -> tuple[int, Expr | None]:
        return self.memoised("not", pos, self._not_expr)  # type: ignore[return-value]

    def _not_expr(self, pos: int) -> tuple[int, Expr | None]:
        nxt = self.lit(pos, "not")
        if nxt != _FAIL and (nxt := self.ws(nxt)) != _FAIL:
            end, operand = self.not_expr(nxt)
            if end != _FAIL:
                assert operand is not None
                # grammar.peg folds `not not X` into X
                return end, operand.operand if isinstance(operand, Not) else Not(operand)
        return self.paren(pos)

    def paren(self, pos: int) -> tuple[int, Expr | None]:
        start = self.lit(pos, "(")
        inner: tuple[int, Expr | None] = (_FAIL, None)
        if start != _FAIL:
            inner = self.or_expr(self.ows(start))
            if inner[0] != _FAIL and (end := self.lit(self.ows(inner[0]), ")")) != _FAIL:
                return end, inner[1]
        matched = self.match(pos)
        if matched[0] != _FAIL:
            return matched
        if inner[0] != _FAIL:
            after = self.ows(inner[0])
            self.invert = not self.invert
            closed = self.lit(after, ")") != _FAIL
            self.invert = not self.invert
            if not closed:
                self.error(after, "grouping", "Unmatched parentheses")
        return _FAIL, None

    def match(self, pos: int) -> tuple[int, Expr | None]:
        sel_end, sel = self.selector(pos)
        if sel_end != _FAIL:
            assert isinstance(sel, Selector)
            for spelled, op in _SELECTOR_OPS:
                if spelled in ("==", "!="):
                    op_end = self.lit(self.ows(sel_end), spelled)
                    nxt = self.ows(op_end) if op_end != _FAIL else _FAIL
                else:
                    nxt = self.words(sel_end, *spelled.split(), trailing=True)
                if nxt != _FAIL:
                    val_end, raw = self.value(nxt)
                    if val_end != _FAIL:
                        assert isinstance(raw, str)
                        return val_end, Match(sel, op, raw)
            for spelled_words, empty_op in _EMPTY_OPS:
                end = self.words(sel_end, *spelled_words, trailing=False)
                if end != _FAIL:
                    return end, Match(sel, empty_op, None)
        val_end, raw = self.value(pos)
        if val_end == _FAIL:
            return _FAIL, None
        assert isinstance(raw, str)
        for spelled_words, in_op in ((("in",), "in"), (("not", "in"), "not in")):
            nxt = self.words(val_end, *spelled_words, trailing=True)
            if nxt == _FAIL:
                continue
            end, sel = self.selector(nxt)
            if end != _FAIL:
                assert isinstance(sel, Selector)
                return end, Match(sel, in_op, raw)  # type: ignore[arg-type]
        for spelled_words in (("in",), ("not", "in")):
            nxt = self.words(val_end, *spelled_words, trailing=True)
            if nxt == _FAIL:
                continue
            self.invert = not self.invert
            found = self.selector(nxt)[0] != _FAIL
            self.invert = not self.invert
            if not found:
                self.error(nxt, "match", "Invalid selector")
        return _FAIL, None

    def selector(self, pos: int) -> tuple[int, object]:
        return self.memoised("selector", pos, self._selector)

    def _selector(self, pos: int) -> tuple[int, object]:
        end = self.identifier(pos)
        if end != _FAIL:
            path = [self.text[pos:end]]
            while True:
                nxt, part = self.selector_part(end)
                if nxt == _FAIL:
                    return end, Selector(tuple(path))
                end = nxt
                path.append(part)
        nxt = self.lit(pos, '"')
        if nxt == _FAIL:
            return _FAIL, None
        segments = []
        while (seg := self.lit(nxt, "/")) != _FAIL:
            seg_end = self.many(seg, "[\\pL\\pN-_.~:|]", "-_.~:|", unicode=True)
            if seg_end == seg:
                self.cls(seg, "[\\pL\\pN-_.~:|]", "-_.~:|", unicode=True)
                break
            segments.append(self.text[seg:seg_end])
            nxt = seg_end
        end = self.lit(nxt, '"')
        if end == _FAIL:
            return _FAIL, None
        # pointerstructure.Parse: ~1 is "/", ~0 is "~"
        return end, Selector(tuple(s.replace("~1", "/").replace("~0", "~")
                                   for s in segments), pointer=True)

    def identifier(self, pos: int) -> int:
        if self.cls(pos, "[a-zA-Z]", alpha=True) == _FAIL:
            return _FAIL
        return self.many(pos + 1, "[a-zA-Z0-9_/]", "0123456789_/", alpha=True)

    def selector_part(self, pos: int) -> tuple[int, str]:
        dot = self.lit(pos, ".")
        if dot != _FAIL and (end := self.identifier(dot)) != _FAIL:
            return end, self.text[dot:end]
        end, key = self.index(pos)
        if end != _FAIL:
            return end, key
        if dot != _FAIL and self.cls(dot, "[0-9]", "0123456789") != _FAIL:
            end = self.many(dot + 1, "[0-9]", "0123456789")
            return end, self.text[dot:end]
        return _FAIL, ""

    def index(self, pos: int) -> tuple[int, str]:
        start = self.lit(pos, "[")
        if start == _FAIL:
            return _FAIL, ""
        start = self.ows(start)
        lit_end, key = self.string(start)
        if lit_end != _FAIL:
            end = self.lit(self.ows(lit_end), "]")
            if end != _FAIL:
                return end, key
            self.error(self.ows(lit_end), "index", "Unclosed index expression")
        else:
            self.error(start, "index", "Invalid index")
        return _FAIL, ""

    def value(self, pos: int) -> tuple[int, object]:
        return self.memoised("value", pos, self._value)

    def _value(self, pos: int) -> tuple[int, object]:
        end, sel = self.selector(pos)
        if end != _FAIL:
            return end, str(sel)
        end = self.number(pos)
        if end != _FAIL:
            return end, self.text[pos:end]
        return self.string(pos)

    def number(self, pos: int) -> int:
        start = self.lit(pos, "-")
        start = pos if start == _FAIL else start
        zero = self.lit(start, "0")
        if zero != _FAIL:
            end = zero
        elif self.cls(start, "[1-9]", "123456789") != _FAIL:
            end = self.many(start + 1, "[0-9]", "0123456789")
        else:
            return _FAIL
        dot = self.lit(end, ".")
        if dot != _FAIL and self.cls(dot, "[0-9]", "0123456789") != _FAIL:
            end = self.many(dot + 1, "[0-9]", "0123456789")
        # AfterNumbers <- &(_ / EOF / ")")
        if self.ws(end) != _FAIL or self.eof(end) or self.lit(end, ")") != _FAIL:
            return end
        self.error(end, "number", "Invalid number literal")
        return _FAIL

    def string(self, pos: int) -> tuple[int, str]:
        for quote in ("`", '"'):
            start = self.lit(pos, quote)
            if start == _FAIL:
                continue
            close = self.text.find(quote, start)
            if close < 0:
                self.invert = not self.invert  # the `!quote .` loop's last look
                self._mark(False, len(self.text), _quote(quote))
                self.invert = not self.invert
                self.eof(len(self.text))
                self.error(len(self.text), "string", "Unterminated string literal")
                return _FAIL, ""
            body = self.text[start:close]
            if quote == "`":
                return close + 1, body.replace("\r", "")
            try:
                return close + 1, go_unquote(body)
            except ValueError:
                self.error(pos, "string", "invalid syntax")  # strconv.Unquote's
                return _FAIL, ""
        return _FAIL, ""

    def collection(self, pos: int) -> tuple[int, Expr | None]:
        for word in ("any", "all"):
            nxt = self.lit(pos, word)
            if nxt != _FAIL and (nxt := self.ws(nxt)) != _FAIL:
                break
        else:
            return _FAIL, None
        sel_end, sel = self.selector(nxt)
        if sel_end == _FAIL:
            return _FAIL, None
        nxt = self.words(sel_end, "as", trailing=True)
        if nxt == _FAIL:
            return _FAIL, None
        nxt, names = self.bindings(nxt)
        if nxt == _FAIL or (nxt := self.lit(self.ows(nxt), "{")) == _FAIL:
            return _FAIL, None
        end, inner = self.or_expr(self.ows(nxt))
        if end == _FAIL or (end := self.lit(self.ows(end), "}")) == _FAIL:
            return _FAIL, None
        assert isinstance(sel, Selector)
        assert inner is not None
        return end, Collection(word, sel, *names, inner)

    def bindings(self, pos: int) -> tuple[int, tuple[str, str, str]]:
        """CollectionIdentifiers: (index, value, default) names, "" for none."""
        first = self.identifier(pos)
        if first != _FAIL:
            comma = self.lit(self.ows(first), ",")
            if comma != _FAIL:
                second = self.identifier(self.ows(comma))
                if second != _FAIL:
                    return second, (self.text[pos:first], self.text[self.ows(comma):second], "")
                under = self.lit(self.ows(comma), "_")
                if under != _FAIL:
                    return under, (self.text[pos:first], "", "")
            return first, ("", "", self.text[pos:first])
        under = self.lit(pos, "_")
        if under != _FAIL:
            comma = self.lit(self.ows(under), ",")
            if comma != _FAIL:
                second = self.identifier(self.ows(comma))
                if second != _FAIL:
                    return second, ("", self.text[self.ows(comma):second], "")
        return _FAIL, ("", "", "")


def parse(text: str) -> Expr:
    """go-bexpr's `CreateEvaluator`: the tree of `text`.

    Raises:
        BexprError: `text` does not parse (go-bexpr's message, with line, column and offset).
    """
    parser = _Parser(text)
    try:
        return parser.input()
    except RecursionError:
        raise BexprError("expression nested too deeply") from None
