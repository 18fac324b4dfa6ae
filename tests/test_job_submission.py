"""A job's submission (Nomad 1.6+): the source a register sends beside the job, kept with the
version it stored and read back by `GET /v1/job/<id>/submission?version=N`.

Pure rules first (the body's shape, Nomad's size limit and its warning); then the API over an
embedded agent's real SQLite file (kept across a restart), over two `yurt server` processes
sharing a real etcd, and `yurt job run -var … -var-file …` end to end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from tests.agent_support import mock_job, running_agent
from tests.cli_proc_support import yurt
from tests.cluster_support import cluster
from yurt.runtime.structs.submission import (
    JOB_MAX_SOURCE_SIZE,
    JobSubmission,
    oversize_warning,
    si_bytes,
    submission_from_body,
    submission_size,
)

# ------------------------------------------------------------------------------ pure rules


def test_the_body_submission_keeps_what_the_client_sets_only() -> None:
    sub = submission_from_body({"Source": "job {}", "Format": "hcl2", "Variables": "a = 1\n",
                                "VariableFlags": {"x": "1"}, "JobID": "forged",
                                "Version": 9, "JobModifyIndex": 9})
    assert sub == JobSubmission(source="job {}", format="hcl2", variables="a = 1\n",
                                variable_flags={"x": "1"})
    assert submission_from_body(None) is None
    assert submission_from_body({"Source": "s", "VariableFlags": {}}) == JobSubmission(
        source="s")


@pytest.mark.parametrize(("raw", "message"), [
    ("text", "Submission: expected an object"),
    ({"Source": 1}, "Submission.Source: expected a string"),
    ({"Variables": ["a"]}, "Submission.Variables: expected a string"),
    ({"VariableFlags": {"x": 1}}, "Submission.VariableFlags: expected an object of strings"),
    ({"VariableFlags": ["x=1"]}, "Submission.VariableFlags: expected an object of strings"),
])
def test_a_misshapen_submission_names_its_field(raw: Any, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message}$"):
        submission_from_body(raw)


def test_the_size_counts_source_variables_and_every_flag_in_bytes() -> None:
    sub = JobSubmission(source="é" * 10, variables="v" * 5, variable_flags={"ab": "cde"})
    assert submission_size(sub) == 20 + 5 + 5
    assert oversize_warning(JobSubmission(source="x" * JOB_MAX_SOURCE_SIZE)) is None
    assert oversize_warning(JobSubmission(source="x" * (JOB_MAX_SOURCE_SIZE + 1))) == (
        "job source size of 1.0 MB exceeds maximum of 1.0 MB and will be discarded")
    assert oversize_warning(JobSubmission(source="x" * 1500), limit=1000) == (
        "job source size of 1.5 kB exceeds maximum of 1.0 kB and will be discarded")


@pytest.mark.parametrize(("n", "text"), [(0, "0 B"), (9, "9 B"), (999, "999 B"),
                                         (1000, "1.0 kB"), (15_300_000, "15 MB"),
                                         (2_000_000_000, "2.0 GB")])
def test_sizes_are_worded_as_go_humanize_words_them(n: int, text: str) -> None:
    assert si_bytes(n) == text


# ------------------------------------------------------------------------------- the API

SOURCE = 'job "web" {\n  # as the user wrote it\n}\n'


def submitted(job_id: str, source: str = SOURCE, **flags: str) -> dict[str, Any]:
    return {**mock_job(job_id), "Submission": {"Source": source, "Format": "hcl2",
                                               "VariableFlags": flags or None,
                                               "Variables": "region = \"eu\"\n"}}


async def _submission(client: httpx2.AsyncClient, job_id: str, version: str
                      ) -> httpx2.Response:
    return await client.get(f"/v1/job/{job_id}/submission", params={"version": version})


async def test_a_submission_round_trips_through_the_agents_sqlite_file(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path, dev_mode=False) as a:
            c = a.client
            r = await c.post("/v1/jobs", json=submitted("web", x="1"))
            assert r.status_code == 200, r.text
            index = r.json()["JobModifyIndex"]
            # Registered again unchanged: no new version, the first submission stays.
            r = await c.post("/v1/jobs", json=submitted("web", source="other"))
            assert r.status_code == 200, r.text
            # A new version without a submission has none; the old one keeps its own.
            changed = mock_job("web", count=2)
            assert (await c.put("/v1/job/web", json=changed)).status_code == 200
            assert (await _submission(c, "web", "1")).status_code == 404
            # Over Nomad's limit: registered, with Nomad's warning, and not kept.
            huge = submitted("web", source="x" * (JOB_MAX_SOURCE_SIZE + 1))
            huge["Job"]["Meta"] = {"v": "2"}
            r = await c.post("/v1/jobs", json=huge)
            assert r.status_code == 200, r.text
            assert "job source size of 1.0 MB exceeds maximum of 1.0 MB and will be " \
                   "discarded" in r.json()["Warnings"]
            assert (await _submission(c, "web", "2")).status_code == 404
            for bad in ("", "x", "-1", "+1", " 1", "١"):
                r = await _submission(c, "web", bad)
                assert (r.status_code, r.text) == (
                    400, "Unable to parse job submission version parameter")
            r = await _submission(c, "nothing", "0")
            assert (r.status_code, r.text) == (404, "job source not found")
            r = await c.post("/v1/jobs", json={**mock_job("bad"), "Submission": {"Source": 1}})
            assert (r.status_code, r.text) == (400, "Submission.Source: expected a string")
        async with running_agent(tmp_path, dev_mode=False) as a:  # from the file
            r = await _submission(a.client, "web", "0")
            assert r.status_code == 200, r.text
            assert r.json() == {"Source": SOURCE, "Format": "hcl2",
                                "VariableFlags": {"x": "1"},
                                "Variables": 'region = "eu"\n', "Namespace": "default",
                                "JobID": "web", "Version": 0, "JobModifyIndex": index}
            await a.client.delete("/v1/job/web", params={"purge": "true"})
            # Purged: its versions and their submissions go with it.
            assert (await _submission(a.client, "web", "0")).status_code == 404


async def test_only_the_tracked_versions_keep_their_submissions(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            for v in range(8):
                body = submitted("web", source=f"v{v}")
                body["Job"]["Meta"] = {"v": str(v)}
                assert (await a.client.post("/v1/jobs", json=body)).status_code == 200
            # Nomad keeps 6 versions (JobTrackedVersions) and the submissions with them.
            for v in range(8):
                r = await _submission(a.client, "web", str(v))
                assert r.status_code == (404 if v < 2 else 200), (v, r.text)
                if v >= 2:
                    assert r.json()["Source"] == f"v{v}"


@pytest.mark.slow
async def test_a_submission_registered_on_one_server_is_read_on_another(
        etcd_urls: list[str], etcd_prefix: bytes, tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with cluster(etcd_urls, etcd_prefix, tmp_path) as c:
            s1 = await c.server("s1")
            s2 = await c.server("s2")
            async with httpx2.AsyncClient(timeout=30) as client:
                body = submitted("web", x="1")
                body["Job"]["Datacenters"] = ["dc1"]
                r = await client.put(f"{s1.address}/v1/jobs", json=body)
                assert r.status_code == 200, r.text
                r = await client.get(f"{s2.address}/v1/job/web/submission",
                                     params={"version": "0"})
                assert r.status_code == 200, r.text
                got = r.json()
                assert (got["Source"], got["VariableFlags"], got["JobID"], got["Version"]) == (
                    SOURCE, {"x": "1"}, "web", 0)
                r = await client.get(f"{s2.address}/v1/job/web/submission",
                                     params={"version": "1"})
                assert (r.status_code, r.text) == (404, "job source not found")


# ----------------------------------------------------------------------------- the CLI

JOB_FILE = '''variable "x" {
  type = number
}
variable "region" {
  type = string
}
job "cli" {
  meta {
    x      = "${var.x}"
    region = var.region
  }
  group "g" {
    task "t" {
      driver = "mock_driver"
      config { run_for = "1h" }
      resources {
        cpu    = 1
        memory = 10
      }
    }
  }
}
'''


@pytest.mark.slow
async def test_job_run_sends_the_file_and_its_variables(tmp_path: Path) -> None:
    job_file, var_file = tmp_path / "cli.nomad.hcl", tmp_path / "vars.hcl"
    job_file.write_text(JOB_FILE)
    var_file.write_text('region = "eu"')
    with trio.fail_after(60):
        async with running_agent(tmp_path / "agent") as a:
            out = await yurt(a.address, "job", "run", "--detach", "-var", "x=1",
                             "-var-file", str(var_file), str(job_file))
            assert out.returncode == 0, out.stderr
            job = (await a.client.get("/v1/job/cli")).json()
            assert job["Meta"] == {"x": "1", "region": "eu"}
            r = await _submission(a.client, "cli", "0")
            assert r.status_code == 200, r.text
            assert r.json() == {"Source": JOB_FILE, "Format": "hcl2",
                                "VariableFlags": {"x": "1"},
                                "Variables": 'region = "eu"\n', "Namespace": "default",
                                "JobID": "cli", "Version": 0,
                                "JobModifyIndex": job["JobModifyIndex"]}
            out = await yurt(a.address, "job", "inspect", "-hcl", "-with-vars", "cli")
            assert out.returncode == 0, out.stderr
            assert out.stdout.decode() == JOB_FILE + "\n"  # Nomad's Output adds a newline
            assert "$ yurt job inspect -namespace default -hcl cli > cli.nomad.hcl\n" \
                   "$ yurt job run -var=x=1 '-var=region = \"eu\"' cli.nomad.hcl" in \
                   out.stderr.decode()
            out = await yurt(a.address, "job", "inspect", "-with-vars", "cli")
            assert (out.returncode, out.stderr) == (
                2, b"yurt: can only use -with-vars with -hcl\n")
            # Registered through the API without its source: nothing to show.
            assert (await a.client.post("/v1/jobs", json=mock_job("bare"))).status_code == 200
            out = await yurt(a.address, "job", "inspect", "-hcl", "bare")
            assert out.returncode == 1
            assert b"job 'bare' with version 0 couldn't be found" in out.stderr
