"""The Go template engine, executed (layer 0): tables in the style of Go's
`text/template/exec_test.go` — name, template, expected output (or error fragment), over one
fixed data value. Expected outputs are what Go 1.22's text/template prints for the same data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from yurt.runtime.gotemplate import Template, TemplateError


@dataclass
class Inner:
    Name: str = "inner"
    Count: int = 3


@dataclass
class Data:
    True_: bool = True
    I: int = 17  # noqa: E741 - Go's exec_test field name
    U16: int = 16
    X: str = "x"
    FloatZero: float = 0.0
    F: float = 1.5
    Big: float = 1e21
    S: list[str] = field(default_factory=lambda: ["a", "b", "c"])
    Empty: list[Any] = field(default_factory=list)
    MSI: dict[str, int] = field(default_factory=lambda: {"one": 1, "two": 2, "three": 3})
    MSIEmpty: dict[str, int] = field(default_factory=dict)
    Nested: dict[str, Any] = field(default_factory=lambda: {"a": {"b": {"c": "deep"}}})
    In: Inner = field(default_factory=Inner)
    Nil: Any = None
    Str: str = "hello"

    def Method0(self) -> str:
        return "M0"

    def Method1(self, a: int) -> int:
        return a

    def Method2(self, a: int, s: str) -> str:
        return f"Method2: {a} {s}"

    def Fails(self) -> str:
        raise ValueError("fails on purpose")


DATA = Data()

EXEC_TESTS: list[tuple[str, str, str]] = [
    # text and trivial actions
    ("empty", "", ""),
    ("text", "some text", "some text"),
    ("dot int", "{{.I}}", "17"),
    ("dot string", "{{.X}}", "x"),
    ("dot bool", "{{.True_}}", "true"),
    ("dot float", "{{.F}}", "1.5"),
    ("float zero", "{{.FloatZero}}", "0"),
    ("float big", "{{.Big}}", "1e+21"),
    ("dot slice", "{{.S}}", "[a b c]"),
    ("dot empty slice", "{{.Empty}}", "[]"),
    ("dot map", "{{.MSI}}", "map[one:1 three:3 two:2]"),
    ("dot struct", "{{.In}}", "{inner 3}"),
    ("nil field", "{{.Nil}}", "<nil>"),
    ("nested field", "{{.In.Name}}", "inner"),
    ("map key", "{{.MSI.one}}", "1"),
    ("missing map key", "{{.MSI.nope}}", "<no value>"),
    ("nested maps", "{{.Nested.a.b.c}}", "deep"),
    ("$", "{{$.I}}", "17"),
    ("$ alone is data", "{{with .In}}{{$.I}}{{end}}", "17"),
    # literals
    ("int literal", "{{3}}", "3"),
    ("negative int", "{{-3}}", "-3"),
    ("hex int", "{{0x1F}}", "31"),
    ("octal int", "{{0o17}}", "15"),
    ("binary int", "{{0b101}}", "5"),
    ("underscore int", "{{1_000}}", "1000"),
    ("float literal", "{{1.5}}", "1.5"),
    ("exp float", "{{1e3}}", "1000"),
    ("char constant", "{{'a'}}", "97"),
    ("escaped char", "{{'\\n'}}", "10"),
    ("string literal", '{{"hi"}}', "hi"),
    ("raw string", "{{`a\\nb`}}", "a\\nb"),
    ("escapes", '{{"a\\tb\\u0041"}}', "a\tbA"),
    ("true", "{{true}}", "true"),
    ("parenthesized", "{{(1)}}", "1"),
    # methods
    ("method0", "{{.Method0}}", "M0"),
    ("method1", "{{.Method1 1234}}", "1234"),
    ("method2", '{{.Method2 3 "x"}}', "Method2: 3 x"),
    ("method piped", "{{.I | .Method1}}", "17"),
    ("method on nested", '{{.Method2 .I .X}}', "Method2: 17 x"),
    # variables
    ("declare", "{{$x := 3}}{{$x}}", "3"),
    ("assign", "{{$x := 1}}{{$x = 2}}{{$x}}", "2"),
    ("assign in if", "{{$x := 1}}{{if true}}{{$x = 2}}{{end}}{{$x}}", "2"),
    ("declare shadows in if", "{{$x := 1}}{{if true}}{{$x := 2}}{{$x}}{{end}}{{$x}}", "21"),
    ("variable field", "{{$v := .In}}{{$v.Name}}", "inner"),
    ("variable map", "{{$m := .MSI}}{{$m.two}}", "2"),
    ("declare prints nothing", "{{$x := .I}}", ""),
    # pipelines
    ("pipe to printf", '{{.I | printf "%d!"}}', "17!"),
    ("pipe chain", '{{"x" | printf "%s%s" "y" | printf "<%s>"}}', "<yx>"),
    ("paren pipe", '{{printf "%s" (printf "%d" .I)}}', "17"),
    ("chain field", "{{(.In).Name}}", "inner"),
    ("chain on index", '{{(index .Nested "a").b.c}}', "deep"),
    # if / else
    ("if true", "{{if true}}T{{end}}", "T"),
    ("if false", "{{if false}}T{{else}}F{{end}}", "F"),
    ("if 0", "{{if 0}}T{{else}}F{{end}}", "F"),
    ("if 1", "{{if 1}}T{{else}}F{{end}}", "T"),
    ("if 0.0", "{{if .FloatZero}}T{{else}}F{{end}}", "F"),
    ("if empty string", '{{if ""}}T{{else}}F{{end}}', "F"),
    ("if string", '{{if "x"}}T{{else}}F{{end}}', "T"),
    ("if empty slice", "{{if .Empty}}T{{else}}F{{end}}", "F"),
    ("if slice", "{{if .S}}T{{else}}F{{end}}", "T"),
    ("if empty map", "{{if .MSIEmpty}}T{{else}}F{{end}}", "F"),
    ("if struct", "{{if .In}}T{{else}}F{{end}}", "T"),
    ("if nil", "{{if .Nil}}T{{else}}F{{end}}", "F"),
    ("if missing key", "{{if .MSI.nope}}T{{else}}F{{end}}", "F"),
    ("else if", "{{if eq .I 1}}1{{else if eq .I 17}}17{{else}}?{{end}}", "17"),
    ("else if falls", "{{if false}}1{{else if false}}2{{else}}3{{end}}", "3"),
    ("else if chain", "{{if 0}}a{{else if 0}}b{{else if 1}}c{{end}}", "c"),
    ("if with decl", "{{if $x := .I}}{{$x}}{{end}}", "17"),
    # and/or/not
    ("and", "{{and 1 2}}", "2"),
    ("and stops", "{{and 0 .Fails}}", "0"),
    ("or", '{{or 0 "" "z"}}', "z"),
    ("or stops", "{{or 1 .Fails}}", "1"),
    ("or all false", '{{or 0 ""}}', ""),
    ("and pipe", "{{1 | and 2}}", "1"),
    ("not", "{{not 0}} {{not 1}} {{not .Empty}}", "true false true"),
    # with
    ("with", "{{with .In}}{{.Name}}{{end}}", "inner"),
    ("with empty", "{{with .Empty}}x{{else}}empty{{end}}", "empty"),
    ("with decl", "{{with $x := .I}}{{$x}}{{.}}{{end}}", "1717"),
    ("else with", "{{with .Empty}}a{{else with .S}}{{index . 0}}{{end}}", "a"),
    ("with missing", "{{with .MSI.nope}}x{{else}}none{{end}}", "none"),
    # range
    ("range slice", "{{range .S}}<{{.}}>{{end}}", "<a><b><c>"),
    ("range index", "{{range $i, $e := .S}}{{$i}}={{$e}} {{end}}", "0=a 1=b 2=c "),
    ("range one var", "{{range $e := .S}}{{$e}}{{end}}", "abc"),
    ("range map sorted", "{{range $k, $v := .MSI}}{{$k}}:{{$v}} {{end}}", "one:1 three:3 two:2 "),
    ("range map values", "{{range .MSI}}{{.}}{{end}}", "132"),
    ("range empty else", "{{range .Empty}}x{{else}}EMPTY{{end}}", "EMPTY"),
    ("range nil else", "{{range .Nil}}x{{else}}NIL{{end}}", "NIL"),
    ("range missing else", "{{range .MSI.nope}}x{{else}}none{{end}}", "none"),
    ("range int", "{{range 3}}{{.}}{{end}}", "012"),
    ("range $ inside", "{{range .S}}{{$.I}}{{end}}", "171717"),
    ("range break", "{{range .S}}{{if eq . \"b\"}}{{break}}{{end}}{{.}}{{end}}", "a"),
    ("range continue", "{{range .S}}{{if eq . \"b\"}}{{continue}}{{end}}{{.}}{{end}}", "ac"),
    ("range assign", "{{$i := 0}}{{$e := \"\"}}{{range $i, $e = .S}}{{end}}{{$i}}{{$e}}", "2c"),
    ("nested range", "{{range .S}}{{range $.S}}x{{end}}{{end}}", "x" * 9),
    ("range var scope", "{{range $x := .S}}{{end}}{{$x := 5}}{{$x}}", "5"),
    # trim markers and comments
    ("trim left", "a  {{- 3}}", "a3"),
    ("trim right", "{{3 -}}  \n b", "3b"),
    ("trim both", "a \n {{- 3 -}} \n b", "a3b"),
    ("trim newlines", "x\n{{- if true }}\ny\n{{- end }}\n", "x\ny\n"),
    ("comment", "a{{/* a comment */}}b", "ab"),
    ("trimmed comment", "a {{- /* c */ -}} b", "ab"),
    ("minus is not trim", "{{-3}}", "-3"),
    # define / template / block
    ("define and call", '{{define "x"}}X{{end}}{{template "x"}}', "X"),
    ("template with dot", '{{define "x"}}[{{.}}]{{end}}{{template "x" .I}}', "[17]"),
    ("template $ is new dot", '{{define "x"}}{{$}}{{end}}{{template "x" 5}}', "5"),
    ("template no arg", '{{define "x"}}{{.}}{{end}}{{template "x"}}', "<no value>"),
    ("block default", '{{block "b" .X}}[{{.}}]{{end}}', "[x]"),
    # builtins
    ("len slice", "{{len .S}}", "3"),
    ("len map", "{{len .MSI}}", "3"),
    ("len string", '{{len "héllo"}}', "5"),
    ("index slice", "{{index .S 1}}", "b"),
    ("index map", '{{index .MSI "two"}}', "2"),
    ("index missing map", '{{index .MSI "nope"}}', "<nil>"),
    ("index nested", '{{index .Nested "a" "b" "c"}}', "deep"),
    ("index no keys", "{{index .S}}", "[a b c]"),
    ("slice", "{{slice .S 1}}", "[b c]"),
    ("slice 2", "{{slice .S 1 2}}", "[b]"),
    ("slice string", '{{slice "hello" 1 3}}', "el"),
    ("eq ints", "{{eq 1 1}}", "true"),
    ("eq strings", '{{eq "a" "b"}}', "false"),
    ("eq many", "{{eq .I 1 2 17}}", "true"),
    ("eq none", "{{eq .I 1 2 3}}", "false"),
    ("eq nil nil", "{{eq .Nil nil}}", "true"),
    ("eq int nil", "{{eq 1 .Nil}}", "false"),
    ("ne", "{{ne 1 2}}", "true"),
    ("lt", "{{lt 1 2}}", "true"),
    ("lt strings", '{{lt "a" "b"}}', "true"),
    ("le", "{{le 2 2}}", "true"),
    ("gt", "{{gt 3 2}}", "true"),
    ("ge", "{{ge 1 2}}", "false"),
    ("lt floats", "{{lt 1.5 2.5}}", "true"),
    ("print", '{{print 1 2 "a" 3}}', "1 2a3"),
    ("print strings", '{{print "a" "b"}}', "ab"),
    ("println", "{{println 1 2}}", "1 2\n"),
    ("html", '{{html "<a&b>"}}', "&lt;a&amp;b&gt;"),
    ("urlquery", '{{urlquery "a b&c"}}', "a+b%26c"),
    # printf verbs
    ("printf %d", '{{printf "%d" 42}}', "42"),
    ("printf %5d", '{{printf "%5d|%-5d|%05d" 42 42 42}}', "   42|42   |00042"),
    ("printf %s", '{{printf "%s" "str"}}', "str"),
    ("printf %q", '{{printf "%q" "a\\"b"}}', '"a\\"b"'),
    ("printf %v slice", '{{printf "%v" .S}}', "[a b c]"),
    ("printf %v map", '{{printf "%v" .MSI}}', "map[one:1 three:3 two:2]"),
    ("printf %+v", '{{printf "%+v" .In}}', "{Name:inner Count:3}"),
    ("printf %x", '{{printf "%x %X %#x" 255 255 255}}', "ff FF 0xff"),
    ("printf %x string", '{{printf "%x" "hi"}}', "6869"),
    ("printf %f", '{{printf "%f %.2f %8.3f" 3.14159 3.14159 3.14159}}', "3.141590 3.14    3.142"),
    ("printf %e", '{{printf "%e" 1234.5678}}', "1.234568e+03"),
    ("printf %g", '{{printf "%g" 0.000012}}', "1.2e-05"),
    ("printf %t", '{{printf "%t" true}}', "true"),
    ("printf %c", '{{printf "%c" 65}}', "A"),
    ("printf %%", '{{printf "100%%"}}', "100%"),
    ("printf %T", '{{printf "%T %T %T" 1 "s" 1.5}}', "int string float64"),
    ("printf bad verb", '{{printf "%d" "x"}}', "%!d(string=x)"),
    ("printf missing", '{{printf "%d %d" 1}}', "1 %!d(MISSING)"),
    ("printf extra", '{{printf "%d" 1 2}}', "1%!(EXTRA int=2)"),
    ("printf nil", '{{printf "%d" .Nil}}', "%!d(<nil>)"),
    ("printf star width", '{{printf "%*d" 4 7}}', "   7"),
    ("printf %s slice", '{{printf "%s" .S}}', "[a b c]"),
]


@pytest.mark.parametrize(("name", "text", "want"), EXEC_TESTS, ids=[t[0] for t in EXEC_TESTS])
def test_exec(name: str, text: str, want: str) -> None:
    assert Template(name, text).execute(DATA) == want


EXEC_ERRORS: list[tuple[str, str, str]] = [
    ("field of int", "{{.I.X}}", 'template: t:1:2: executing "t" at <.I.X>: can\'t evaluate '
                                 "field X in type int"),
    ("unknown field", "{{.Nope}}", "can't evaluate field Nope in type Data"),
    ("nil pointer", "{{.Nil.X}}", "nil pointer evaluating interface {}.X"),
    ("args to field", "{{.I 1}}", "I has arguments but cannot be invoked as function"),
    ("args to map key", "{{.MSI.one 1}}", "one is not a method but has arguments"),
    ("args to literal", "{{1 2}}", "can't give argument to non-function 1"),
    ("pipe to literal", "{{1 | 2}}", "non executable command in pipeline stage 2"),
    ("nil command", "{{nil}}", "nil is not a command"),
    ("method error", "{{.Fails}}", "error calling Fails: fails on purpose"),
    ("method arity", "{{.Method1}}", "wrong number of args for Method1: want 1 got 0"),
    ("func arity", "{{len}}", "wrong number of args for len: want 1 got 0"),
    ("eq types", "{{eq 1 1.0}}", "error calling eq: incompatible types for comparison"),
    ("eq missing", "{{eq 1}}", "error calling eq: missing argument for comparison"),
    ("lt bool", "{{lt true false}}", "error calling lt: invalid type for comparison"),
    ("lt mixed", '{{lt 1 "a"}}', "error calling lt: incompatible types for comparison"),
    ("eq slices", "{{eq .S .S}}", "error calling eq: non-comparable type"),
    ("index range", "{{index .S 5}}", "error calling index: index out of range: 5"),
    ("index of int", "{{index 3 1}}", "error calling index: can't index item of type int"),
    ("slice bounds", "{{slice .S 2 1}}", "error calling slice: invalid slice index: 2 > 1"),
    ("len of int", "{{len 3}}", "error calling len: len of type int"),
    ("range over string", '{{range "abc"}}{{end}}', "range can't iterate over abc"),
    ("range int two vars", "{{range $i, $e := 3}}{{end}}", "can't use 3 to iterate over more"),
    ("undefined template", '{{template "nope"}}', 'template "nope" not defined'),
    ("printf wants string", "{{printf 1}}",
     'executing "t" at <printf>: wrong type for value; expected string; got int'),
    ("error location", "line one\n  {{.I.X}}", "template: t:2:4: executing"),
    ("recursion", '{{define "r"}}{{template "r"}}{{end}}{{template "r"}}',
     "exceeded maximum template depth"),
]


@pytest.mark.parametrize(("name", "text", "want"), EXEC_ERRORS, ids=[t[0] for t in EXEC_ERRORS])
def test_exec_errors(name: str, text: str, want: str) -> None:
    with pytest.raises(TemplateError) as info:
        Template("t", text).execute(DATA)
    assert want in str(info.value)


def test_missing_key_modes() -> None:
    data = {"a": 1}
    assert Template("t", "{{.b}}").execute(data) == "<no value>"
    assert Template("t", "{{.b}}", missing_key="zero").execute(data) == "<nil>"
    with pytest.raises(TemplateError, match='map has no entry for key "b"'):
        Template("t", "{{.b}}", missing_key="error").execute(data)
    with pytest.raises(ValueError, match="unrecognized option"):
        Template("t", "", missing_key="bogus")


def test_custom_delimiters() -> None:
    tmpl = Template("t", "[[ .a ]] {{ .a }} [[- if .a ]] yes [[- end ]]", left="[[", right="]]")
    assert tmpl.execute({"a": 1}) == "1 {{ .a }} yes"


def test_funcs_extend_and_override() -> None:
    tmpl = Template("t", '{{shout "hi"}} {{len "abc"}}',
                    funcs={"shout": lambda s: s.upper() + "!", "len": lambda s: "L"})
    assert tmpl.execute(None) == "HI! L"


def test_executes_many_times_with_fresh_variables() -> None:
    tmpl = Template("t", "{{$x := .}}{{$x}}")
    assert [tmpl.execute(i) for i in (1, 2, 3)] == ["1", "2", "3"]


def test_execute_named_template() -> None:
    tmpl = Template("t", '{{define "a"}}A{{.}}{{end}}main')
    assert tmpl.execute(1, name="a") == "A1"
    with pytest.raises(TemplateError, match='no template "z"'):
        tmpl.execute(1, name="z")


def test_a_failing_function_is_an_error_calling_it() -> None:
    def boom() -> str:
        raise AttributeError("no such thing")

    with pytest.raises(TemplateError, match=r'at <boom>: error calling boom: no such thing'):
        Template("t", "{{ boom }}", funcs={"boom": boom}).execute(None)
