"""The Go template lexer and parser (layer 0): tables in the style of Go's `parse_test.go` and
`lex_test.go` — a template and its tree printed back, or the parse error it must give, with
Go's message and the line:col it occurs at.
"""

from __future__ import annotations

import pytest

from yurt.runtime.gotemplate import TemplateError
from yurt.runtime.gotemplate.builtins import BUILTINS
from yurt.runtime.gotemplate.lex import lex
from yurt.runtime.gotemplate.literals import go_unquote
from yurt.runtime.gotemplate.parse import parse
from yurt.runtime.gotemplate.tokens import T

FUNCS = {*BUILTINS, "f"}

PARSE_TESTS: list[tuple[str, str, str]] = [
    ("empty", "", ""),
    ("spaces", " \t\n", '" \\t\\n"'),
    ("text", "some text", '"some text"'),
    ("empty action", "{{.}}", "{{.}}"),
    ("field", "{{.X}}", "{{.X}}"),
    ("multi field", "{{.X.Y.Z}}", "{{.X.Y.Z}}"),
    ("simple command", "{{printf}}", "{{printf}}"),
    ("$ invocation", "{{$}}", "{{$}}"),
    ("variable invocation", "{{with $x := 3}}{{$x 23}}{{end}}",
     "{{with $x := 3}}{{$x 23}}{{end}}"),
    ("variable with fields", "{{$.I}}", "{{$.I}}"),
    ("multi-word command", "{{printf `%d` 23}}", "{{printf `%d` 23}}"),
    ("pipeline", "{{.X|.Y}}", "{{.X | .Y}}"),
    ("pipeline with decl", "{{$x := .X|.Y}}", "{{$x := .X | .Y}}"),
    ("nested pipeline", "{{.X (.Y .Z) (.A | .B .C) (.E)}}", "{{.X (.Y .Z) (.A | .B .C) (.E)}}"),
    ("field applied to parentheses", "{{(.Y .Z).Field}}", "{{(.Y .Z).Field}}"),
    ("simple if", "{{if .X}}hello{{end}}", '{{if .X}}"hello"{{end}}'),
    ("if with else", "{{if .X}}true{{else}}false{{end}}", '{{if .X}}"true"{{else}}"false"{{end}}'),
    ("if with else if", "{{if .X}}1{{else if .Y}}2{{end}}",
     '{{if .X}}"1"{{else}}{{if .Y}}"2"{{end}}{{end}}'),
    ("simple range", "{{range .X}}hello{{end}}", '{{range .X}}"hello"{{end}}'),
    ("chained field range", "{{range .X.Y.Z}}hello{{end}}", '{{range .X.Y.Z}}"hello"{{end}}'),
    ("nested range", "{{range .X}}hello{{range .Y}}goodbye{{end}}{{end}}",
     '{{range .X}}"hello"{{range .Y}}"goodbye"{{end}}{{end}}'),
    ("range with else", "{{range .X}}true{{else}}false{{end}}",
     '{{range .X}}"true"{{else}}"false"{{end}}'),
    ("range over pipeline", "{{range .X|.M}}true{{else}}false{{end}}",
     '{{range .X | .M}}"true"{{else}}"false"{{end}}'),
    ("range []int", "{{range .SI}}{{.}}{{end}}", "{{range .SI}}{{.}}{{end}}"),
    ("range 1 var", "{{range $x := .SI}}{{.}}{{end}}", "{{range $x := .SI}}{{.}}{{end}}"),
    ("range 2 vars", "{{range $x, $y := .SI}}{{.}}{{end}}",
     "{{range $x, $y := .SI}}{{.}}{{end}}"),
    ("range with break", "{{range .SI}}{{.}}{{break}}{{end}}",
     "{{range .SI}}{{.}}{{break}}{{end}}"),
    ("constants", "{{range .SI 1 -3.2i true false 'a' nil}}{{end}}", "ERR"),
    ("template", '{{template `x`}}', '{{template "x"}}'),
    ("template with arg", '{{template `x` .Y}}', '{{template "x" .Y}}'),
    ("with", "{{with .X}}hello{{end}}", '{{with .X}}"hello"{{end}}'),
    ("with with else", "{{with .X}}hello{{else}}goodbye{{end}}",
     '{{with .X}}"hello"{{else}}"goodbye"{{end}}'),
    ("trim left", "x \r\n\t{{- 3}}", '"x"{{3}}'),
    ("trim right", "{{3 -}}\n\n\ty", '{{3}}"y"'),
    ("trim left and right", "x \r\n\t{{- 3 -}}\n\n\ty", '"x"{{3}}"y"'),
    ("comment trim left", "x \r\n\t{{- /* hi */}}", '"x"'),
    ("comment trim right", "{{/* hi */ -}}\n\n\ty", '"y"'),
    ("block definition", '{{block "foo" .}}hello{{end}}', '{{template "foo" .}}'),
    ("newline in assignment", "{{ $x \n := \n 1 \n }}", "{{$x := 1}}"),
    ("newline in pipeline", "{{\n\"x\"\n|\nprintf\n}}", '{{"x" | printf}}'),
    ("spaces around field", "{{ .X }}", "{{.X}}"),
    ("func", "{{f .X}}", "{{f .X}}"),
]


@pytest.mark.parametrize(("name", "text", "want"), PARSE_TESTS, ids=[t[0] for t in PARSE_TESTS])
def test_parse(name: str, text: str, want: str) -> None:
    if want == "ERR":
        with pytest.raises(TemplateError):
            parse("t", text, FUNCS)
        return
    assert str(parse("t", text, FUNCS)["t"]) == want


PARSE_ERRORS: list[tuple[str, str, str]] = [
    ("unclosed action", "hello{{range", "template: t:1:12: unclosed action"),
    ("unmatched end", "{{end}}", "template: t:1:2: unexpected end"),
    ("unmatched else", "{{else}}", "unexpected else"),
    ("missing end", "hello{{range .x}}", "unexpected EOF"),
    ("missing end after else", "hello{{range .x}}{{else}}", "unexpected EOF"),
    ("undefined function", "hello{{undefined}}",
     'template: t:1:7: function "undefined" not defined'),
    ("undefined variable", "{{$x}}", 'undefined variable "$x"'),
    ("variable undefined after end", "{{with $x := 4}}{{end}}{{$x}}", 'undefined variable "$x"'),
    ("variable undefined in template", '{{$x := 1}}{{define "a"}}{{$x}}{{end}}',
     'undefined variable "$x"'),
    ("declare with field", "{{with $x.Y := 4}}{{end}}", 'undefined variable "$x"'),
    ("template with field ref", "{{template .X}}", "unexpected"),
    ("template with var", "{{template $v}}", "unexpected"),
    ("invalid punctuation", "{{printf 3, 4}}", 'unexpected "," in operand'),
    ("multidecl outside range", "{{with $v, $u := 3}}{{end}}", "too many declarations in with"),
    ("too many decls in range", "{{range $u, $v, $w := 3}}{{end}}",
     "too many declarations in range"),
    ("range decl then junk", "{{range $u, 3}}{{end}}", "range can only initialize variables"),
    ("dot applied to parentheses", "{{printf (printf .).}}", "unexpected"),
    ("adjacent args", "{{printf 3`x`}}", "unexpected"),
    ("adjacent args with .", "{{printf `x`.}}", "unexpected"),
    ("extra end after if", "{{if .X}}a{{else if .Y}}b{{end}}{{end}}", "unexpected end"),
    ("break outside range", "{{range .}}{{end}} {{break}}", "{{break}} outside {{range}}"),
    ("continue outside range", "{{continue}}", "{{continue}} outside {{range}}"),
    ("break in range else", "{{range .}}{{else}}{{break}}{{end}}", "{{break}} outside {{range}}"),
    ("unterminated string", '{{"abc}}', "unterminated quoted string"),
    ("unterminated raw", "{{`abc}}", "unterminated raw quoted string"),
    ("unterminated char", "{{'a}}", "unterminated character constant"),
    ("bad number", "{{3k}}", 'bad number syntax: "3k"'),
    ("unclosed paren", "{{(3}}", "unclosed left paren"),
    ("extra paren", "{{3)}}", "unexpected right paren"),
    ("unclosed comment", "{{/*}}", "unclosed comment"),
    ("text after comment", "{{/* c */ 3}}", "comment ends before closing delimiter"),
    ("bad character", "{{\x01}}", "unrecognized character in action: U+0001"),
    ("missing value for if", "{{if}}{{end}}", "missing value for if"),
    ("empty pipeline", "{{ $x := }}", "missing value for command"),
    ("expected :=", "{{$x := 1}}{{$x : 3}}", "expected :="),
    ("else if in range", "{{range .x}}{{else if .y}}{{end}}", "unexpected <if> in range"),
    ("unexpected . after term", '{{"x".y}}', 'unexpected . after term "\\"x\\""'),
    ("nil in pipeline stage", "{{.X | nil}}", "non executable command in pipeline stage 2"),
    ("line of error", "a\nb\n{{ nosuch }}", "template: t:3:3:"),
    ("error in later action", "{{if .X}}\n{{end}}\n{{(1}}", "unclosed left paren"),
]


@pytest.mark.parametrize(("name", "text", "want"), PARSE_ERRORS, ids=[t[0] for t in PARSE_ERRORS])
def test_parse_errors(name: str, text: str, want: str) -> None:
    with pytest.raises(TemplateError) as info:
        parse("t", text, FUNCS)
    assert want in str(info.value)


def test_lex_items() -> None:
    items = lex('a{{- $x := .F.G | printf "%d" 1.5 -}} b')
    kinds = [i.typ for i in items]
    assert kinds == [T.TEXT, T.LEFT_DELIM, T.VARIABLE, T.SPACE, T.DECLARE, T.SPACE, T.FIELD,
                     T.FIELD, T.SPACE, T.PIPE, T.SPACE, T.IDENTIFIER, T.SPACE, T.STRING,
                     T.SPACE, T.NUMBER, T.RIGHT_DELIM, T.TEXT, T.EOF]
    assert items[0].val == "a"
    assert items[-2].val == "b"


def test_lex_lines_count_newlines_in_raw_strings() -> None:
    items = lex("{{`a\nb`}}\n{{.X}}")
    field = next(i for i in items if i.typ is T.FIELD)
    assert field.line == 3


def test_custom_delims_leave_braces_alone() -> None:
    items = lex("{{x}}<<.A>>", "<<", ">>")
    assert [i.typ for i in items] == [T.TEXT, T.LEFT_DELIM, T.FIELD, T.RIGHT_DELIM, T.EOF]


@pytest.mark.parametrize(("quoted", "want"), [
    ('"a\\tb"', "a\tb"), ('"\\x41\\u00e9\\U0001F600"', "Aé\U0001F600"), ('"\\101"', "A"),
    ("`raw\\n`", "raw\\n"), ('"\\""', '"'),
])
def test_go_unquote(quoted: str, want: str) -> None:
    assert go_unquote(quoted) == want


@pytest.mark.parametrize("bad", ['"\\q"', '"abc', '"\\x4"', "``x"])
def test_go_unquote_refuses(bad: str) -> None:
    with pytest.raises(ValueError, match=r"."):
        go_unquote(bad)


def test_define_does_not_replace_main_with_blank() -> None:
    trees = parse("t", '{{define "t"}}body{{end}}\n', FUNCS)
    assert str(trees["t"]) == '"body"'
