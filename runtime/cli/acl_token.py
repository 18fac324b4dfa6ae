"""`yurt acl token create|info|list|self|update|delete`: Nomad's token verbs
(nomad/command/acl_token_*.go) over `/v1/acl/token[s]`.

A token is printed as Nomad's `outputACLToken` block (runtime/cli/acl.py `token_block`),
Secret ID included: `create` exists to hand it out. `-ttl` is a Go duration, checked here and
sent as Go writes `ExpirationTTL` in JSON (`time.Duration.String()`, api/acl.go
`ACLToken.MarshalJSON`); the agent turns it into an expiry time and refuses one out of its
bounds (400). `update` reads the token, changes what the flags say (policies and roles, when
given, replace the old ones, as in Nomad) and writes it back whole. `self` asks about the
token this CLI would send (runtime/cli/api_client.py `client_token`), and says so when there
is none rather than ask as anonymous.
"""

from __future__ import annotations

from typing import Any

import click

from yurt.runtime.cli.acl import (
    dedupe,
    print_token,
    request,
    segment,
    send,
    shown,
    time_ns,
)
from yurt.runtime.cli.output import check_format, echo, fail, output_options, print_table
from yurt.runtime.errors import EXIT_FAILED, EXIT_USAGE


@click.group("token")
def token_group() -> None:
    """ACL tokens: who a request is, by its secret."""


def _role_links(role_names: tuple[str, ...], role_ids: tuple[str, ...]) -> list[dict[str, str]]:
    """nomad/command/acl_token_create.go `generateACLTokenRoleLinks`: by name, then by ID,
    each once."""
    return ([{"Name": name} for name in dedupe(role_names)]
            + [{"ID": role_id} for role_id in dedupe(role_ids)])


def _token_options(f: Any) -> Any:
    """The flags `create` and `update` share (Nomad's, with Nomad's repeatable ones)."""
    for option in reversed((
        click.option("-name", "--name", default="", help="A human readable name."),
        click.option("-policy", "--policy", "policies", multiple=True, metavar="NAME",
                     help="A policy of the token (repeatable; client tokens only)."),
        click.option("-role-id", "--role-id", "role_ids", multiple=True, metavar="ID",
                     help="A role of the token, by ID (repeatable; client tokens only)."),
        click.option("-role-name", "--role-name", "role_names", multiple=True, metavar="NAME",
                     help="A role of the token, by name (repeatable; client tokens only)."),
    )):
        f = option(f)
    return f


@token_group.command("create")
@_token_options
@click.option("-type", "--type", "token_type", default="client", show_default=True,
              help="client or management.")
@click.option("-global", "--global", "is_global", is_flag=True,
              help="Replicate the token to every region (kept for Nomad's sake).")
@click.option("-ttl", "--ttl", default="", metavar="DURATION",
              help='How long the token lives, e.g. "5m" or "1h" (default: forever).')
@click.option("-accessor", "--accessor", "accessor", default="", metavar="UUID",
              help="Upload (restore) a client token with this AccessorID; its SecretID is "
                   "read from PATH (a file, or - for stdin).")
@output_options
@click.argument("secret_path", metavar="[PATH]", required=False)
def token_create_command(name: str, policies: tuple[str, ...], role_ids: tuple[str, ...],
                         role_names: tuple[str, ...], token_type: str, is_global: bool,
                         ttl: str, accessor: str, json_output: bool, template: str,
                         secret_path: str | None) -> None:
    """Create a token; its Secret ID is printed. Needs a management token. With -accessor,
    upload a client token with both IDs given (the SecretID from PATH, never the command
    line)."""
    from yurt.runtime.cli.api_client import api
    from yurt.runtime.lib.durations import format_duration, parse_duration

    check_format(json_output, template)
    secret = _uploaded_secret(accessor, secret_path, token_type)
    token: dict[str, Any] = {"Name": name, "Type": token_type, "Policies": list(policies),
                             "Roles": _role_links(role_names, role_ids), "Global": is_global}
    if ttl:
        try:
            token["ExpirationTTL"] = format_duration(parse_duration(ttl))
        except ValueError as e:
            fail(f"Failed to parse TTL as time duration: {e}", EXIT_USAGE)
    with api() as client:
        # Nomad warns of a policy it cannot read, and creates the token all the same: a
        # policy may be written after the token that names it.
        for policy in dedupe(policies):
            found = client.request("GET", f"/v1/acl/policy/{segment(policy)}")
            if not found.is_success:
                echo(f"Error fetching info on {policy} policy: "
                     f"{found.text.strip() or found.status_code}", err=True)
        if accessor:  # Nomad's `ACLTokens().Upload`: PUT at the new accessor
            token.update(AccessorID=accessor, SecretID=secret)
            created = send(client, "PUT", f"/v1/acl/token/{segment(accessor)}",
                           "Error uploading token", json=token)
        else:
            created = send(client, "POST", "/v1/acl/token", "Error creating token",
                           json=token)
    print_token(created, json_output, template)


def _uploaded_secret(accessor: str, path: str | None, token_type: str) -> str:
    """The SecretID of a token `-accessor` uploads, read from `path` (`-`: stdin), checked as
    Nomad's command/acl_token_create.go `Run` and api/acl.go `Upload` check it (exit 2); ""
    when nothing is uploaded."""
    import re
    import sys
    from pathlib import Path

    def is_uuid(text: str) -> bool:  # helper/funcs.go `IsUUID`
        return re.fullmatch(r"[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}",
                            text) is not None

    if accessor and path is None:
        fail('-accessor requires a SecretID supplied as a file path or "-" for stdin',
             EXIT_USAGE)
    if not accessor and path is not None:
        fail("A SecretID file path was provided but -accessor was not set", EXIT_USAGE)
    if not accessor or path is None:
        return ""
    if not is_uuid(accessor):
        fail("-accessor value must be a valid UUID", EXIT_USAGE)
    if token_type == "management":
        fail("Error uploading token: cannot upload management tokens", EXIT_USAGE)
    try:
        raw = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        fail(f"Error reading SecretID: {getattr(e, 'strerror', None) or e}", EXIT_USAGE)
    secret = raw.strip()
    if not is_uuid(secret):
        fail("SecretID must be a valid UUID", EXIT_USAGE)
    return secret


@token_group.command("info")
@output_options
@click.argument("accessor", metavar="ACCESSOR_ID")
def token_info_command(json_output: bool, template: str, accessor: str) -> None:
    """Show a token by its accessor ID. Needs a management token."""
    check_format(json_output, template)
    token = request("GET", f"/v1/acl/token/{segment(accessor)}", "Error fetching token")
    print_token(token, json_output, template)


def _expired(token: dict[str, Any], now_ns: int) -> bool:
    """nomad/command/acl_token_list.go `formatTokens`: past its expiration time."""
    expiry = time_ns(token.get("ExpirationTime"))
    return expiry is not None and expiry[0] < now_ns


@token_group.command("list")
@output_options
def token_list_command(json_output: bool, template: str) -> None:
    """List the tokens. Needs a management token."""
    import time

    from yurt.runtime.cli.output import emit

    check_format(json_output, template)
    tokens = request("GET", "/v1/acl/tokens", "Error listing ACL tokens") or []

    def human() -> None:
        if not tokens:
            echo("No tokens found")
            return
        now = time.time_ns()
        print_table(("Name", "Type", "Global", "Accessor ID", "Expired"),
                    [[shown(t.get("Name")), shown(t.get("Type")),
                      "true" if t.get("Global") else "false", shown(t.get("AccessorID")),
                      "true" if _expired(t, now) else "false"] for t in tokens],
                    id_columns=(3,))

    emit(tokens, json_output, template, human)


@token_group.command("self")
@output_options
def token_self_command(json_output: bool, template: str) -> None:
    """Show the token this CLI sends (from $YURT_TOKEN, $NOMAD_TOKEN, $YURT_TOKEN_FILE or
    the local agent's bootstrap token)."""
    from yurt.runtime.cli.api_client import client_token

    check_format(json_output, template)
    if not client_token():
        fail("No token present in the environment: set YURT_TOKEN, NOMAD_TOKEN or "
             "YURT_TOKEN_FILE", EXIT_FAILED)
    token = request("GET", "/v1/acl/token/self", "Error fetching self token")
    print_token(token, json_output, template)


@token_group.command("update")
@_token_options
@click.option("-type", "--type", "token_type", default="", help="client or management.")
@output_options
@click.argument("accessor", metavar="ACCESSOR_ID")
def token_update_command(name: str, policies: tuple[str, ...], role_ids: tuple[str, ...],
                         role_names: tuple[str, ...], token_type: str, json_output: bool,
                         template: str, accessor: str) -> None:
    """Change a token's name, type, policies or roles (given policies, or roles, replace
    the token's). Needs a management token."""
    from yurt.runtime.cli.api_client import api

    check_format(json_output, template)
    path = f"/v1/acl/token/{segment(accessor)}"
    with api() as client:
        token = send(client, "GET", path, "Error fetching token")
        if name:
            token["Name"] = name
        if token_type:
            token["Type"] = token_type
        if policies:
            token["Policies"] = dedupe(policies)
        if role_names or role_ids:
            token["Roles"] = _role_links(role_names, role_ids)
        updated = send(client, "POST", path, "Error updating token", json=token)
    print_token(updated, json_output, template)


@token_group.command("delete")
@click.argument("accessor", metavar="ACCESSOR_ID")
def token_delete_command(accessor: str) -> None:
    """Delete a token by its accessor ID. Needs a management token."""
    request("DELETE", f"/v1/acl/token/{segment(accessor)}", "Error deleting token")
    echo(f"Token {accessor} successfully deleted")
