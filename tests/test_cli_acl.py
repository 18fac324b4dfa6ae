"""`yurt acl …` (runtime/cli/acl*.py): Nomad's ACL verbs, flags and output.

Layer 0: what the verbs print (Nomad's `outputACLToken`, `formatACLPolicy`, `formatACLRole`,
Go's `time.Time` text) and how Nomad's single-dash flags are read, from dicts shaped as the
API's JSON. Layer 2: the real `yurt` against a real agent with ACLs on.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path

import httpx2
import pytest
import trio

from tests.agent_support import Running
from tests.cli_proc_support import YURT
from tests.test_cli_token_discovery import OTHER_USER
from tests.token_support import without_suite_token
from yurt.runtime.agent.agent import Agent, AgentConfig
from yurt.runtime.cli import cli
from yurt.runtime.cli.acl import go_time, time_ns, token_block
from yurt.runtime.cli.acl_policy import policy_text
from yurt.runtime.cli.acl_role import role_text
from yurt.runtime.cli.acl_token import _expired
from yurt.runtime.cli.flags import nomad_spelling
from yurt.runtime.cli.lazy import subcommand
from yurt.runtime.lib.datadir import bootstrap_token_path
from yurt.runtime.server.acl.settings import BOOTSTRAP_MANUAL, AclSettings


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
        command = subcommand(command, args.pop(0))
    return command.make_context("yurt", args).params


def test_nomads_flags_are_read() -> None:
    assert parsed("acl token create -name=ci -type management -global -ttl 1h -policy a "
                  "-policy b -role-id R -role-name N -json") == {
        "name": "ci", "token_type": "management", "is_global": True, "ttl": "1h",
        "policies": ("a", "b"), "role_ids": ("R",), "role_names": ("N",),
        "json_output": True, "template": "", "accessor": "", "secret_path": None}
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


# --------------------------------------------------------------------------- layer 2

BOOTSTRAP_SECRET = "8f9b7c1e-1111-4222-8333-944445555666"
READ_DEFAULT = 'namespace "default" {\n  policy = "read"\n}\n'


@asynccontextmanager
async def acl_agent(data_dir: Path, *, bootstrap: str = BOOTSTRAP_MANUAL
                    ) -> AsyncIterator[Running]:
    """An agent with ACLs on, as `yurt agent` has them, bootstrapped by the test (`manual`)
    or by its own start (`auto`); its HTTP client sends no token."""
    agent = Agent(AgentConfig(data_dir=data_dir, port=0, dev_mode=True,
                              acl=AclSettings(enabled=True, bootstrap=bootstrap)))
    async with trio.open_nursery() as nursery:
        address = await nursery.start(agent.run)
        await agent.ready.wait()
        async with httpx2.AsyncClient(base_url=address, timeout=20) as client:
            try:
                yield Running(agent, address, client)
            finally:
                agent.stop()


def cli_env(address: str, home: Path, **extra: str) -> dict[str, str]:
    """A user's environment: no token (not even the suite's), the agent at `address`, and a
    default data dir under `home`, so nothing of this machine's own agent is found."""
    return {**without_suite_token(), "YURT_ADDR": address, "XDG_DATA_HOME": str(home),
            **extra}


async def run(env: dict[str, str], *args: str, stdin: bytes = b"",
              as_other_user: bool = False) -> subprocess.CompletedProcess[bytes]:
    """`yurt <args>` to its end; as uid 4242 (no groups) with `as_other_user`."""
    command = [YURT, *args]
    if as_other_user:
        command = ["setpriv", f"--reuid={OTHER_USER}", f"--regid={OTHER_USER}",
                   "--clear-groups", sys.executable, *command]
    return await trio.run_process(command, stdin=stdin, capture_stdout=True,
                                  capture_stderr=True, check=False, env=env)


def kv(out: bytes) -> dict[str, str]:
    """The `key = value` lines of a block (the first value of a key wins)."""
    found: dict[str, str] = {}
    for line in out.decode().splitlines():
        key, sep, value = line.partition(" = ")
        if sep:
            found.setdefault(key.strip(), value)
    return found


@pytest.mark.slow
async def test_bootstrap_and_policies(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with acl_agent(tmp_path / "data") as a:
            env = cli_env(a.address, tmp_path / "home")
            # The operator's secret from stdin, never an argument.
            boot = await run(env, "acl", "bootstrap", "-", stdin=BOOTSTRAP_SECRET.encode()
                             + b"\n")
            assert boot.returncode == 0, boot.stderr
            token = kv(boot.stdout)
            assert (token["Secret ID"], token["Name"], token["Type"], token["Policies"],
                    token["Roles"], token["Expiry Time"]) == (
                BOOTSTRAP_SECRET, "Bootstrap Token", "management", "n/a", "n/a", "<none>")
            assert token["Create Time"].endswith(" +0000 UTC")
            again = await run(env, "acl", "bootstrap")
            assert again.returncode == 2  # the agent's 400
            assert again.stderr.startswith(b"yurt: Error bootstrapping: ACL bootstrap already "
                                           b"done"), again.stderr

            anonymous = await run(env, "acl", "token", "list")
            assert anonymous.returncode == 1
            assert anonymous.stderr.startswith(b"yurt: Error listing ACL tokens: permission "
                                               b"denied"), anonymous.stderr

            env["YURT_TOKEN"] = BOOTSTRAP_SECRET
            rules = tmp_path / "readonly.hcl"
            rules.write_text(READ_DEFAULT)
            applied = await run(env, "acl", "policy", "apply", "-description", "read only",
                                "readonly", str(rules))
            assert (applied.returncode, applied.stdout) == (
                0, b'Successfully wrote "readonly" ACL policy!\n'), applied.stderr
            piped = await run(env, "acl", "policy", "apply", "-namespace", "default", "-job",
                              "web", "web-vars", "-", stdin=READ_DEFAULT.encode())
            assert piped.returncode == 0, piped.stderr

            # A policy the agent cannot parse: its 400, the line and column in it, exit 2.
            bad = tmp_path / "bad.hcl"
            bad.write_text('namespace "default" {\n  policy = "reed"\n}\n')
            refused = await run(env, "acl", "policy", "apply", "bad", str(bad))
            assert refused.returncode == 2
            assert refused.stderr.startswith(b"yurt: Error writing ACL policy: ")
            assert b'bad:2:3: Invalid namespace policy: "reed"' in refused.stderr
            assert b"\\t" not in refused.stderr  # Nomad's tab-indented list, as spaces
            orphan = await run(env, "acl", "policy", "apply", "-group", "g", "p", str(rules))
            assert (orphan.returncode, orphan.stderr) == (
                2, b"yurt: -job is required if -group is set\n")
            missing = await run(env, "acl", "policy", "apply", "p", str(tmp_path / "none"))
            assert missing.returncode == 2
            assert b"No such file or directory" in missing.stderr

            info = await run(env, "acl", "policy", "info", "readonly")
            assert info.returncode == 0, info.stderr
            head, rules_shown = info.stdout.decode().split("\nRules\n\n")
            assert rules_shown == READ_DEFAULT + "\n"
            assert kv(head.encode())["Description"] == "read only"
            attached = await run(env, "acl", "policy", "info", "web-vars")
            assert "Associated Workload\nNamespace = default\nJobID     = web\n" in (
                attached.stdout.decode())

            listed = await run(env, "acl", "policy", "list")
            assert listed.stdout.decode().splitlines() == [
                "Name      Description", "readonly  read only", "web-vars  <none>"]
            as_json = await run(env, "acl", "policy", "list", "-json")
            assert [p["Name"] for p in json.loads(as_json.stdout)] == ["readonly", "web-vars"]
            templated = await run(env, "acl", "policy", "list", "-t",
                                  "{{range .}}{{.Name}},{{end}}")
            assert templated.stdout == b"readonly,web-vars,"

            deleted = await run(env, "acl", "policy", "delete", "web-vars")
            assert deleted.stdout == b"Successfully deleted web-vars policy!\n"
            gone = await run(env, "acl", "policy", "info", "web-vars")
            assert (gone.returncode, gone.stderr) == (
                1, b"yurt: Error fetching info on ACL policy: ACL policy not found\n")


@pytest.mark.slow
async def test_tokens(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with acl_agent(tmp_path / "data") as a:
            r = await a.client.post("/v1/acl/bootstrap")
            management = r.json()["SecretID"]
            env = cli_env(a.address, tmp_path / "home", NOMAD_TOKEN=management)  # Nomad's
            rules = tmp_path / "readonly.hcl"
            rules.write_text(READ_DEFAULT)
            assert (await run(env, "acl", "policy", "apply", "readonly",
                              str(rules))).returncode == 0

            made = await run(env, "acl", "token", "create", "-name=ci", "-policy", "readonly",
                             "-policy", "nosuch", "-ttl", "1h")
            assert made.returncode == 0, made.stderr
            # Nomad warns of a policy it cannot read, and makes the token all the same.
            assert made.stderr == b"Error fetching info on nosuch policy: ACL policy not found\n"
            token = kv(made.stdout)
            assert (token["Name"], token["Type"], token["Global"], token["Policies"]) == (
                "ci", "client", "false", "[readonly nosuch]")
            created = datetime.strptime(token["Create Time"][:19], "%Y-%m-%d %H:%M:%S")
            expires = datetime.strptime(token["Expiry Time"][:19], "%Y-%m-%d %H:%M:%S")
            assert abs((expires - created).total_seconds() - 3600) <= 1
            assert made.stdout.decode().endswith("\nRoles\n<none>\n")
            accessor, secret = token["Accessor ID"], token["Secret ID"]

            bad_ttl = await run(env, "acl", "token", "create", "-policy", "readonly", "-ttl",
                                "soon")
            assert bad_ttl.returncode == 2
            assert bad_ttl.stderr.startswith(b"yurt: Failed to parse TTL as time duration: ")
            too_long = await run(env, "acl", "token", "create", "-policy", "readonly", "-ttl",
                                 "72h")
            assert too_long.returncode == 2
            assert b"cannot be more than 24h0m0s in the future" in too_long.stderr

            info = await run(env, "acl", "token", "info", accessor)
            assert kv(info.stdout)["Secret ID"] == secret
            listed = await run(env, "acl", "token", "list")
            rows = [line.split() for line in listed.stdout.decode().splitlines()]
            assert rows[0] == ["Name", "Type", "Global", "Accessor", "ID", "Expired"]
            assert ["ci", "client", "false", accessor, "false"] in rows
            assert [t["AccessorID"] for t in json.loads((await run(
                env, "acl", "token", "list", "-json")).stdout) if t["Name"] == "ci"] == [
                accessor]

            # The client token's own view: itself, its policies, nothing of the others.
            as_ci = {**env, "YURT_TOKEN": secret}
            me = await run(as_ci, "acl", "token", "self")
            assert kv(me.stdout)["Accessor ID"] == accessor, me.stderr
            mine = await run(as_ci, "acl", "policy", "list", "-json")
            assert [p["Name"] for p in json.loads(mine.stdout)] == ["readonly"]
            denied = await run(as_ci, "acl", "token", "create", "-policy", "readonly")
            assert denied.returncode == 1
            assert denied.stderr.startswith(b"yurt: Error creating token: permission denied")

            updated = await run(env, "acl", "token", "update", "-name", "ci2", "-policy",
                                "readonly", accessor)
            assert updated.returncode == 0, updated.stderr
            after = kv(updated.stdout)
            assert (after["Name"], after["Policies"], after["Expiry Time"]) == (
                "ci2", "[readonly]", token["Expiry Time"])  # the TTL is kept
            assert int(after["Modify Index"]) > int(token["Modify Index"])

            removed = await run(env, "acl", "token", "delete", accessor)
            assert removed.stdout == f"Token {accessor} successfully deleted\n".encode()
            stale = await run(as_ci, "acl", "token", "self")
            assert stale.returncode == 1
            assert b"ACL token not found" in stale.stderr
            nobody = await run(cli_env(a.address, tmp_path / "home"), "acl", "token", "self")
            assert (nobody.returncode, b"No token present" in nobody.stderr) == (1, True)


@pytest.mark.slow
async def test_roles(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with acl_agent(tmp_path / "data") as a:
            r = await a.client.post("/v1/acl/bootstrap")
            env = cli_env(a.address, tmp_path / "home", YURT_TOKEN=r.json()["SecretID"])
            for name, text in (("readonly", READ_DEFAULT), ("nodes", 'node { policy = "read" }')):
                assert (await run(env, "acl", "policy", "apply", name, "-",
                                  stdin=text.encode())).returncode == 0

            unnamed = await run(env, "acl", "role", "create", "-policy", "readonly")
            assert (unnamed.returncode, unnamed.stderr) == (
                2, b"yurt: ACL role name must be specified using the -name flag\n")
            made = await run(env, "acl", "role", "create", "-name", "ops", "-description",
                             "on call", "-policy", "readonly")
            assert made.returncode == 0, made.stderr
            role = kv(made.stdout)
            assert (role["Name"], role["Description"], role["Policies"]) == (
                "ops", "on call", "readonly")
            role_id = role["ID"]
            by_name = await run(env, "acl", "role", "info", "-by-name", "ops")
            assert kv(by_name.stdout)["ID"] == role_id
            by_id = await run(env, "acl", "role", "info", "-json", role_id)
            assert json.loads(by_id.stdout)["Name"] == "ops"
            listed = await run(env, "acl", "role", "list")
            assert listed.stdout.decode().splitlines()[1].split() == [
                role_id, "ops", "on", "call", "readonly"]

            merged = await run(env, "acl", "role", "update", "-policy", "nodes", role_id)
            assert kv(merged.stdout)["Policies"] == "nodes,readonly", merged.stderr
            nothing = await run(env, "acl", "role", "update", role_id)
            assert nothing.returncode == 2
            replaced = await run(env, "acl", "role", "update", "-no-merge", "-name", "ops2",
                                 "-policy", "nodes", role_id)
            assert (kv(replaced.stdout)["Name"], kv(replaced.stdout)["Policies"],
                    kv(replaced.stdout)["Description"]) == ("ops2", "nodes", "<none>")

            # A token through the role: its roles table, and it acts with the role's policy.
            linked = await run(env, "acl", "token", "create", "-name", "r", "-role-name",
                               "ops2", "-json")
            token = json.loads(linked.stdout)
            assert [link["ID"] for link in token["Roles"]] == [role_id]
            shown = await run(env, "acl", "token", "info", token["AccessorID"])
            assert shown.stdout.decode().endswith(f"\nRoles\nID{' ' * 36}Name\n"
                                                  f"{role_id}  ops2\n")
            nodes = await run({**env, "YURT_TOKEN": token["SecretID"]}, "node", "status",
                              "-json")
            assert nodes.returncode == 0, nodes.stderr

            deleted = await run(env, "acl", "role", "delete", role_id)
            assert deleted.stdout == f"ACL role {role_id} successfully deleted\n".encode()
            gone = await run(env, "acl", "role", "info", role_id)
            assert (gone.returncode, gone.stderr) == (
                1, b"yurt: Error reading ACL role: ACL role not found\n")


@pytest.fixture
def public_root() -> Iterator[Path]:
    """A directory every user may traverse, as /var/lib is (pytest's tmp tree is root's)."""
    path = Path(tempfile.mkdtemp(prefix="yurt-acl-"))
    path.chmod(0o711)
    try:
        yield path
    finally:
        shutil.rmtree(path)


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root to act as uid 4242")
async def test_the_agents_user_finds_its_bootstrap_token_and_no_one_else_does(
        public_root: Path) -> None:
    home = public_root / "xdg"
    home.mkdir(mode=0o711)
    data = home / "yurt"  # the default data dir of a user whose XDG_DATA_HOME is `home`
    with trio.fail_after(60):
        async with acl_agent(data, bootstrap="auto") as a:
            path = a.agent.acl_start.bootstrap_file
            assert path == bootstrap_token_path(data)
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
            path.parent.chmod(0o711)  # only the file's own mode stands in the way
            env = cli_env(a.address, home)

            mine = await run(env, "acl", "token", "self")
            assert mine.returncode == 0, mine.stderr
            assert kv(mine.stdout)["Secret ID"] == path.read_text().strip()
            assert kv(mine.stdout)["Type"] == "management"
            jobs = await run(env, "job", "status")
            assert jobs.returncode == 0, jobs.stderr

            theirs = await run(env, "job", "status", as_other_user=True)
            assert theirs.returncode == 1
            assert theirs.stderr.startswith(b"yurt: permission denied"), theirs.stderr
            assert b"Traceback" not in theirs.stderr
            assert b"bootstrap.token" not in theirs.stderr  # skipped without a word
            self_less = await run(env, "acl", "token", "self", as_other_user=True)
            assert (self_less.returncode, b"No token present" in self_less.stderr) == (1, True)
