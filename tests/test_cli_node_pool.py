"""`yurt node pool apply|list|info|delete|jobs|nodes`: Nomad's output (layer 0 for the
formatting and the spec file, layer 2 through real `yurt` processes against a real agent)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.agent_support import mock_job, running_agent
from tests.cli_proc_support import yurt
from yurt.runtime.cli.node_pool import (
    format_node_stubs,
    format_pool_info,
    format_pool_list,
    parse_pool_spec,
)

SPEC = '''node_pool "gpu" {
  description = "Nodes with GPUs"
  meta {
    team = "ml"
  }
}
'''


# ------------------------------------------------------------------------- layer 0


def test_the_spec_file_is_nomads_hcl_or_the_apis_json() -> None:
    assert parse_pool_spec(SPEC, False) == {"Name": "gpu", "Description": "Nodes with GPUs",
                                            "Meta": {"team": "ml"}}
    assert parse_pool_spec('{"Name": "x"}', True) == {"Name": "x"}
    with pytest.raises(ValueError, match='unknown field "colour"'):
        parse_pool_spec('node_pool "x" {\n  colour = "red"\n}', False)
    with pytest.raises(ValueError, match="expected one block"):
        parse_pool_spec('pool "x" {}', False)


def test_outputs_are_nomads() -> None:
    pools = [{"Name": "all", "Description": "Node pool with all nodes in the cluster."},
             {"Name": "gpu", "Description": ""}]
    assert format_pool_list(pools) == (
        "Name  Description\n"
        "all   Node pool with all nodes in the cluster.\n"
        "gpu")
    assert format_pool_info({"Name": "gpu", "Description": "d", "Meta": {"b": "2", "a": "1"}}
                            ) == ("Name        = gpu\nDescription = d\n\nMetadata\na = 1\nb = 2\n\n"
                                  "Scheduler Configuration\nNo scheduler configuration")
    assert format_pool_info({"Name": "x"}).split("\n\n")[1] == "Metadata\nNo metadata"
    node = {"ID": "0123456789abcdef", "Datacenter": "dc1", "Name": "box", "NodeClass": "",
            "Drain": False, "SchedulingEligibility": "eligible", "Status": "ready"}
    assert format_node_stubs([node]) == (
        "ID        DC   Name  Class  Drain  Eligibility  Status\n"
        "01234567  dc1  box          false  eligible     ready")


# ------------------------------------------------------------------------- layer 2


async def test_pool_verbs_against_an_agent(tmp_path: Path) -> None:
    spec = tmp_path / "gpu.hcl"
    spec.write_text(SPEC)
    with trio.fail_after(60):
        async with running_agent(tmp_path / "data") as a:
            applied = await yurt(a.address, "node", "pool", "apply", str(spec))
            assert applied.returncode == 0, applied.stderr
            assert applied.stdout.decode() == 'Successfully applied node pool "gpu"!\n'
            listed = (await yurt(a.address, "node", "pool", "list")).stdout.decode()
            assert listed.splitlines() == [
                "Name     Description",
                "all      Node pool with all nodes in the cluster.",
                "default  Default node pool.",
                "gpu      Nodes with GPUs"]
            info = await yurt(a.address, "node", "pool", "info", "gp")
            assert info.stdout.decode().startswith(
                "Name        = gpu\nDescription = Nodes with GPUs\n\nMetadata\nteam = ml\n")
            nodes = (await yurt(a.address, "node", "pool", "nodes", "default")).stdout
            assert nodes.decode().splitlines()[1].startswith(a.agent.node.id[:8])
            assert (await yurt(a.address, "node", "pool", "nodes", "gpu")).stdout == (
                b"No nodes\n")
            assert (await yurt(a.address, "node", "pool", "jobs", "gpu")).stdout == b"No jobs\n"
            job = mock_job("ml")
            job["Job"]["NodePool"] = "gpu"
            assert (await a.client.put("/v1/jobs", json=job)).status_code == 200
            jobs = (await yurt(a.address, "node", "pool", "jobs", "gpu")).stdout.decode()
            assert jobs.splitlines()[1].split()[:2] == ["ml", "service"]
            busy = await yurt(a.address, "node", "pool", "delete", "gpu")
            assert busy.returncode == 2
            assert ('Error deleting node pool: 1 error occurred:\n'
                    '    * node pool "gpu" has non-terminal jobs in regions: [global]'
                    in busy.stderr.decode())
            assert (await a.client.delete("/v1/job/ml?purge=true")).status_code == 200
            deleted = await yurt(a.address, "node", "pool", "delete", "gpu")
            assert deleted.returncode == 0, deleted.stderr
            assert deleted.stdout == b'Successfully deleted node pool "gpu"!\n'
            missing = await yurt(a.address, "node", "pool", "info", "nope")
            assert missing.returncode == 1
            assert b'No node pool with prefix "nope" found' in missing.stderr
