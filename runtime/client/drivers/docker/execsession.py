"""`alloc exec` into a container through the Engine API's exec create/start.

Work in progress: the signature below is the seam with `driver.py`.
"""

from __future__ import annotations

import trio

from yurt.runtime.client.drivers.docker.engine import DockerEngine
from yurt.runtime.client.drivers.protocol import ExecInput, ExecOutput, ExecRequest


async def exec_in_container(engine: DockerEngine, container_id: str, request: ExecRequest,
                            inputs: trio.abc.ReceiveChannel[ExecInput],
                            outputs: trio.abc.SendChannel[ExecOutput]) -> int:
    """The `ExecDriver.exec_task` contract (protocol.py) for a container."""
    raise NotImplementedError
