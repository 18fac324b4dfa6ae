"""`yurt monitor [-log-level L] [-json] [-node-id N] [-server-id S]`: the agent's log, live,
as Nomad's command/agent_monitor.go streams it.

It asks `/v1/agent/monitor` (runtime/api/agent.py `agent_monitor`; `agent:read` where ACLs are
on) for Nomad's stream frames (`{"Data": base64}` objects, `{}` heartbeats, one after another
with no separator), decodes them as they arrive and prints each line, until the agent closes
the stream or Ctrl-C (exit 130, as a Nomad killed by SIGINT reports). The level may be below
the agent's own (`-log-level=debug` of an agent that logs at info). A monitor that reads too
slowly loses lines (the agent says how many, in a `monitor:` line) and never slows the agent.

Errors are Nomad's: `==> Error starting monitor: <the agent's answer>`, exit 1 (2 for a 400:
a bad level, both -node-id and -server-id). `-node-id` takes a prefix, as Nomad's
`lookupNodeID`; `-log-include-location` adds each line's caller (file:line), as hclog does.
The lines are made printable (runtime/cli/output.py): a job's name in a log
line is the job author's text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import click

from yurt.runtime.cli.output import echo
from yurt.runtime.errors import EXIT_FAILED, EXIT_USAGE


def decode_frames(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """The data of Nomad's stream frames, concatenated JSON objects split anywhere across
    `chunks`; heartbeats (`{}`) carry none and are skipped.

    Raises:
        ValueError: the stream holds something that is not a JSON object.
    """
    import base64

    decoder = json.JSONDecoder()
    pending = ""
    for chunk in chunks:
        pending += chunk.decode("utf-8", errors="replace")
        while True:
            pending = pending.lstrip()
            if not pending:
                break
            try:
                frame, end = decoder.raw_decode(pending)
            except json.JSONDecodeError:
                break  # incomplete: wait for more
            pending = pending[end:]
            if not isinstance(frame, dict):
                raise ValueError(f"not a stream frame: {frame!r}")
            if frame.get("Data"):
                yield base64.b64decode(frame["Data"])
    if pending.strip():
        raise ValueError("the stream ended inside a frame")


def _fail(message: str, code: int = EXIT_FAILED) -> None:
    echo(f"==> {message}", err=True)
    raise SystemExit(code)


@click.command("monitor")
@click.option("-log-level", "--log-level", "log_level", default="", metavar="LEVEL",
              help="The level to follow: trace, debug, info (default), warn or error.")
@click.option("-log-include-location", "--log-include-location", "include_location",
              is_flag=True, help="Include the file and line of each log call.")
@click.option("-node-id", "--node-id", "node_id", default="", metavar="NODE",
              help="The node to follow (this agent's node; an ID prefix).")
@click.option("-server-id", "--server-id", "server_id", default="", metavar="SERVER",
              help="The server to follow (this agent's server, or `leader`).")
@click.option("-json", "--json", "log_json", is_flag=True, help="Follow JSON log lines.")
def monitor_command(log_level: str, include_location: bool, node_id: str, server_id: str,
                    log_json: bool) -> None:
    """Stream the agent's log lines, at a level that may be below the agent's own."""
    from yurt.runtime.cli.api_client import api, call

    with api() as client:
        if node_id:
            nodes = call(client, "GET", "/v1/nodes", params={"prefix": node_id})
            if not nodes:
                _fail(f"No node(s) with prefix or id {node_id!r} found")
            if len(nodes) > 1:
                _fail(f"Prefix {node_id!r} matched multiple nodes", EXIT_USAGE)
            node_id = nodes[0]["ID"]
        params = {"log_level": log_level, "node_id": node_id, "server_id": server_id,
                  "log_json": str(log_json).lower(),
                  "log_include_location": str(include_location).lower()}
        with client.stream("GET", "/v1/agent/monitor", params=params,
                           timeout=None) as response:
            if response.status_code >= 400:
                _fail("Error starting monitor: " + response.text.strip(),
                      EXIT_USAGE if response.status_code == 400 else EXIT_FAILED)
            try:
                for data in decode_frames(response.iter_bytes()):
                    echo(data.decode("utf-8", errors="replace"), nl=False)
            except ValueError as e:
                _fail(f"error monitoring logs: {e}")


def register(cli: click.Group) -> None:
    """Add `monitor` to `yurt`."""
    cli.add_command(monitor_command)
