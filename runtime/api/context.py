"""What every handler shares: the agent, the job-parse limiter, and the lookups that turn a
path parameter into a job, an allocation view or a running alloc runner (404/400 otherwise).

One `Context` is made per app (app.py `build_app`) and passed as the first argument of every
handler; it holds no request state. The alloc runner is a type here only: the agent binds the API
before it loads its runners (see runtime/agent/agent.py), so importing it would slow that start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

import msgspec
import trio

from yurt.runtime.api.request import PARSES_AT_ONCE, ApiError
from yurt.runtime.client.restore import RESTORING
from yurt.runtime.client.taskusage import CpuRates
from yurt.runtime.structs import Allocation, Job

if TYPE_CHECKING:
    from yurt.runtime.agent.agent import Agent
    from yurt.runtime.client.allocrunner.runner import AllocRunner

@final
class Context:
    """The agent the handlers answer for, and the lookups they share."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.parse_limiter = trio.CapacityLimiter(PARSES_AT_ONCE)
        #: The last CPU reading of each task the stats endpoint was asked about.
        self.cpu_rates = CpuRates()

    def alloc_view(self, alloc_id: str) -> Allocation:
        """The server copy with the client's live view laid over it."""
        server = self.agent.server.allocs.get(alloc_id)
        runner = self.agent.client.runners.get(alloc_id)
        if server is None and runner is None:
            raise ApiError(404, "alloc not found")
        if runner is None:
            assert server is not None
            stored = self.agent.restoring.pending.get(alloc_id)
            if stored is not None:  # what the tasks were doing when the last agent died
                return msgspec.structs.replace(server, client_status=stored.client_status,
                                               client_description=RESTORING,
                                               task_states=stored.task_states)
            return server
        view = runner.client_alloc()
        if server is not None:
            view = msgspec.structs.replace(server, client_status=view.client_status,
                                           client_description=view.client_description,
                                           task_states=view.task_states)
        return view

    def client_status(self, alloc: Allocation) -> str:
        """`alloc_view(alloc.id).client_status`, without building the view."""
        runner = self.agent.client.runners.get(alloc.id)
        if runner is not None:
            return runner.client_status()
        stored = self.agent.restoring.pending.get(alloc.id)
        return stored.client_status if stored is not None else alloc.client_status

    async def restored_runner(self, alloc_id: str) -> AllocRunner:
        """`runner`, once the allocation is restored if it still is (see restore.py)."""
        await self.agent.restoring.wait(alloc_id)
        return self.runner(alloc_id)

    def runner(self, alloc_id: str) -> AllocRunner:
        from yurt.runtime.client.allocrunner.runner import real

        runner = real(self.agent.client.runners.get(alloc_id))
        if runner is None:
            if alloc_id in self.agent.server.allocs:
                raise ApiError(400, f"allocation {alloc_id} is not running on this client")
            raise ApiError(404, "Unknown allocation")
        return runner

    def job(self, job_id: str) -> Job:
        job = self.agent.server.jobs.get(job_id)
        if job is None:
            raise ApiError(404, "job not found")
        return job

    def find_alloc_id(self, prefix: str) -> str:
        if prefix in self.agent.server.allocs or prefix in self.agent.client.runners:
            return prefix
        matches = [a for a in self.agent.server.allocs if a.startswith(prefix)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise ApiError(404, "alloc not found")
        raise ApiError(400, f"alloc ID prefix {prefix!r} is ambiguous")
