"""A Nomad API client (python-nomad) pointed at a running yurt agent (layer 2).

python-nomad speaks Nomad's HTTP API with `requests`; it runs in a worker thread here, against
the agent on a real socket, and sees Nomad's shapes: register, list and read allocations, a
job's allocations, deregister. The agent has ACLs on and is bootstrapped by python-nomad, as
python-nomad's CI runs its suite against Nomad (and scripts/python_nomad_suite.py against
yurt): its first test bootstraps, every later client sends that token, and a client without
it is refused as Nomad refuses it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx2
import nomad
import nomad.api.exceptions
import pytest
import trio

from tests.agent_support import Running, raw_job, wait_status
from yurt.runtime.agent.agent import Agent, AgentConfig
from yurt.runtime.server.acl.settings import BOOTSTRAP_MANUAL, AclSettings

pytestmark = pytest.mark.slow


@asynccontextmanager
async def bootstrapped_by_python_nomad(data_dir: Path
                                       ) -> AsyncIterator[tuple[Running, nomad.Nomad]]:
    """An agent with ACLs on and nobody bootstrapped (Nomad's `-acl-enabled`), bootstrapped by
    python-nomad as its tests/test_acl.py `test_create_bootstrap` does, and a python-nomad
    client that sends that token (its tests/common.py `NOMAD_TOKEN`); `Running.client` sends
    it too. In dev mode: every task it started is killed when the test ends."""
    settings = AclSettings(enabled=True, bootstrap=BOOTSTRAP_MANUAL)
    agent = Agent(AgentConfig(data_dir=data_dir, port=0, dev_mode=True, acl=settings))
    async with trio.open_nursery() as nursery:
        address = await nursery.start(agent.run)
        await agent.ready.wait()
        port = urlparse(address).port
        assert port is not None
        anonymous = nomad.Nomad(host="127.0.0.1", port=port, timeout=10)
        made = await trio.to_thread.run_sync(anonymous.acl.generate_bootstrap)
        client = nomad.Nomad(host="127.0.0.1", port=port, timeout=10, token=made["SecretID"])
        async with httpx2.AsyncClient(base_url=address, timeout=20,
                                      headers={"X-Nomad-Token": made["SecretID"]}) as http:
            try:
                yield Running(agent, address, http), client
            finally:
                agent.stop()


async def test_python_nomad_drives_yurt(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with bootstrapped_by_python_nomad(tmp_path) as (a, client):
            port = urlparse(a.address).port
            anonymous = nomad.Nomad(host="127.0.0.1", port=port, timeout=10)
            made_up = nomad.Nomad(host="127.0.0.1", port=port, timeout=10,
                                  token="aed2fc63-c155-40d5-b58a-18deed4b73e5")
            for stranger in (anonymous, made_up):
                with pytest.raises(nomad.api.exceptions.URLNotAuthorizedNomadException):
                    await trio.to_thread.run_sync(stranger.jobs.get_jobs)
            job = raw_job("nomadjob", "sleep 1000")

            def register() -> Any:
                return client.jobs.register_job(job)

            registered = await trio.to_thread.run_sync(register)
            assert "EvalID" in registered
            await wait_status(a.client, "nomadjob", "running")

            def inspect() -> tuple[Any, Any, Any, Any]:
                allocs = client.allocations.get_allocations()
                one = client.allocation.get_allocation(allocs[0]["ID"])
                of_job = client.job.get_allocations("nomadjob")
                read_job = client.job.get_job("nomadjob")
                return allocs, one, of_job, read_job

            allocs, one, of_job, read_job = await trio.to_thread.run_sync(inspect)
            assert [x["JobID"] for x in allocs] == ["nomadjob"]
            assert one["TaskStates"]["t"]["State"] == "running"
            assert one["Job"]["ID"] == "nomadjob"
            assert [x["ID"] for x in of_job] == [one["ID"]]
            assert read_job["TaskGroups"][0]["Tasks"][0]["Driver"] == "raw_exec"

            await trio.to_thread.run_sync(lambda: client.job.deregister_job("nomadjob"))
            stopped = await wait_status(a.client, "nomadjob", "complete")
            assert stopped["DesiredStatus"] == "stop"
