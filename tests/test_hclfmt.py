"""runtime/lib/hclfmt.py: HCL's canonical layout as hclwrite's `Format` writes it.

Each case is an input and the text `nomad fmt` writes for it; the formatter must also leave
its own output unchanged, and a job file must parse to the same job before and after.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from yurt.runtime.errors import JobSpecError
from yurt.runtime.jobspec import encode_job, parse_job
from yurt.runtime.lib.hclfmt import format_hcl
from yurt.runtime.lib.hcltokens import (
    CHEREDOC,
    CONTROL,
    CQUOTE,
    INTERP,
    OHEREDOC,
    OQUOTE,
    QUOTEDLIT,
    STRINGLIT,
    HclSyntaxError,
    lex,
)

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").rglob("*.hcl"))

CASES = {
    "attribute spacing": ("a=1\n", "a = 1\n"),
    "traversal and index": ("a=b . c [ 0 ]\n", "a = b.c[0]\n"),
    "call and arithmetic": ("x = foo( 1,-2,a*b , c... )\n", "x = foo(1, -2, a * b, c...)\n"),
    "negation after operators": ("x = ( a+-2 )*-b\n", "x = (a + -2) * -b\n"),
    "bang": ("x = ! true\n", "x = !true\n"),
    "empty block": ("b{}\n", "b {}\n"),
    "one-line block": ('b "l" {  c=1  }\n', 'b "l" { c = 1 }\n'),
    "nested blocks": (
        'job "x" {\ngroup "g" {\n    task "t" {\n driver="raw_exec"\n}\n}\n}\n',
        'job "x" {\n  group "g" {\n    task "t" {\n      driver = "raw_exec"\n    }\n  }\n}\n'),
    "alignment of a run of attributes": (
        "job {\na = 1\nlonger_name = 2\n\nb = 3\n}\n",
        "job {\n  a           = 1\n  longer_name = 2\n\n  b = 3\n}\n"),
    "a block line breaks the run": (
        "a = 1\nblk {\nxyz = 2\n}\nabcd = 3\n",
        "a = 1\nblk {\n  xyz = 2\n}\nabcd = 3\n"),
    "list of objects": (
        "ports = [\n{\nname=\"http\"\nto = 80\n},\n{ name = \"db\" }\n]\n",
        "ports = [\n  {\n    name = \"http\"\n    to   = 80\n  },\n  { name = \"db\" }\n]\n"),
    "object constructor": ("m = {a=1, bb = \"x\"}\n", 'm = { a = 1, bb = "x" }\n'),
    "multi-line object": (
        "env = {\nA = \"1\"\nLONG = \"2\"\n}\n",
        'env = {\n  A    = "1"\n  LONG = "2"\n}\n'),
    "trailing comments align": (
        "a = 1 # one\nbbb = 22 // two\n",
        "a   = 1  # one\nbbb = 22 // two\n"),
    "comments kept byte for byte": (
        "  # a comment   \n/* block\n   comment */\nx = 1 /* inline */\n",
        "# a comment   \n/* block\n   comment */\nx = 1 /* inline */\n"),
    "comment lines are indented": ("b {\n      # inside\nx = 1\n}\n",
                                   "b {\n  # inside\n  x = 1\n}\n"),
    "strings with braces and interpolation": (
        'a = "{not a block} ${ var.x }-%{ if y }z%{ endif }"\n',
        'a = "{not a block} ${var.x}-%{if y}z%{endif}"\n'),
    "escaped template sequences stay literal": (
        'a = "$${ raw } %%{ raw }"\n', 'a = "$${ raw } %%{ raw }"\n'),
    "strip markers": ('a="hello ${~ name ~}"\n', 'a = "hello ${~name~}"\n'),
    "heredoc body untouched": (
        "b {\ndata = <<EOT\n  keep   this  \n{{ with x }}{ }\nEOT\nnext=1\n}\n",
        "b {\n  data = <<EOT\n  keep   this  \n{{ with x }}{ }\nEOT\n  next = 1\n}\n"),
    "indented heredoc": (
        "t {\nargs = [\"-c\", <<-EOF\n      echo hi\n      EOF\n]\n}\n",
        "t {\n  args = [\"-c\", <<-EOF\n      echo hi\n      EOF\n  ]\n}\n"),
    "interpolation inside a heredoc": (
        "x = <<EOT\n${ a }\n%{ for i in l }${i}%{ endfor }\nEOT\n",
        "x = <<EOT\n${a}\n%{for i in l}${i}%{endfor}\nEOT\n"),
    "for expression": ("x = [ for v in [1,2] : v*2 if v>1 ]\n",
                       "x = [for v in [1, 2] : v * 2 if v > 1]\n"),
    "conditional": ("x = a==b ? \"y\" : \"n\"\n", 'x = a == b ? "y" : "n"\n'),
    "tabs and trailing spaces": ("b {\t\n\tx\t=\t1   \n}\n", "b {\n  x = 1\n}\n"),
    "no final newline is kept as is": ("a=1", "a = 1"),
    "crlf line ends": ("b {\r\nx=1\r\n}\r\n", "b {\r\n  x = 1\r\n}\r\n"),
    "multi-byte alignment": ('é = 1\nab = "ü"\n', 'é  = 1\nab = "ü"\n'),
    "dashes in identifiers": ("x = a-b\ny = a - b\n", "x = a-b\ny = a - b\n"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_cases(name: str) -> None:
    given, expected = CASES[name]
    assert format_hcl(given) == expected
    assert format_hcl(expected) == expected  # idempotent


def test_only_spaces_change() -> None:
    """Whatever the input, the tokens are the same before and after: only spaces differ."""
    for given, _ in CASES.values():
        before = [(t.type, t.text) for t in lex(given)]
        after = [(t.type, t.text) for t in lex(format_hcl(given))]
        assert before == after


def test_byte_order_mark_dropped() -> None:
    assert format_hcl("\ufeffa=1\n") == "a = 1\n"


@pytest.mark.parametrize(("text", "where", "words"), [
    ('a = "open\n', (1, 10), "cannot span lines"),
    ('a = "open', (1, 5), "unclosed string"),
    ("a = <<EOT\nbody\n", (1, 5), "unclosed heredoc"),
    ("a = 1 /* never closed\n", (1, 7), "unterminated comment"),
    ("b {\n  x = [1, 2\n}\n", (3, 1), "unexpected closing bracket"),
    ("b {\n  x = 1\n", (1, 3), "unclosed '{'"),
    ("a = 1\nb = @\n", (2, 5), "invalid character '@'"),
    ('a = "${x"\n', (1, 10), "cannot span lines"),
])
def test_errors_name_line_and_column(text: str, where: tuple[int, int], words: str) -> None:
    with pytest.raises(HclSyntaxError) as info:
        format_hcl(text)
    assert (info.value.line, info.value.column) == where
    assert words in info.value.message


def _job_json(text: str, name: str) -> str:
    try:
        return encode_job(parse_job(text, filename=name)).decode()
    except JobSpecError as e:  # a job yurt refuses must be refused alike
        return "error: " + "\n".join(f"{p.line}: {p.field}: {p.message}" for p in e.problems)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_format_idempotently_and_parse_the_same(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    once = format_hcl(text)
    assert format_hcl(once) == once
    assert _job_json(once, path.name) == _job_json(text, path.name)


def test_examples_are_mostly_canonical_already() -> None:
    """The examples taken from Nomad's repository were written by `nomad fmt` (Nomad's CI
    checks its HCL files with hclwrite): the formatter leaves them as they are."""
    real = [p for p in EXAMPLES if p.parent.name == "real"]
    assert real
    for path in real:
        text = path.read_text(encoding="utf-8")
        assert format_hcl(text) == text, path.name


def test_scrambled_spacing_formats_back() -> None:
    """Extra spaces between the tokens of a canonical file (where spaces may go: not inside
    string or heredoc literals) are all taken out again, indentation and alignment included."""
    rnd = random.Random(30)
    literal = {QUOTEDLIT, STRINGLIT, CQUOTE, CHEREDOC, INTERP, CONTROL}
    after_literal = {OQUOTE, QUOTEDLIT, STRINGLIT, OHEREDOC, CHEREDOC}
    for path in EXAMPLES:
        text = format_hcl(path.read_text(encoding="utf-8"))
        tokens = lex(text)
        for before, token in zip([None, *tokens], tokens, strict=False):
            if token.type not in literal and (before is None or before.type not in after_literal):
                token.spaces += rnd.choice((0, 1, 3))
        scrambled = "".join(" " * t.spaces + t.text for t in tokens)
        assert scrambled != text
        assert format_hcl(scrambled) == text, path.name
