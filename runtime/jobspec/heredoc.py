"""Give heredoc strings back the newline HCL keeps and python-hcl2 drops.

In HCL (and so in Nomad) a heredoc's value is every line up to the closing marker, each with
its newline: `<<EOH` / `hello` / `EOH` is "hello\\n". python-hcl2 strips the newline before
the closing marker, so a template's file would end without one (and a task that reads it with
`read` would miss the last line). `restore_heredoc_newlines` walks the parse tree beside
python-hcl2's dict and adds it back to every attribute whose value is a heredoc, in place.

Invariant: only attributes whose whole value is one heredoc change, and only a heredoc with
at least one line (an empty heredoc is "" in HCL too). The walk pairs the n-th block of a type
in the tree with element n of that type's list in the dict, the order python-hcl2 keeps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import lark

_HEREDOCS: Final = ("heredoc_template", "heredoc_template_trim")


def _name(node: lark.Tree[lark.Token]) -> str:
    from lark import Token, Tree

    first = node.children[0]
    if isinstance(first, Tree):
        first = first.children[0]
    return str(first) if isinstance(first, Token) else ""


def _heredoc_has_lines(expr: lark.Tree[lark.Token]) -> bool | None:
    """None when `expr` is not a heredoc; else whether it has a line before its marker."""
    from lark import Token, Tree

    node: Any = expr
    while isinstance(node, Tree) and node.data == "expr_term" and len(node.children) == 1:
        node = node.children[0]
    if not (isinstance(node, Tree) and node.data in _HEREDOCS and node.children):
        return None
    token = node.children[0]
    if not isinstance(token, Token):
        return None
    lines = str(token).rstrip("\r\n").split("\n")
    return len(lines) > 2  # the opening line, the body lines, the closing marker line


def _walk(body: lark.Tree[lark.Token], raw: dict[str, Any]) -> None:
    from lark import Tree

    seen: dict[str, int] = {}
    for node in body.children:
        if not isinstance(node, Tree) or node.data not in ("attribute", "block"):
            continue
        name = _name(node)
        if node.data == "attribute":
            value = raw.get(name)
            expr = node.children[-1]
            if isinstance(value, str) and isinstance(expr, Tree) and _heredoc_has_lines(expr):
                raw[name] = value + "\n"
            continue
        ordinal = seen.get(name, 0)
        seen[name] = ordinal + 1
        blocks = raw.get(name)
        if not isinstance(blocks, list) or ordinal >= len(blocks):
            continue
        inner: Any = blocks[ordinal]
        labels = [c for c in node.children[1:] if isinstance(c, Tree) and c.data != "body"]
        for _ in labels:
            keys = [k for k in inner if k != "__is_block__"] if isinstance(inner, dict) else []
            inner = inner[keys[0]] if len(keys) == 1 else None
        sub = next((c for c in node.children if isinstance(c, Tree) and c.data == "body"), None)
        if isinstance(inner, dict) and sub is not None:
            _walk(sub, inner)


def restore_heredoc_newlines(raw: dict[str, Any], tree: lark.Tree[lark.Token]) -> None:
    from lark import Tree

    for body in tree.children:
        if isinstance(body, Tree) and body.data == "body":
            _walk(body, raw)
