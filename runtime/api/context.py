"""What every handler shares: the process it answers for (view.py `AgentView`), the job-parse
limiter, and the lookups that turn a path parameter into a job, an allocation view or a
running alloc runner (404/400 otherwise).

One `Context` is made per app (app.py `build_app`) and passed as the first argument of every
handler; it holds no request state. The alloc runner is a type here only: the agent binds the API
before it loads its runners (see runtime/agent/agent.py), so importing it would slow that start.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import TYPE_CHECKING, Final, final

import msgspec
import trio

from yurt.runtime.api.request import PARSES_AT_ONCE, ApiError
from yurt.runtime.api.view import AgentView, ClientSide
from yurt.runtime.client.restore import RESTORING
from yurt.runtime.client.taskusage import CpuRates
from yurt.runtime.structs import Allocation, Job

if TYPE_CHECKING:
    from yurt.runtime.client.allocrunner.interface import AllocRunner as AnyRunner
    from yurt.runtime.client.allocrunner.runner import AllocRunner
    from yurt.runtime.server.local import LocalServer

#: No runners: a `yurt server` runs no allocations.
_NO_RUNNERS: Final[Mapping[str, AnyRunner]] = {}
_NONE_RESTORING: Final[Mapping[str, Allocation]] = {}


def find_alloc_id(prefix: str, allocs: Mapping[str, Allocation], runners: Container[str]
                  ) -> str:
    """The ID of the allocation that `prefix` is the ID or the unique prefix of, among the
    server's `allocs` and the client's `runners` (404, or 400 when ambiguous)."""
    if prefix in allocs or prefix in runners:
        return prefix
    matches = [a for a in allocs if a.startswith(prefix)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise ApiError(404, "alloc not found")
    raise ApiError(400, f"alloc ID prefix {prefix!r} is ambiguous")


@final
class Context:
    """The process the handlers answer for, and the lookups they share."""

    def __init__(self, agent: AgentView) -> None:
        self.agent = agent
        self.parse_limiter = trio.CapacityLimiter(PARSES_AT_ONCE)
        #: The last CPU reading of each task the stats endpoint was asked about.
        self.cpu_rates = CpuRates()

    @property
    def server(self) -> LocalServer:
        """The server the server routes answer from and change."""
        state = self.agent.server_state
        if state is None:  # never reached: runtime/agent/clientmode.py forwards these routes
            raise ApiError(501, "a client-only agent (--servers) keeps no server state: "
                                "ask a server")
        return state

    def client_side(self) -> ClientSide:
        """The parts of the process that runs allocations; 501 on a `yurt server`."""
        side = self.agent.client_side
        if side is None:
            raise ApiError(501, "this is a yurt server: ask the agent of the node that runs "
                                "the allocation (its address is the node's HTTPAddr in "
                                "/v1/node/<id>)")
        return side

    def runners(self) -> Mapping[str, AnyRunner]:
        """The client's runners by allocation ID (none on a `yurt server`)."""
        side = self.agent.client_side
        return side.client.runners if side is not None else _NO_RUNNERS

    def restoring(self) -> Mapping[str, Allocation]:
        """The allocations still restoring after a start, each as the client view an earlier
        agent persisted (none on a `yurt server`)."""
        side = self.agent.client_side
        return side.restoring.pending if side is not None else _NONE_RESTORING

    async def wait_restored(self, alloc_id: str | None = None) -> None:
        """Until `alloc_id` (None: every allocation) is restored (see client/restore.py)."""
        side = self.agent.client_side
        if side is not None:
            await side.restoring.wait(alloc_id)
        else:
            await trio.lowlevel.checkpoint()

    def alloc_view(self, alloc_id: str) -> Allocation:
        """The server copy with the client's live view laid over it."""
        server = self.agent.server.allocs.get(alloc_id)
        runner = self.runners().get(alloc_id)
        if server is None and runner is None:
            raise ApiError(404, "alloc not found")
        if runner is None:
            assert server is not None
            stored = self.restoring().get(alloc_id)
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
        runner = self.runners().get(alloc.id)
        if runner is not None:
            return runner.client_status()
        stored = self.restoring().get(alloc.id)
        return stored.client_status if stored is not None else alloc.client_status

    async def restored_runner(self, alloc_id: str) -> AllocRunner:
        """`runner`, once the allocation is restored if it still is (see client/restore.py)."""
        await self.wait_restored(alloc_id)
        return self.runner(alloc_id)

    def runner(self, alloc_id: str) -> AllocRunner:
        from yurt.runtime.client.allocrunner.runner import real

        runner = real(self.runners().get(alloc_id))
        if runner is None:
            if alloc_id in self.agent.server.allocs:
                raise ApiError(400, f"allocation {alloc_id} is not running on this client")
            raise ApiError(404, "Unknown allocation")
        return runner

    def job(self, job_id: str) -> Job:
        job = self.server.jobs.get(job_id)
        if job is None:
            raise ApiError(404, "job not found")
        return job

    def find_alloc_id(self, prefix: str) -> str:
        return find_alloc_id(prefix, self.agent.server.allocs, self.runners())
