"""consul-template's functions over the Go template engine (layer 0): Nomad service and
variable lookups through a recording `Lookups`, JSON in Go's encoding, the string helpers.
"""

from __future__ import annotations

from typing import Any, TypeVar

import pytest

from yurt.runtime.gotemplate import Template, TemplateError
from yurt.runtime.gotemplate.consul import (
    NomadService,
    NomadServicesSnippet,
    NomadVarItems,
    NomadVarMeta,
    consul_funcs,
)

R = TypeVar("R")


class FakeLookups:
    """Answers from dicts; what is absent is 'not fetched yet' and recorded as missing."""

    def __init__(self, services: dict[str, list[NomadService]] | None = None,
                 variables: dict[str, dict[str, str]] | None = None) -> None:
        self._services = services or {}
        self._variables = variables or {}
        self.used: list[str] = []
        self.missing: list[str] = []

    def _record(self, dep: str, found: R) -> R:
        self.used.append(dep)
        if found is None:
            self.missing.append(dep)
        return found

    def services(self, name: str, dep: str) -> list[NomadService] | None:
        return self._record(dep, self._services.get(name))

    def service_names(self, dep: str) -> list[NomadServicesSnippet] | None:
        names = [NomadServicesSnippet(n, sorted({t for s in v for t in s.Tags}))
                 for n, v in sorted(self._services.items())]
        return self._record(dep, names)

    def variable(self, path: str, dep: str) -> NomadVarItems | None:
        items = self._variables.get(path)
        meta = NomadVarMeta("default", path, 5, 7)
        return self._record(dep, None if items is None else NomadVarItems(items, meta))

    def variable_list(self, prefix: str, dep: str) -> list[NomadVarMeta] | None:
        return self._record(dep, [NomadVarMeta("default", p) for p in sorted(self._variables)
                                  if p.startswith(prefix)])

    def variable_exists(self, path: str, dep: str) -> bool | None:
        return self._record(dep, path in self._variables)


WEB = [NomadService(ID="_nomad-task-a1-web-web-http", Name="web", Address="10.0.0.1", Port=8080,
                    Tags=["prod", "v1"], AllocID="a1"),
       NomadService(ID="_nomad-task-a2-web-web-http", Name="web", Address="10.0.0.2", Port=8081,
                    Tags=["canary"], AllocID="a2")]


def render(text: str, lookups: FakeLookups | None = None, env: dict[str, str] | None = None,
           **kw: Any) -> str:
    funcs = consul_funcs(env or {}, lookups or FakeLookups(), clock=lambda: 1_700_000_000.5)
    return Template("t", text, funcs, **kw).execute(None)


CASES: list[tuple[str, str, str]] = [
    ("service addresses",
     '{{range nomadService "web"}}{{.Address}}:{{.Port}} {{end}}', "10.0.0.1:8080 10.0.0.2:8081 "),
    ("service by tag", '{{range nomadService "prod.web"}}{{.AllocID}}{{end}}', "a1"),
    ("service tags", '{{range nomadService "web"}}{{.Tags}}{{end}}', "[prod v1][canary]"),
    ("service contains tag",
     '{{range nomadService "web"}}{{if .Tags | contains "canary"}}{{.Port}}{{end}}{{end}}', "8081"),
    ("service count", '{{len (nomadService "web")}}', "2"),
    ("rendezvous subset", '{{len (nomadService 1 "key" "web")}}', "1"),
    ("services", "{{range nomadServices}}{{.Name}}={{.Tags}};{{end}}", "web=[canary prod v1];"),
    ("var item", '{{with nomadVar "nomad/jobs/app"}}{{.user}}{{end}}', "admin"),
    ("var item key", '{{with nomadVar "nomad/jobs/app"}}{{.user.Key}}{{end}}', "user"),
    ("var range", '{{range $k, $v := nomadVar "nomad/jobs/app"}}{{$k}}={{$v}};{{end}}',
     "pass=s3cret;user=admin;"),
    ("var keys", '{{(nomadVar "nomad/jobs/app").Keys}}', "[pass user]"),
    ("var metadata", '{{(nomadVar "nomad/jobs/app").Metadata.Path}}', "nomad/jobs/app"),
    ("var index", '{{index (nomadVar "nomad/jobs/app") "pass"}}', "s3cret"),
    ("var list", '{{range nomadVarList "nomad/"}}{{.Path}} {{end}}', "nomad/jobs/app "),
    ("var exists", '{{nomadVarExists "nomad/jobs/app"}} {{nomadVarExists "x"}}', "true false"),
    ("env", '{{env "NOMAD_TASK_NAME"}}|{{env "UNSET"}}|', "web|" + "|"),
    ("toJSON map", '{{parseJSON `{"b":[1,2.5,"x"],"a":null}` | toJSON}}',
     '{"a":null,"b":[1,2.5,"x"]}'),
    ("toJSON escapes html", '{{"<a&b>" | toJSON}}', '"\\u003ca\\u0026b\\u003e"'),
    ("toJSONPretty", '{{parseJSON `{"a":{"b":1}}` | toJSONPretty}}',
     '{\n  "a": {\n    "b": 1\n  }\n}'),
    ("toJSON services", '{{(index (nomadService "web") 0).Tags | toJSON}}', '["prod","v1"]'),
    ("parseJSON numbers are float64", '{{$n := (parseJSON `{"n":3}`).n}}{{printf "%T %v" $n $n}}',
     "float64 3"),
    ("parseJSON empty", '{{parseJSON ""}}', "map[]"),
    ("split", '{{range split "," "a,b,c"}}<{{.}}>{{end}}', "<a><b><c>"),
    ("split piped", '{{"a:b" | split ":" | join "-"}}', "a-b"),
    ("split empty", '{{len (split "," "")}}', "0"),
    ("join", '{{join ", " (split " " "x y z")}}', "x, y, z"),
    ("replaceAll", '{{"a.b.c" | replaceAll "." "/"}}', "a/b/c"),
    ("toLower toUpper", '{{toLower "AbC"}}{{toUpper "xY"}}', "abcXY"),
    ("trimSpace", '{{trimSpace "  x \\n"}}', "x"),
    ("trimPrefix", '{{"v1.2" | trimPrefix "v"}}', "1.2"),
    ("timestamp", "{{timestamp}}", "2023-11-14T22:13:20Z"),
    ("timestamp unix", '{{timestamp "unix"}}', "1700000000"),
    ("timestamp layout", '{{timestamp "2006-01-02 15:04:05"}}', "2023-11-14 22:13:20"),
    ("parseInt", '{{parseInt "42" | printf "%d"}}', "42"),
    ("parseBool", '{{parseBool "true"}}', "true"),
    ("add", "{{add 1 2}}", "3"),
    ("subtract reversed", "{{subtract 1 5}}", "4"),
    ("divide", "{{divide 2 10}}", "5"),
    ("base64", '{{base64Encode "hi" | base64Decode}}', "hi"),
    ("regexReplaceAll", '{{regexReplaceAll "(a+)" "<$1>" "baaad"}}', "b<aaa>d"),
    ("in", '{{in (split "," "a,b") "b"}}', "true"),
]


@pytest.mark.parametrize(("name", "text", "want"), CASES, ids=[c[0] for c in CASES])
def test_consul_funcs(name: str, text: str, want: str) -> None:
    lookups = FakeLookups({"web": WEB}, {"nomad/jobs/app": {"user": "admin", "pass": "s3cret"}})
    assert render(text, lookups, {"NOMAD_TASK_NAME": "web"}) == want


def test_missing_variable_renders_empty_and_is_recorded() -> None:
    lookups = FakeLookups()
    out = render('[{{with nomadVar "nomad/jobs/x"}}{{.a}}{{end}}]', lookups)
    assert out == "[]"
    assert lookups.missing == ["nomad.var.block(nomad/jobs/x@default.global)"]


def test_missing_service_is_recorded_with_consul_templates_name() -> None:
    lookups = FakeLookups()
    assert render('{{range nomadService "db"}}x{{end}}', lookups) == ""
    assert lookups.missing == ["nomad.service(db)"]


ERRORS: list[tuple[str, str]] = [
    ('{{split 1 "a"}}', "wrong type for value; expected string; got int"),
    ('{{parseJSON "{bad"}}', "error calling parseJSON:"),
    ('{{nomadService "bad name!"}}', 'error calling nomadService: nomadService: invalid format'),
    ('{{nomadService 1 "x"}}', "expected 1 or 3 arguments"),
    ('{{parseInt "x"}}', 'strconv.ParseInt: parsing "x": invalid syntax'),
    ("{{divide 0 1}}", "division by 0"),
    ('{{key "consul/only"}}', 'function "key" not defined'),
]


@pytest.mark.parametrize(("text", "want"), ERRORS)
def test_consul_func_errors(text: str, want: str) -> None:
    with pytest.raises(TemplateError) as info:
        render(text)
    assert want in str(info.value)


def test_to_json_of_a_struct_has_its_fields_only() -> None:
    lookups = FakeLookups(variables={"nomad/a": {"k": "v"}})
    text = render('{{ nomadVarList "nomad/" | toJSON }}', lookups)
    assert text == ('[{"CreateIndex":0,"CreateTime":0,"ModifyIndex":0,"ModifyTime":0,'
                    '"Namespace":"default","Path":"nomad/a"}]')
