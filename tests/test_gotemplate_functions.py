"""Every function consul-template and Nomad document for `template` blocks, against what a
yurt render offers (layer 0), and the helpers added for it: `executeTemplate` over `define`d
templates, the `contains*` family, `loop`, `scratch`, the math functions.

The documented list is hard-coded from consul-template's docs/templating-language.md (the
function index at its top: API, scratch, helper and math functions) and from Nomad's
job-specification `template` page (the Nomad-native service and variable functions). A
function yurt lacks must be in `ABSENT` with the reason; the test fails on one missing without
a reason, and on one listed as absent that yurt now has.
"""

from __future__ import annotations

from typing import Any, Final

import pytest

from tests.test_gotemplate_consul import FakeLookups
from yurt.runtime.gotemplate import Template, TemplateError
from yurt.runtime.gotemplate.consul import NomadService, consul_funcs
from yurt.runtime.gotemplate.consul_helpers import helper_funcs

#: consul-template docs/templating-language.md, the index's four sections.
CONSUL_TEMPLATE: Final = (
    # API functions
    "caLeaf", "caRoots", "connect", "datacenters", "file", "key", "keyExists", "keyOrDefault",
    "ls", "safeLs", "node", "nodes", "secret", "secrets", "service", "services", "tree",
    "safeTree",
    # Scratch
    "scratch",
    # Helper functions
    "base64Decode", "base64Encode", "base64URLDecode", "base64URLEncode", "byKey", "byTag",
    "byMeta", "contains", "containsAll", "containsAny", "containsNone", "containsNotAll",
    "env", "executeTemplate", "explode", "explodeMap", "indent", "in", "loop", "join",
    "trimSpace", "parseBool", "parseFloat", "parseInt", "parseJSON", "parseUint", "parseYAML",
    "plugin", "regexMatch", "regexReplaceAll", "replaceAll", "sha256Hex", "split",
    "timestamp", "toJSON", "toJSONPretty", "toLower", "toTitle", "toTOML", "toUpper",
    "toYAML", "sockaddr",
    # Math functions
    "add", "subtract", "multiply", "divide", "modulo", "minimum", "maximum",
)
#: Nomad's job-specification `template` page: native service discovery and Variables.
NOMAD: Final = ("nomadService", "nomadServices", "nomadVar", "nomadVarList", "nomadVarExists")

_CONSUL = "reads Consul, which yurt does not run against (a Nomad client without Consul blocks"
_VAULT = "reads Vault, which yurt does not run against (a Nomad client without Vault blocks"
#: What yurt lacks, and why.
ABSENT: Final = {
    **{name: f"{_CONSUL} on it the same way)" for name in (
        "caLeaf", "caRoots", "connect", "datacenters", "key", "keyExists", "keyOrDefault", "ls",
        "safeLs", "node", "nodes", "service", "services", "tree", "safeTree")},
    **{name: f"{_VAULT} on it the same way)" for name in ("secret", "secrets")},
    "byKey": "groups the KV pairs of `tree`, a Consul function",
    "explode": "nests the KV pairs of `tree`/`ls`, Consul functions",
    "explodeMap": "not yet: nests a map by `/` keys; only jobs that also use `toYAML` use it",
    "byMeta": "groups Consul services by ServiceMeta; Nomad services carry no meta",
    "plugin": "Nomad's client `template.function_denylist` refuses it by default",
    "file": "not yet: needs Nomad's task-dir sandbox for the path (template."
            "disable_file_sandbox)",
    "parseYAML": "not yet: needs a YAML decoder with Go's yaml.v2 typing",
    "toYAML": "not yet: needs a YAML encoder with Go's yaml.v2 output",
    "toTOML": "not yet: needs a TOML encoder with BurntSushi/toml's output",
    "sockaddr": "not yet: go-sockaddr's template language over the host's interfaces",
}


def offered() -> dict[str, Any]:
    return {**consul_funcs({}, FakeLookups()), **helper_funcs()}


def test_every_documented_function_is_offered_or_explained() -> None:
    funcs = offered()
    missing = [f for f in (*CONSUL_TEMPLATE, *NOMAD) if f not in funcs and f not in ABSENT]
    assert missing == []
    now_offered = [f for f in ABSENT if f in funcs]
    assert now_offered == []  # the table must not claim an absence that is gone
    assert set(ABSENT) <= set(CONSUL_TEMPLATE)


def render(text: str, data: Any = None, **env: str) -> str:
    funcs = {**consul_funcs(env, FakeLookups()), **helper_funcs()}
    return Template("t", text, funcs).execute(data, funcs=funcs)


def test_execute_template_as_consul_templates_docs_show() -> None:
    text = ('{{ define "custom" }}my custom template {{ . }}{{ end }}'
            '{{ executeTemplate "custom" }}|{{ executeTemplate "custom" 42 }}|'
            '{{ $var := executeTemplate "custom" "v" }}{{ $var | toUpper }}')
    assert render(text) == (
        "my custom template <no value>|my custom template 42|MY CUSTOM TEMPLATE V")


def test_execute_template_errors_and_depth() -> None:
    with pytest.raises(TemplateError, match='no template "nope"'):
        render('{{ executeTemplate "nope" }}')
    with pytest.raises(TemplateError, match="maximum template depth"):
        render('{{ define "r" }}{{ executeTemplate "r" }}{{ end }}{{ executeTemplate "r" }}')
    # Variables of the caller are not visible inside, as in Go's ExecuteTemplate.
    with pytest.raises(TemplateError, match="undefined variable"):
        render('{{ define "x" }}{{ $v }}{{ end }}{{ $v := 1 }}{{ executeTemplate "x" }}')


def test_helpers() -> None:
    tags = ["a", "b"]
    assert render("{{ containsAll .N .T }} {{ containsAny .N .T }} {{ containsNone .N .T }} "
                  "{{ containsNotAll .N .T }}", {"N": ["a", "z"], "T": tags}) == (
        "false true false true")
    assert render("{{ containsAll .N .T }} {{ containsAny .N .T }}",
                  {"N": [], "T": tags}) == "true false"
    assert render("{{ range loop 3 }}{{ . }}{{ end }} {{ range $i := loop 5 8 }}{{ $i }}"
                  "{{ end }}") == "012 567"
    assert render('{{ scratch.Set "k" "v" }}{{ scratch.Get "k" }}{{ scratch.Key "k" }}'
                  '{{ scratch.MapSet "m" "b" 2 }}{{ scratch.MapSet "m" "a" 1 }}'
                  '{{ scratch.MapValues "m" }}') == "vtrue[1 2]"
    assert render("{{ 7 | modulo 3 }} {{ 2 | minimum 5 }} {{ 2 | maximum 5 }}") == "1 2 5"
    assert render('{{ "1" | parseUint }} {{ "hello" | base64URLEncode }} '
                  '{{ "aGVsbG8=" | base64URLDecode }}') == "1 aGVsbG8= hello"
    assert render('{{ "bladibla" | sha256Hex }}') == (
        "54cf4c66bcabb5c20e25331c01dd600b73369e97a947861bd8d3a0e0b8b3d70b")
    assert render('{{ "a\\nb" | indent 2 }}') == "  a\n  b"
    web = [NomadService(ID="1", Name="web", Tags=["x", "y"]),
           NomadService(ID="2", Name="web", Tags=["y"])]
    assert render("{{ range $t, $s := byTag . }}{{ $t }}={{ len $s }} {{ end }}", web) == (
        "x=1 y=2 ")
