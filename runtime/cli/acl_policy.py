"""`yurt acl policy apply|info|list|delete`: Nomad's policy verbs (nomad/command/acl_policy_*.go)
over `/v1/acl/policy/:name` and `/v1/acl/policies`.

A policy file is read (or stdin, `-`) and sent as its text, unparsed: the agent parses it
(runtime/server/acl/policy.py) and answers a policy it cannot use with a 400 whose message
names the line and column; that message is printed after Nomad's "Error writing ACL policy:"
and the command exits 2, as for any bad input. `-namespace`, `-job`, `-group`, `-task` attach
the policy to a workload (Nomad's `JobACL`), each requiring the one before it, checked here
before anything is sent, with Nomad's messages.
"""

from __future__ import annotations

from typing import Any

import click

from yurt.runtime.cli.acl import read_source, request, segment, shown
from yurt.runtime.cli.output import echo, fail, format_kv, output_options, print_table
from yurt.runtime.errors import EXIT_USAGE


@click.group("policy")
def policy_group() -> None:
    """ACL policies: rules granting capabilities, attached to tokens and roles."""


@policy_group.command("apply")
@click.option("-description", "--description", default="",
              help="A human readable description of the policy.")
@click.option("-namespace", "--namespace", default="",
              help="Attach the policy to this namespace (its workloads).")
@click.option("-job", "--job", "job_id", default="",
              help="Attach the policy to this job (needs -namespace).")
@click.option("-group", "--group", default="",
              help="Attach the policy to this task group (needs -job).")
@click.option("-task", "--task", default="", help="Attach the policy to this task (needs -group).")
@click.argument("name")
@click.argument("path", metavar="PATH")
def policy_apply_command(description: str, namespace: str, job_id: str, group: str, task: str,
                         name: str, path: str) -> None:
    """Create or update the policy NAME from the file PATH (- for stdin).

    Needs a management token.
    """
    # nomad/command/acl_policy_apply.go `Run`: the workload flags, checked in its order.
    if job_id and not namespace:
        fail("-namespace is required if -job is set", EXIT_USAGE)
    if group and not job_id:
        fail("-job is required if -group is set", EXIT_USAGE)
    if task and not group:
        fail("-group is required if -task is set", EXIT_USAGE)
    rules = read_source(path, "policy")
    policy: dict[str, Any] = {"Name": name, "Description": description, "Rules": rules}
    if namespace:
        policy["JobACL"] = {"Namespace": namespace, "JobID": job_id, "Group": group,
                            "Task": task}
    request("POST", f"/v1/acl/policy/{segment(name)}", "Error writing ACL policy", json=policy)
    echo(f'Successfully wrote "{name}" ACL policy!')


def policy_text(policy: dict[str, Any]) -> str:
    """Nomad's `formatACLPolicy`: name, description and indexes, the workload it is attached
    to (if any), then its rules as written."""
    out = format_kv([("Name", shown(policy.get("Name"))),
                     ("Description", shown(policy.get("Description"))),
                     ("CreateIndex", str(policy.get("CreateIndex", 0))),
                     ("ModifyIndex", str(policy.get("ModifyIndex", 0)))])
    workload = policy.get("JobACL")
    if workload:
        out += "\n\nAssociated Workload\n" + format_kv(
            [(key, shown(workload.get(key))) for key in ("Namespace", "JobID", "Group",
                                                             "Task")])
    return f"{out}\n\nRules\n\n{policy.get('Rules', '')}"


@policy_group.command("info")
@output_options
@click.argument("name")
def policy_info_command(json_output: bool, template: str, name: str) -> None:
    """Show the policy NAME: its description, workload and rules.

    Needs a management token, or a token holding the policy.
    """
    from yurt.runtime.cli.output import check_format, emit

    check_format(json_output, template)
    policy = request("GET", f"/v1/acl/policy/{segment(name)}",
                     "Error fetching info on ACL policy")
    emit(policy, json_output, template, lambda: echo(policy_text(policy)))


@policy_group.command("list")
@output_options
def policy_list_command(json_output: bool, template: str) -> None:
    """List the policies (a non-management token sees its own)."""
    from yurt.runtime.cli.output import check_format, emit

    check_format(json_output, template)
    policies = request("GET", "/v1/acl/policies", "Error listing ACL policies") or []

    def human() -> None:
        if not policies:
            echo("No policies found")
            return
        print_table(("Name", "Description"),
                    [[shown(p.get("Name")), shown(p.get("Description"))]
                     for p in policies], id_columns=())

    emit(policies, json_output, template, human)


@policy_group.command("delete")
@click.argument("name")
def policy_delete_command(name: str) -> None:
    """Delete the policy NAME. Needs a management token."""
    request("DELETE", f"/v1/acl/policy/{segment(name)}", "Error deleting ACL policy")
    echo(f"Successfully deleted {name} policy!")
