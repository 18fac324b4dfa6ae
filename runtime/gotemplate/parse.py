"""A recursive-descent parser for Go templates, shaped after Go's `text/template/parse/parse.go`.

`parse(name, text, funcs)` returns every template the text defines: the main one under `name`,
plus each `{{define}}`/`{{block}}`. As in Go, the parser already rejects an unknown function
("function %q not defined") and an undeclared variable ("undefined variable %q"), so a template
that parses cannot fail for those reasons at render time.

Errors are `TemplateError("template: <name>:<line>:<col>: <msg>")`. Go's parse errors name the
line only; the column is added here because a jobspec's template is read in an editor.
"""

from __future__ import annotations

from collections.abc import Collection

from yurt.runtime.gotemplate import nodes as n
from yurt.runtime.gotemplate.lex import lex
from yurt.runtime.gotemplate.literals import go_unquote, number_value
from yurt.runtime.gotemplate.tokens import Item, T, go_quote


class TemplateError(Exception):
    """A template that does not parse, or a render that failed; the text is Go's."""


class _Scope:
    """The variables declared where the parser is: the declarations in order (a block's end
    drops its own, `end(mark)`) and a count per name, so that checking a reference is one
    dict lookup. A scan of the declarations per reference made parsing quadratic: 20000
    variables and as many references, half a megabyte of text, took seconds, unbudgeted."""

    __slots__ = ("counts", "names")

    def __init__(self) -> None:
        self.names = ["$"]
        self.counts = {"$": 1}

    def __len__(self) -> int:
        return len(self.names)

    def __contains__(self, name: object) -> bool:
        return name in self.counts

    def declare(self, name: str) -> None:
        self.names.append(name)
        self.counts[name] = self.counts.get(name, 0) + 1

    def end(self, mark: int) -> None:
        """Drop the declarations made since `len(self)` was `mark`."""
        while len(self.names) > mark:
            name = self.names.pop()
            left = self.counts[name] - 1
            if left:
                self.counts[name] = left
            else:
                del self.counts[name]


class _Parser:
    def __init__(self, name: str, text: str, items: list[Item], funcs: Collection[str]) -> None:
        self.name = name
        self.text = text
        self.items = items
        self.i = 0
        self.funcs = funcs
        self.vars = _Scope()
        self.range_depth = 0
        self.action_line = 0
        self.trees: dict[str, n.ListNode] = {}

    # -- errors --------------------------------------------------------------------------
    def location(self, pos: int) -> str:
        line = self.text.count("\n", 0, pos) + 1
        col = pos - (self.text.rfind("\n", 0, pos) + 1)
        return f"{self.name}:{line}:{col}"

    def errorf(self, msg: str, pos: int | None = None) -> TemplateError:
        at = self.items[max(self.i - 1, 0)].pos if pos is None else pos
        return TemplateError(f"template: {self.location(at)}: {msg}")

    def unexpected(self, item: Item, context: str) -> TemplateError:
        if item.typ is T.ERROR:
            extra = ""
            if self.action_line and self.action_line != item.line:
                extra = f" in action started at {self.name}:{self.action_line}"
                if item.val.endswith(" action"):
                    extra = extra[len(" in action") :]
            return self.errorf(f"{item}{extra}", item.pos)
        return self.errorf(f"unexpected {item} in {context}", item.pos)

    # -- tokens --------------------------------------------------------------------------
    def next(self) -> Item:
        item = self.items[min(self.i, len(self.items) - 1)]
        self.i += 1
        return item

    def backup(self, k: int = 1) -> None:
        self.i -= k

    def peek(self) -> Item:
        return self.items[min(self.i, len(self.items) - 1)]

    def next_non_space(self) -> Item:
        item = self.next()
        while item.typ is T.SPACE:
            item = self.next()
        return item

    def peek_non_space(self) -> Item:
        item = self.next_non_space()
        self.backup()
        return item

    def expect(self, typ: T, context: str) -> Item:
        item = self.next_non_space()
        if item.typ is not typ:
            raise self.unexpected(item, context)
        return item

    # -- structure -----------------------------------------------------------------------
    def parse(self) -> dict[str, n.ListNode]:
        root = n.ListNode(self.peek().pos)
        while self.peek().typ is not T.EOF:
            if self.peek().typ is T.LEFT_DELIM:
                save = self.i
                self.next()
                if self.next_non_space().typ is T.DEFINE:
                    self.parse_definition()
                    continue
                self.i = save
            node = self.text_or_action()
            if isinstance(node, _Marker):
                raise self.errorf(f"unexpected {node.word}", node.pos)
            root.nodes.append(node)
        if self.peek().typ is T.ERROR:
            raise self.unexpected(self.peek(), "input")
        # A main template that is only whitespace does not replace a definition (Go's IsEmptyTree).
        if self.name not in self.trees or any(
            not (isinstance(x, n.Text) and not x.text.strip()) for x in root.nodes
        ):
            self.trees[self.name] = root
        return self.trees

    def parse_definition(self) -> None:
        item = self.next_non_space()
        if item.typ not in (T.STRING, T.RAW_STRING):
            raise self.unexpected(item, "define clause")
        name = self._unquote(item)
        self.expect(T.RIGHT_DELIM, "define clause")
        saved, self.vars = self.vars, _Scope()
        body, end = self.item_list()
        self.vars = saved
        if end.word != "end":
            raise self.errorf(f"unexpected {end.word} in define clause", end.pos)
        self.trees[name] = body

    def item_list(self) -> tuple[n.ListNode, _Marker]:
        body = n.ListNode(self.peek_non_space().pos)
        while self.peek_non_space().typ is not T.EOF:
            node = self.text_or_action()
            if isinstance(node, _Marker):
                return body, node
            body.nodes.append(node)
        if self.peek().typ is T.ERROR:
            raise self.unexpected(self.peek(), "input")
        raise self.errorf("unexpected EOF", self.peek().pos)

    def text_or_action(self) -> n.Node | _Marker:
        item = self.next_non_space()
        if item.typ is T.TEXT:
            return n.Text(item.pos, item.val)
        if item.typ is T.LEFT_DELIM:
            self.action_line = item.line
            try:
                return self.action()
            finally:
                self.action_line = 0
        raise self.unexpected(item, "input")

    def action(self) -> n.Node | _Marker:
        item = self.next_non_space()
        if item.typ is T.ELSE:
            return self.else_control(item)
        if item.typ is T.END:
            self.expect(T.RIGHT_DELIM, "end")
            return _Marker("end", item.pos)
        if item.typ is T.IF:
            return self.control("if", item, allow_else_chain=True)
        if item.typ is T.RANGE:
            return self.control("range", item, allow_else_chain=False)
        if item.typ is T.WITH:
            return self.control("with", item, allow_else_chain=True)
        if item.typ is T.TEMPLATE:
            return self.template_control(item)
        if item.typ is T.BLOCK:
            return self.block_control(item)
        if item.typ in (T.BREAK, T.CONTINUE):
            word = item.val
            self.expect(T.RIGHT_DELIM, word)
            if self.range_depth == 0:
                raise self.errorf(f"{{{{{word}}}}} outside {{{{range}}}}", item.pos)
            if word == "break":
                return n.Break(item.pos, item.line)
            return n.Continue(item.pos, item.line)
        self.backup()
        return n.Action(item.pos, item.line, self.pipeline("command", T.RIGHT_DELIM))

    def else_control(self, item: Item) -> _Marker:
        following = self.peek_non_space()
        if following.typ in (T.IF, T.WITH):
            return _Marker("else", item.pos, chained=following.typ)
        self.expect(T.RIGHT_DELIM, "else")
        return _Marker("else", item.pos)

    def control(self, kind: str, item: Item, allow_else_chain: bool) -> n.Branch:
        mark = len(self.vars)
        pipe = self.pipeline(kind, T.RIGHT_DELIM)
        if kind == "range":
            self.range_depth += 1
        body, end = self.item_list()
        if kind == "range":
            self.range_depth -= 1
        else_body: n.ListNode | None = None
        if end.word == "else":
            if end.chained is not None:
                if not allow_else_chain or end.chained is not _CHAIN[kind]:
                    raise self.errorf(f"unexpected <{end.chained.value}> in {kind}", end.pos)
                # "{{else if x}}" is "{{else}}{{if x}}...{{end}}{{end}}" with one shared end.
                chained = self.next_non_space()
                else_body = n.ListNode(chained.pos, [self.control(kind, chained, True)])
            else:
                else_body, end = self.item_list()
                if end.word != "end":
                    raise self.errorf(f"expected end; found {{{{{end.word}}}}}", end.pos)
        self.vars.end(mark)
        return n.Branch(item.pos, kind, item.line, pipe, body, else_body)

    def template_control(self, item: Item) -> n.TemplateCall:
        token = self.next_non_space()
        name = self.template_name(token, "template clause")
        pipe: n.Pipe | None = None
        if self.next_non_space().typ is not T.RIGHT_DELIM:
            self.backup()
            pipe = self.pipeline("template clause", T.RIGHT_DELIM)
        return n.TemplateCall(item.pos, item.line, name, pipe)

    def block_control(self, item: Item) -> n.TemplateCall:
        token = self.next_non_space()
        name = self.template_name(token, "block clause")
        pipe = self.pipeline("block clause", T.RIGHT_DELIM)
        saved, self.vars = self.vars, _Scope()
        body, end = self.item_list()
        self.vars = saved
        if end.word != "end":
            raise self.errorf(f"unexpected {end.word} in block clause", end.pos)
        self.trees[name] = body
        return n.TemplateCall(item.pos, item.line, name, pipe)

    def template_name(self, token: Item, context: str) -> str:
        if token.typ in (T.STRING, T.RAW_STRING):
            return self._unquote(token)
        raise self.unexpected(token, context)

    def _unquote(self, item: Item) -> str:
        try:
            return go_unquote(item.val)
        except ValueError:
            raise self.errorf(f"invalid syntax: {item.val}", item.pos) from None

    # -- pipelines -----------------------------------------------------------------------
    def pipeline(self, context: str, end: T) -> n.Pipe:
        token = self.peek_non_space()
        pipe = n.Pipe(token.pos, token.line)
        while True:  # declarations
            save = self.i
            v = self.next_non_space()
            if v.typ is not T.VARIABLE:
                self.i = save
                break
            following = self.peek_non_space()
            if following.typ in (T.ASSIGN, T.DECLARE):
                pipe.is_assign = following.typ is T.ASSIGN
                self.next_non_space()
                pipe.decl.append(n.Variable(v.pos, [v.val]))
                if not pipe.is_assign:
                    self.vars.declare(v.val)
                elif v.val not in self.vars:
                    raise self.errorf(f"undefined variable {go_quote(v.val)}", v.pos)
                break
            if following.typ is T.CHAR and following.val == ",":
                self.next_non_space()
                pipe.decl.append(n.Variable(v.pos, [v.val]))
                self.vars.declare(v.val)
                if context == "range" and len(pipe.decl) < 2:
                    if self.peek_non_space().typ in (T.VARIABLE, T.RIGHT_DELIM, T.RIGHT_PAREN):
                        continue
                    raise self.errorf("range can only initialize variables", v.pos)
                raise self.errorf(f"too many declarations in {context}", v.pos)
            # Not a declaration: put the variable back for the command to read.
            self.i = save
            break
        while True:
            token = self.next_non_space()
            if token.typ is end:
                self.check_pipeline(pipe, context)
                return pipe
            if token.typ in _OPERAND_START:
                self.backup()
                pipe.cmds.append(self.command())
                continue
            raise self.unexpected(token, context)

    def check_pipeline(self, pipe: n.Pipe, context: str) -> None:
        if not pipe.cmds:
            raise self.errorf(f"missing value for {context}")
        for i, cmd in enumerate(pipe.cmds[1:], start=1):
            if isinstance(cmd.args[0], (n.Bool, n.Dot, n.Nil, n.Number, n.String)):
                raise self.errorf(f"non executable command in pipeline stage {i + 1}", cmd.pos)

    def command(self) -> n.Command:
        cmd = n.Command(self.peek_non_space().pos)
        while True:
            self.peek_non_space()
            operand = self.operand()
            if operand is not None:
                cmd.args.append(operand)
            token = self.next()
            if token.typ is T.SPACE:
                continue
            if token.typ in (T.RIGHT_DELIM, T.RIGHT_PAREN):
                self.backup()
            elif token.typ is not T.PIPE:
                raise self.unexpected(token, "operand")
            break
        if not cmd.args:
            raise self.errorf("empty command", cmd.pos)
        return cmd

    def operand(self) -> n.Node | None:
        node = self.term()
        if node is None or self.peek().typ is not T.FIELD:
            return node
        fields: list[str] = []
        while self.peek().typ is T.FIELD:
            fields.append(self.next().val[1:])
        if isinstance(node, n.Field):
            return n.Field(node.pos, node.idents + fields)
        if isinstance(node, n.Variable):
            return n.Variable(node.pos, node.idents + fields)
        if isinstance(node, (n.Bool, n.String, n.Number, n.Nil, n.Dot)):
            raise self.errorf(f"unexpected . after term {go_quote(str(node))}", node.pos)
        return n.Chain(node.pos, node, fields)

    def term(self) -> n.Node | None:
        token = self.next_non_space()
        typ = token.typ
        if typ is T.IDENTIFIER:
            if token.val not in self.funcs:
                raise self.errorf(f"function {go_quote(token.val)} not defined", token.pos)
            return n.Identifier(token.pos, token.val)
        if typ is T.DOT:
            return n.Dot(token.pos)
        if typ is T.NIL:
            return n.Nil(token.pos)
        if typ is T.VARIABLE:
            name = token.val.split(".")[0]
            if name not in self.vars:
                raise self.errorf(f"undefined variable {go_quote(name)}", token.pos)
            return n.Variable(token.pos, token.val.split("."))
        if typ is T.FIELD:
            return n.Field(token.pos, token.val[1:].split("."))
        if typ is T.BOOL:
            return n.Bool(token.pos, token.val == "true")
        if typ in (T.CHAR_CONSTANT, T.NUMBER):
            try:
                return n.Number(token.pos, number_value(token), token.val)
            except ValueError:
                msg = f"illegal number syntax: {go_quote(token.val)}"
                raise self.errorf(msg, token.pos) from None
        if typ is T.LEFT_PAREN:
            return self.pipeline("parenthesized pipeline", T.RIGHT_PAREN)
        if typ in (T.STRING, T.RAW_STRING):
            return n.String(token.pos, token.val, self._unquote(token))
        self.backup()
        return None


class _Marker:
    """`{{else}}` or `{{end}}` as `item_list` meets them; never part of a tree."""

    def __init__(self, word: str, pos: int, chained: T | None = None) -> None:
        self.word = word
        self.pos = pos
        self.chained = chained


_CHAIN = {"if": T.IF, "with": T.WITH}
_OPERAND_START = frozenset({
    T.BOOL, T.CHAR_CONSTANT, T.DOT, T.FIELD, T.IDENTIFIER, T.NUMBER, T.NIL, T.RAW_STRING,
    T.STRING, T.VARIABLE, T.LEFT_PAREN,
})


def parse(
    name: str, text: str, funcs: Collection[str], left: str = "{{", right: str = "}}"
) -> dict[str, n.ListNode]:
    """Parse `text`; returns every template it defines, the main one under `name`."""
    return _Parser(name, text, lex(text, left, right), funcs).parse()
