"""The cluster's paused eval broker (`PauseEvalBroker`), under the mock clock over an
in-memory etcd (layer 1): set through one server, the leader (another) processes nothing
while it is set; cleared, the leader processes what waited (nomad/leader.go
`handleEvalBrokerStateChange`)."""

from __future__ import annotations

import trio

from tests.test_cluster_server_core import node, servers, settle, sized
from yurt.runtime.server.schedconfig import SchedulerConfiguration
from yurt.runtime.structs import EVAL_STATUS_COMPLETE, EVAL_STATUS_PENDING


async def test_the_leader_processes_nothing_while_the_broker_is_paused(
        autojump_clock: object) -> None:
    async with servers(2) as (s1, s2), trio.open_nursery() as nursery:
        await s1.register_node(node("n1"), "secret-n1")
        nursery.start_soon(s2.lead)
        updated, _ = await s1.set_scheduler_config(
            SchedulerConfiguration(pause_eval_broker=True), None)
        assert updated
        await settle(s1, s2)
        registered = await s1.register_job(sized("web", 2))
        await trio.sleep(5)
        await settle(s1, s2)
        assert s2.evals[registered.eval_id].status == EVAL_STATUS_PENDING
        assert not s2.job_allocs("web")
        updated, _ = await s1.set_scheduler_config(SchedulerConfiguration(), None)
        assert updated
        await settle(s1, s2)
        assert s1.evals[registered.eval_id].status == EVAL_STATUS_COMPLETE
        assert len([a for a in s1.job_allocs("web") if not a.is_terminal()]) == 2
        nursery.cancel_scope.cancel()
