"""Where things are in a job file: source positions keyed by field path.

Neither python-hcl2's dict output nor `json.loads` remembers line numbers, yet every jobspec
error must name one. Both formats are parsed by lark with `propagate_positions`, so we walk the
raw parse tree once and index positions:

- JSON: by *key path*, the literal keys and list indices: `("Job", "TaskGroups", 0, "Name")`.
- HCL: by *structural path*, `("job", 0, "group", 0, "task", 1, "restart", 0, "mode")`: block
  types with their ordinal, attribute names. The jobspec's HCL normaliser, which knows both
  shapes, translates this into a key-path index as it builds the JSON-shaped job, so every
  later stage locates problems by key path whatever the source format.

A lookup falls back to the nearest enclosing path that has a position, so an error about a
value the user never wrote (a default that fails a cross-field rule) still points at the block
that owns it. The JSON index is built only when there is an error to place: JSON jobs parse with
the standard library on the happy path.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:  # lark loads only when a tree is walked: a daemon that never sees a bad job
    from lark import Lark, Token, Tree  # or an HCL one never pays for it

Position = tuple[int, int]
PathKey = tuple[str | int, ...]


def locate(index: Mapping[PathKey, Position], path: PathKey) -> Position:
    """The position of `path`, or of its nearest ancestor in `index`; (0, 0) if none."""
    for end in range(len(path), 0, -1):
        pos = index.get(path[:end])
        if pos is not None:
            return pos
    return (0, 0)


# --------------------------------------------------------------------------- HCL


def _string_value(node: Tree[Token] | Token) -> str:
    """The text of a label: a quoted string's parts joined, or a bare identifier."""
    from lark import Token

    if isinstance(node, Token):
        return str(node)
    return "".join(str(t) for t in node.scan_values(lambda v: isinstance(v, Token))
                   if t.type not in ("DBLQUOTE",))


def _children(node: Tree[Token]) -> Iterator[Tree[Token]]:
    from lark import Tree

    for child in node.children:
        if isinstance(child, Tree):
            yield child


def hcl_positions(tree: Tree[Token]) -> dict[PathKey, Position]:
    """Index every block and attribute of an HCL parse tree by its structural path.

    A block contributes `(type, n)`, its type and its ordinal among same-type sibling blocks
    (python-hcl2 lists same-type blocks in source order, so the n-th `task` block here is
    element n of the `task` list there); an attribute contributes its name. Labels are left
    out on purpose: two blocks with the same label (a duplicate task name) must still have
    two positions.
    """
    from lark import Tree

    index: dict[PathKey, Position] = {}

    def walk_body(body: Tree[Token], prefix: PathKey) -> None:
        seen: dict[str, int] = {}
        for node in _children(body):
            if node.data not in ("attribute", "block"):
                continue
            name = _string_value(node.children[0])
            pos = (node.meta.line, node.meta.column)
            if node.data == "attribute":
                index.setdefault((*prefix, name), pos)
                continue
            ordinal = seen.get(name, 0)
            seen[name] = ordinal + 1
            path = (*prefix, name, ordinal)
            index[path] = pos
            for child in node.children:
                if isinstance(child, Tree) and child.data == "body":
                    walk_body(child, path)

    for body in _children(tree):
        if body.data == "body":
            walk_body(body, ())
    return index


# --------------------------------------------------------------------------- JSON

_JSON_GRAMMAR: Final = r"""
    ?value: object | array | string | NUMBER -> number | "true" -> true
          | "false" -> false | "null" -> null
    array: "[" [value ("," value)*] "]"
    object: "{" [pair ("," pair)*] "}"
    pair: string ":" value
    string: ESCAPED_STRING
    NUMBER: /-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/
    %import common.ESCAPED_STRING
    %import common.WS
    %ignore WS
"""


@lru_cache(maxsize=1)
def _json_parser() -> Lark:
    from lark import Lark

    return Lark(_JSON_GRAMMAR, start="value", parser="lalr", propagate_positions=True)


def json_positions(text: str) -> dict[PathKey, Position]:
    """Index every member and element of a JSON document by its key path.

    The caller has already parsed `text` successfully with `json.loads`; this second parse only
    recovers positions. A member's position is that of its key.
    """
    from lark import Tree

    index: dict[PathKey, Position] = {}

    def walk(node: Tree[Token] | Token, path: PathKey) -> None:
        if not isinstance(node, Tree):
            return
        if node.data == "object":
            for pair in _children(node):
                key_node, value = pair.children
                assert isinstance(key_node, Tree)
                key = json.loads(str(key_node.children[0]))
                index.setdefault((*path, key), (pair.meta.line, pair.meta.column))
                walk(value, (*path, key))
        elif node.data == "array":
            for i, item in enumerate(c for c in node.children if c is not None):
                if isinstance(item, Tree) and not item.meta.empty:
                    index.setdefault((*path, i), (item.meta.line, item.meta.column))
                walk(item, (*path, i))

    walk(_json_parser().parse(text), ())
    return index


# --------------------------------------------------------------------------- nesting limits
#
# Deeply nested input must be refused before anything recursive sees it (lark's transformer,
# the walks above, the jobspec's checks). Both helpers below are iterative.


def hcl_trouble(tree: Tree[Token], depth_limit: int, node_limit: int
                ) -> tuple[Position, str] | None:
    """Where the parse tree first nests deeper than `depth_limit` levels ("depth"), or has
    more than `node_limit` nodes ("size"), or None."""
    from lark import Tree

    stack: list[tuple[Tree[Token], int, Position]] = [(tree, 1, (0, 0))]
    nodes = 0
    while stack:
        node, depth, known = stack.pop()
        nodes += 1
        if depth > depth_limit:
            return known, "depth"  # the deepest allowed ancestor's: where it went too far
        if not node.meta.empty:
            known = (node.meta.line, node.meta.column)
        if nodes > node_limit:
            return known, "size"
        stack.extend((c, depth + 1, known) for c in node.children if isinstance(c, Tree))
    return None


#: A JSON string (skipped whole, so brackets inside it do not count), a bracket, or one of the
#: non-JSON constants Python's `json` accepts.
_JSON_TOKENS: Final = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]|-?Infinity|NaN')


def json_trouble(text: str, depth_limit: int) -> tuple[Position, str] | None:
    """Where JSON text first nests deeper than `depth_limit` or uses NaN/Infinity, and which.

    Used to place an error that the decoder found without a position (a RecursionError, a
    refused constant) or that a depth check on the decoded value found.
    """
    depth = 0
    for m in _JSON_TOKENS.finditer(text):
        token = m.group()
        if token in ("[", "{"):
            depth += 1
            if depth > depth_limit:
                return _line_col(text, m.start()), "depth"
        elif token in ("]", "}"):
            depth -= 1
        elif not token.startswith('"'):
            return _line_col(text, m.start()), "constant"
    return None


def _line_col(text: str, offset: int) -> Position:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1
