"""Task `identity` blocks and the job's `ui` block in job files (layer 0): Nomad's JSON names,
the default identity every task gets (moved out of `Identities`, audience nomadproject.io),
HCL and JSON giving the same job, and Nomad's validation messages."""

from __future__ import annotations

import json

import pytest

from tests.jobspec_support import problems_of
from yurt.runtime.jobspec import encode_job, parse_job
from yurt.runtime.lib.durations import HOUR
from yurt.runtime.structs.identity import JobUIConfig, JobUILink, WorkloadIdentity


def hcl(task_block: str = "", job_block: str = "") -> str:
    """A job whose line 2 holds `job_block` and line 6 `task_block`."""
    return f'''job "example" {{
  {job_block}
  group "cache" {{
    task "redis" {{
      driver = "mock_driver"
      {task_block}
    }}
  }}
}}
'''


def test_nomad_init_identity_becomes_the_default_identity() -> None:
    job = parse_job(hcl("identity {\n env = true\n file = true\n }"))
    task = job.task_groups[0].tasks[0]
    assert task.default_identity == WorkloadIdentity(name="default", aud=["nomadproject.io"],
                                                     env=True, file=True)
    assert task.identities == []
    encoded = json.loads(encode_job(job))["Job"]["TaskGroups"][0]["Tasks"][0]
    assert encoded["Identity"] == {
        "Name": "default", "Audience": ["nomadproject.io"], "ChangeMode": "", "ChangeSignal": "",
        "Env": True, "File": True, "Filepath": "", "ServiceName": "", "TTL": 0,
        "ExtraClaims": []}
    assert encoded["Identities"] == []


def test_every_task_gets_a_default_identity_and_named_ones_stay_apart() -> None:
    job = parse_job(hcl('identity {\n name = "vault_default"\n aud = ["vault.io"]\n'
                        ' ttl = "1h"\n change_mode = "signal"\n change_signal = "sighup"\n }'))
    task = job.task_groups[0].tasks[0]
    assert task.default_identity == WorkloadIdentity(name="default", aud=["nomadproject.io"])
    assert task.identities == [WorkloadIdentity(name="vault_default", aud=["vault.io"], ttl=HOUR,
                                                change_mode="signal", change_signal="SIGHUP")]
    # The default identity's audience is Nomad's, whatever the job says.
    job = parse_job(hcl('identity {\n name = "default"\n aud = ["elsewhere"]\n }'))
    assert job.task_groups[0].tasks[0].default_identity.aud == [  # type: ignore[union-attr]
        "nomadproject.io"]


def test_ui_block() -> None:
    job = parse_job(hcl(job_block='ui {\n description = "Nomad **Example** Job"\n'
                                  ' link {\n label = "Learn more about Nomad"\n'
                                  ' url = "https://developer.hashicorp.com/nomad"\n }\n'
                                  ' link {\n label = "Two"\n url = "https://example.com"\n }\n }'))
    assert job.ui == JobUIConfig(description="Nomad **Example** Job", link=[
        JobUILink("Learn more about Nomad", "https://developer.hashicorp.com/nomad"),
        JobUILink("Two", "https://example.com")])
    assert json.loads(encode_job(job))["Job"]["UI"] == {
        "Description": "Nomad **Example** Job",
        "Links": [{"Label": "Learn more about Nomad",
                   "URL": "https://developer.hashicorp.com/nomad"},
                  {"Label": "Two", "URL": "https://example.com"}]}


def test_hcl_and_its_json_give_the_same_job() -> None:
    job = parse_job(hcl('identity {\n file = true\n }\n identity {\n name = "x"\n'
                        ' aud = ["a"]\n ttl = "5m"\n }',
                        'ui {\n description = "d"\n }'))
    assert parse_job(encode_job(job).decode(), filename="job.json") == job


def test_nomad_run_output_json_with_identity_in_identity_field_parses() -> None:
    """`nomad job run -output` writes the default identity under `Identity`."""
    doc = json.loads(encode_job(parse_job(hcl())))
    task = doc["Job"]["TaskGroups"][0]["Tasks"][0]
    task["Identity"] = {"Name": "", "Audience": None, "Env": True, "File": True,
                        "ChangeMode": "", "ChangeSignal": "", "ServiceName": "", "TTL": 0}
    task["Identities"] = None
    doc["Job"]["UI"] = {"Description": "x", "Links": None}
    job = parse_job(json.dumps(doc))
    identity = job.task_groups[0].tasks[0].default_identity
    assert identity == WorkloadIdentity(name="default", aud=["nomadproject.io"], env=True,
                                        file=True)
    assert job.ui == JobUIConfig(description="x")


@pytest.mark.parametrize(("block", "message"), [
    ('name = "no spaces"', 'Identity "no spaces" is invalid: invalid name "no spaces". Must '
                           "match regex ^[a-zA-Z0-9-_]{1,128}$"),
    ('name = "x"\n aud = ["a", ""]', 'Identity "x" is invalid: an empty string is an invalid '
                                     "audience (2)"),
    ('name = "x"\n change_signal = "SIGHUP"',
     'Identity "x" is invalid: can only use change_signal="SIGHUP" with change_mode="signal"'),
    ('name = "x"\n change_mode = "signal"',
     'Identity "x" is invalid: change_signal must be specified when using '
     'change_mode="signal"'),
    ('name = "x"\n change_mode = "reload"', 'Identity "x" is invalid: invalid change_mode: '
                                            "reload"),
    ('ttl = "1h"', 'Identity "default" is invalid: ttl for default identity not yet supported'),
    ('name = "x"\n filepath = "secrets/x.jwt"',
     'Identity "x" is invalid: file parameter must be true in order to specify filepath'),
])
def test_identity_validation_messages(block: str, message: str) -> None:
    ((problem),) = problems_of(hcl(f"identity {{\n {block}\n }}"))
    assert problem.line == 6
    assert problem.message == message


def test_two_default_identities_are_refused() -> None:
    problems = problems_of(hcl("identity {\n env = true\n }\n"
                               '      identity {\n name = "default"\n }'))
    assert [(p.line, p.field, p.message) for p in problems] == [
        (9, "job.example.group.cache.task.redis.identity.default",
         "Duplicate default identities found")]


def test_ui_description_is_bounded() -> None:
    ((problem,),) = [problems_of(hcl(job_block=f'ui {{ description = "{"d" * 1001}" }}'))]
    assert (problem.line, problem.field) == (2, "job.example.ui")
    assert problem.message == "UI description must be under 1000 characters, currently 1001"
