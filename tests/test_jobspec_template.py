"""The `template` block in job files (layer 0): heredoc data kept intact for the template
engine (`{{ }}` untouched, `$${` unescaped as HCL does), Nomad's canonical defaults, the same
job from HCL and from `nomad job run -output` JSON giving one struct, and Nomad's
`Template.Validate` messages on the file, line and field they are about."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from tests.jobspec_support import problems_of
from yurt.runtime.jobspec import load_job, parse_job
from yurt.runtime.jobspec.rules_template import escapes_alloc_dir
from yurt.runtime.lib.durations import SECOND
from yurt.runtime.structs.template import ChangeScript, Template, WaitConfig


def hcl(*blocks: str) -> str:
    body = "\n".join(f"      template {{\n{b}\n      }}" for b in blocks)
    return f'''job "web" {{
  group "api" {{
    task "t" {{
      driver = "mock_driver"
{body}
    }}
  }}
}}
'''


def templates(text: str) -> list[Template]:
    return parse_job(text).task_groups[0].tasks[0].templates


HEREDOC = '''        data = <<EOH
{{ range nomadService "web" }}server {{ .Address }}:{{ .Port }};
{{ end }}{{- with nomadVar "nomad/jobs/web" }}{{ .user }}{{ end }}
user = "$${USER}" home = "${HOME}"
EOH
        destination = "local/app.conf"'''


def test_heredoc_data_reaches_the_engine_intact() -> None:
    (tmpl,) = templates(hcl(HEREDOC))
    assert tmpl.data.startswith('{{ range nomadService "web" }}server {{ .Address }}:')
    assert '{{- with nomadVar "nomad/jobs/web" }}{{ .user }}{{ end }}' in tmpl.data
    assert 'user = "${USER}" home = "${HOME}"' in tmpl.data


def test_defaults_are_nomads_canonical_ones() -> None:
    (tmpl,) = templates(hcl('        data = "x"\n        destination = "local/x"'))
    assert tmpl == Template(data="x", destination="local/x", change_mode="restart",
                            splay=5 * SECOND, perms="0644", left_delimiter="{{",
                            right_delimiter="}}")


def test_signal_mode_defaults_to_sighup_and_upper_cases() -> None:
    a, b = templates(hcl('        data = "x"\n        destination = "a"\n'
                         '        change_mode = "signal"',
                         '        data = "x"\n        destination = "b"\n'
                         '        change_mode = "signal"\n        change_signal = "sigusr1"'))
    assert (a.change_signal, b.change_signal) == ("SIGHUP", "SIGUSR1")


def test_an_unknown_signal_registers_as_in_nomad() -> None:
    # Nomad parses the name when the task's template manager starts, not at registration
    # (tests/test_template_hook.py: the task then fails).
    (tmpl,) = templates(hcl('        data = "x"\n        destination = "a"\n'
                            '        change_mode = "signal"\n        change_signal = "SIGFOO"'))
    assert tmpl.change_signal == "SIGFOO"


def test_every_field_from_hcl() -> None:
    (tmpl,) = templates(hcl('''        source = "local/in.tpl"
        destination = "local/out"
        change_mode = "script"
        change_script {
          command = "/bin/reload"
          args = ["-q"]
          timeout = "3s"
          fail_on_error = true
        }
        splay = "10s"
        perms = "0600"
        uid = 1000
        gid = 1000
        left_delimiter = "[["
        right_delimiter = "]]"
        env = false
        wait {
          min = "2s"
          max = "10s"
        }
        error_on_missing_key = true'''))
    assert tmpl == Template(source="local/in.tpl", destination="local/out", change_mode="script",
                            change_script=ChangeScript(command="/bin/reload", args=["-q"],
                                                       timeout=3 * SECOND, fail_on_error=True),
                            splay=10 * SECOND, perms="0600", uid=1000, gid=1000,
                            left_delimiter="[[", right_delimiter="]]",
                            wait=WaitConfig(min=2 * SECOND, max=10 * SECOND),
                            error_on_missing_key=True)


# `nomad job run -output` for the HCL job above (trimmed to the task).
NOMAD_OUTPUT_TEMPLATE = {
    "ChangeMode": "script", "ChangeScript": {
        "Args": ["-q"], "Command": "/bin/reload", "FailOnError": True,
        "RunOnFirstRender": False, "Timeout": 3000000000},
    "ChangeSignal": "", "DestPath": "local/out", "EmbeddedTmpl": "", "Envvars": False,
    "ErrMissingKey": True, "Gid": 1000, "LeftDelim": "[[", "Once": False, "Perms": "0600",
    "RightDelim": "]]", "SourcePath": "local/in.tpl", "Splay": 10000000000, "Uid": 1000,
    "VaultGrace": 0, "Wait": {"Max": 10000000000, "Min": 2000000000},
}


def test_nomad_output_json_parses_to_the_same_template() -> None:
    job = {"Job": {"ID": "web", "TaskGroups": [{"Name": "api", "Tasks": [
        {"Name": "t", "Driver": "mock_driver", "Templates": [NOMAD_OUTPUT_TEMPLATE]}]}]}}
    (tmpl,) = parse_job(json.dumps(job)).task_groups[0].tasks[0].templates
    assert json.loads(msgspec.json.encode(tmpl)) == NOMAD_OUTPUT_TEMPLATE
    assert tmpl.change_script is not None
    assert tmpl.change_script.timeout == 3 * SECOND


@pytest.mark.parametrize(("block", "line", "field", "message"), [
    ('        destination = "local/x"', 5, "job.web.group.api.task.t.template.0",
     "Must specify a source path or have an embedded template"),
    ('        data = "x"', 5, "job.web.group.api.task.t.template.0.destination",
     "Must specify a destination for the template"),
    ('        data = "x"\n        destination = "../../../etc/passwd"', 7,
     "job.web.group.api.task.t.template.0.destination",
     "destination escapes allocation directory"),
    ('        data = "x"\n        destination = "a"\n        change_mode = "reload"', 8,
     "job.web.group.api.task.t.template.0.change_mode",
     "Invalid change mode. Must be one of the following: noop, signal, script, restart"),
    ('        data = "x"\n        destination = "a"\n        change_mode = "signal"\n'
     '        env = true', 9, "job.web.group.api.task.t.template.0.env",
     "cannot use signals with env var templates"),
    ('        data = "x"\n        destination = "a"\n        change_mode = "script"', 5,
     "job.web.group.api.task.t.template.0.change_script",
     "must specify change script configuration value when change mode is script"),
    ('        data = "x"\n        destination = "a"\n        splay = "-1s"', 8,
     "job.web.group.api.task.t.template.0.splay", "Must specify positive splay value"),
    ('        data = "x"\n        destination = "a"\n        perms = "0999"', 8,
     "job.web.group.api.task.t.template.0.perms",
     'Failed to parse "0999" as octal: strconv.ParseUint: parsing "0999": invalid syntax'),
    ('        data = "x"\n        destination = "a"\n        perms = "77777"', 8,
     "job.web.group.api.task.t.template.0.perms",
     'Failed to parse "77777" as octal: strconv.ParseUint: parsing "77777": value out of range'),
    ('        data = "x"\n        destination = "a"\n        wait {\n          min = "5s"\n'
     '          max = "1s"\n        }', 9, "job.web.group.api.task.t.template.0.wait.min",
     "wait min 5s is greater than max 1s"),
    ('        data = "x"\n        destination = "a"\n        nonsense = 1', 8,
     "job.web.group.api.task.t.template.0.nonsense", 'unknown field "nonsense"'),
])
def test_nomads_checks(block: str, line: int, field: str, message: str) -> None:
    (problem,) = problems_of(hcl(block))
    assert (problem.line, problem.field) == (line, field)
    assert problem.message.startswith(message)


def test_two_templates_on_one_destination() -> None:
    (problem,) = problems_of(hcl('        data = "x"\n        destination = "local/a"',
                                 '        data = "y"\n        destination = "local/a"'))
    assert problem.message == "Template 2 has same destination as 1"
    assert problem.field == "job.web.group.api.task.t.template.1.destination"


@pytest.mark.parametrize(("dest", "escapes"), [
    ("local/x", False), ("/local/x", False), ("../alloc/x", False), ("../../x", True),
    ("local/../../../x", True), ("..", False), ("../..", True), ("/../../x", True),
])
def test_escapes_alloc_dir(dest: str, escapes: bool) -> None:
    assert escapes_alloc_dir(dest) is escapes


def test_the_example_job_parses() -> None:
    root = Path(__file__).parent.parent
    job = load_job(root / "examples/service-template.nomad.hcl")
    conf, env = job.task_groups[0].tasks[0].templates
    assert conf.data == '{{- with nomadVar "nomad/jobs/greeter" }}{{ .greeting }}{{ end }}\n'
    assert (conf.change_mode, conf.change_signal, conf.perms) == ("signal", "SIGHUP", "0640")
    assert env.env
    assert env.destination == "secrets/greeter.env"


def test_heredocs_keep_their_last_newline_as_hcl_does() -> None:
    (tmpl,) = templates(hcl(HEREDOC))
    assert tmpl.data.endswith('home = "${HOME}"\n')
    trimmed, empty, quoted = templates(hcl(
        '        data = <<-EOT\n          a\n            b\n          EOT\n'
        '        destination = "x"',
        '        data = <<EOT\nEOT\n        source = "local/in"\n        destination = "y"',
        '        data = "no newline"\n        destination = "z"'))
    assert trimmed.data == "a\n  b\n"
    assert empty.data == ""
    assert quoted.data == "no newline"
