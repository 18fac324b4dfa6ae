"""`yurt acl …`: Nomad's ACL commands (nomad/command/acl_*.go) over the agent's `/v1/acl/*`.

This module holds the `acl` group, `acl bootstrap`, and what the verbs share: reading a file
or stdin, calling the API with Nomad's "Error doing X:" lead, and printing a token as Nomad's
`outputACLToken` does. The verbs live beside it: policies in acl_policy.py, tokens in
acl_token.py, roles in acl_role.py; `register` attaches them all.

Flags are Nomad's, single dash or double (runtime/cli/flags.py); human output is Nomad's
(`key = value` blocks, tables, its sentences), made printable by runtime/cli/output.py, since a
token's or policy's name is whatever its author typed; `-json` and `-t` print the API's data.
Exit codes are yurt's table (runtime/errors.py), not Nomad's all-purpose 1: 2 for bad input
(a usage error, a flag Nomad's CLI would refuse, a policy the agent cannot parse: its 400),
1 for a refused or failed request.

Secrets: a token's secret travels only in the `X-Nomad-Token` header (api_client.py
`client_token`) or a request's body. `acl bootstrap` takes the operator's BootstrapSecret from
a file or stdin, never from an argument (every user reads /proc/PID/cmdline). A created token's
Secret ID is printed on stdout, as Nomad prints it: that is what the command is for.

Start-up: like every verb module, only click and output.py at import; the HTTP client loads
inside the commands (tests/test_import_weight.py).
"""

from __future__ import annotations

import calendar
import re
import sys
import time
from collections.abc import Sequence
from typing import Any, Final

import click

from yurt.runtime.cli.output import echo, fail, format_kv, format_list, output_options
from yurt.runtime.errors import EXIT_USAGE

#: RFC 3339 as Go writes `time.Time` in JSON: fraction up to nanoseconds, `Z` or an offset.
_RFC3339: Final = re.compile(
    r"(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?\d*"
    r"(?:([Zz])|([+-])(\d{2}):(\d{2}))$")
_NS: Final = 1_000_000_000


@click.group("acl")
def acl_group() -> None:
    """Nomad's ACLs: bootstrap, policies, tokens and roles."""


# --------------------------------------------------------------------------- shared


def read_source(path: str, what: str) -> str:
    """The text of the file `path`, or of stdin when `path` is "-"; exit 2 when it cannot
    be read (`what` names it in the message: "policy", "bootstrap token")."""
    try:
        if path == "-":
            return sys.stdin.read()
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        source = "stdin" if path == "-" else path
        fail(f"Error reading the {what} from {source}: {reason}", EXIT_USAGE)


def request(method: str, path: str, context: str, **kw: Any) -> Any:
    """The API's JSON answer to one request (None for an empty body); an error status ends
    the command with `context` before the agent's message ("Error creating token: …")."""
    from yurt.runtime.cli.api_client import api

    with api() as client:
        return send(client, method, path, context, **kw)


def send(client: Any, method: str, path: str, context: str, **kw: Any) -> Any:
    """`request` on a connection the caller holds (for a verb that asks more than once)."""
    from yurt.runtime.cli.api_client import fail_on_error

    response = client.request(method, path, **kw)
    fail_on_error(response, context)
    return response.json() if response.content else None


def segment(value: str) -> str:
    """`value` as one path segment of a URL (a name may hold `/`, `?` or spaces)."""
    from urllib.parse import quote

    return quote(value, safe="")


def shown(value: Any) -> str:
    """A field as Nomad's `formatKV` and `formatList` show it: text, `<none>` when blank (so
    every column has a word, for `awk`)."""
    text = "" if value is None else str(value)
    return text if text.strip() else "<none>"


def dedupe(values: Sequence[str]) -> list[str]:
    """`values` without repeats, first occurrence kept (Nomad's set of `-policy` names)."""
    return list(dict.fromkeys(values))


def time_ns(value: Any) -> tuple[int, int] | None:
    """A JSON time as Unix nanoseconds and its UTC offset in minutes: RFC 3339 text (Nomad's
    encoding) or an integer of nanoseconds (UTC); None for null, Go's zero time or text that
    is neither."""
    if isinstance(value, int) and not isinstance(value, bool):
        return (value, 0) if value > 0 else None
    if not isinstance(value, str):
        return None
    m = _RFC3339.match(value.strip())
    if not m:
        return None
    day, clock, frac, zulu, sign, hours, minutes = m.groups()
    if day == "0001-01-01" and clock == "00:00:00" and not (frac or "").strip("0"):
        return None  # Go's zero `time.Time`: no time at all
    offset = 0 if zulu else (int(hours) * 60 + int(minutes)) * (-1 if sign == "-" else 1)
    (year, month, mday), (hour, minute, second) = (map(int, day.split("-")),
                                                   map(int, clock.split(":")))
    seconds = calendar.timegm((year, month, mday, hour, minute, second, 0, 0, 0))
    return (seconds - offset * 60) * _NS + int((frac or "0").ljust(9, "0")), offset


def go_time(value: Any, *, none: str = "<none>") -> str:
    """A time as Go's `time.Time.String()` prints it (Nomad's `%v`): `2022-08-23
    12:16:09.680699039 +0000 UTC`, the fraction's trailing zeros dropped; `none` for none."""
    parsed = time_ns(value)
    if parsed is None:
        return none
    ns, offset = parsed
    local = ns // _NS + offset * 60
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(local))
    frac = f"{ns % _NS:09d}".rstrip("0")
    sign = "-" if offset < 0 else "+"
    zone = f"{sign}{abs(offset) // 60:02d}{abs(offset) % 60:02d}"
    return f"{stamp}{'.' + frac if frac else ''} {zone} {'UTC' if offset == 0 else zone}"


def token_block(token: dict[str, Any]) -> str:
    """Nomad's `outputACLToken`: the token's `key = value` lines, then, for a client token,
    its roles as a table (or `<none>`); a management token's policies and roles are n/a."""
    pairs = [("Accessor ID", shown(token.get("AccessorID"))),
             ("Secret ID", shown(token.get("SecretID"))),
             ("Name", shown(token.get("Name"))),
             ("Type", shown(token.get("Type"))),
             ("Global", "true" if token.get("Global") else "false"),
             ("Create Time", go_time(token.get("CreateTime"), none="0001-01-01 00:00:00 +0000 "
                                                                   "UTC")),
             ("Expiry Time", go_time(token.get("ExpirationTime"))),
             ("Create Index", str(token.get("CreateIndex", 0))),
             ("Modify Index", str(token.get("ModifyIndex", 0)))]
    if token.get("Type") == "management":
        return format_kv([*pairs, ("Policies", "n/a"), ("Roles", "n/a")])
    pairs.append(("Policies", "[" + " ".join(token.get("Policies") or []) + "]"))
    roles = token.get("Roles") or []
    table = (format_list([["ID", "Name"], *([shown(r.get("ID")), shown(r.get("Name"))]
                                           for r in roles)]) if roles else "<none>")
    return f"{format_kv(pairs)}\n\nRoles\n{table}"


def print_token(token: dict[str, Any], json_output: bool = False, template: str = "") -> None:
    """The token as JSON, through a Go template, or as Nomad's block (`token_block`)."""
    from yurt.runtime.cli.output import emit

    emit(token, json_output, template, lambda: echo(token_block(token)))


# --------------------------------------------------------------------------- bootstrap


@acl_group.command("bootstrap")
@output_options
@click.argument("path", required=False, metavar="[PATH]")
def bootstrap_command(json_output: bool, template: str, path: str | None) -> None:
    """Bootstrap the ACL system: the first management token.

    Without PATH the agent makes the secret; with PATH (a file, or - for stdin) the
    operator's BootstrapSecret is read from it, never taken as an argument. Once ACLs are
    bootstrapped, this fails.
    """
    from yurt.runtime.cli.output import check_format

    check_format(json_output, template)
    # Nomad's `acl bootstrap`: one trailing newline is not part of the secret; "" asks the
    # agent to make one.
    secret = read_source(path, "bootstrap token").removesuffix("\n") if path else ""
    token = request("POST", "/v1/acl/bootstrap", "Error bootstrapping",
                    json={"BootstrapSecret": secret})
    print_token(token, json_output, template)
