"""`yurt var …` and `yurt namespace …` against a real agent (the CLI in a worker thread)."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import trio
from click.testing import CliRunner, Result

from tests.agent_support import Running, running_agent
from yurt.runtime.cli import cli


async def _yurt(agent: Running, *args: str, stdin: str = "") -> Result:
    runner = CliRunner()
    return await trio.to_thread.run_sync(partial(
        runner.invoke, cli, list(args), input=stdin, env={"YURT_ADDR": agent.address,
                                                          "YURT_TOKEN": ""}))


async def test_var_put_get_list_purge(tmp_path: Path) -> None:
    secret_file = tmp_path / "pw"
    secret_file.write_text("from-a-file")
    with trio.fail_after(60):
        async with running_agent(tmp_path / "data") as agent:
            put = await _yurt(agent, "var", "put", "app/db", "user=u", f"pass=@{secret_file}",
                              "note=-", stdin="from-stdin")
            assert put.exit_code == 0, put.output
            assert put.output.startswith('Created variable "app/db" with modify index ')
            stored = (await agent.client.get("/v1/var/app/db")).json()
            assert stored["Items"] == {"user": "u", "pass": "from-a-file",
                                       "note": "from-stdin"}

            item = await _yurt(agent, "var", "get", "-item", "pass", "app/db")
            assert (item.exit_code, item.output) == (0, "from-a-file\n")
            shown = await _yurt(agent, "var", "get", "app/db")
            assert "Path        = app/db" in shown.output
            assert f"Check Index = {stored['ModifyIndex']}" in shown.output
            assert "user = u" in shown.output
            as_json = await _yurt(agent, "var", "get", "-out", "json", "app/db")
            assert json.loads(as_json.output) == stored

            listed = await _yurt(agent, "var", "list", "--json", "app")
            assert [v["Path"] for v in json.loads(listed.output)] == ["app/db"]
            assert "app/db" in (await _yurt(agent, "var", "list")).output
            assert "No variables found" in (await _yurt(agent, "var", "list", "zzz")).output

            # As with Nomad, put is a check-and-set: an existing variable needs its index.
            conflict = await _yurt(agent, "var", "put", "app/db", "user=v")
            assert conflict.exit_code == 1
            assert "Check-and-Set conflict" in conflict.output
            assert f"-check-index={stored['ModifyIndex']}" in conflict.output
            ok = await _yurt(agent, "var", "put", "-check-index",
                             str(stored["ModifyIndex"]), "app/db", "user=v")
            assert ok.exit_code == 0, ok.output
            forced = await _yurt(agent, "var", "put", "-force", "app/db", "user=w")
            assert forced.exit_code == 0, forced.output
            assert (await agent.client.get("/v1/var/app/db")).json()["Items"] == {"user": "w"}

            stale = await _yurt(agent, "var", "purge", "-check-index", "1", "app/db")
            assert stale.exit_code == 1
            purged = await _yurt(agent, "var", "purge", "app/db")
            assert (purged.exit_code, purged.output) == (
                0, 'Successfully purged variable "app/db"!\n')
            missing = await _yurt(agent, "var", "get", "app/db")
            assert missing.exit_code == 1
            assert "variable not found" in missing.output


async def test_var_bad_input_exits_2(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as agent:
            for args in [("var", "put", "a.b", "k=v"), ("var", "put", "a", "novalue"),
                         ("var", "put", "-check-index", "x", "a", "k=v"),
                         ("var", "put", "-namespace", "*", "a", "k=v")]:
                result = await _yurt(agent, *args)
                assert result.exit_code == 2, (args, result.output)
            assert (await agent.client.get("/v1/vars")).json() == []


async def test_namespace_apply_list_status_delete(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as agent:
            applied = await _yurt(agent, "namespace", "apply", "-description", "Team A",
                                  "-meta", "owner=a", "team-a")
            assert (applied.exit_code, applied.output) == (
                0, 'Successfully applied namespace "team-a"!\n')
            # Flags not given keep their value.
            await _yurt(agent, "namespace", "apply", "-quota", "q", "team-a")
            got = (await agent.client.get("/v1/namespace/team-a")).json()
            assert (got["Description"], got["Meta"], got["Quota"]) == (
                "Team A", {"owner": "a"}, "q")
            listed = await _yurt(agent, "namespace", "list")
            assert "team-a" in listed.output
            assert "Default shared namespace" in listed.output
            status = await _yurt(agent, "namespace", "status", "team-a")
            assert "Description = Team A" in status.output
            assert "owner = a" in status.output

            await _yurt(agent, "var", "put", "-namespace", "team-a", "x", "k=v")
            in_ns = await _yurt(agent, "var", "list", "-namespace", "team-a", "--json")
            assert [v["Path"] for v in json.loads(in_ns.output)] == ["x"]
            refused = await _yurt(agent, "namespace", "delete", "team-a")
            assert refused.exit_code == 2
            assert "has variables associated with it" in refused.output
            await _yurt(agent, "var", "purge", "-namespace", "team-a", "x")
            deleted = await _yurt(agent, "namespace", "delete", "team-a")
            assert (deleted.exit_code, deleted.output) == (
                0, 'Successfully deleted namespace "team-a"!\n')
            gone = await _yurt(agent, "namespace", "status", "team-a")
            assert gone.exit_code == 1
            assert (await _yurt(agent, "namespace", "apply", "bad_name")).exit_code == 2
