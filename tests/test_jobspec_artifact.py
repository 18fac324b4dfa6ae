"""The `artifact` stanza: HCL and Nomad JSON, Nomad's defaults and its validation messages."""

from __future__ import annotations

import json

import pytest

from tests.jobspec_support import problems_of
from yurt.runtime.jobspec import encode_job, parse_job
from yurt.runtime.jobspec.rules_artifact import checksum_problem, escapes_alloc_dir
from yurt.runtime.structs.artifact import TaskArtifact

SHA256 = "ab" * 32


def hcl(task_body: str) -> str:
    return f'''job "web" {{
  group "g" {{
    task "t" {{
      driver = "raw_exec"
      config {{
        command = "/bin/true"
      }}
{task_body}
    }}
  }}
}}
'''


def test_artifacts_in_hcl_get_nomads_defaults() -> None:
    job = parse_job(hcl(f'''      artifact {{
        source = "https://example.com/app.tar.gz"
        options {{
          checksum = "sha256:{SHA256}"
        }}
        headers {{
          X-Token = "secret"
        }}
      }}
      artifact {{
        source = "https://example.com/bin/tool?x=1"
        mode = "file"
        insecure = true
      }}
      artifact {{
        source = "file:///srv/conf"
        destination = "../alloc/conf"
        chown = true
      }}'''))
    assert job.task_groups[0].tasks[0].artifacts == [
        TaskArtifact(getter_source="https://example.com/app.tar.gz",
                     getter_options={"checksum": f"sha256:{SHA256}"},
                     getter_headers={"X-Token": "secret"}, getter_mode="any",
                     relative_dest="local/"),
        # File mode's default destination is `local/<path.Base(source)>`, query and all.
        TaskArtifact(getter_source="https://example.com/bin/tool?x=1", getter_mode="file",
                     getter_insecure=True, relative_dest="local/tool?x=1"),
        TaskArtifact(getter_source="file:///srv/conf", relative_dest="../alloc/conf",
                     chown=True),
    ]


def test_nomad_output_json_round_trips() -> None:
    """`nomad job run -output` spells every field, nulls included."""
    artifact = {"GetterSource": "https://example.com/a.zip", "GetterOptions": None,
                "GetterHeaders": None, "GetterMode": "any", "GetterInsecure": False,
                "RelativeDest": "local/", "Chown": False}
    doc = {"Job": {"ID": "web", "TaskGroups": [{"Name": "g", "Tasks": [
        {"Name": "t", "Driver": "raw_exec", "Config": {"command": "/bin/true"},
         "Artifacts": [artifact]}]}]}}
    job = parse_job(json.dumps(doc), filename="job.json")
    out = json.loads(encode_job(job))
    assert out["Job"]["TaskGroups"][0]["Tasks"][0]["Artifacts"] == [artifact]
    assert parse_job(encode_job(job).decode(), filename="again.json") == job


def test_problems_name_file_line_and_field_with_nomads_messages() -> None:
    problems = problems_of(hcl('''      artifact {
        mode = "bogus"
        destination = "../../etc"
        options {
          checksum = "sha256:abcd"
        }
      }'''))
    assert [(p.line, p.field, p.message) for p in problems] == [
        (8, "job.web.group.g.task.t.artifact.0", "source must be specified"),
        (9, "job.web.group.g.task.t.artifact.0.mode",
         'invalid artifact mode "bogus"; must be one of: any, file, dir'),
        (10, "job.web.group.g.task.t.artifact.0.destination",
         "destination escapes allocation directory"),
        (12, "job.web.group.g.task.t.artifact.0.options.checksum",
         "invalid sha256 checksum: abcd"),
    ]


def test_unknown_artifact_field_is_an_error() -> None:
    (p,) = problems_of(hcl('      artifact {\n        source = "x"\n        sorce = "y"\n      }'))
    assert p.field == "job.web.group.g.task.t.artifact.0.sorce"
    assert p.message.startswith('unknown field "sorce"; did you mean "source"?')


@pytest.mark.parametrize(("check", "message"), [
    (f"sha256:{SHA256}", None),
    (f"  md5:{'0' * 32}  ", None),
    (f"sha1:{'0' * 40}", None),
    (f"sha512:{'0' * 128}", None),
    ("sha256:${NOMAD_META_sum}", None),  # known only once interpolated
    ("   ", "checksum value cannot be empty"),
    ("abcd", 'checksum must be given as "type:value"; got "abcd"'),
    ("file:http://x/SUMS", 'checksum must be given as "type:value"; got "file:http://x/SUMS"'),
    ("sha256:xyz", "invalid checksum: encoding/hex: invalid byte: U+0078 'x'"),
    ("sha256:abc", "invalid checksum: encoding/hex: odd length hex string"),
    ("crc32:abcd", "unsupported checksum type: crc32"),
    ("md5:abcd", "invalid md5 checksum: abcd"),
])
def test_checksum_rules_are_nomads(check: str, message: str | None) -> None:
    assert checksum_problem(check) == message


@pytest.mark.parametrize(("dest", "escapes"), [
    ("local/", False), ("", False), ("/abs/is/task/relative", False), ("../alloc/x", False),
    ("..", False), ("../..", True), ("local/../../..", True), ("../../web/x", True),
    ("a/../../../x", True),
])
def test_destination_must_stay_in_the_allocation_directory(dest: str, escapes: bool) -> None:
    assert escapes_alloc_dir(dest) is escapes
