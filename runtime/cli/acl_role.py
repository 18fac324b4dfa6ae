"""`yurt acl role create|info|list|update|delete`: Nomad's role verbs
(nomad/command/acl_role_*.go) over `/v1/acl/role[s]`.

A role is a named set of policies that tokens link to. Printed as Nomad's `formatACLRole`
block (its policies sorted, joined by commas) and `formatACLRoles` table. `update` merges
what the flags give into the role as it is (a new name or description replaces the old; each
`-policy` is added unless already linked), unless `-no-merge`, which writes exactly what the
flags say (then `-name` and one `-policy` at least are required), as Nomad's does.
"""

from __future__ import annotations

from typing import Any

import click

from yurt.runtime.cli.acl import dedupe, request, segment, send, shown
from yurt.runtime.cli.output import (
    check_format,
    echo,
    emit,
    fail,
    format_kv,
    output_options,
    print_table,
)
from yurt.runtime.errors import EXIT_USAGE


@click.group("role")
def role_group() -> None:
    """ACL roles: named sets of policies that tokens link to."""


def _policy_names(role: dict[str, Any]) -> str:
    """nomad/command/acl_role.go `aclRolePolicyLinkToStringList`: sorted, comma-joined."""
    return ",".join(sorted(str(p.get("Name", "")) for p in role.get("Policies") or []))


def role_text(role: dict[str, Any]) -> str:
    """nomad/command/acl_role.go `formatACLRole`."""
    return format_kv([("ID", shown(role.get("ID"))), ("Name", shown(role.get("Name"))),
                      ("Description", shown(role.get("Description"))),
                      ("Policies", shown(_policy_names(role))),
                      ("Create Index", str(role.get("CreateIndex", 0))),
                      ("Modify Index", str(role.get("ModifyIndex", 0)))])


def _print_role(role: dict[str, Any], json_output: bool, template: str) -> None:
    emit(role, json_output, template, lambda: echo(role_text(role)))


def _links(policies: tuple[str, ...] | list[str]) -> list[dict[str, str]]:
    """nomad/command/acl_role.go `aclRolePolicyNamesToPolicyLinks`: each name once."""
    return [{"Name": name} for name in dedupe(policies)]


def _role_options(f: Any) -> Any:
    for option in reversed((
        click.option("-name", "--name", default="", help="The role's name (1-128 characters)."),
        click.option("-description", "--description", default="",
                     help="A description (up to 256 characters)."),
        click.option("-policy", "--policy", "policies", multiple=True, metavar="NAME",
                     help="A policy of the role, by name (repeatable)."),
    )):
        f = option(f)
    return f


def _require_name_and_policy(name: str, policies: tuple[str, ...]) -> None:
    if not name:
        fail("ACL role name must be specified using the -name flag", EXIT_USAGE)
    if not policies:
        fail("At least one policy name must be specified using the -policy flag", EXIT_USAGE)


@role_group.command("create")
@_role_options
@output_options
def role_create_command(name: str, description: str, policies: tuple[str, ...],
                        json_output: bool, template: str) -> None:
    """Create a role of one or more policies. Needs a management token."""
    check_format(json_output, template)
    _require_name_and_policy(name, policies)
    role = request("POST", "/v1/acl/role", "Error creating ACL role",
                   json={"Name": name, "Description": description,
                         "Policies": _links(policies)})
    _print_role(role, json_output, template)


@role_group.command("info")
@click.option("-by-name", "--by-name", "by_name", is_flag=True,
              help="The argument is the role's name, not its ID.")
@output_options
@click.argument("role_id", metavar="ROLE_ID")
def role_info_command(by_name: bool, json_output: bool, template: str, role_id: str) -> None:
    """Show a role, by ID (or by name with -by-name). Needs a management token."""
    check_format(json_output, template)
    path = f"/v1/acl/role/name/{segment(role_id)}" if by_name else \
        f"/v1/acl/role/{segment(role_id)}"
    role = request("GET", path, "Error reading ACL role")
    _print_role(role, json_output, template)


@role_group.command("list")
@output_options
def role_list_command(json_output: bool, template: str) -> None:
    """List the roles. Needs a management token."""
    check_format(json_output, template)
    roles = request("GET", "/v1/acl/roles", "Error listing ACL roles") or []

    def human() -> None:
        if not roles:
            echo("No ACL roles found")
            return
        print_table(("ID", "Name", "Description", "Policies"),
                    [[shown(r.get("ID")), shown(r.get("Name")), shown(r.get("Description")),
                      shown(_policy_names(r))] for r in roles])

    emit(roles, json_output, template, human)


@role_group.command("update")
@_role_options
@click.option("-no-merge", "--no-merge", "no_merge", is_flag=True,
              help="Write exactly what the flags say instead of merging into the role.")
@output_options
@click.argument("role_id", metavar="ROLE_ID")
def role_update_command(name: str, description: str, policies: tuple[str, ...],
                        no_merge: bool, json_output: bool, template: str, role_id: str) -> None:
    """Change a role's name, description or policies. Needs a management token."""
    from yurt.runtime.cli.api_client import api

    check_format(json_output, template)
    path = f"/v1/acl/role/{segment(role_id)}"
    with api() as client:
        current = send(client, "GET", path, "Error when retrieving ACL role")
        if no_merge:
            _require_name_and_policy(name, policies)
            role = {"ID": role_id, "Name": name, "Description": description,
                    "Policies": _links(policies)}
        else:
            if not (policies or name or description):
                fail("Please provide at least one flag to update the ACL role", EXIT_USAGE)
            role = dict(current)
            role["Name"] = name or current.get("Name", "")
            role["Description"] = description or current.get("Description", "")
            linked = [p.get("Name", "") for p in current.get("Policies") or []]
            role["Policies"] = _links([*linked, *policies])
        updated = send(client, "POST", path, "Error updating ACL role", json=role)
    _print_role(updated, json_output, template)


@role_group.command("delete")
@click.argument("role_id", metavar="ROLE_ID")
def role_delete_command(role_id: str) -> None:
    """Delete a role by its ID. Needs a management token."""
    request("DELETE", f"/v1/acl/role/{segment(role_id)}", "Error deleting ACL role")
    echo(f"ACL role {role_id} successfully deleted")
