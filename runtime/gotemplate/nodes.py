"""The parse tree of a Go template (Go's `text/template/parse/node.go`, reduced to what the
evaluator needs). Every node keeps its source position so that execution errors can name
`line:col`, and `str(node)` prints it back as template source, which Go's errors quote as
the context (`executing "t" at <.Foo>: ...`).

Invariants: a `Pipe` has at least one `Command`, a `Command` at least one argument (the parser
enforces both); `Number` holds the Python value the literal stands for (int or float).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from yurt.runtime.gotemplate.tokens import go_quote


@dataclass(slots=True)
class Pos:
    pos: int


@dataclass(slots=True)
class Text(Pos):
    text: str

    def __str__(self) -> str:
        return go_quote(self.text)


@dataclass(slots=True)
class Dot(Pos):
    def __str__(self) -> str:
        return "."


@dataclass(slots=True)
class Nil(Pos):
    def __str__(self) -> str:
        return "nil"


@dataclass(slots=True)
class Bool(Pos):
    value: bool

    def __str__(self) -> str:
        return "true" if self.value else "false"


@dataclass(slots=True)
class Number(Pos):
    value: int | float
    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(slots=True)
class String(Pos):
    quoted: str
    value: str

    def __str__(self) -> str:
        return self.quoted


@dataclass(slots=True)
class Field(Pos):
    idents: list[str]

    def __str__(self) -> str:
        return "".join("." + i for i in self.idents)


@dataclass(slots=True)
class Variable(Pos):
    idents: list[str]  # idents[0] is the variable name with its "$"

    def __str__(self) -> str:
        return ".".join(self.idents)


@dataclass(slots=True)
class Identifier(Pos):
    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(slots=True)
class Chain(Pos):
    node: Node
    fields: list[str]

    def __str__(self) -> str:
        inner = str(self.node)
        if isinstance(self.node, Pipe):
            inner = f"({inner})"
        return inner + "".join("." + f for f in self.fields)


@dataclass(slots=True)
class Command(Pos):
    args: list[Node] = field(default_factory=list)

    def __str__(self) -> str:
        return " ".join(f"({a})" if isinstance(a, Pipe) else str(a) for a in self.args)


@dataclass(slots=True)
class Pipe(Pos):
    line: int
    is_assign: bool = False
    decl: list[Variable] = field(default_factory=list)
    cmds: list[Command] = field(default_factory=list)

    def __str__(self) -> str:
        text = " | ".join(str(c) for c in self.cmds)
        if self.decl:
            names = ", ".join(str(v) for v in self.decl)
            text = f"{names} {'=' if self.is_assign else ':='} {text}"
        return text


@dataclass(slots=True)
class Action(Pos):
    line: int
    pipe: Pipe

    def __str__(self) -> str:
        return "{{" + str(self.pipe) + "}}"


@dataclass(slots=True)
class ListNode(Pos):
    nodes: list[Node] = field(default_factory=list)

    def __str__(self) -> str:
        return "".join(str(n) for n in self.nodes)


@dataclass(slots=True)
class Branch(Pos):
    """if / range / with: `kind` names which."""

    kind: str
    line: int
    pipe: Pipe
    body: ListNode
    else_body: ListNode | None

    def __str__(self) -> str:
        text = "{{" + self.kind + " " + str(self.pipe) + "}}" + str(self.body)
        if self.else_body is not None:
            text += "{{else}}" + str(self.else_body)
        return text + "{{end}}"


@dataclass(slots=True)
class TemplateCall(Pos):
    line: int
    name: str
    pipe: Pipe | None

    def __str__(self) -> str:
        arg = "" if self.pipe is None else " " + str(self.pipe)
        return "{{template " + go_quote(self.name) + arg + "}}"


@dataclass(slots=True)
class Break(Pos):
    line: int

    def __str__(self) -> str:
        return "{{break}}"


@dataclass(slots=True)
class Continue(Pos):
    line: int

    def __str__(self) -> str:
        return "{{continue}}"


Node = (
    Text | Dot | Nil | Bool | Number | String | Field | Variable | Identifier | Chain | Command
    | Pipe | Action | ListNode | Branch | TemplateCall | Break | Continue
)
