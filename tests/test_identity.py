"""Workload identities: Nomad's claims (layer 0), the signing key and its JWKS (layer 0, real
files), token files confined to the allocation directory, and a raw_exec task that gets its
tokens in `NOMAD_TOKEN` and `secrets/nomad_token`, verified with the key the agent serves at
`/.well-known/jwks.json` over a real socket (layer 2)."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from tests.agent_support import raw_job, running_agent
from yurt.hooks.identity import (
    IdentityError,
    token_env,
    token_file,
    wants_token,
    workload_claims,
    write_token,
)
from yurt.runtime.agent.agent import Agent
from yurt.runtime.lib.durations import HOUR
from yurt.runtime.server.workload_keys import WorkloadKeyError, b64url, load_or_create
from yurt.runtime.structs import Allocation, Job, Task, TaskGroup
from yurt.runtime.structs.identity import WorkloadIdentity, default_identity

NOW = 1_700_000_000_123_456_789


def _b64(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def verify(token: str, jwks: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The header and claims of `token` once its RS256 signature checks out against `jwks`."""
    header_b64, claims_b64, signature_b64 = token.split(".")
    header = json.loads(_b64(header_b64))
    (key,) = [k for k in jwks["keys"] if k["kid"] == header["kid"]]
    public = rsa.RSAPublicNumbers(int.from_bytes(_b64(key["e"]), "big"),
                                  int.from_bytes(_b64(key["n"]), "big")).public_key()
    public.verify(_b64(signature_b64), f"{header_b64}.{claims_b64}".encode(),
                  padding.PKCS1v15(), hashes.SHA256())
    return header, json.loads(_b64(claims_b64))


def alloc_for(job: Job) -> Allocation:
    return Allocation(id="2a4c1f0e-0000-4000-8000-00000000000a", namespace=job.namespace,
                      job_id=job.id, task_group="cache", job=job)


# --------------------------------------------------------------------------- claims


def test_default_identity_claims_are_nomads() -> None:
    job = Job(id="example", task_groups=[TaskGroup(name="cache")])
    task = Task(name="redis")
    claims = workload_claims(alloc_for(job), task, default_identity(), NOW, "jti-1")
    assert claims == {
        "nomad_namespace": "default", "nomad_job_id": "example",
        "nomad_allocation_id": "2a4c1f0e-0000-4000-8000-00000000000a", "nomad_task": "redis",
        "sub": "global:default:example:cache:redis:default", "aud": "nomadproject.io",
        "nbf": 1_700_000_000, "iat": 1_700_000_000, "jti": "jti-1"}


def test_named_identity_with_ttl_and_a_dispatched_parent() -> None:
    job = Job(id="batch/dispatch-1", parent_id="batch", region="eu", namespace="prod")
    wid = WorkloadIdentity(name="vault_default", aud=["vault.io", "other"], ttl=HOUR)
    claims = workload_claims(alloc_for(job), Task(name="t"), wid, NOW, "j")
    assert claims["nomad_job_id"] == "batch"  # Nomad's GetIDforWorkloadIdentity
    assert claims["sub"] == "eu:prod:batch:cache:t:vault_default"
    assert claims["aud"] == ["vault.io", "other"]
    assert claims["exp"] == 1_700_000_000 + 3600


def test_only_tasks_that_expose_an_identity_get_the_hook() -> None:
    assert not wants_token(Task(name="t"))
    assert not wants_token(Task(name="t", default_identity=default_identity()))
    assert wants_token(Task(name="t", identities=[WorkloadIdentity(name="x", file=True)]))
    assert wants_token(Task(name="t", default_identity=WorkloadIdentity(name="default",
                                                                        env=True)))


def test_token_names() -> None:
    named = WorkloadIdentity(name="extra")
    assert (token_env(default_identity()), token_file(default_identity())) == (
        "NOMAD_TOKEN", "secrets/nomad_token")
    assert (token_env(named), token_file(named)) == ("NOMAD_TOKEN_extra",
                                                     "secrets/nomad_extra.jwt")
    assert token_file(WorkloadIdentity(name="x", filepath="local/t.jwt")) == "local/t.jwt"


# --------------------------------------------------------------------------- the key


def test_key_is_made_once_private_and_verifies_what_it_signs(tmp_path: Path) -> None:
    signer = load_or_create(tmp_path / "server")
    key_file = tmp_path / "server" / "workload-key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    again = load_or_create(tmp_path / "server")
    assert again.key_id == signer.key_id
    assert "PRIVATE" not in repr(signer)
    token = signer.sign({"sub": "x"})
    header, claims = verify(token, again.jwks())
    assert header == {"alg": "RS256", "kid": signer.key_id, "typ": "JWT"}
    assert claims == {"sub": "x"}
    header_part, _, signature_part = token.split(".")
    forged = b64url(json.dumps({"sub": "y"}).encode())
    tampered = f"{header_part}.{forged}.{signature_part}"
    with pytest.raises(InvalidSignature):
        verify(tampered, signer.jwks())
    key_file.write_text("{}")
    with pytest.raises(WorkloadKeyError, match="is not a yurt workload key"):
        load_or_create(tmp_path / "server")


def test_token_files_stay_inside_the_allocation_directory(tmp_path: Path) -> None:
    task_dir = tmp_path / "alloc" / "t"
    (task_dir / "secrets").mkdir(parents=True)
    write_token(task_dir, "secrets/nomad_token", "tok", None)
    written = task_dir / "secrets" / "nomad_token"
    assert written.read_text() == "tok"
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    outside = tmp_path / "outside"
    outside.write_text("keep")
    link = task_dir / "secrets" / "link"
    link.symlink_to(outside)
    write_token(task_dir, "secrets/link", "tok", None)  # never through a link: replaced
    assert not link.is_symlink()
    assert link.read_text() == "tok"
    with pytest.raises(IdentityError):
        write_token(task_dir, "../../outside", "tok", None)
    assert outside.read_text() == "keep"


# --------------------------------------------------------------------------- end to end


async def wait_complete(agent: Agent, job_id: str) -> Allocation:
    """The job's one allocation once its task exited 0, waking on every server change."""
    while True:
        changed = agent.server.changed
        allocs = agent.server.job_allocs(job_id)
        if allocs and allocs[0].client_status in ("complete", "failed"):
            assert allocs[0].client_status == "complete", allocs[0].task_states
            return allocs[0]
        await changed.wait()


@pytest.mark.slow
async def test_a_task_gets_tokens_the_agent_jwks_verifies(tmp_path: Path) -> None:
    script = ('printf %s "$NOMAD_TOKEN" > local/env_token; '
              'printf %s "$NOMAD_TOKEN_extra" > local/env_extra')
    body = raw_job("example", script, job_type="batch")
    task = body["Job"]["TaskGroups"][0]["Tasks"][0]
    task["Identity"] = {"Env": True, "File": True}
    task["Identities"] = [{"Name": "extra", "Audience": ["x.io"], "Env": True, "File": True,
                           "TTL": HOUR}]
    with trio.fail_after(60):
        async with running_agent(tmp_path, token="s3cret") as a:
            r = await a.client.put("/v1/jobs", json=body)
            assert r.status_code == 200, r.text
            alloc = await wait_complete(a.agent, "example")
            task_dir = tmp_path / "alloc" / alloc.id / "t"
            # The key set is public, as Nomad's: no token needed even when the API wants one.
            async with httpx2.AsyncClient(base_url=a.address) as anonymous:
                jwks_answer = await anonymous.get("/.well-known/jwks.json")
                assert (await anonymous.get("/v1/jobs")).status_code == 403
                assert (await anonymous.post("/.well-known/jwks.json")).status_code == 405
            assert jwks_answer.status_code == 200, jwks_answer.text
            jwks = jwks_answer.json()
            env_token = (task_dir / "local" / "env_token").read_text()
            file_token = (task_dir / "secrets" / "nomad_token").read_text()
            assert env_token == file_token
            assert stat.S_IMODE(os.stat(task_dir / "secrets" / "nomad_token").st_mode) == 0o600
            _, claims = verify(env_token, jwks)
            assert {k: claims[k] for k in ("nomad_namespace", "nomad_job_id",
                                           "nomad_allocation_id", "nomad_task", "sub",
                                           "aud")} == {
                "nomad_namespace": "default", "nomad_job_id": "example",
                "nomad_allocation_id": alloc.id, "nomad_task": "t",
                "sub": "global:default:example:g:t:default", "aud": "nomadproject.io"}
            assert "exp" not in claims
            extra = (task_dir / "local" / "env_extra").read_text()
            assert extra == (task_dir / "secrets" / "nomad_extra.jwt").read_text()
            _, extra_claims = verify(extra, jwks)
            assert extra_claims["aud"] == "x.io"
            assert extra_claims["exp"] - extra_claims["iat"] == 3600
            # The job as the API returns it: the default identity in Identity.
            job = (await a.client.get("/v1/job/example")).json()
            returned = job["TaskGroups"][0]["Tasks"][0]
            assert returned["Identity"]["Name"] == "default"
            assert returned["Identity"]["Audience"] == ["nomadproject.io"]
            assert [i["Name"] for i in returned["Identities"]] == ["extra"]


@pytest.mark.slow
async def test_a_task_without_env_or_file_gets_no_token(tmp_path: Path) -> None:
    body = raw_job("plain", 'printf %s "${NOMAD_TOKEN-unset}" > local/env_token',
                   job_type="batch")
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            r = await a.client.put("/v1/jobs", json=body)
            assert r.status_code == 200, r.text
            alloc = await wait_complete(a.agent, "plain")
            task_dir = tmp_path / "alloc" / alloc.id / "t"
            assert (task_dir / "local" / "env_token").read_text() == "unset"
            assert not (task_dir / "secrets" / "nomad_token").exists()
