"""`yurt agent-info` and `yurt version`: what the agent says of itself, and what this
program is (Nomad's command/agent_info.go and command/version.go).

`agent-info` prints `/v1/agent/self`'s `stats` as Nomad does: each section's name on a line of
its own, sections sorted, then `  key = value` lines sorted by key; `-json` and `-t` print the
whole answer (config, member, stats) as the API gives it. It needs `agent:read` where ACLs
are on (the API's table, runtime/api/authz_table.py).

`version` reads the installed metadata (importlib.metadata, about 17 ms: only inside the
command) and prints `yurt v<version>` where Nomad prints `Nomad v<version>`, then the Nomad
HTTP API it speaks. It needs no agent.

Exit codes: 0 ok, 1 the agent could not be reached or refused, 2 bad input.
"""

from __future__ import annotations

from typing import Any, Final

import click

from yurt.runtime.cli.output import check_format, echo, emit

#: The Nomad HTTP API yurt serves and its verbs speak, and the Nomad release its behaviour
#: is read from (the reference source under /work/.mirror is Nomad 2.0.6-dev).
NOMAD_API: Final = "v1"
NOMAD_REFERENCE: Final = "2.0.6"


def stats_text(stats: dict[str, dict[str, Any]]) -> str:
    """Nomad's `agent-info` text: sections sorted, their keys sorted, `  key = value`."""
    lines: list[str] = []
    for section in sorted(stats):
        lines.append(section)
        values = stats[section] or {}
        lines += [f"  {key} = {values[key]}" for key in sorted(values)]
    return "\n".join(lines)


def version_text(version: str) -> str:
    return (f"yurt v{version}\n"
            f"Nomad HTTP API {NOMAD_API} (behaviour of Nomad {NOMAD_REFERENCE})")


def register(cli: click.Group) -> None:
    """Add `agent-info` and `version` to `yurt`."""

    @cli.command("agent-info")
    @click.option("-json", "--json", "json_output", is_flag=True,
                  help="Print the API's JSON instead of text.")
    @click.option("-t", "template", default="", metavar="TEMPLATE",
                  help="Format the API's data with a Go template (Nomad's -t).")
    def agent_info(json_output: bool, template: str) -> None:
        """Display status information about the agent (/v1/agent/self)."""
        from yurt.runtime.cli.api_client import api, call

        check_format(json_output, template)
        with api() as client:
            info = call(client, "GET", "/v1/agent/self")
        emit(info, json_output, template, lambda: echo(stats_text(info.get("stats") or {})))

    @cli.command("version")
    def version_command() -> None:
        """Print yurt's version and the Nomad API it speaks."""
        from yurt.runtime import __version__

        echo(version_text(__version__))
