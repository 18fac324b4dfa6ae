"""The root loads its commands lazily (runtime/cli/lazy.py): `--help` lists them without
importing them, a command imports only its own group, and what `--help` says of a command
before loading is what the command says of itself once loaded."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest

from yurt.runtime.cli.lazy import LazyGroup, short_help_of

#: The modules that hold commands; none may load for `yurt --help`.
COMMAND_MODULES = (
    "yurt.runtime.cli.job_group", "yurt.runtime.cli.alloc_group", "yurt.runtime.cli.node_group",
    "yurt.runtime.cli.acl_group", "yurt.runtime.cli.daemon_verbs", "yurt.runtime.cli.jobs",
    "yurt.runtime.cli.deployment", "yurt.runtime.cli.operator", "yurt.runtime.cli.vars",
    "yurt.runtime.cli.service", "yurt.runtime.cli.status", "yurt.runtime.cli.fmt",
    "yurt.runtime.cli.api_client",
)


def _probe(code: str) -> object:
    """Run `code` in a fresh interpreter (this one has imported everything long ago); its
    last stdout line, as JSON."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def test_help_lists_every_command_and_imports_none() -> None:
    code = ("import sys, json, io, contextlib\n"
            "from yurt.runtime.cli import cli\n"
            "out = io.StringIO()\n"
            "with contextlib.redirect_stdout(out):\n"
            "    try:\n"
            "        cli.main(['--help'], prog_name='yurt', standalone_mode=False)\n"
            "    except SystemExit:\n"
            "        pass\n"
            f"loaded = [m for m in {COMMAND_MODULES!r} if m in sys.modules]\n"
            "print(json.dumps({'loaded': loaded, 'help': out.getvalue()}))\n")
    result = _probe(code)
    assert isinstance(result, dict)
    assert result["loaded"] == []
    for name in ("job", "alloc", "node", "status", "operator", "fmt", "server", "version"):
        assert f"\n  {name} " in result["help"]


def test_a_command_loads_its_own_group_only() -> None:
    code = ("import sys, json\n"
            "from yurt.runtime.cli import cli\n"
            "cli.get_command(None, 'alloc')\n"
            f"print(json.dumps([m for m in {COMMAND_MODULES!r} if m in sys.modules]))\n")
    loaded = _probe(code)
    assert "yurt.runtime.cli.alloc_group" in loaded  # type: ignore[operator]
    for other in ("yurt.runtime.cli.job_group", "yurt.runtime.cli.operator",
                  "yurt.runtime.cli.deployment", "yurt.runtime.cli.node_group"):
        assert other not in loaded  # type: ignore[operator]


def test_the_help_table_says_what_each_command_says_of_itself() -> None:
    code = ("import json\n"
            "from yurt.runtime.cli import cli\n"
            "from yurt.runtime.cli.lazy import short_help_of\n"
            "table = {n: e.short_help for n, e in cli.lazy.items()}\n"
            "loaded = {n: short_help_of(c) for n, c in cli.load_all().items()}\n"
            "print(json.dumps({'table': table, 'loaded': loaded}))\n")
    result = _probe(code)
    assert isinstance(result, dict)
    table, loaded = result["table"], result["loaded"]
    assert set(table) <= set(loaded)
    assert {n: loaded[n] for n in table} == table



CALLS: list[str] = []


def register_two(group: click.Group) -> None:
    CALLS.append("two")
    for name in ("alpha", "beta"):
        group.add_command(click.Command(name, help=f"The {name} verb."))


def register_nothing(group: click.Group) -> None:
    CALLS.append("nothing")


def test_a_registrar_of_several_names_runs_once_and_dresses_each() -> None:
    CALLS.clear()
    group = LazyGroup("root")
    group.add_lazy(("alpha", "beta"), f"{__name__}:register_two",
                   ("The alpha verb.", "The beta verb."))
    dressed: list[str] = []
    group.on_load.append(lambda command, name: dressed.append(name))
    alpha = group.get_command(None, "alpha")
    beta = group.get_command(None, "beta")
    assert alpha is not None
    assert beta is not None
    assert CALLS == ["two"]
    assert sorted(dressed) == ["alpha", "beta"]
    assert group.lazy == {}
    assert short_help_of(alpha) == "The alpha verb."


def test_a_registrar_that_misses_its_name_is_a_bug() -> None:
    group = LazyGroup("root")
    group.add_lazy("gamma", f"{__name__}:register_nothing", "Gamma.")
    with pytest.raises(RuntimeError, match="did not register 'gamma'"):
        group.get_command(None, "gamma")
    assert group.get_command(None, "unknown") is None
