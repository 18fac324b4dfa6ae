"""The scheduler configuration (Nomad's `SchedulerConfiguration`), persisted.

`/v1/operator/scheduler/configuration` reads and sets it; the embedded server's placement
honours `PreemptionConfig`: for a job type whose switch is off, placement never evicts anything
(runtime/server/local.py asks `preemption_enabled`), and `PauseEvalBroker`: while it is set,
no evaluation is processed (they stay pending, blocked ones stay blocked) until it is cleared,
as Nomad's paused eval broker (local.py `_process`; `yurt eval delete` needs it). yurt's
default differs from Nomad's on purpose: Nomad preempts only for system jobs by default, yurt
has always preempted for every job type on its one node, and keeps doing so until an
operator turns a switch off.

Stored in `<data-dir>/server/scheduler-config.json`, written atomically before a change is
answered, so an agent restart keeps it. `ModifyIndex` is the server index the change took, and
a check-and-set (`?cas=N`) succeeds only when N is the current `ModifyIndex`, as Nomad's.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Final

import msgspec
import trio

from yurt.runtime.server.nodestate import write_atomically
from yurt.runtime.structs import Base

# A type-only cycle inside server/, kept on purpose: the scheduler configuration's change is
# made under `LocalServer`'s lock and index (Nomad's `operator_endpoint.go`
# `SchedulerSetConfiguration` commits through the server's Raft); no run-time import.
if TYPE_CHECKING:
    from yurt.runtime.server.local import LocalServer

ALGORITHMS: Final = ("binpack", "spread")
FILE_NAME: Final = "scheduler-config.json"


class PreemptionConfig(Base):
    system_scheduler_enabled: bool = True
    sys_batch_scheduler_enabled: bool = True
    batch_scheduler_enabled: bool = True
    service_scheduler_enabled: bool = True


class SchedulerConfiguration(Base):
    scheduler_algorithm: str = "binpack"
    preemption_config: PreemptionConfig = msgspec.field(default_factory=PreemptionConfig)
    memory_oversubscription_enabled: bool = False
    reject_job_registration: bool = False
    pause_eval_broker: bool = False
    create_index: int = 0
    modify_index: int = 0

    def preemption_enabled(self, job_type: str) -> bool:
        """Whether placement may evict allocations for a job of `job_type`."""
        p = self.preemption_config
        return {"system": p.system_scheduler_enabled,
                "sysbatch": p.sys_batch_scheduler_enabled,
                "batch": p.batch_scheduler_enabled,
                "service": p.service_scheduler_enabled}.get(job_type, True)


def validate(config: SchedulerConfiguration) -> str:
    """Why Nomad would refuse `config`, or ""."""
    if config.scheduler_algorithm not in ALGORITHMS:
        return (f"invalid scheduler algorithm {config.scheduler_algorithm!r}, must be one of "
                f"{', '.join(ALGORITHMS)}")
    return ""


def _read(path: Path) -> SchedulerConfiguration | None:
    try:
        return msgspec.json.decode(path.read_bytes(), type=SchedulerConfiguration)
    except FileNotFoundError:
        return None
    except (msgspec.DecodeError, OSError):
        return None  # unreadable: the defaults, as a fresh server has


async def load(path: Path) -> SchedulerConfiguration:
    """The stored configuration, or the defaults."""
    stored = await trio.to_thread.run_sync(_read, path)
    return stored if stored is not None else SchedulerConfiguration()


async def save(path: Path, config: SchedulerConfiguration) -> None:
    await trio.to_thread.run_sync(write_atomically, path, msgspec.json.encode(config))


async def attach(server: LocalServer, directory: Path) -> None:
    """Give `server` the configuration stored in `directory` (at agent start); the
    server's counter is never below its index."""
    server.scheduler_config = await load(directory / FILE_NAME)
    server.observe_index(server.scheduler_config.modify_index)
