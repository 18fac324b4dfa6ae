"""The checks that depend on the body or the state, through a real agent: a job lands (and is
checked) in the namespace its body names, Nomad's fine-grained capabilities stand in for
submit-job where Nomad takes them, a purge is not a stop, a deployment's and an
evaluation's namespace is theirs, a service is deleted only from the namespace asked, and a
variable's conflict shows its items only to a token that may read it.

Layer 2: an in-process agent on a real socket (tests/authz_support.py), the real clock,
bounded by `trio.fail_after`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import trio

from tests.agent_support import mock_job
from tests.authz_support import AclAgent, acl_agent, rolled_out
from yurt.runtime.api.authz import namespace_policy


async def _create_a(at: AclAgent) -> None:
    assert (await at.admin.put("/v1/namespace/a", json={"Name": "a"})).status_code == 200


def _as(secret: str) -> dict[str, str]:
    return {"X-Nomad-Token": secret}


def in_namespace(doc: dict[str, Any], namespace: str) -> dict[str, Any]:
    doc["Job"]["Namespace"] = namespace
    return doc


async def _until(admin: httpx2.AsyncClient, path: str, namespace: str) -> Any:
    while True:  # bounded by the caller
        found = (await admin.get(path, params={"namespace": namespace})).json()
        if found:
            return found
        await trio.sleep(0.05)


async def test_a_job_is_checked_in_the_namespace_its_body_names(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with acl_agent(tmp_path / "data") as at:
            await _create_a(at)
            client, token = at.admin, at.resolver.token
            register_a = token(namespace_policy("register-job", namespace="a"))
            submit_default = token(namespace_policy("submit-job"))
            # nomad/job_endpoint.go `Register`: submit-job or register-job, in the job's.
            ok = await client.post("/v1/jobs", json=in_namespace(mock_job("j1"), "a"),
                                   headers=_as(register_a))
            assert ok.status_code == 200, ok.text
            for doc, secret in ((mock_job("j2"), register_a),
                                (in_namespace(mock_job("j3"), "a"), submit_default)):
                refused = await client.post("/v1/jobs", json=doc, headers=_as(secret))
                assert (refused.status_code, refused.text) == (403, "Permission denied")
            # The query names the namespace of a job whose body names none.
            ok = await client.put("/v1/job/j4", json=mock_job("j4"), params={"namespace": "a"},
                                  headers=_as(register_a))
            assert ok.status_code == 200, ok.text
            # A policy override asks sentinel-override besides.
            override = {**in_namespace(mock_job("j5"), "a"), "PolicyOverride": True}
            refused = await client.post("/v1/jobs", json=override, headers=_as(register_a))
            assert refused.status_code == 403
            with_override = token(namespace_policy("register-job", "sentinel-override",
                                                   namespace="a"))
            ok = await client.post("/v1/jobs", json=override, headers=_as(with_override))
            assert ok.status_code == 200, ok.text
            # `Plan`: plan-job; `Validate`: read-job, in the job's namespace.
            plan_a = token(namespace_policy("plan-job", namespace="a"))
            planned = await client.post("/v1/job/j1/plan", params={"namespace": "a"},
                                        json=in_namespace(mock_job("j1"), "a"),
                                        headers=_as(plan_a))
            assert planned.status_code == 200, planned.text
            assert (await client.post("/v1/job/j1/plan", json=mock_job("j1"),
                                      headers=_as(plan_a))).status_code == 403
            read_a = token(namespace_policy("read-job", namespace="a"))
            valid = await client.post("/v1/validate/job", json=in_namespace(mock_job("v"), "a"),
                                      headers=_as(read_a))
            assert valid.status_code == 200, valid.text
            # No namespace in the job: `default`, whatever the query says (Nomad's).
            assert (await client.post("/v1/validate/job", json=mock_job("v"),
                                       params={"namespace": "a"},
                                       headers=_as(read_a))).status_code == 403


async def test_a_purge_takes_more_than_deregister_job(tmp_path: Path) -> None:
    # nomad/job_endpoint.go `Deregister`.
    with trio.fail_after(60):
        async with acl_agent(tmp_path / "data") as at:
            client, token = at.admin, at.resolver.token
            assert (await client.post("/v1/jobs", json=mock_job("j"))).status_code == 200
            stop_only = token(namespace_policy("deregister-job"))
            purged = await client.delete("/v1/job/j", params={"purge": "true"},
                                         headers=_as(stop_only))
            assert purged.status_code == 403
            assert (await client.get("/v1/job/j")).json()["Stop"] is False
            stopped = await client.delete("/v1/job/j", headers=_as(stop_only))
            assert stopped.status_code == 200, stopped.text
            assert (await client.get("/v1/job/j")).json()["Stop"] is True
            purge = token(namespace_policy("purge-job"))
            purged = await client.delete("/v1/job/j", params={"purge": "true"},
                                         headers=_as(purge))
            assert purged.status_code == 200, purged.text
            assert (await client.get("/v1/job/j")).status_code == 404


async def test_deployments_and_evaluations_are_checked_in_their_own_namespace(
        tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with acl_agent(tmp_path / "data") as at:
            await _create_a(at)
            client, token = at.admin, at.resolver.token
            registered = await client.post("/v1/jobs", json=rolled_out("j", "a"))
            assert registered.status_code == 200, registered.text
            eval_id = registered.json()["EvalID"]
            deployment = await _until(client, "/v1/job/j/deployment", "a")
            await _until(client, f"/v1/evaluation/{eval_id}/allocations", "a")
            read_default = token(namespace_policy("read-job"))
            read_a = token(namespace_policy("read-job", namespace="a"))
            # nomad/eval_endpoint.go `GetEval`, `Allocations`: the request's, then theirs.
            for path in (f"/v1/evaluation/{eval_id}", f"/v1/evaluation/{eval_id}/allocations",
                         f"/v1/deployment/allocations/{deployment['ID']}"):
                assert (await client.get(path, headers=_as(read_default))).status_code == 403
                assert (await client.get(path, headers=_as(read_a))).status_code == 403
                seen = await client.get(path, params={"namespace": "a"}, headers=_as(read_a))
                assert seen.status_code == 200, (path, seen.text)
            # `GetDeployment` hides one the token may not read.
            hidden = await client.get(f"/v1/deployment/{deployment['ID']}",
                                      headers=_as(read_default))
            assert hidden.status_code == 404
            # `Fail`: fail-deployment or submit-job in the deployment's namespace, whatever
            # the request's.
            fail_default = token(namespace_policy("fail-deployment"))
            path = f"/v1/deployment/fail/{deployment['ID']}"
            assert (await client.post(path, headers=_as(fail_default))).status_code == 403
            fail_a = token(namespace_policy("fail-deployment", namespace="a"))
            failed = await client.post(path, headers=_as(fail_a))
            assert failed.status_code == 200, failed.text
            assert (await client.get(f"/v1/deployment/{deployment['ID']}",
                                     params={"namespace": "a"})).json()["Status"] == "failed"


async def test_a_service_is_deleted_only_from_the_namespace_asked(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with acl_agent(tmp_path / "data") as at:
            await _create_a(at)
            client, token = at.admin, at.resolver.token
            doc = in_namespace(mock_job("j"), "a")
            doc["Job"]["TaskGroups"][0]["Services"] = [{"Name": "svc", "PortLabel": "8080"}]
            assert (await client.post("/v1/jobs", json=doc)).status_code == 200
            (reg,) = await _until(client, "/v1/service/svc", "a")
            path = f"/v1/service/svc/{reg['ID']}"
            # nomad/service_registration_endpoint.go `DeleteByID`: in the request's namespace.
            in_default = token(namespace_policy("delete-service-registration"))
            missed = await client.delete(path, headers=_as(in_default))
            assert (missed.status_code, missed.text) == (500, "service registration not found")
            assert (await client.get("/v1/service/svc", params={"namespace": "a"})).json()
            in_a = token(namespace_policy("delete-service-registration", namespace="a"))
            deleted = await client.delete(path, params={"namespace": "a"}, headers=_as(in_a))
            assert deleted.status_code == 200, deleted.text
            # `/v1/services?namespace=*` lists only the namespaces the token may read.
            reader = token(namespace_policy("read-job"))
            assert (await client.get("/v1/services", params={"namespace": "*"},
                                     headers=_as(reader))).json() == []


async def test_a_variable_conflict_shows_items_only_to_a_reader(tmp_path: Path) -> None:
    # nomad/variables_endpoint.go `makeVariablesApplyResponse`.
    with trio.fail_after(60):
        async with acl_agent(tmp_path / "data") as at:
            client, token = at.admin, at.resolver.token
            assert (await client.put("/v1/var/app/db",
                                     json={"Items": {"pw": "s3cret"}})).status_code == 200

            def caps(*granted: str) -> str:
                return ('namespace "default" { variables { path "app/*" { capabilities = '
                        + str(list(granted)).replace("'", '"') + " } } }")

            for policy, items in ((caps("write"), None),
                                  (caps("write", "read"), {"pw": "s3cret"})):
                conflict = await client.put("/v1/var/app/db", params={"cas": "0"},
                                            json={"Items": {"pw": "other"}},
                                            headers=_as(token(policy)))
                assert conflict.status_code == 409, conflict.text
                assert conflict.json()["Path"] == "app/db"
                assert conflict.json().get("Items") == items


async def test_a_repeated_query_parameter_is_checked_as_it_is_acted_on(tmp_path: Path) -> None:
    """The guard reads `?namespace=` and `?purge=` as the handlers do (a repeated parameter:
    its last value): a token may not be checked in one namespace and act in another."""
    with trio.fail_after(60):
        async with acl_agent(tmp_path / "data") as at:
            await _create_a(at)
            client, token = at.admin, at.resolver.token
            for doc in (mock_job("web"), in_namespace(mock_job("aweb"), "a")):
                assert (await client.post("/v1/jobs", json=doc)).status_code == 200
            reader = _as(token(namespace_policy("read-job")))
            for query in ("namespace=default&namespace=a", "namespace=a&namespace="):
                read = await client.get(f"/v1/job/aweb?{query}", headers=reader)
                assert read.status_code in (403, 404), (query, read.text)
            writer_a = _as(token(namespace_policy("submit-job", "read-job", namespace="a")))
            stop = await client.delete("/v1/job/web?namespace=a&namespace=default",
                                       headers=writer_a)
            assert stop.status_code == 403, stop.text
            deregister = _as(token(namespace_policy("deregister-job", "read-job")))
            purge = await client.delete("/v1/job/web?purge=false&purge=true",
                                        headers=deregister)
            assert purge.status_code == 403, purge.text
            assert (await client.get("/v1/job/web")).status_code == 200  # still there
