"""What the client needs of an allocation runner: the `AllocRunner` protocol and the
`AllocRunnerFactory` that makes one (Nomad's `client/allocrunner/interfaces/runner.go`
`AllocRunner` and `client/config/arconfig.go` `AllocRunnerFactory`).

The client, the alloc sync and the garbage collector speak to runners only through this
protocol, so another runner can stand in for the real one: the simulated runner
(`simulated.py`), with which thousands of simulated nodes load a cluster's servers.

Invariant: this module imports nothing of the concrete runner, the task runner, the hooks or
the drivers (a test imports it in a fresh interpreter and looks at `sys.modules`), so a
consumer implements a runner without loading any of them. The least complete
implementation is in tests/test_allocrunner_interface.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import trio

from yurt.runtime.client.allocrunner.broadcaster import AllocBroadcaster
from yurt.runtime.errors import YurtError
from yurt.runtime.structs import Allocation, Job, TaskEvent, TaskGroup, TaskState

if TYPE_CHECKING:
    from yurt.store.protocol import SavedTask


class AllocRunnerError(YurtError):
    """An allocation that cannot run here (no job, no such group, ...)."""


@dataclass
class AllocState:
    """The live client view (Nomad's `state.State`)."""

    client_status: str = ""
    client_description: str = ""
    task_states: dict[str, TaskState] = field(default_factory=dict)


class AllocRunner(Protocol):
    """One allocation on this node.

    A runner reports every new client view of its allocation twice: to the
    `on_alloc_state_updated` callback it was made with (the client's sync and collector), and
    to its `broadcaster` (API watchers, the allocations that wait for this one to end).
    """

    @property
    def id(self) -> str: ...

    @property
    def alloc(self) -> Allocation:
        """The server's copy, as last handed to `update`."""
        ...

    broadcaster: AllocBroadcaster[Allocation]
    #: `run()` finished, or never will (destroyed before it ran).
    wait_done: trio.Event
    destroyed: trio.Event
    shutdown_done: trio.Event

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Run the allocation until it ends, is destroyed, or the runner shuts down."""
        ...

    async def restore(self, saved: Mapping[str, SavedTask] | None = None) -> None:
        """After an agent restart, before `run()`: take up what an earlier agent ran."""
        ...

    def update(self, alloc: Allocation) -> None:
        """A newer server copy (a desired stop, a new job version); never blocks."""
        ...

    def alloc_state(self) -> AllocState:
        """The live client view."""
        ...

    def client_alloc(self) -> Allocation:
        """The server copy with the client view last published laid over it."""
        ...

    def client_status(self) -> str: ...

    def destroy(self) -> None:
        """Stop everything and forget the allocation; returns at once, `destroyed` tells."""
        ...

    async def destroy_and_wait(self) -> None: ...

    def shutdown(self) -> None:
        """Agent shutdown: stop supervising, leave the tasks running; returns at once."""
        ...

    async def shutdown_and_wait(self) -> None: ...

    async def restart_task(self, name: str, event: TaskEvent | None = None) -> None: ...

    async def restart_running(self, event: TaskEvent | None = None) -> None: ...

    async def restart_all(self, event: TaskEvent | None = None) -> None: ...

    async def signal(self, task: str | None, signal: str) -> None: ...

    def stop_bound(self) -> float:
        """Seconds within which a stop of this allocation ends."""
        ...


def group_of(alloc: Allocation) -> tuple[Job, TaskGroup]:
    """The allocation's job and task group.

    Raises:
        AllocRunnerError: it has none (Nomad's messages): it cannot run here.
    """
    if alloc.job is None:
        raise AllocRunnerError(f"allocation {alloc.id} has no job")
    group = alloc.job.lookup_group(alloc.task_group)
    if group is None:
        raise AllocRunnerError(f'failed to lookup task group "{alloc.task_group}"')
    return alloc.job, group


@dataclass(frozen=True)
class RunnerSetup:
    """What the client hands a factory along with the allocation."""

    #: Where the runner's destroy and shutdown work runs (the client's runners nursery).
    nursery: trio.Nursery
    #: Every new client view of the allocation, for the alloc sync and the collector.
    on_alloc_state_updated: Callable[[Allocation], None]
    #: The runner of the allocation this one replaces, when it runs here.
    previous: AllocRunner | None = None
    #: The runners of the allocations this one preempted that run here.
    preempted: Sequence[AllocRunner] = ()


#: Makes the runner of a new allocation (Nomad's `config.AllocRunnerFactory`).
#: Raises `AllocRunnerError` for an allocation that cannot run: the client reports it failed.
AllocRunnerFactory = Callable[[Allocation, RunnerSetup], AllocRunner]
