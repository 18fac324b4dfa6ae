"""HCL2 variables, locals, expressions and functions in job files (pure logic, layer 1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from yurt.runtime.errors import JobSpecError
from yurt.runtime.jobspec import VarInputs, load_job, parse_job
from yurt.runtime.jobspec.evaluate import EvalError, Scope
from yurt.runtime.jobspec.evaluate_tree import evaluate, render_string
from yurt.runtime.jobspec.functions import functions
from yurt.runtime.jobspec.variables import convert, parse_type

DATA = Path(__file__).parent / "data"


def ev(text: str, variables: dict[str, Any] | None = None) -> Any:
    scope = Scope(variables or {}, {}, {})
    scope.functions = functions(None, False, scope)
    return evaluate(text, scope)


@pytest.mark.parametrize(("expr", "value"), [
    ("1 + 2 * 3", 7), ("(1 + 2) * 3", 9), ("10 / 4", 2.5), ("10 / 2", 5), ("7 % 3", 1),
    ("-3 + 1", -2), ("!true || false", False), ("1 < 2 && 2 >= 2", True),
    ('"a" == "a"', True), ('1 == "1"', False), ('true ? "y" : "n"', "y"),
    ("[1, 2, 3][1]", 2), ('{ a = 1, "b" = 2 }.b', 2), ('{ a = { b = [5] } }.a.b.0', 5),
    ("[for s in [\"a\", \"b\"] : upper(s)]", ["A", "B"]),
    ('{for k, v in { a = 1, b = 2 } : v => k}', {"1": "a", "2": "b"}),
    ('[for n in range(5) : n if n % 2 == 0]', [0, 2, 4]),
    ('[{ id = 1 }, { id = 2 }][*].id', [1, 2]),
    ('"x-${1 + 1}-${"y"}"', "x-2-y"),
    ('format("%s-%03d", "web", 7)', "web-007"),
    ('formatlist("%s:%d", ["a", "b"], 80)', ["a:80", "b:80"]),
    ('join(",", split(" ", "a b c"))', "a,b,c"),
    ('lookup({ a = 1 }, "b", 9)', 9), ('merge({ a = 1 }, { b = 2, a = 3 })', {"a": 3, "b": 2}),
    ('concat([1], [2, 3])', [1, 2, 3]), ('title("hello world")', "Hello World"),
    ('trimspace("  x ")', "x"), ('trim("--x--", "-")', "x"), ('trimprefix("ab", "a")', "b"),
    ('trimsuffix("ab", "b")', "a"), ('replace("a.b.c", ".", "-")', "a-b-c"),
    ('replace("a1b22", "/[0-9]+/", "#")', "a#b#"), ('regex("(\\\\d+)", "ab12")', ["12"]),
    ('regexall("\\\\d", "a1b2")', ["1", "2"]), ('coalesce("", "x")', "x"),
    ('coalescelist([], [1])', [1]), ('length("abc")', 3), ('keys({ b = 1, a = 2 })', ["a", "b"]),
    ('values({ b = 1, a = 2 })', [2, 1]), ('contains(["a"], "a")', True),
    ('distinct([1, 1, 2])', [1, 2]), ('flatten([[1], [2, [3]]])', [1, 2, 3]),
    ('element(["a", "b"], 3)', "b"), ('index(["a", "b"], "b")', 1),
    ('slice([1, 2, 3], 1, 3)', [2, 3]), ('range(1, 4)', [1, 2, 3]), ('min(3, 1, 2)', 1),
    ('max(3, 1, 2)', 3), ('abs(-4)', 4), ('ceil(1.2)', 2), ('floor(1.8)', 1),
    ('jsonencode({ a = [1, true] })', '{"a":[1,true]}'), ('jsondecode("[1]")', [1]),
    ('base64decode(base64encode("hi"))', "hi"), ('basename("/a/b.txt")', "b.txt"),
    ('dirname("/a/b.txt")', "/a"), ('tostring(5)', "5"), ('tonumber("5")', 5),
    ('tobool("true")', True), ('tolist(["a"])', ["a"]), ('toset(["b", "a", "b"])', ["a", "b"]),
    ('try(var.nope, "fallback")', "fallback"), ('can(var.nope)', False), ('can(var.x)', True),
    ('sort(["b", "a"])', ["a", "b"]), ('reverse([1, 2])', [2, 1]), ('sum([1, 2.5])', 3.5),
    ('zipmap(["a"], [1])', {"a": 1}), ('compact(["a", "", null])', ["a"]),
    ('chunklist([1, 2, 3], 2)', [[1, 2], [3]]), ('substr("hello", 1, 3)', "ell"),
    ('setunion(["a"], ["b", "a"])', ["a", "b"]), ('parseint("ff", 16)', 255),
    ('pow(2, 10)', 1024), ('signum(-3)', -1), ('strrev("ab")', "ba"),
    ('sha256("a")', "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb"),
    ('urlencode("a b")', "a%20b"), ('indent(2, "a\nb")', "a\n  b"),
    ('upper(var.x)', "X"), ('lower("AB")', "ab"), ('length(uuidv4())', 36),
])
def test_expressions_and_functions_evaluate_as_hcl_does(expr: str, value: Any) -> None:
    assert ev(expr, {"x": "x"}) == value


@pytest.mark.parametrize(("expr", "message"), [
    ("var.missing", 'undefined variable "var.missing"'),
    ("local.missing", 'undefined local "local.missing"'),
    ('{ a = 1 }.b', 'no attribute "b"'),
    ('1 + "a"', "a number is required"),
    ("nosuch(1)", 'unknown function "nosuch"'),
    ('"${[1]}"', "string required"),
    ("[1][5]", "out of range"),
    ('lookup({}, "k")', 'no key "k"'),
    ('file("x")', "filesystem function disabled"),
    ('transpose("x")', "transpose\\(\\): "),
    ('jsondecode("{")', "jsondecode\\(\\): "),
    ("[1][1e999]", "cannot evaluate"),
])
def test_bad_expressions_say_what_was_expected(expr: str, message: str) -> None:
    with pytest.raises(EvalError, match=message):
        ev(expr)


def test_runtime_interpolations_stay_text_for_the_client() -> None:
    scope = Scope({"x": "v"}, {}, {})
    text = "${NOMAD_ALLOC_DIR}/${var.x}/${attr.unique.network.ip-address}/${env[\"HOME\"]}"
    assert render_string(text, scope) == ("${NOMAD_ALLOC_DIR}/v/"
                                          "${attr.unique.network.ip-address}/${env[\"HOME\"]}")
    assert render_string("$${var.x}", scope) == "$${var.x}"
    assert render_string("${node.datacenter}", scope) == "${node.datacenter}"


def test_types_convert_as_cty_does() -> None:
    assert convert("3", parse_type("number")) == 3
    assert convert(3, parse_type("string")) == "3"
    assert convert("true", parse_type("bool")) is True
    assert convert([1, 2], parse_type("${list(string)}")) == ["1", "2"]
    assert convert({"a": 1}, parse_type("${map(string)}")) == {"a": "1"}
    assert convert({"a": 1, "x": 2}, parse_type("${object({a = number})}")) == {"a": 1}
    with pytest.raises(EvalError, match='attribute "a" is required'):
        convert({}, parse_type("${object({a = number})}"))
    with pytest.raises(EvalError, match="list of string required"):
        convert("x", parse_type("${list(string)}"))
    with pytest.raises(EvalError, match="a type such as"):
        parse_type("${list(strin)}")


def _job(inputs: VarInputs | None = None) -> Any:
    return load_job(DATA / "homelab_vars.nomad.hcl", inputs)


def test_the_homelab_job_takes_defaults_and_locals() -> None:
    job = _job(VarInputs())
    group = job.task_groups[0]
    task = group.tasks[0]
    assert job.datacenters == ["home"]
    assert group.count == 1
    assert task.env == {"TZ": "Europe/Berlin", "APP_NAME": "MEDIA-1-2-3"}
    assert task.config["args"][1] == "echo media-1-2-3 on ${attr.kernel.name}; sleep 3600"
    assert task.meta == {"replicas": "01", "dcs": "home"}


def test_precedence_is_env_then_var_files_then_var_flags() -> None:
    inputs = VarInputs(env={"NOMAD_VAR_replicas": "2", "NOMAD_VAR_image_tag": "env",
                            "NOMAD_VAR_undeclared": "ignored"},
                       var_files=(("a.hcl", 'replicas = 3\ndatacenters = ["x", "y"]\n'),
                                  ("b.json", '{"replicas": 4}')),
                       args=("replicas=5",))
    job = _job(inputs)
    assert job.task_groups[0].count == 5
    assert job.datacenters == ["x", "y"]
    assert job.task_groups[0].tasks[0].env["APP_NAME"] == "MEDIA-ENV"
    assert _job(VarInputs(var_files=(("b.json", '{"replicas": 4}'),),
                          env={"NOMAD_VAR_replicas": "2"})).task_groups[0].count == 4


def _problems(text: str, inputs: VarInputs | None = None) -> list[str]:
    with pytest.raises(JobSpecError) as e:
        parse_job(text, filename="j.hcl", variables=inputs)
    return [f"{p.line}:{p.field}: {p.message}" for p in e.value.problems]


JOB = '''variable "n" {
  type = number
  validation {
    condition     = var.n < 3
    error_message = "Too many."
  }
}
job "j" {
  group "g" {
    count = var.n
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
}
'''


def test_errors_name_the_line_and_what_was_expected() -> None:
    assert _problems(JOB) == ['1:variable.n: unset variable "n": a variable the job uses must '
                              "be set (-var, -var-file, NOMAD_VAR_n) or have a default"]
    assert _problems(JOB, VarInputs(args=("n=7",))) == [
        "1:var.n: invalid value for variable (-var): Too many."]
    assert "number required" in _problems(JOB, VarInputs(args=("n=x",)))[0]
    assert 'undefined -var variable: "m"' in _problems(JOB, VarInputs(args=("n=1", "m=2")))[0]
    lenient = parse_job(JOB, variables=VarInputs(args=("n=1", "m=2"), strict=False))
    assert lenient.task_groups[0].count == 1
    undefined = JOB.replace("count = var.n", "count = var.q")
    assert _problems(undefined, VarInputs(args=("n=1",))) == [
        '10:job.j.group.g.count: undefined variable "var.q": declare it with variable '
        '"q" { … }']
    bad_local = 'locals {\n  a = local.b\n}\n' + JOB
    assert _problems(bad_local, VarInputs(args=("n=1",))) == [
        '2:local.a: undefined local "local.b": define it in a locals block']


def test_the_api_is_not_strict_about_undeclared_variables() -> None:
    job = parse_job(JOB, variables=VarInputs(var_files=(("input.hcl", "n = 2\nm = 3\n"),),
                                             strict=False))
    assert job.task_groups[0].count == 2


def test_file_functions_read_beside_the_job_only_when_allowed(tmp_path: Path) -> None:
    (tmp_path / "motd.tpl").write_text("hello ${name}\n")
    path = tmp_path / "job.hcl"
    path.write_text(JOB.replace('command = "/bin/true"',
                                'command = trimspace(templatefile("motd.tpl", '
                                '{ name = "lab" }))'))
    job = load_job(path, VarInputs(args=("n=1",), allow_fs=True))
    assert job.task_groups[0].tasks[0].config["command"] == "hello lab"
    with pytest.raises(JobSpecError, match="filesystem function disabled"):
        load_job(path, VarInputs(args=("n=1",)))


def test_dynamic_blocks_expand_as_hcl_dynblock_does() -> None:
    text = '''variable "tasks" {
  default = { web = "/bin/web", db = "/bin/db" }
}
job "j" {
  group "g" {
    dynamic "task" {
      for_each = var.tasks
      iterator = t
      labels   = [t.key]
      content {
        driver = "raw_exec"
        config { command = t.value }
      }
    }
  }
}
'''
    job = parse_job(text)
    assert [(t.name, t.config["command"]) for t in job.task_groups[0].tasks] == [
        ("web", "/bin/web"), ("db", "/bin/db")]


def test_template_directives_render_as_hcl_does() -> None:
    scope = Scope({"hosts": ["a", "b"], "tls": True}, {}, {})
    scope.functions = functions(None, False, scope)
    text = ("%{ for i, h in var.hosts ~}\nserver ${h}:${8000 + i}\n%{ endfor ~}\n"
            "%{ if var.tls }tls on%{ else }tls off%{ endif } ${NOMAD_TASK_DIR} $${x} %%{y}")
    assert render_string(text, scope) == ("server a:8000\nserver b:8001\n"
                                          "tls on ${NOMAD_TASK_DIR} $${x} %%{y}")
    with pytest.raises(EvalError, match="missing %\\{ endif \\}"):
        render_string("%{ if true }x", scope)
    with pytest.raises(EvalError, match="must be a bool"):
        render_string("%{ if var.hosts }x%{ endif }", scope)


def test_a_heredoc_with_directives_renders_in_a_job() -> None:
    text = JOB.replace('config { command = "/bin/true" }', '''config {
        command = "/bin/sh"
        args = [<<EOT
%{ for n in range(var.n) ~}
echo ${n}
%{ endfor ~}
EOT
        ]
      }''')
    job = parse_job(text, variables=VarInputs(args=("n=2",)))
    assert job.task_groups[0].tasks[0].config["args"] == ["echo 0\necho 1\n"]


def test_an_untyped_variable_takes_its_defaults_type() -> None:
    text = JOB.replace("  type = number\n", "  default = 1\n", 1)
    assert parse_job(text, variables=VarInputs(args=("n=2",))).task_groups[0].count == 2
    untyped_list = '''variable "dcs" {
  default = ["a"]
}
''' + JOB.replace("  type = number\n", "  default = 1\n", 1).replace(
        'job "j" {', 'job "j" {\n  datacenters = var.dcs')
    job = parse_job(untyped_list, variables=VarInputs(args=('dcs=["x", "y"]',)))
    assert job.datacenters == ["x", "y"]


def test_a_variables_block_declares_untyped_variables() -> None:
    text = 'variables {\n  n = 2\n}\n' + JOB[JOB.index('job "j"'):]
    assert parse_job(text).task_groups[0].count == 2
    assert parse_job(text, variables=VarInputs(args=("n=3",))).task_groups[0].count == 3


def test_a_default_of_the_wrong_type_is_placed_on_its_line() -> None:
    text = 'variable "n" {\n  type    = number\n  default = "many"\n}\n' + \
        JOB[JOB.index('job "j"'):]
    assert _problems(text) == ['3:variable.n.default: the default is not compatible with the '
                               "type number: a number is required, got 'many'"]


@pytest.mark.parametrize(("expr", "message"), [
    ("[for a in range(1000) : [for b in range(1000) : b]]", "iterate more than 100000 times"),
    ('format("%9999999d", 1)', "format width"),
    ('regex("(a|aa)+$", "${join("", [for i in range(40) : "a"])}b")', "regex\\(\\): .*time"),
    ('regex("(", "x")', "invalid regular expression"),
])
def test_evaluation_is_bounded_for_untrusted_job_files(expr: str, message: str) -> None:
    with pytest.raises(EvalError, match=message):
        ev(expr)


def test_doubling_through_locals_is_bounded() -> None:
    chain = "\n".join(f'  l{i} = "${{local.l{i + 1}}}${{local.l{i + 1}}}"' for i in range(40))
    text = "locals {\n" + chain + '\n  l40 = "abcdefghij"\n}\n' + JOB.replace(
        "count = var.n", "count = length(local.l0)")
    problems = _problems(text, VarInputs(args=("n=1",)))
    assert any("too large a value" in p for p in problems), problems


def test_a_local_that_refers_to_itself_is_an_error() -> None:
    text = 'locals {\n  a = "${local.b}"\n  b = upper(local.a)\n}\n' + JOB
    problems = _problems(text, VarInputs(args=("n=1",)))
    assert problems[0] == "2:local.a: local.a refers to itself"


ATOMS = ["1", "1e999", '"a"', "true", "null", "var.n", "local.l", "[1, 2]", '{ a = 1 }',
         "range(3)", '"${var.n}"', "attr.x", "-1"]
OPS = [" + ", " * ", " / ", " == ", " && ", "[0]", ".a", "", " ? 1 : ", "(", ")"]


@given(st.lists(st.sampled_from(ATOMS) | st.sampled_from(OPS), min_size=1, max_size=8),
       st.sampled_from(["length", "join", "upper", "merge", "element", "format", "tonumber"]))
@settings(max_examples=150, deadline=None)
def test_any_expression_yields_a_job_or_a_job_spec_error(parts: list[str], fn: str) -> None:
    expr = "".join(parts)
    text = (f'locals {{\n  l = {fn}({expr})\n}}\n' + JOB.replace("count = var.n",
                                                                  "count = 1"))
    problems: list[Any] = []
    try:
        job = parse_job(text, variables=VarInputs(args=("n=1",)))
    except JobSpecError as e:
        problems = e.problems
        job = None
    if job is None:
        assert problems
        assert all(p.message for p in problems)
    else:
        assert job.task_groups[0].count == 1
