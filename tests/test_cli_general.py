"""Nomad's general options (runtime/cli/general.py): one precedence for every setting (flag,
then YURT_*, then NOMAD_*, then the default), the options on every remote verb and on no local
one, their help section, and the Go-style flags of `alloc exec` (pure: layer 1)."""

from __future__ import annotations

from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from yurt.runtime.cli import cli, general
from yurt.runtime.cli.flags import nomad_spelling
from yurt.runtime.cli.general import LOCAL, OPTIONS, GeneralOption, settings, take_go_flag
from yurt.runtime.cli.lazy import subcommand, subcommands

#: Every variable a setting may come from: scrubbed before each test.
ALL_VARS = [name for spec in OPTIONS for name in (spec.nomad_env, spec.yurt_env)]


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ALL_VARS:
        monkeypatch.delenv(name, raising=False)
    general._FLAGS.clear()
    yield
    general._FLAGS.clear()


# flag, YURT_ADDR, NOMAD_ADDR -> the address used and where it came from
PRECEDENCE = [
    ("", "", "", "http://127.0.0.1:4646", ""),
    ("", "", "http://n:1", "http://n:1", "NOMAD_ADDR"),
    ("", "http://y:1", "", "http://y:1", "YURT_ADDR"),
    ("", "http://y:1", "http://n:1", "http://y:1", "YURT_ADDR"),
    ("http://f:1", "", "http://n:1", "http://f:1", "-address"),
    ("http://f:1", "http://y:1", "", "http://f:1", "-address"),
    ("http://f:1", "http://y:1", "http://n:1", "http://f:1", "-address"),
]


@pytest.mark.parametrize(("flag", "yurt_env", "nomad_env", "used", "source"), PRECEDENCE)
def test_one_precedence_flag_then_yurt_then_nomad(
        monkeypatch: pytest.MonkeyPatch, flag: str, yurt_env: str, nomad_env: str, used: str,
        source: str) -> None:
    monkeypatch.setenv("YURT_ADDR", yurt_env)  # empty: as if not set, as Nomad reads it
    monkeypatch.setenv("NOMAD_ADDR", nomad_env)
    general._FLAGS["address"] = flag or None
    got = settings()
    assert (got.address, got.source_of("address")) == (used, source)


@pytest.mark.parametrize("spec", OPTIONS, ids=lambda s: s.name)
def test_every_setting_follows_the_same_precedence(monkeypatch: pytest.MonkeyPatch,
                                                   spec: general._Spec) -> None:
    value = "1" if not spec.metavar else "v"
    monkeypatch.setenv(spec.nomad_env, value)
    assert settings().source_of(spec.name) == spec.nomad_env
    monkeypatch.setenv(spec.yurt_env, value)
    assert settings().source_of(spec.name) == spec.yurt_env
    general._FLAGS[spec.name] = True if not spec.metavar else "f"
    assert settings().source_of(spec.name) == f"-{spec.name}"


def test_namespace_and_region_become_query_parameters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOMAD_NAMESPACE", "team")
    monkeypatch.setenv("NOMAD_REGION", "global")
    assert settings().query() == [("namespace", "team"), ("region", "global")]
    monkeypatch.setenv("NOMAD_NAMESPACE", "")
    monkeypatch.setenv("NOMAD_REGION", "")
    assert settings().query() == []


def test_skip_verify_reads_gos_booleans_and_ignores_others(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for raw, on in (("1", True), ("true", True), ("0", False), ("F", False)):
        monkeypatch.setenv("NOMAD_SKIP_VERIFY", raw)
        assert settings().skip_verify is on
    monkeypatch.setenv("NOMAD_SKIP_VERIFY", "yes")  # Nomad ignores it: verification stays on
    general._WARNED.clear()
    assert settings().skip_verify is False
    assert settings().skip_verify is False
    assert capsys.readouterr().err.count("ignoring NOMAD_SKIP_VERIFY='yes': not a boolean") == 1


def _leaves(group: click.Group, path: tuple[str, ...] = ()
            ) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    for name, sub in subcommands(group).items():
        if isinstance(sub, click.Group):
            yield from _leaves(sub, (*path, name))
        else:
            yield (*path, name), sub


def test_every_remote_verb_has_the_general_options_and_no_local_one_does() -> None:
    remote = 0
    for path, command in _leaves(cli):
        names = {o for p in command.params if isinstance(p, GeneralOption) for o in p.opts}
        if path in LOCAL or any(p[: len(path)] == path for p in LOCAL if len(p) < len(path)):
            assert not names, path
        elif command.context_settings.get("ignore_unknown_options"):
            assert not names, path  # alloc exec, action: their own parser (take_go_flag)
        else:
            remote += 1
            assert {"--address", "--region", "--ca-cert", "--tls-skip-verify"} <= names, path
    assert remote > 50  # the walk reached the tree


def test_a_commands_own_namespace_option_is_kept() -> None:
    var_put = subcommand(subcommand(cli, "var"), "put")  # type: ignore[arg-type]
    own = [p for p in var_put.params if "--namespace" in p.opts]
    assert len(own) == 1
    assert not isinstance(own[0], GeneralOption)
    assert any("--address" in p.opts for p in var_put.params)


def test_help_shows_a_general_options_section() -> None:
    result = CliRunner().invoke(cli, ["job", "status", "--help"])
    assert result.exit_code == 0
    own, _, rest = result.output.partition("General Options:")
    assert "-json" in own
    assert "--address" not in own
    assert "--address <addr>" in rest
    assert "NOMAD_ADDR" in rest
    assert "--tls-server-name" in rest


def test_nomads_single_dash_spelling_reaches_the_options() -> None:
    assert nomad_spelling(cli, ["job", "status", "-address=http://h:1", "-ca-cert", "c", "j"]
                          ) == ["job", "status", "--address=http://h:1", "--ca-cert", "c", "j"]
    # alloc logs has `-c`: `-ca-cert` must still be the general option, not `-c a-cert`.
    assert nomad_spelling(cli, ["alloc", "logs", "-ca-cert=x", "ab"])[2] == "--ca-cert=x"


def test_go_style_parsers_take_the_general_flags() -> None:
    args = ["-address", "http://h:1", "-tls-skip-verify", "-namespace=team", "-task", "t"]
    assert take_go_flag(args, 0) == 2
    assert take_go_flag(args, 2) == 3
    assert take_go_flag(args, 3) == 4
    assert take_go_flag(args, 4) is None
    got = settings()
    assert (got.address, got.skip_verify, got.namespace) == ("http://h:1", True, "team")
    with pytest.raises(general.GeneralOptionError, match="flag needs an argument: -address"):
        take_go_flag(["-address"], 0)
    from yurt.runtime.cli.exec import parse_flags

    flags, rest = parse_flags(["-insecure", "-ca-cert=/ca.pem", "-task", "t", "ab12", "ls"])
    assert (flags.task, rest) == ("t", ["ab12", "ls"])
    assert settings().ca_cert == "/ca.pem"


def test_a_job_file_without_a_namespace_goes_to_the_general_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from yurt.runtime.structs import Job

    job = Job(id="web", name="web")
    assert general.into_namespace(job) is job
    monkeypatch.setenv("NOMAD_NAMESPACE", "team")
    assert general.into_namespace(job).namespace == "team"
    own = Job(id="web", name="web", namespace="ops")
    assert general.into_namespace(own).namespace == "ops"  # the file's namespace wins
    monkeypatch.setenv("NOMAD_NAMESPACE", "*")  # a wildcard lists; it registers nowhere
    assert general.into_namespace(job).namespace == "default"


@pytest.mark.parametrize(("variable", "flag"), [("NOMAD_ADDR", ()), ("YURT_ADDR", ()),
                                                 ("", ("-address=notaurl",))])
def test_a_malformed_address_names_where_it_came_from(variable: str, flag: tuple[str, ...]
                                                      ) -> None:
    env = {variable: "notaurl"} if variable else {}
    result = CliRunner().invoke(cli, nomad_spelling(cli, ["job", "status", *flag]), env=env)
    assert result.exit_code == 2
    assert result.output.startswith(f"yurt: {variable or '-address'}='notaurl' is not an "
                                    "http(s) address"), result.output


@pytest.mark.parametrize("verb", [["alloc", "exec"], ["action", "-job", "web"]], ids=" ".join)
def test_go_style_verbs_take_an_address_with_an_h_in_it(verb: list[str]) -> None:
    # `-address=http://…` holds an `h`: never read as click's `-h`, it reaches the agent.
    result = CliRunner().invoke(cli, [*verb, "-address=http://127.0.0.1:1", "abcd", "ls"])
    assert result.exit_code == 1, result.output
    assert "cannot reach the agent at http://127.0.0.1:1" in result.output
    helped = CliRunner().invoke(cli, [*verb, "-h"])
    assert helped.exit_code == 0
    assert helped.output.startswith(f"Usage: cli {verb[0]}")
