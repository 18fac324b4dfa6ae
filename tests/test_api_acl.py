"""/v1/acl/*, end to end: a real agent on a socket, real tokens in `X-Nomad-Token`.

Theory. Every ACL endpoint is Nomad's (command/agent/acl_endpoint.go): a bootstrap makes the
first management token once (again only with the index the `acl-bootstrap-reset` file
names); management tokens write policies, tokens and roles; a client token reads the
policies and roles it holds, and its own token; a one-time token is exchanged once, without a
token, for the token that made it. Times are RFC 3339, `ExpirationTTL` a Go duration. With
ACLs off every endpoint answers 400 `ACL support disabled`. A write through the agent is seen
by the very next request (the resolver's cache is dropped), a deleted token refused at once.

Layer 2: real agent, real SQLite, real clock, absolute deadlines.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx2
import nomad
import pytest
import trio

from tests.agent_support import Running, mock_job
from yurt.runtime.agent.agent import Agent, AgentConfig
from yurt.runtime.server.acl.settings import BOOTSTRAP_MANUAL, AclSettings

READ_DEFAULT = 'namespace "default" { policy = "read" }'
SUBMIT_DEFAULT = 'namespace "default" { policy = "write" }'


@asynccontextmanager
async def acl_agent(data_dir: Path, *, enabled: bool = True) -> AsyncIterator[Running]:
    """An agent in dev mode whose ACLs are on (bootstrapped by the test) or off; its client
    sends no token (`as_token` for one)."""
    settings = AclSettings(enabled=enabled, bootstrap=BOOTSTRAP_MANUAL)
    # Not `dev_mode`: that makes a session token of its own (runtime/agent/aclsetup.py).
    agent = Agent(AgentConfig(data_dir=data_dir, port=0, acl=settings))
    async with trio.open_nursery() as nursery:
        address = await nursery.start(agent.run)
        await agent.ready.wait()
        async with httpx2.AsyncClient(base_url=address, timeout=20) as client:
            try:
                yield Running(agent, address, client)
            finally:
                agent.stop()


def as_token(secret: str) -> dict[str, str]:
    return {"X-Nomad-Token": secret}


async def bootstrap(c: httpx2.AsyncClient) -> dict[str, Any]:
    r = await c.post("/v1/acl/bootstrap")
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def rfc3339(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


async def test_every_endpoint_says_acls_are_disabled(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with acl_agent(tmp_path, enabled=False) as a:
            c = a.client
            for method, path in [("POST", "/v1/acl/bootstrap"), ("GET", "/v1/acl/policies"),
                                 ("GET", "/v1/acl/policy/p"), ("DELETE", "/v1/acl/policy/p"),
                                 ("GET", "/v1/acl/tokens"), ("GET", "/v1/acl/token/self"),
                                 ("PUT", "/v1/acl/token/onetime"), ("GET", "/v1/acl/roles"),
                                 ("POST", "/v1/acl/token/onetime/exchange")]:
                r = await c.request(method, path)
                assert (r.status_code, r.text) == (400, "ACL support disabled"), path


async def test_bootstrap_once_then_with_the_reset_file(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with acl_agent(tmp_path) as a:
            c = a.client
            first = await bootstrap(c)
            assert (first["Name"], first["Type"], first["Global"]) == (
                "Bootstrap Token", "management", True)
            assert first["Policies"] is None
            assert first["ExpirationTime"] is None
            assert first["ExpirationTTL"] == ""
            assert abs((rfc3339(first["CreateTime"]) - datetime.now(rfc3339(
                first["CreateTime"]).tzinfo)).total_seconds()) < 60
            again = await c.post("/v1/acl/bootstrap")
            index = first["CreateIndex"]
            assert (again.status_code, again.text) == (
                400, f"ACL bootstrap already done (reset index: {index})")
            (tmp_path / "server" / "acl-bootstrap-reset").write_text(f"{index}\n")
            bad = await c.post("/v1/acl/bootstrap", json={"BootstrapSecret": "nope"})
            assert (bad.status_code, bad.text) == (400, "invalid acl token")
            chosen = "2b778dd9-f5f1-6f29-b4b4-9a5fa948757a"
            second = await c.post("/v1/acl/bootstrap", json={"BootstrapSecret": chosen})
            assert second.status_code == 200
            assert second.json()["SecretID"] == chosen
            spent = await c.post("/v1/acl/bootstrap")
            assert spent.text == (f"Invalid bootstrap reset index (specified {index}, reset "
                                  f"index: {second.json()['CreateIndex']})")
            # Both are management tokens.
            for secret in (first["SecretID"], chosen):
                listed = await c.get("/v1/acl/tokens", headers=as_token(secret))
                assert listed.status_code == 200


async def test_policies_are_written_by_management_and_read_by_their_holders(
        tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with acl_agent(tmp_path) as a:
            c = a.client
            root = as_token((await bootstrap(c))["SecretID"])
            body = {"Name": "readonly", "Description": "reads", "Rules": READ_DEFAULT}
            assert (await c.put("/v1/acl/policy/readonly", json=body)).status_code == 403
            assert (await c.put("/v1/acl/policy/readonly", json=body,
                                headers=root)).status_code == 200
            await c.put("/v1/acl/policy/other", json={"Name": "other", "Rules": ""},
                        headers=root)
            mismatch = await c.put("/v1/acl/policy/x", json={"Name": "y"}, headers=root)
            assert (mismatch.status_code, mismatch.text) == (
                400, "ACL policy name does not match request path")
            invalid = await c.put("/v1/acl/policy/a_b", json={
                "Name": "a_b", "Rules": 'namespace "x" { policy = "nope" }'}, headers=root)
            assert invalid.status_code == 400
            assert invalid.text.startswith("policy 0 invalid: 2 errors occurred:\n"
                                           "\t* invalid name 'a_b'\n\t* failed to parse rules")
            got = (await c.get("/v1/acl/policy/readonly", headers=root)).json()
            assert (got["Rules"], got["Description"]) == (READ_DEFAULT, "reads")
            assert got["CreateIndex"] == got["ModifyIndex"] > 0
            listed = (await c.get("/v1/acl/policies", headers=root)).json()
            assert [p["Name"] for p in listed] == ["other", "readonly"]
            assert "Rules" not in listed[0]

            client = (await c.post("/v1/acl/token", json={
                "Name": "ro", "Type": "client", "Policies": ["readonly"]},
                headers=root)).json()
            holder = as_token(client["SecretID"])
            assert [p["Name"] for p in (await c.get("/v1/acl/policies",
                                                    headers=holder)).json()] == ["readonly"]
            assert (await c.get("/v1/acl/policy/readonly", headers=holder)).status_code == 200
            assert (await c.get("/v1/acl/policy/other", headers=holder)).status_code == 403
            # `anonymous` is anyone's to read; it does not exist yet.
            missing = await c.get("/v1/acl/policy/anonymous")
            assert (missing.status_code, missing.text) == (404, "ACL policy not found")
            assert (await c.delete("/v1/acl/policy/other", headers=holder)).status_code == 403
            assert (await c.delete("/v1/acl/policy/other", headers=root)).status_code == 200
            assert (await c.get("/v1/acl/policy/other", headers=root)).status_code == 404


async def test_tokens_their_ttls_and_who_may_see_them(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with acl_agent(tmp_path) as a:
            c = a.client
            boot = await bootstrap(c)
            root = as_token(boot["SecretID"])
            made = await c.post("/v1/acl/token", json={
                "Name": "ttl", "Type": "client", "Policies": ["readonly"],
                "ExpirationTTL": "1h"}, headers=root)
            assert made.status_code == 200, made.text
            token = made.json()
            assert token["ExpirationTTL"] == "1h0m0s"
            assert (rfc3339(token["ExpirationTime"]) - rfc3339(token["CreateTime"])
                    ).total_seconds() == 3600
            in_ns = await c.post("/v1/acl/token", json={
                "Type": "client", "Policies": ["p"], "ExpirationTTL": 7200 * 10**9},
                headers=root)
            assert in_ns.json()["ExpirationTTL"] == "2h0m0s"
            short = await c.post("/v1/acl/token", json={
                "Type": "client", "Policies": ["p"], "ExpirationTTL": "10s"}, headers=root)
            assert (short.status_code, short.text) == (400, (
                "token 0 invalid: 1 error occurred:\n\t* expiration time cannot be less than "
                "1m0s in the future (was 10s)\n\n"))
            untyped = await c.post("/v1/acl/token", json={"Policies": ["p"]}, headers=root)
            assert "token type must be client or management" in untyped.text

            mine = as_token(token["SecretID"])
            assert (await c.get("/v1/acl/tokens", headers=mine)).status_code == 403
            stubs = (await c.get("/v1/acl/tokens", headers=root)).json()
            assert [s["Name"] for s in stubs] == ["Bootstrap Token", "ttl", ""]
            assert all("SecretID" not in s for s in stubs)
            own = await c.get(f"/v1/acl/token/{token['AccessorID']}", headers=mine)
            assert own.json()["SecretID"] == token["SecretID"]
            others = await c.get(f"/v1/acl/token/{boot['AccessorID']}", headers=mine)
            assert others.status_code == 403
            assert (await c.get("/v1/acl/token/nope", headers=mine)).status_code == 403
            assert (await c.get("/v1/acl/token/nope", headers=root)).status_code == 404
            me = (await c.get("/v1/acl/token/self", headers=mine)).json()
            assert me["AccessorID"] == token["AccessorID"]
            anonymous = (await c.get("/v1/acl/token/self")).json()
            assert (anonymous["AccessorID"], anonymous["Policies"]) == (
                "anonymous", ["anonymous"])

            updated = await c.post(f"/v1/acl/token/{token['AccessorID']}", json={
                "AccessorID": token["AccessorID"], "Name": "renamed", "Type": "client",
                "Policies": ["other"], "ExpirationTTL": "1h",
                "ExpirationTime": token["ExpirationTime"]}, headers=root)
            assert updated.status_code == 200, updated.text
            assert (updated.json()["Name"], updated.json()["SecretID"]) == (
                "renamed", token["SecretID"])
            wrong = await c.post(f"/v1/acl/token/{token['AccessorID']}", json={
                "AccessorID": boot["AccessorID"]}, headers=root)
            assert (wrong.status_code, wrong.text) == (
                400, "ACL token accessor does not match request path")

            assert (await c.delete(f"/v1/acl/token/{token['AccessorID']}",
                                   headers=root)).status_code == 200
            gone = await c.get("/v1/acl/token/self", headers=mine)
            assert (gone.status_code, gone.text) == (403, "ACL token not found")
            twice = await c.delete(f"/v1/acl/token/{token['AccessorID']}", headers=root)
            assert (twice.status_code, twice.text) == (
                400, f"Cannot delete nonexistent tokens: {token['AccessorID']}")


async def test_roles_link_tokens_to_policies(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with acl_agent(tmp_path) as a:
            c = a.client
            root = as_token((await bootstrap(c))["SecretID"])
            no_policy = await c.post("/v1/acl/role", json={
                "Name": "ops", "Policies": [{"Name": "submit"}]}, headers=root)
            assert (no_policy.status_code, no_policy.text) == (400, "cannot find policy submit")
            await c.put("/v1/acl/policy/submit", json={"Name": "submit",
                                                       "Rules": SUBMIT_DEFAULT}, headers=root)
            role = (await c.post("/v1/acl/role", json={
                "Name": "ops", "Policies": [{"Name": "submit"}]}, headers=root)).json()
            await c.post("/v1/acl/role", json={"Name": "dev", "Policies": [
                {"Name": "submit"}]}, headers=root)
            token = (await c.post("/v1/acl/token", json={
                "Type": "client", "Roles": [{"Name": "ops"}]}, headers=root)).json()
            assert token["Roles"] == [{"ID": role["ID"], "Name": "ops"}]
            holder = as_token(token["SecretID"])

            # The role's policy works, end to end: a job may be submitted and read.
            assert (await c.get("/v1/jobs")).status_code == 403
            assert (await c.post("/v1/jobs", json=mock_job("web"),
                                 headers=holder)).status_code == 200
            assert (await c.get("/v1/job/web", headers=holder)).status_code == 200

            assert [r["Name"] for r in (await c.get("/v1/acl/roles", headers=holder)).json()] \
                == ["ops"]
            assert len((await c.get("/v1/acl/roles", headers=root)).json()) == 2
            assert (await c.get(f"/v1/acl/role/{role['ID']}", headers=holder)).json()[
                "Name"] == "ops"
            assert (await c.get("/v1/acl/role/name/ops", headers=holder)).status_code == 200
            assert (await c.get("/v1/acl/role/name/dev", headers=holder)).status_code == 403
            assert [p["Name"] for p in (await c.get("/v1/acl/policies",
                                                    headers=holder)).json()] == ["submit"]
            mismatch = await c.put(f"/v1/acl/role/{role['ID']}", json={
                "ID": "other", "Name": "ops", "Policies": [{"Name": "submit"}]}, headers=root)
            assert (mismatch.status_code, mismatch.text) == (
                400, "ACL role ID does not match request path")
            renamed = await c.put(f"/v1/acl/role/{role['ID']}", json={
                "ID": role["ID"], "Name": "operators", "Policies": [{"Name": "submit"}]},
                headers=root)
            assert renamed.json()["ModifyIndex"] > role["ModifyIndex"]
            read = (await c.get(f"/v1/acl/token/{token['AccessorID']}", headers=root)).json()
            assert read["Roles"] == [{"ID": role["ID"], "Name": "operators"}]

            assert (await c.delete(f"/v1/acl/role/{role['ID']}", headers=root)).status_code \
                == 200
            # The token lost what the role gave it, at once.
            assert (await c.get("/v1/job/web", headers=holder)).status_code == 403
            gone = await c.get(f"/v1/acl/role/{role['ID']}", headers=root)
            assert (gone.status_code, gone.text) == (404, "ACL role not found")
            assert (await c.delete(f"/v1/acl/role/{role['ID']}",
                                   headers=root)).status_code == 404


async def test_a_one_time_token_is_exchanged_once(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with acl_agent(tmp_path) as a:
            c = a.client
            boot = await bootstrap(c)
            assert (await c.put("/v1/acl/token/onetime")).status_code == 403
            made = await c.put("/v1/acl/token/onetime", headers=as_token(boot["SecretID"]))
            assert made.status_code == 200
            ott = made.json()["OneTimeToken"]
            assert ott["AccessorID"] == boot["AccessorID"]
            lasts = rfc3339(ott["ExpiresAt"]) - datetime.now(rfc3339(ott["ExpiresAt"]).tzinfo)
            assert 540 < lasts.total_seconds() <= 600
            exchanged = await c.post("/v1/acl/token/onetime/exchange",
                                     json={"OneTimeSecretID": ott["OneTimeSecretID"]})
            assert exchanged.status_code == 200
            assert exchanged.json()["Token"]["SecretID"] == boot["SecretID"]
            again = await c.post("/v1/acl/token/onetime/exchange",
                                 json={"OneTimeSecretID": ott["OneTimeSecretID"]})
            assert (again.status_code, again.text) == (403, "Permission denied")
            # Nomad's exact routes answer a method they do not take 405, whoever asks.
            for method, path in (("POST", "/v1/acl/token/self"),
                                 ("DELETE", "/v1/acl/token/self"),
                                 ("GET", "/v1/acl/token/onetime")):
                for headers in ({}, as_token(boot["SecretID"])):
                    answer = await c.request(method, path, headers=headers)
                    assert answer.status_code == 405, (method, path, headers)


@pytest.mark.slow
async def test_python_nomads_acl_tests_pass(tmp_path: Path) -> None:
    """The calls and checks of python-nomad's tests/test_acl.py, in its order."""
    with trio.fail_after(60):
        async with acl_agent(tmp_path) as a:
            port = urlparse(a.address).port
            assert port is not None

            def run() -> None:
                n = nomad.Nomad(host="127.0.0.1", port=port, timeout=10)
                bootstrap = n.acl.generate_bootstrap()
                assert "SecretID" in bootstrap
                n = nomad.Nomad(host="127.0.0.1", port=port, timeout=10,
                                token=bootstrap["SecretID"])
                assert "Bootstrap Token" in n.acl.get_tokens()[0]["Name"]
                token = {"Name": "Readonly token", "Type": "client", "Policies": ["readonly"],
                         "Global": False}
                assert "Readonly token" in n.acl.create_token(token)["Name"]
                assert isinstance(n.acl.get_tokens(), list)
                created = n.acl.create_token({"Name": "CreatedForUpdate", "Type": "client",
                                              "Policies": ["readonly"], "Global": False})
                update = {"AccessorID": created["AccessorID"], "Name": "Updated",
                          "Type": "client", "Policies": ["readonly"]}
                assert "Updated" in n.acl.update_token(id_=created["AccessorID"],
                                                       token=update)["Name"]
                got = n.acl.create_token({"Name": "GetToken", "Type": "client",
                                          "Policies": ["readonly"], "Global": False})
                assert n.acl.get_token(got["AccessorID"])["Name"] == "GetToken"
                doomed = n.acl.create_token({"Name": "DeleteToken", "Type": "client",
                                             "Policies": ["readonly"], "Global": False})
                assert n.acl.delete_token(doomed["AccessorID"])
                assert not any(t["Name"] == "DeleteToken" for t in n.acl.get_tokens())
                assert n.get_token() in n.acl.get_self_token()["SecretID"]
                assert isinstance(n.acl.get_policies(), list)
                policy = {"Name": "my-policy", "Description": "This is a great policy",
                          "Rules": ""}
                assert n.acl.create_policy(id_="my-policy", policy=policy).ok
                assert "This is a great policy" in n.acl.get_policy("my-policy")["Description"]
                assert n.acl.update_policy(id_="my-policy", policy={
                    "Name": "my-policy", "Description": "Updated", "Rules": ""}).ok
                assert n.acl.get_policy("my-policy")["Description"] == "Updated"
                assert n.acl.delete_policy(id_="my-policy")
                assert not any(p["Name"] == "my-policy" for p in n.acl.get_policies())

            await trio.to_thread.run_sync(run)
