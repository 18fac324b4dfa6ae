"""Durations on the command line are Go durations, as everywhere else in yurt and Nomad
(runtime/cli/durationtype.py): `yurt nodesim --duration 300s` (layer 0, click's runner)."""

from __future__ import annotations

import click
from click.testing import CliRunner

from yurt.runtime.cli.durationtype import GO_DURATION
from yurt.runtime.cli.nodesim import nodesim


@click.command()
@click.option("--for", "for_", type=GO_DURATION)
def show(for_: float) -> None:
    click.echo(repr(for_))


def test_go_durations_become_seconds() -> None:
    for text, seconds in (("300s", 300.0), ("5m", 300.0), ("1h30m", 5400.0),
                          ("250ms", 0.25), ("0", 0.0)):
        done = CliRunner().invoke(show, ["--for", text])
        assert (done.exit_code, done.output) == (0, f"{seconds!r}\n"), text


def test_a_bare_number_or_a_typo_is_refused_with_what_was_expected() -> None:
    for text in ("300", "5 minutes", "s"):
        done = CliRunner().invoke(show, ["--for", text])
        assert done.exit_code == 2, text
        assert "Invalid value for '--for'" in done.output, done.output
        assert "expected" in done.output, done.output


def test_nodesim_takes_a_go_duration() -> None:
    (option,) = [p for p in nodesim.params if p.name == "duration"]
    assert option.type is GO_DURATION
    done = CliRunner().invoke(nodesim, ["--servers", "http://127.0.0.1:1", "--nodes", "1",
                                        "--duration", "300"])
    assert done.exit_code == 2
    assert "Invalid value for '--duration'" in done.output, done.output
