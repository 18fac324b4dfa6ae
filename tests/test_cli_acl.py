"""`yurt acl …` (runtime/cli/acl*.py): Nomad's ACL verbs, flags and output.

Layer 0: what the verbs print (Nomad's `outputACLToken`, `formatACLPolicy`, `formatACLRole`,
Go's `time.Time` text) and how Nomad's single-dash flags are read, from dicts shaped as the
API's JSON. Layer 2: the real `yurt` against a real agent with ACLs on.
"""

from __future__ import annotations

import pytest

from yurt.runtime.cli import cli
from yurt.runtime.cli.acl import go_time, time_ns, token_block
from yurt.runtime.cli.acl_policy import policy_text
from yurt.runtime.cli.acl_role import role_text
from yurt.runtime.cli.acl_token import _expired
from yurt.runtime.cli.flags import nomad_spelling


@pytest.mark.parametrize(("value", "shown"), [
    ("2022-08-23T12:16:09.680699039Z", "2022-08-23 12:16:09.680699039 +0000 UTC"),
    ("2022-08-23T12:16:09.450Z", "2022-08-23 12:16:09.45 +0000 UTC"),  # zeros dropped
    ("2022-08-23T12:16:09Z", "2022-08-23 12:16:09 +0000 UTC"),
    ("2022-08-23T14:16:09.5+02:00", "2022-08-23 14:16:09.5 +0200 +0200"),
    ("2022-08-23T07:46:09-04:30", "2022-08-23 07:46:09 -0430 -0430"),
    (1661256969680699039, "2022-08-23 12:16:09.680699039 +0000 UTC"),  # nanoseconds
    (None, "<none>"),
    ("0001-01-01T00:00:00Z", "<none>"),  # Go's zero time
    ("yesterday", "<none>"),
])
def test_times_print_as_go_prints_them(value: object, shown: str) -> None:
    assert go_time(value) == shown


def test_an_offset_is_the_same_instant() -> None:
    assert time_ns("2022-08-23T14:16:09.5+02:00") == (1661256969_500000000, 120)
    assert time_ns("2022-08-23T12:16:09.5Z") == (1661256969_500000000, 0)


CREATED = "2022-08-23T12:16:09.680699039Z"


def test_a_client_token_prints_as_nomads_block_with_its_roles() -> None:
    token = {"AccessorID": "ef851ca0", "SecretID": "11d5348a", "Name": "ci", "Type": "client",
             "Global": False, "Policies": ["readonly", "deploy"], "CreateTime": CREATED,
             "ExpirationTime": "2022-08-23T20:16:09.680699039Z", "CreateIndex": 140,
             "ModifyIndex": 141, "Roles": [{"ID": "2fe0c403", "Name": "ops"}]}
    assert token_block(token) == (
        "Accessor ID  = ef851ca0\n"
        "Secret ID    = 11d5348a\n"
        "Name         = ci\n"
        "Type         = client\n"
        "Global       = false\n"
        "Create Time  = 2022-08-23 12:16:09.680699039 +0000 UTC\n"
        "Expiry Time  = 2022-08-23 20:16:09.680699039 +0000 UTC\n"
        "Create Index = 140\n"
        "Modify Index = 141\n"
        "Policies     = [readonly deploy]\n"
        "\n"
        "Roles\n"
        "ID        Name\n"
        "2fe0c403  ops")


def test_a_management_token_has_no_policies_or_roles_and_blanks_say_none() -> None:
    token = {"AccessorID": "a", "SecretID": "s", "Name": "", "Type": "management",
             "Global": True, "CreateTime": CREATED, "CreateIndex": 7, "ModifyIndex": 7}
    block = token_block(token).splitlines()
    assert block[2] == "Name         = <none>"
    assert block[4:7] == ["Global       = true",
                          "Create Time  = 2022-08-23 12:16:09.680699039 +0000 UTC",
                          "Expiry Time  = <none>"]
    assert block[-2:] == ["Policies     = n/a", "Roles        = n/a"]
    client = token_block({**token, "Type": "client", "Policies": []}).splitlines()
    assert client[-4:] == ["Policies     = []", "", "Roles", "<none>"]


def test_names_are_made_printable() -> None:
    token = {"AccessorID": "a", "SecretID": "s", "Name": "evil\x1b]0;owned\x07",
             "Type": "client", "Roles": [{"ID": "r", "Name": "\x1b[2J"}]}
    block = token_block(token)
    assert not {"\x1b", "\x07"} & set(block)
    assert "evil\\x1b]0;owned\\a" in block
    role = role_text({"ID": "i", "Name": "r\x1b[31m", "Policies": [{"Name": "p\x07"}]})
    assert not {"\x1b", "\x07"} & set(role)


def test_a_policy_prints_its_workload_and_rules() -> None:
    rules = 'namespace "default" {\n  policy = "read"\n}\n'
    policy = {"Name": "readonly", "Description": "", "Rules": rules, "CreateIndex": 749,
              "ModifyIndex": 758, "JobACL": {"Namespace": "default", "JobID": "example",
                                             "Group": "cache", "Task": ""}}
    assert policy_text(policy) == (
        "Name        = readonly\n"
        "Description = <none>\n"
        "CreateIndex = 749\n"
        "ModifyIndex = 758\n"
        "\n"
        "Associated Workload\n"
        "Namespace = default\n"
        "JobID     = example\n"
        "Group     = cache\n"
        "Task      = <none>\n"
        "\n"
        "Rules\n"
        "\n" + rules)
    assert "Associated Workload" not in policy_text({**policy, "JobACL": None})


def test_a_role_lists_its_policies_sorted() -> None:
    role = {"ID": "2fe0c403", "Name": "ops", "Description": "on call",
            "Policies": [{"Name": "write"}, {"Name": "read"}], "CreateIndex": 3,
            "ModifyIndex": 5}
    assert role_text(role) == (
        "ID           = 2fe0c403\n"
        "Name         = ops\n"
        "Description  = on call\n"
        "Policies     = read,write\n"
        "Create Index = 3\n"
        "Modify Index = 5")


def test_a_token_is_expired_once_its_time_has_passed() -> None:
    now = 1661256969_000000000
    assert _expired({"ExpirationTime": "2022-08-23T12:16:08Z"}, now)
    assert not _expired({"ExpirationTime": "2022-08-23T12:16:10Z"}, now)
    assert not _expired({"ExpirationTime": None}, now)
    assert not _expired({}, now)


def parsed(typed: str) -> dict[str, object]:
    """The parameters the verb gets for the command line `typed` (as `main` reads it)."""
    import click

    args = nomad_spelling(cli, typed.split())
    command: click.Command = cli
    while isinstance(command, click.Group):
        command = command.commands[args.pop(0)]
    return command.make_context("yurt", args).params


def test_nomads_flags_are_read() -> None:
    assert parsed("acl token create -name=ci -type management -global -ttl 1h -policy a "
                  "-policy b -role-id R -role-name N -json") == {
        "name": "ci", "token_type": "management", "is_global": True, "ttl": "1h",
        "policies": ("a", "b"), "role_ids": ("R",), "role_names": ("N",),
        "json_output": True, "template": ""}
    assert parsed("acl token create -t {{.SecretID}}")["template"] == "{{.SecretID}}"
    assert parsed("acl token update -policy p -type=client ACC") == {
        "name": "", "policies": ("p",), "role_ids": (), "role_names": (),
        "token_type": "client", "json_output": False, "template": "", "accessor": "ACC"}
    assert parsed("acl policy apply -description d -namespace default -job j -group g "
                  "-task t p -") == {
        "description": "d", "namespace": "default", "job_id": "j", "group": "g", "task": "t",
        "name": "p", "path": "-"}
    assert parsed("acl role info -by-name ops")["by_name"] is True
    assert parsed("acl role update -no-merge -name n -policy p ID") == {
        "name": "n", "description": "", "policies": ("p",), "no_merge": True,
        "json_output": False, "template": "", "role_id": "ID"}
    assert parsed("acl bootstrap -json -") == {"json_output": True, "template": "",
                                               "path": "-"}
