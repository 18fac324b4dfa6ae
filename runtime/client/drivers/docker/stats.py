"""A container's resource usage from the Engine API's stats, as Nomad's
drivers/docker/util/stats_posix.go `DockerStatsToTaskResourceUsage`.

Work in progress: the signature below is the seam with `driver.py`.
"""

from __future__ import annotations

from yurt.runtime.client.drivers.docker.engine import DockerEngine
from yurt.runtime.client.drivers.protocol import TaskUsage


async def container_usage(engine: DockerEngine, container_id: str) -> TaskUsage:
    """The container's usage now (one `/containers/ID/stats?stream=false`)."""
    raise NotImplementedError
