"""The CLI verbs that talk to a running agent over its HTTP API (at `-address`, `$YURT_ADDR` or
`$NOMAD_ADDR`, with Nomad's other general options: runtime/cli/general.py).

Each command is a thin client: it calls Nomad's API paths through runtime/cli/http.py (a small
`http.client` client: start-up is most of a verb's cost), then prints through
runtime/cli/output.py: human output (Nomad's `key = value` lines and tables; drawn only at a
terminal) or, with `-json`/`-t`, the API's data as JSON or through a Go template. IDs are
taken by prefix as Nomad takes them (`resolve_job`, `resolve_alloc`: an ambiguous prefix lists
its matches and exits 2). Exit codes are runtime/errors.py's table: 0 ok, 1 a job or a request
failed or the agent cannot be reached, 2 bad input, 130 interrupted.
The token is never taken from the command line (every user can read it in /proc) and is sent
only as the `X-Nomad-Token` header, the websocket's too (a query string ends up in logs).
`client_token` looks for it in this order, the first found wins:

1. `$YURT_TOKEN` (when set and not blank), yurt's name beating Nomad's as every general
   setting's does (runtime/cli/general.py);
2. `$NOMAD_TOKEN`, as Nomad's CLI reads it, so a Nomad user's environment works unchanged;
3. the file named by `$YURT_TOKEN_FILE`: one that cannot be read, or is empty, is an error
   (exit 2), since the user asked for it;
4. the bootstrap token of the agent at the CLI's address (`<data dir>/server/bootstrap.token`):
   its data dir is the one it named in this user's runtime dir while it runs (`-dev`'s
   temporary one, a `--data-dir`: runtime/lib/datadir.py `pointed_data_dir`), else the default
   (`$XDG_DATA_HOME/yurt` or `~/.local/share/yurt`), when this user may read it. The agent
   writes it 0600, so only its own user (or root) gets it; for anyone else it is missing or
   unreadable, and silently skipped: they are anonymous, and the agent answers 403 where its
   anonymous policy allows nothing. It is sent only to a loopback address whose listening
   socket that file's owner holds (`_served_by`): never to another machine, nor to a port
   another local user took;
5. none: the request is anonymous.
"""

from __future__ import annotations

import errno
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from yurt.runtime.cli.general import check_region, settings
from yurt.runtime.cli.http import (
    AddressError,
    AgentConnection,
    ConnectError,
    ReadTimeout,
    TLSError,
    TransportError,
    agent_address,
    websocket_context,
    websocket_url,
)
from yurt.runtime.cli.output import (
    SHORT_ID,
    echo,
    echo_raw,
    emit_json,
    fail,
    format_kv,
    format_list,
    output_options,
    print_table,
)
from yurt.runtime.cli.tls import socket_failure, tls_context, tls_hint
from yurt.runtime.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE
from yurt.runtime.lib.datadir import bootstrap_token_path, default_data_dir, pointed_data_dir
from yurt.runtime.lib.procfs import tcp_listener_uids

__all__ = ["emit_json", "format_kv", "format_list", "output_options"]


#: What makes the bootstrap token file "not there" for this user: skipped without a word.
_ABSENT = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM})


def client_token() -> str:
    """The token to send, as the module's header orders its sources; "" for none.

    Ends the command (exit 2) when `$YURT_TOKEN_FILE` names a file that cannot be read or
    is empty; the bootstrap token file is only ever skipped.
    """
    for variable in ("YURT_TOKEN", "NOMAD_TOKEN"):
        token = os.environ.get(variable, "").strip()
        if token:
            return token
    path = os.environ.get("YURT_TOKEN_FILE")
    if path:
        try:
            token = Path(path).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as e:
            reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            fail(f"cannot read $YURT_TOKEN_FILE {path}: {reason}", EXIT_USAGE)
        if not token:
            fail(f"$YURT_TOKEN_FILE {path} is empty", EXIT_USAGE)
        return token
    return _bootstrap_token()


def _bootstrap_token() -> str:
    """The bootstrap token of the agent at the CLI's address, if this user may read it: the
    data dir that agent named in this user's runtime dir (lib/datadir.py `pointed_data_dir`:
    `-dev`'s temporary one, a `--data-dir`), else the default one; "" when there is none."""
    pointed = _pointed_data_dir()
    try:
        path = bootstrap_token_path(pointed or default_data_dir())
    except RuntimeError:  # no $HOME and no passwd entry: no default data dir either
        return ""
    try:
        token = path.read_text(encoding="utf-8").strip()
        owner = path.stat().st_uid
    except OSError as e:
        if e.errno in _ABSENT:  # no agent here, or another user's: anonymous
            return ""
        reason = e.strerror or str(e)
    except UnicodeDecodeError as e:
        reason = str(e)
    else:
        return token if _served_by(owner) else ""
    # Something is there but broken (a directory, an I/O error): say so, then go on without.
    echo(f"yurt: ignoring the bootstrap token file {path}: {reason}", err=True)
    return ""


def _loopback_agent() -> tuple[str, int] | None:
    """(host:port, port) of the address the CLI talks to when it is a loopback one, the only
    kind a token found on this machine is ever sent to; None for any other address."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(agent_address())
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except (AddressError, ValueError):
        return None
    host = parts.hostname or ""
    if not (host == "localhost" or host == "::1" or host.startswith("127.")):
        return None
    return parts.netloc, port


def _pointed_data_dir() -> Path | None:
    """The data dir the agent at the CLI's loopback address named (see `_bootstrap_token`)."""
    agent = _loopback_agent()
    return None if agent is None else pointed_data_dir(agent[1])


def _served_by(owner: int) -> bool:
    """Whether the address the CLI talks to is served by `owner`, the agent's user, on this
    machine: a loopback address whose listening socket that user holds (lib/procfs.py). The
    management token is never sent anywhere else: not to another machine, and not to a port
    another local user took while the agent was down (they would be handed root)."""
    agent = _loopback_agent()
    if agent is None:
        return False
    netloc, port = agent
    owners = tcp_listener_uids(port)
    if owners and owners <= {owner}:
        return True
    if owners:  # somebody else listens there
        echo(f"yurt: not sending the agent's bootstrap token to {netloc}: the program "
             "listening there is not run by the agent's user", err=True)
    return False


#: How a user points the CLI elsewhere, in the messages that say it cannot reach an agent.
ADDRESS_HINT = "set NOMAD_ADDR, YURT_ADDR or -address to another address"
#: How a user gives the CLI a token, in the messages of a refused request.
TOKEN_HINT = "set NOMAD_TOKEN, YURT_TOKEN or YURT_TOKEN_FILE"


@contextmanager
def api() -> Iterator[AgentConnection]:
    """A client of the agent the general options name (runtime/cli/general.py: address,
    TLS, and the namespace and region every request carries unless it sets its own); an
    agent that cannot be reached, a failed TLS handshake, or a connection that breaks, ends
    the command with exit 1 (never a traceback)."""
    current = settings()
    addr = agent_address(current)
    check_region(current)
    tls = tls_context(current) if addr.startswith("https:") else None
    token = client_token()
    headers = {"X-Nomad-Token": token} if token else {}
    try:
        with AgentConnection(addr, headers=headers, timeout=30, tls=tls,
                             query=current.query()) as client:
            yield client
    except TLSError as e:
        fail(f"TLS with the agent at {addr} failed: {e}{tls_hint(str(e), current)}")
    except ConnectError:
        fail(f"cannot reach the agent at {addr}: is `yurt agent` running? ({ADDRESS_HINT})")
    except ReadTimeout:
        fail(f"the agent at {addr} did not answer in time")
    except TransportError as e:
        fail(f"lost the connection to the agent at {addr}: {e}")


def fail_on_error(response: Any, context: str = "") -> None:
    """End the command when the agent refused the request: its message (after `context`,
    Nomad's "Error creating token" say, when given), exit 2 for a 400 (the request was bad),
    1 for any other error status; return for a success."""
    if response.status_code < 400:
        return
    lead = f"{context}: " if context else ""
    # Nomad's multi-error texts indent each problem with a tab: spaces, not an escaped `\t`.
    text = response.text.strip().expandtabs(4)
    if response.status_code == 404:
        fail(lead + (text or "not found"))
    if response.status_code == 403:
        detail = f" ({text})" if text and text.lower() != "permission denied" else ""
        fail(f"{lead}permission denied{detail}: {TOKEN_HINT} to a token the agent accepts "
             "for this")
    fail(lead + text, EXIT_USAGE if response.status_code == 400 else EXIT_FAILED)


def call(client: AgentConnection, method: str, path: str, **kw: Any) -> Any:
    """The API's JSON answer (None for an empty body); an error status ends the command."""
    response = client.request(method, path, **kw)
    fail_on_error(response)
    return response.json() if response.content else None


def _ago(ns: int) -> str:
    if not ns:
        return "-"
    seconds = max(time.time() - ns / 1e9, 0)
    if seconds < 60:
        return f"{seconds:.0f}s ago"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m ago"
    return f"{seconds / 3600:.1f}h ago"


# --------------------------------------------------------------------------- prefixes


def job_status_text(job: dict[str, Any]) -> str:
    """Nomad's `getStatusString`: a stopped job is `dead (stopped)` until it is purged."""
    return f"{job['Status']} (stopped)" if job.get("Stop") else str(job["Status"])


def job_list_rows(jobs: list[dict[str, Any]]) -> list[list[str]]:
    return [[j["ID"], j["Type"], str(j["Priority"]), job_status_text(j),
             _ago(j["SubmitTime"])] for j in jobs]


JOB_HEADER = ("ID", "Type", "Priority", "Status", "Submitted")


def resolve_job(client: AgentConnection, prefix: str, *, kind: str = "",
                only: Callable[[dict[str, Any]], bool] | None = None) -> str:
    """The job ID `prefix` names, as Nomad's `JobIDByPrefix` finds it: an exact ID wins,
    else the one job whose ID starts with it. None: exit 1; several: the list, exit 2.

    Args:
        kind: the word Nomad puts before "job(s)" when nothing matches ("parameterized").
        only: the jobs a prefix may match (Nomad's filter: dispatch only parameterized
            parents); an exact ID matches whatever its kind.
    """
    listed = call(client, "GET", "/v1/jobs", params={"prefix": prefix})
    if any(j["ID"] == prefix for j in listed):
        return prefix  # named exactly: the agent says why, if it refuses this kind of job
    jobs = [j for j in listed if only is None or only(j)]
    if not jobs:
        fail(f'No {kind + " " if kind else ""}job(s) with prefix or ID "{prefix}" found')
    if len(jobs) > 1:
        fail(f'Prefix "{prefix}" matched multiple jobs\n\n'
              + format_list([list(JOB_HEADER), *job_list_rows(jobs)]), EXIT_USAGE)
    return str(jobs[0]["ID"])


FULL_ID_LENGTH = 36


def resolve_alloc(client: AgentConnection, prefix: str, *, full_ids: bool = False) -> str:
    """The allocation ID `prefix` names (Nomad's rules and messages): at least two
    characters (exit 2); none found: exit 1; several: they are listed, exit 2 (with whole
    IDs when `full_ids`, a verb's `-verbose`)."""
    if len(prefix) == FULL_ID_LENGTH:
        return prefix  # a whole ID: no listing needed (an unknown one is the API's 404)
    if len(prefix) < 2:
        fail("Identifier must contain at least two characters.", EXIT_USAGE)
    allocs = call(client, "GET", "/v1/allocations", params={"prefix": prefix})
    if not allocs:
        fail(f'No allocation(s) with prefix or id "{prefix}" found')
    if len(allocs) > 1:
        # Nomad's 8 characters; whole IDs when the prefix is that long already, since the
        # matches then share their first 8 and short IDs would not tell them apart.
        length = FULL_ID_LENGTH if full_ids or len(prefix) >= SHORT_ID else SHORT_ID
        rows = [[a["ID"][:length], a["Name"],
                 a.get("TaskGroup", ""), a["DesiredStatus"], a["ClientStatus"]]
                for a in allocs]
        fail("Prefix matched multiple allocations\n\n"
              + format_list([["ID", "Name", "Task Group", "Desired", "Status"], *rows]),
              EXIT_USAGE)
    return str(allocs[0]["ID"])


# --------------------------------------------------------------------------- job


def job_stop(job_id: str, json_output: bool, *, purge: bool = False) -> None:
    with api() as client:
        job_id = resolve_job(client, job_id)
        result = call(client, "DELETE", f"/v1/job/{quote(job_id, safe='')}"
                      + ("?purge=true" if purge else ""))
    if json_output:
        emit_json(result)
    else:
        echo(f'Job "{job_id}" stopped' + (" and purged" if purge else ""))


def print_jobs(jobs: list[dict[str, Any]]) -> None:
    """The jobs table, or Nomad's "No running jobs"."""
    if not jobs:
        echo("No running jobs")
        return
    print_table(JOB_HEADER, job_list_rows(jobs), id_columns=())



# --------------------------------------------------------------------------- alloc


# --------------------------------------------------------------------------- node, events


def agent_warnings(client: AgentConnection) -> list[str]:
    """What the agent says its operator must hear (`/v1/agent/self` `Warnings`: e.g. that
    any local user can run commands as root through it); none when it may not be read."""
    response = client.request("GET", "/v1/agent/self")
    if response.status_code != 200:
        return []
    found = response.json().get("Warnings") or []
    return [str(w) for w in found if isinstance(w, str)]


def events(topics: list[str], index: int | None, json_output: bool) -> None:
    """Follow the event stream. A reader that goes away (`| head`) ends it quietly with 0, as
    `alloc logs` does; it is noticed at the next event written, so a stream with no events
    arriving runs on until one comes (Nomad's `event stream` behaves the same)."""
    import json

    import trio
    from trio_websocket import ConnectionClosed, HandshakeError, open_websocket_url

    from yurt.runtime.cli.output import quiet_broken_pipe

    current = settings()
    addr = agent_address(current)
    check_region(current)
    params: list[tuple[str, str]] = [("topic", t) for t in topics]
    if index is not None:
        params.append(("index", str(index)))
    token = client_token()
    headers = [(b"X-Nomad-Token", token.encode())] if token else []
    url = websocket_url("/v1/event/ws", params, current)
    tls = websocket_context(url, current)
    reader_gone = False

    def say(line: str, *, raw: bool = False) -> bool:
        """Print a line (`raw`: a JSON record, exact); False once the reader is gone
        (stdout's broken pipe, not the socket's: only this write is caught)."""
        nonlocal reader_gone
        try:
            (echo_raw if raw else echo)(line)
        except BrokenPipeError:
            reader_gone = True
        return not reader_gone

    async def follow() -> None:
        try:
            async with open_websocket_url(url, extra_headers=headers, ssl_context=tls) as ws:
                while True:
                    record = json.loads(await ws.get_message())
                    if json_output:
                        if not say(json.dumps(record), raw=True):
                            return
                        continue
                    for event in record.get("Events", []):
                        line = f"{event['Index']:>6}  {event['Topic']}/{event['Type']}"
                        if event["Topic"] == "Task":
                            p = event["Payload"]
                            line += (f"  {p['AllocID'][:8]} {p['Task']}: "
                                     f"{p['Event']['Type']} — {p['Event']['DisplayMessage']}")
                        elif event["Topic"] == "Allocation":
                            a = event["Payload"]["Allocation"]
                            line += f"  {a['Name']} {a['ClientStatus']}"
                        else:
                            line += f"  {event['Key']}"
                        if not say(line):
                            return
        except ConnectionClosed:
            return
        except HandshakeError as e:  # the connection failed (its cause says why) or was refused
            fail(socket_failure(addr, e.__cause__, current))
        except OSError as e:
            fail(socket_failure(addr, e, current))

    try:
        trio.run(follow)
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
    except BaseExceptionGroup as group:  # Ctrl-C inside the websocket's own nursery
        if group.subgroup(KeyboardInterrupt) is not None:
            sys.exit(EXIT_INTERRUPTED)
        raise
    if reader_gone:
        quiet_broken_pipe()
