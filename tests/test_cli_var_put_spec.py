"""`var put -in -out -template -verbose` with Nomad's specification files, and `var list -out
-template`, against a real agent (the CLI in a worker thread); plus the pure rules of
runtime/cli/var_put.py (command/var_put.go `makeVariable`, var.go `renderAsHCL`)."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest
import trio
from click.testing import CliRunner, Result

from tests.agent_support import Running, running_agent
from yurt.runtime.cli import cli
from yurt.runtime.cli.var_put import (
    LIST_FORMATS,
    PUT_FORMATS,
    SpecError,
    file_format,
    make_variable,
    output_problem,
    parse_spec,
    render_hcl,
    terse_lines,
)

HCL_SPEC = """
namespace = "default"
path = "from/spec"
modify_index = 0
items {
  user = "u"
  pass = "p"
}
"""


async def _yurt(agent: Running, *args: str, stdin: str = "") -> Result:
    runner = CliRunner()
    return await trio.to_thread.run_sync(partial(
        runner.invoke, cli, list(args), input=stdin, env={"YURT_ADDR": agent.address,
                                                          "YURT_TOKEN": ""}))


def test_spec_parsing_and_rendering() -> None:
    spec = parse_spec(HCL_SPEC, "hcl", "s.hcl")
    assert spec == {"Namespace": "default", "Path": "from/spec", "ModifyIndex": 0,
                    "Items": {"user": "u", "pass": "p"}}
    assert parse_spec('{"path": "a", "Items": {"k": "v"}, "ModifyIndex": 7}', "json", "-") == {
        "Path": "a", "Items": {"k": "v"}, "ModifyIndex": 7}
    assert parse_spec('items = {"a.b" = "x"}', "hcl", "s.hcl")["Items"] == {"a.b": "x"}
    with pytest.raises(SpecError, match='invalid key "colour"'):
        parse_spec('colour = "red"', "hcl", "s.hcl")
    with pytest.raises(SpecError, match="unmarshaling json"):
        parse_spec("{", "json", "-")
    with pytest.raises(SpecError, match="Items must map"):
        parse_spec('{"Items": {"k": 1}}', "json", "-")
    with pytest.raises(SpecError, match="Use the -in flag"):
        file_format("spec.txt")
    assert file_format("a/spec.nv.hcl") == "hcl"
    # The path or namespace of the command line over the spec's: a copy, indexes zeroed.
    stored = {"Path": "a", "Namespace": "default", "ModifyIndex": 9, "CreateIndex": 3,
              "Items": {"k": "v"}}
    assert make_variable(stored, "", "")["ModifyIndex"] == 9
    copied = make_variable(stored, "b", "")
    assert (copied["Path"], copied["ModifyIndex"], copied["CreateIndex"]) == ("b", 0, 0)
    assert make_variable(None, "p", "ns") == {"Path": "p", "Namespace": "ns", "Items": {}}
    text = render_hcl({**stored, "Items": {"k": "v", "long": "x\ny"}})
    assert text.splitlines()[1:3] == ['namespace    = "default"', 'path         = "a"']
    assert '     k = "v"' in text.splitlines()
    assert '  long = "x\\ny"' in text.splitlines()
    assert parse_spec(text, "hcl", "again.hcl")["Items"] == {"k": "v", "long": "x\ny"}
    assert output_problem("json", "{{.}}", PUT_FORMATS) == (
        "The '-template' flag is only valid when using 'go-template' formatting")
    assert output_problem("go-template", "", PUT_FORMATS) == (
        "A template must be supplied using '-template' when using go-template formatting")
    assert output_problem("yaml", "", LIST_FORMATS) == (
        'Invalid value for "-out"; valid values are [go-template, json, table, terse]')
    found = [{"Namespace": "default", "Path": "a"}, {"Namespace": "dev", "Path": "b"}]
    assert terse_lines(found, "") == ["a", "b"]
    assert [x.split() for x in terse_lines(found, "*")] == [["default", "a"], ["dev", "b"]]


async def test_var_put_from_specs_and_output_formats(tmp_path: Path) -> None:
    spec_file = tmp_path / "spec.nv.hcl"
    spec_file.write_text(HCL_SPEC)
    odd = tmp_path / "spec.txt"
    odd.write_text('{"Path": "odd", "Items": {"k": "v"}}')
    with trio.fail_after(60):
        async with running_agent(tmp_path / "data") as agent:
            put = await _yurt(agent, "var", "put", "-verbose", f"@{spec_file}", "extra=1")
            assert put.exit_code == 0, put.output
            assert f'Reading whole HCL variable specification from "{spec_file}"' in put.output
            assert 'Created variable "from/spec" with modify index ' in put.output
            stored = (await agent.client.get("/v1/var/from/spec")).json()
            assert stored["Items"] == {"user": "u", "pass": "p", "extra": "1"}
            # The spec's index (0: only if new) is the check-and-set: a conflict now.
            again = await _yurt(agent, "var", "put", f"@{spec_file}")
            assert again.exit_code == 1
            assert "Check-and-Set conflict" in again.output
            # JSON from stdin (-in json is the default), under a path of the command line,
            # printed as HCL; removing an item says so with -verbose.
            piped = json.dumps({"Items": {"a": "1", "b": "2"}})
            out = await _yurt(agent, "var", "put", "-verbose", "-out", "hcl", "copy/one", "-",
                              "b=", stdin=piped)
            assert out.exit_code == 0, out.output
            assert 'Removed item "b"' in out.output
            assert 'path         = "copy/one"' in out.output
            assert '  a = "1"' in out.output
            assert (await agent.client.get("/v1/var/copy/one")).json()["Items"] == {"a": "1"}
            out = await _yurt(agent, "var", "put", "-in", "hcl", "-out", "go-template",
                              "-template", "{{.Path}}={{.Items.user}}", "hcl/stdin", "-",
                              stdin=HCL_SPEC)
            assert out.exit_code == 0, out.output
            assert out.output == "hcl/stdin=u\n"
            out = await _yurt(agent, "var", "put", "-out", "json", "j/one", "k=v")
            assert json.loads(out.output)["Path"] == "j/one"
            # An extension that names no format needs -in.
            out = await _yurt(agent, "var", "put", f"@{odd}")
            assert out.exit_code == 2
            assert "Use the -in flag to specify it" in out.output
            for bad in (["-in", "yaml", "p", "k=v"], ["-out", "json", "-template", "x", "p",
                                                       "k=v"],
                        ["-out", "go-template", "p", "k=v"], ["-out", "xml", "p", "k=v"],
                        ["p"]):
                refused = await _yurt(agent, "var", "put", *bad)
                assert refused.exit_code == 2, (bad, refused.output)
            # var list -out
            listed = await _yurt(agent, "var", "list", "-out", "terse")
            assert listed.output.split() == ["copy/one", "from/spec", "hcl/stdin", "j/one"]
            listed = await _yurt(agent, "var", "list", "-out", "go-template", "-template",
                                 "{{range .}}{{.Path}},{{end}}", "j")
            assert listed.output == "j/one,\n"
            listed = await _yurt(agent, "var", "list", "-out", "json", "copy")
            assert [v["Path"] for v in json.loads(listed.output)] == ["copy/one"]
            listed = await _yurt(agent, "var", "list", "-out", "table")
            assert listed.output.split()[:3] == ["Namespace", "Path", "Last"]
            refused = await _yurt(agent, "var", "list", "-template", "{{.}}")
            assert refused.exit_code == 2
            assert "only valid when using 'go-template'" in refused.output
