"""`acl token create -accessor` (Nomad's upload of a client token with both IDs given, the
SecretID from a file or stdin) and `namespace apply [-json] FILE|-` (Nomad's specification
files), run as a user runs them against an agent on a real socket; plus the pure spec
reading."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import trio

from tests.agent_support import running_agent
from tests.cli_proc_support import yurt
from tests.test_cli_acl import READ_DEFAULT, acl_agent, cli_env, kv, run
from yurt.runtime.cli.namespace_spec import parse_spec

pytestmark = pytest.mark.slow

NS_HCL = """
name        = "team"
description = "the team's"
meta {
  owner = "ops"
}
capabilities {
  enabled_task_drivers = ["raw_exec"]
}
"""


def test_namespace_spec_reading() -> None:
    assert parse_spec(NS_HCL, False, "ns.hcl") == {
        "Name": "team", "Description": "the team's", "Meta": {"owner": "ops"},
        "Capabilities": {"EnabledTaskDrivers": ["raw_exec"]}}
    assert parse_spec('node_pool_config { default = "x" }', False, "ns.hcl") == {
        "NodePoolConfiguration": {"Default": "x"}}
    assert parse_spec('{"Name": "j"}', True, "-") == {"Name": "j"}


async def test_token_upload_with_given_ids(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with acl_agent(tmp_path / "data") as a:
            management = (await a.client.post("/v1/acl/bootstrap")).json()["SecretID"]
            env = cli_env(a.address, tmp_path / "home", NOMAD_TOKEN=management)
            rules = tmp_path / "readonly.hcl"
            rules.write_text(READ_DEFAULT)
            assert (await run(env, "acl", "policy", "apply", "readonly",
                              str(rules))).returncode == 0
            accessor, secret = str(uuid.uuid4()), str(uuid.uuid4())
            secret_file = tmp_path / "secret"
            secret_file.write_text(secret + "\n")
            made = await run(env, "acl", "token", "create", "-accessor", accessor, "-name",
                             "restored", "-policy", "readonly", str(secret_file))
            assert made.returncode == 0, made.stderr
            token = kv(made.stdout)
            assert (token["Accessor ID"], token["Secret ID"], token["Name"]) == (
                accessor, secret, "restored")
            # The uploaded secret opens what its policy allows.
            r = await a.client.get("/v1/acl/token/self", headers={"X-Nomad-Token": secret})
            assert r.json()["AccessorID"] == accessor
            # From stdin, with -json.
            other, other_secret = str(uuid.uuid4()), str(uuid.uuid4())
            made = await run(env, "acl", "token", "create", "-accessor", other, "-policy",
                             "readonly", "-json", "-", stdin=other_secret.encode())
            assert made.returncode == 0, made.stderr
            assert json.loads(made.stdout)["SecretID"] == other_secret
            for bad, text in (
                    (["-accessor", accessor], b"-accessor requires a SecretID"),
                    ([str(secret_file)], b"A SecretID file path was provided but -accessor"),
                    (["-accessor", "nope", str(secret_file)], b"-accessor value must be a "
                                                              b"valid UUID"),
                    (["-accessor", str(uuid.uuid4()), "-type", "management",
                      str(secret_file)], b"cannot upload management tokens")):
                out = await run(env, "acl", "token", "create", *bad)
                assert out.returncode == 2, (bad, out.stderr)
                assert text in out.stderr
            not_uuid = tmp_path / "plain"
            not_uuid.write_text("not-a-uuid")
            out = await run(env, "acl", "token", "create", "-accessor", str(uuid.uuid4()),
                            str(not_uuid))
            assert out.returncode == 2
            assert b"SecretID must be a valid UUID" in out.stderr
            assert b"not-a-uuid" not in out.stderr  # a secret is never echoed


async def test_namespace_apply_from_files(tmp_path: Path) -> None:
    spec = tmp_path / "ns.hcl"
    spec.write_text(NS_HCL)
    with trio.fail_after(60):
        async with running_agent(tmp_path / "data") as a:
            out = await yurt(a.address, "namespace", "apply", "-description", "ignored",
                             str(spec))
            assert out.returncode == 0, out.stderr
            assert out.stdout == b'Successfully applied namespace "team"!\n'
            assert b"Flags are ignored when a file is specified!" in out.stderr
            ns = (await a.client.get("/v1/namespace/team")).json()
            assert (ns["Description"], ns["Meta"]) == ("the team's", {"owner": "ops"})
            as_json = tmp_path / "ns.json"
            as_json.write_text(json.dumps({"Name": "json-ns", "Description": "from json"}))
            out = await yurt(a.address, "namespace", "apply", "-json", str(as_json))
            assert out.returncode == 0, out.stderr
            ns = (await a.client.get("/v1/namespace/json-ns")).json()
            assert ns["Description"] == "from json"
            # -json with a name is refused; broken JSON is a parse error.
            out = await yurt(a.address, "namespace", "apply", "-json", "plain-name")
            assert out.returncode == 2
            broken = tmp_path / "broken.json"
            broken.write_text("{")
            out = await yurt(a.address, "namespace", "apply", "-json", str(broken))
            assert out.returncode == 2
            assert b"Failed to parse namespace" in out.stderr
            out = await yurt(a.address, "namespace", "apply", "-description", "d", "byname")
            assert out.returncode == 0, out.stderr
            assert (await a.client.get("/v1/namespace/byname")).json()["Description"] == "d"
