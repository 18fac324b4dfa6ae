"""`yurt operator scheduler|raft|api` (and the `snapshot` verbs from operator_snapshot.py), as
Nomad's command/operator_*.go print them.

- `scheduler get-config [-json] [-t T]`: Nomad's `key = value` lines
  (command/operator_scheduler_get_config.go). `set-config` reads the configuration, changes the
  flags given and writes it back as a check-and-set on its ModifyIndex
  (operator_scheduler_set_config.go): "Scheduler configuration updated!" (0), or "could not be
  atomically updated" (1); `-check-index` that does not match is refused before (1).
  yurt's placement honours `-scheduler-algorithm` and the `-preempt-*` switches; it stores
  `-memory-oversubscription`, `-reject-job-registration` and `-pause-eval-broker` without
  acting on them (each said on stderr when set). `-node-limit-for-feasibility-checks` has no
  field to store it in: refused (exit 2).
- `raft list-peers`: Nomad's columns (Node ID Address State Voter RaftProtocol); the
  single agent is its own one voter. `raft remove-peer` is refused (exit 1): a single agent has
  no peer to remove, and removing itself would leave no server. `raft transfer-leadership
  -peer-id|-peer-address` names the agent itself (its ID or address in list-peers): it is
  the leader already, Nomad's no-op, "Transferred leadership to peer with id …" (0); any
  other peer is Nomad's "… was not found in the Raft configuration" (1).
- `api [-X M] [-H 'K: V'] [-filter F] [-dryrun] [-verbose] PATH`: a curl of the agent
  (operator_api.go): the body from stdin when stdin is no terminal and not empty (then POST by
  default; Nomad POSTs an empty stdin's nothing too) or
  from `-d` (a yurt addition), the token of the CLI sent as `X-Nomad-Token` unless `-H` sets
  one; the answer's body on stdout whatever its status (0, as Nomad's). `-dryrun` prints the
  curl command, never the token (`${NOMAD_TOKEN}` or `${YURT_TOKEN}` stands for it).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from yurt.runtime.cli.output import echo, fail, output_options
from yurt.runtime.errors import EXIT_FAILED, EXIT_USAGE

F = TypeVar("F", bound=Callable[..., Any])


def register(cli: click.Group) -> None:
    """Attach `operator` (with `snapshot`, operator_snapshot.py) to the root."""
    from yurt.runtime.cli.operator_snapshot import snapshot_group

    operator_group.add_command(snapshot_group)
    cli.add_command(operator_group)


@click.group("operator")
def operator_group() -> None:
    """Operate the server: scheduler configuration, raft peers, snapshots, raw API calls."""


@operator_group.group("scheduler")
def scheduler_group() -> None:
    """The scheduler configuration."""


@scheduler_group.command("get-config")
@output_options
def get_config(json_output: bool, template: str) -> None:
    """Display the current scheduler configuration."""
    from yurt.runtime.cli.api_client import api, call
    from yurt.runtime.cli.output import check_format, emit, format_kv

    check_format(json_output, template)
    with api() as client:
        found = call(client, "GET", "/v1/operator/scheduler/configuration")

    def human() -> None:
        c = found["SchedulerConfig"]
        p = c.get("PreemptionConfig") or {}

        def b(v: Any) -> str:
            return "true" if v else "false"

        echo(format_kv([
            ("Scheduler Algorithm", c.get("SchedulerAlgorithm", "")),
            ("Memory Oversubscription", b(c.get("MemoryOversubscriptionEnabled"))),
            ("Reject Job Registration", b(c.get("RejectJobRegistration"))),
            ("Pause Eval Broker", b(c.get("PauseEvalBroker"))),
            ("Preemption System Scheduler", b(p.get("SystemSchedulerEnabled"))),
            ("Preemption Service Scheduler", b(p.get("ServiceSchedulerEnabled"))),
            ("Preemption Batch Scheduler", b(p.get("BatchSchedulerEnabled"))),
            ("Preemption SysBatch Scheduler", b(p.get("SysBatchSchedulerEnabled"))),
            ("Node Limit For Feasibility Checks", str(c.get(
                "NodeLimitForFeasibilityChecks", 0))),
            ("Modify Index", str(c.get("ModifyIndex", 0)))]))

    emit(found, json_output, template, human)


def _bool_option(name: str, help_text: str) -> Callable[[F], F]:
    return click.option(f"-{name}", f"--{name}", name.replace("-", "_"), type=click.BOOL,
                        default=None, metavar="true|false", help=help_text)


#: Flag → (field, inside PreemptionConfig, honoured by yurt's placement).
_SWITCHES = {
    "memory_oversubscription": ("MemoryOversubscriptionEnabled", False, False),
    "reject_job_registration": ("RejectJobRegistration", False, False),
    "pause_eval_broker": ("PauseEvalBroker", False, True),
    "preempt_batch_scheduler": ("BatchSchedulerEnabled", True, True),
    "preempt_service_scheduler": ("ServiceSchedulerEnabled", True, True),
    "preempt_sysbatch_scheduler": ("SysBatchSchedulerEnabled", True, True),
    "preempt_system_scheduler": ("SystemSchedulerEnabled", True, True),
}


@scheduler_group.command("set-config")
@click.option("-check-index", "--check-index", "check_index", default="",
              help="Update only if the configuration's ModifyIndex is this.")
@click.option("-scheduler-algorithm", "--scheduler-algorithm", "algorithm", default="",
              type=click.Choice(["", "binpack", "spread"]), help="binpack or spread.")
@_bool_option("memory-oversubscription", "Stored; yurt does not oversubscribe memory.")
@_bool_option("reject-job-registration", "Stored; yurt does not act on it.")
@_bool_option("pause-eval-broker", "Pause the eval broker: evaluations stay pending "
              "until it is unpaused.")
@_bool_option("preempt-batch-scheduler", "Preemption for batch jobs.")
@_bool_option("preempt-service-scheduler", "Preemption for service jobs.")
@_bool_option("preempt-sysbatch-scheduler", "Preemption for sysbatch jobs.")
@_bool_option("preempt-system-scheduler", "Preemption for system jobs.")
@click.option("-node-limit-for-feasibility-checks", "--node-limit-for-feasibility-checks",
              "node_limit", default=None, help="Refused: yurt has no such limit.")
def set_config(check_index: str, algorithm: str, node_limit: str | None,
               **switches: bool | None) -> None:
    """Modify the current scheduler configuration."""
    from yurt.runtime.cli.api_client import api, call

    if node_limit is not None:
        fail("-node-limit-for-feasibility-checks is not supported: yurt's placement has no "
             "node limit to set", EXIT_USAGE)
    index = 0
    if check_index:
        if not check_index.isdigit():
            fail(f'Error parsing check-index value "{check_index}": not a number', EXIT_USAGE)
        index = int(check_index)
    with api() as client:
        current = call(client, "GET", "/v1/operator/scheduler/configuration")["SchedulerConfig"]
        if index > 0 and current.get("ModifyIndex") != index:
            fail("Error performing check index set: check-index "
                 f"{index} does not match does not match current state value "
                 f"{current.get('ModifyIndex')}")
        config = dict(current)
        config["PreemptionConfig"] = dict(current.get("PreemptionConfig") or {})
        if algorithm:
            config["SchedulerAlgorithm"] = algorithm
        for flag, value in switches.items():
            if value is None:
                continue
            field, preemption, honoured = _SWITCHES[flag]
            (config["PreemptionConfig"] if preemption else config)[field] = value
            if not honoured:
                echo(f"note: -{flag.replace('_', '-')} is stored, but yurt does not act on it",
                     err=True)
        result = call(client, "PUT", "/v1/operator/scheduler/configuration",
                      params={"cas": str(index or current.get("ModifyIndex", 0))}, json=config)
    if result.get("Updated"):
        echo("Scheduler configuration updated!")
        return
    echo("Scheduler configuration could not be atomically updated, please try again")
    sys.exit(EXIT_FAILED)


@operator_group.group("raft")
def raft_group() -> None:
    """The server's raft peers (the single agent is its one voter)."""


@raft_group.command("list-peers")
@click.option("-stale", "--stale", is_flag=True, help="Accepted: the agent is its own leader.")
def list_peers(stale: bool) -> None:
    """Display the current raft peer configuration."""
    from yurt.runtime.cli.api_client import api, call
    from yurt.runtime.cli.output import format_list

    with api() as client:
        found = call(client, "GET", "/v1/operator/raft/configuration")
    rows = [["Node", "ID", "Address", "State", "Voter", "RaftProtocol"]]
    for s in sorted(found.get("Servers") or [], key=lambda s: str(s.get("Node", ""))):
        rows.append([s.get("Node", ""), s.get("ID", ""), s.get("Address", ""),
                     "leader" if s.get("Leader") else "follower",
                     "true" if s.get("Voter") else "false", str(s.get("RaftProtocol", ""))])
    echo(format_list(rows))


@raft_group.command("remove-peer")
@click.option("-peer-id", "--peer-id", "peer_id", default="", help="The peer's ID.")
@click.option("-peer-address", "--peer-address", "peer_address", default="",
              help="The peer's address (Nomad's deprecated spelling).")
def remove_peer(peer_id: str, peer_address: str) -> None:
    """Remove a raft peer: refused, a single agent has none but itself."""
    if not peer_id and not peer_address:
        fail("Missing peer id required", EXIT_USAGE)
    fail("Error removing peer: a single yurt agent is its own only raft peer; removing it "
         "would leave no server (there is nothing else to remove)")


def transfer_target(servers: list[dict[str, Any]], peer_id: str, peer_address: str
                    ) -> tuple[dict[str, Any] | None, str]:
    """The raft peer a transfer names (nomad/operator_endpoint.go `TransferLeadershipToPeer`
    and command/operator_raft_leadership_transfer.go): (the peer, "") or (None, Nomad's
    error text). Pure."""
    if not peer_id and not peer_address:
        return None, "an address or id is required for the destination peer"
    if peer_id and peer_address:
        return None, "cannot give both an address and id"
    for server in servers:
        if (peer_id and server.get("ID") == peer_id) or (
                peer_address and server.get("Address") == peer_address):
            return server, ""
    kind, value = ("id", peer_id) if peer_id else ("address", peer_address)
    return None, f'{kind} "{value}" was not found in the Raft configuration'


@raft_group.command("transfer-leadership")
@click.option("-peer-id", "--peer-id", "peer_id", default="", help="The new leader's raft ID.")
@click.option("-peer-address", "--peer-address", "peer_address", default="",
              metavar="IP:PORT", help="The new leader's raft address.")
def transfer_leadership(peer_id: str, peer_address: str) -> None:
    """Transfer leadership to a raft peer: the single agent is its own one peer and leader,
    so naming it is Nomad's no-op, and naming another is Nomad's "not found"."""
    from yurt.runtime.cli.api_client import api, call

    with api() as client:
        found = call(client, "GET", "/v1/operator/raft/configuration")
    target, problem = transfer_target(list(found.get("Servers") or []), peer_id, peer_address)
    if target is None:
        fail(f"Error transferring leadership to peer: {problem}")
    if not target.get("Leader"):  # a cluster's servers meet through etcd: no raft to move
        fail("Error transferring leadership to peer: yurt's leadership is not raft's: it "
             "cannot be handed to a peer")
    if peer_address:
        echo(f'Transferred leadership to peer with address "{peer_address}"')
    else:
        echo(f'Transferred leadership to peer with id "{peer_id}"')


def _stdin_body() -> bytes | None:
    """stdin's bytes unless it is a character device (a terminal, /dev/null), as Nomad's
    operator_api.go checks `os.ModeCharDevice`, or empty."""
    import stat

    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (OSError, ValueError):
        return None
    if stat.S_ISCHR(mode):
        return None
    # An empty stdin (a script's, a CI job's) is no body: a GET stays a GET.
    return sys.stdin.buffer.read() or None


@operator_group.command("api")
@click.option("-X", "method", default="", help="The HTTP method (GET, or POST with a body).")
@click.option("-H", "headers", multiple=True, metavar="'KEY: VALUE'", help="A header "
              "(repeatable).")
@click.option("-d", "data", default=None, help="The body (else stdin when it is no terminal).")
@click.option("-filter", "--filter", "filter_expr", default="", help="A filter expression.")
@click.option("-dryrun", "--dryrun", is_flag=True, help="Print the curl command instead.")
@click.option("-verbose", "--verbose", is_flag=True, help="Show the request and answer "
              "headers on stderr.")
@click.argument("path")
def api_command(method: str, headers: tuple[str, ...], data: str | None, filter_expr: str,
                dryrun: bool, verbose: bool, path: str) -> None:
    """Query the agent's HTTP API as curl would."""
    import shlex
    from urllib.parse import urlencode, urlsplit

    from yurt.runtime.cli.http import agent_address

    base = agent_address()
    if path.startswith(("http://", "https://")):
        parts = urlsplit(path)
        base_parts = urlsplit(base)
        if (parts.scheme, parts.netloc) != (base_parts.scheme, base_parts.netloc):
            fail(f"{path}: not the agent's address {base}: yurt sends requests (and the "
                 "token) only to the agent it is set up for", EXIT_USAGE)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
    if not path.startswith("/"):
        fail(f"Error turning path into URL: {path!r} is neither /PATH nor a URL", EXIT_USAGE)
    if filter_expr:
        path += ("&" if "?" in path else "?") + urlencode({"filter": filter_expr})
    extra: dict[str, str] = {}
    for header in headers:
        key, sep, value = header.partition(":")
        if not sep or not key.strip():
            fail(f"Error parsing flags: -H {header!r} is not 'Key: Value'", EXIT_USAGE)
        extra[key.strip()] = value.strip()
    body = data.encode() if data is not None else _stdin_body()
    method = (method or ("POST" if body is not None else "GET")).upper()
    if dryrun:
        parts_ = ["curl"] + (["--verbose"] if verbose else [])
        if method != "GET":
            parts_.append(f"-X {method}")
        if body is not None:
            parts_.append("--data-binary @-")
        parts_ += [f"-H {shlex.quote(f'{k}: {v}')}" for k, v in extra.items()
                   if k.lower() != "x-nomad-token"]
        for variable in ("YURT_TOKEN", "NOMAD_TOKEN"):  # api_client.py `client_token`'s order
            if os.environ.get(variable, "").strip():
                parts_.append(f'-H "X-Nomad-Token: ${{{variable}}}"')
                break
        parts_.append(shlex.quote(base.rstrip("/") + path))
        echo(" \\\n  ".join(parts_))
        return
    _send(method, path, extra, body, verbose)


def _send(method: str, path: str, extra: dict[str, str], body: bytes | None,
          verbose: bool) -> None:
    from yurt.runtime.cli.api_client import client_token
    from yurt.runtime.cli.http import AgentConnection, TransportError, agent_address

    token = client_token()
    # A -H X-Nomad-Token wins over the CLI's own token, as Nomad's.
    headers = {**({"X-Nomad-Token": token} if token else {}), **extra}
    addr = agent_address()
    try:
        with AgentConnection(addr, headers=headers, timeout=30) as client:
            response = client.request(method, path, content=body)
            content = response.content
    except TransportError as e:
        fail(f"Error performing request: {addr}: {e}")
    if verbose:
        echo(f"> {method} {path}", err=True)
        for key in headers:
            echo(f"> {key}: {'<hidden>' if key.lower() == 'x-nomad-token' else headers[key]}",
                 err=True)
        echo(f"< HTTP/1.1 {response.status_code}", err=True)
        for key, value in response.headers.items():
            echo(f"< {key}: {value}", err=True)
    sys.stdout.buffer.write(content)
    sys.stdout.buffer.flush()
