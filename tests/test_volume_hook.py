"""The volume hook (hooks/volumes.py) end to end (layer 3: a real in-process agent whose
config offers a host volume, real exec tasks, namespaces and bind mounts, the real clock): an
exec task's read-write `volume_mount` writes into the host directory, its read-only one
refuses the write; a raw_exec task asking for a host volume fails its start as Nomad's
(`MountConfigSupportNone`) with `Task hook failed`. The hook alone (layer 1): a node that lost
the volume fails the start with Nomad's "host volume validation error"; mounts are
interpolated with the node's values and the task's env."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from tests.agent_support import wait_status
from tests.test_execdriver import ROOTFS
from yurt.hooks.base import TaskHookContext
from yurt.hooks.volumes import VolumesHook
from yurt.runtime.agent.agent import Agent, AgentConfig
from yurt.runtime.client.drivers import execdriver, rawexec
from yurt.runtime.errors import HookError
from yurt.runtime.structs import Allocation, Job, Node, Task, TaskGroup
from yurt.runtime.structs.node import ClientHostVolumeConfig
from yurt.runtime.structs.volume import VolumeMount, VolumeRequest

SCRIPT = ("echo written >/data/f; "
          "if echo no 2>/alloc/err >/ro/g; then echo wrote >/alloc/rc; else echo refused "
          ">/alloc/rc; fi")


def _job(job_id: str, driver: str, config: dict[str, Any]) -> dict[str, Any]:
    return {"Job": {"ID": job_id, "Type": "batch", "TaskGroups": [{
        "Name": "g", "RestartPolicy": {"Attempts": 0, "Mode": "fail"},
        "Volumes": {"rw": {"Name": "rw", "Type": "host", "Source": "data"},
                    "ro": {"Name": "ro", "Type": "host", "Source": "data", "ReadOnly": True}},
        "Tasks": [{"Name": "t", "Driver": driver, "Config": config,
                   "VolumeMounts": [{"Volume": "rw", "Destination": "/data"},
                                    {"Volume": "ro", "Destination": "/ro"}],
                   "Resources": {"CPU": 100, "MemoryMB": 16}}]}]}}


@pytest.mark.slow
async def test_exec_mounts_the_host_volume_and_raw_exec_refuses_it(tmp_path: Path) -> None:
    host = tmp_path / "volume"
    host.mkdir()
    agent = Agent(AgentConfig(
        data_dir=tmp_path / "data", port=0, dev_mode=True,
        driver_factories={"exec": execdriver.plugin, "raw_exec": rawexec.plugin},
        driver_config={"exec": {"rootfs_dir": str(ROOTFS)}},
        host_volumes={"data": ClientHostVolumeConfig(name="data", path=str(host))}))
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            address = await nursery.start(agent.run)
            try:
                async with httpx2.AsyncClient(base_url=address, timeout=20) as client:
                    job = _job("vol", "exec", {"command": "/bin/sh", "args": ["-c", SCRIPT]})
                    assert (await client.post("/v1/jobs", json=job)).status_code == 200
                    alloc = await wait_status(client, "vol", "complete")

                    async def cat(path: str) -> str:
                        reply = await client.get(f"/v1/client/fs/cat/{alloc['ID']}",
                                                 params={"path": path})
                        return str(reply.text)

                    assert (host / "f").read_text() == "written\n"
                    assert not (host / "g").exists()
                    assert await cat("alloc/rc") == "refused\n"
                    assert "Read-only file system" in await cat("alloc/err")

                    job = _job("raw", "raw_exec", {"command": "/bin/true"})
                    assert (await client.post("/v1/jobs", json=job)).status_code == 200
                    failed = await wait_status(client, "raw", "failed")
                    events = failed["TaskStates"]["t"]["Events"]
                    hook = [e for e in events if e["Type"] == "Task hook failed"]
                    assert [e["DisplayMessage"] for e in hook] == [
                        'volumes: task driver "raw_exec" for "t" does not support host volumes']
                    assert "Started" not in [e["Type"] for e in events]
            finally:
                agent.stop()


def _ctx(offered: dict[str, ClientHostVolumeConfig], propagation_mode: str = ""
         ) -> tuple[VolumesHook, TaskHookContext]:
    task = Task(name="t", driver="exec",
                volume_mounts=[VolumeMount(volume="v", destination="/srv/${node.unique.name}",
                                           propagation_mode=propagation_mode)])
    group = TaskGroup(name="g", tasks=[task], volumes={
        "v": VolumeRequest(name="v", type="host", source="data", per_alloc=True)})
    alloc = Allocation(id="a", name="j.g[3]", task_group="g",
                       job=Job(id="j", task_groups=[group]))

    async def emit(_: object) -> None:
        raise AssertionError("the runner, not the hook, emits the failure event")

    ctx = TaskHookContext(alloc=alloc, task=task, task_dir=None, emit_event=emit,
                          unix_clock=lambda: 0)
    return VolumesHook(Node(id="n", name="box", host_volumes=offered)), ctx


async def test_a_node_without_the_volume_fails_the_start_in_nomads_words() -> None:
    hook, ctx = _ctx({"data": ClientHostVolumeConfig(name="data", path="/x")})
    with pytest.raises(HookError, match=r"^host volume validation error: missing data\[3\]$"):
        await hook.prestart(ctx, {})


async def test_mounts_follow_per_alloc_interpolate_and_are_revalidated_each_start() -> None:
    hook, ctx = _ctx({"data[3]": ClientHostVolumeConfig(name="data[3]", path="/x",
                                                        read_only=True)})
    response = await hook.prestart(ctx, {})
    assert [(m.task_path, m.host_path, m.readonly) for m in response.mounts] == [
        ("/srv/box", "/x", True)]
    assert not response.done


async def test_a_mounts_propagation_mode_reaches_the_driver() -> None:
    hook, ctx = _ctx({"data[3]": ClientHostVolumeConfig(name="data[3]", path="/x")},
                     propagation_mode="host-to-task")
    response = await hook.prestart(ctx, {})
    assert [m.propagation_mode for m in response.mounts] == ["host-to-task"]
