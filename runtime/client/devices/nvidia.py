"""`NvidiaDevicePlugin`: NVIDIA GPUs through NVML (the optional `nvidia-ml-py` package).

On a machine without the library, the driver or a GPU it reports no devices: undetected, not
an error, so an agent everywhere can list it. Where NVML works, each GPU is an instance of a
group named after its model, with its UUID as ID; health follows NVML's view (a GPU that stops
answering is unhealthy); reserving gives `NVIDIA_VISIBLE_DEVICES`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Final, final

import trio

from yurt.runtime.client.devices.protocol import (
    DeviceGroup,
    DeviceInstance,
    InstanceStats,
    Reservation,
)

FINGERPRINT_PERIOD: Final = 30.0


def _nvml() -> Any | None:
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
    except Exception:  # no package, no driver, no GPU: all mean "undetected"
        return None
    return pynvml


def _scan(nvml: Any) -> list[DeviceGroup]:
    groups: dict[str, DeviceGroup] = {}
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        model = str(nvml.nvmlDeviceGetName(handle))
        uuid = str(nvml.nvmlDeviceGetUUID(handle))
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        group = groups.setdefault(model, DeviceGroup(
            vendor="nvidia", type="gpu", name=model,
            attributes={"memory_mib": str(memory.total // 2**20)}))
        group.instances.append(DeviceInstance(id=uuid))
    return list(groups.values())


@final
class NvidiaDevicePlugin:
    def __init__(self) -> None:
        self._nvml = _nvml()

    @property
    def name(self) -> str:
        return "nvidia"

    @property
    def detected(self) -> bool:
        return self._nvml is not None

    async def fingerprint(self) -> AsyncIterator[list[DeviceGroup]]:
        while True:
            if self._nvml is None:
                yield []
                await trio.sleep_forever()
            yield await trio.to_thread.run_sync(_scan, self._nvml)
            await trio.sleep(FINGERPRINT_PERIOD)

    async def reserve(self, ids: list[str]) -> Reservation:
        await trio.lowlevel.checkpoint()
        return Reservation(envs={"NVIDIA_VISIBLE_DEVICES": ",".join(ids)})

    async def stats(self) -> dict[str, InstanceStats]:
        if self._nvml is None:
            await trio.lowlevel.checkpoint()
            return {}
        nvml = self._nvml

        def read() -> dict[str, InstanceStats]:
            out = {}
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                util = nvml.nvmlDeviceGetUtilizationRates(handle)
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                out[str(nvml.nvmlDeviceGetUUID(handle))] = InstanceStats(summary={
                    "utilization_percent": float(util.gpu),
                    "memory_used_mib": float(memory.used // 2**20)})
            return out

        return await trio.to_thread.run_sync(read)
