"""What the exec driver binds into a task's root besides its dirs (layer 2: real namespaces
and mounts as root): the device hook's nodes (`TaskConfig.devices`), read-only without "w" in
their permissions, including a node made with mknod; and the destinations it refuses before
the start (relative, "..", /proc, through a symlink, under the read-only host part of the
root), each a non-recoverable DriverError naming the mount and the destination — in a real
agent (layer 3, in process), a Driver Failure event; and exec's `work_dir` must be absolute.
execstart.sh holds on its own: a file at a destination is never emptied, and a symlink
planted after the check fails the start without touching the host path behind it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import httpx2
import msgspec
import pytest
import trio

from tests.agent_support import wait_status
from tests.test_execdriver import ROOTFS, driver, no_leftovers, task
from yurt.runtime.agent.agent import Agent, AgentConfig
from yurt.runtime.client.drivers import chroot, execdriver, orphans
from yurt.runtime.client.drivers.configs import ExecTaskConfig
from yurt.runtime.client.drivers.execdriver import _host_places, check_destination
from yurt.runtime.client.drivers.protocol import TaskConfig
from yurt.runtime.errors import DriverError
from yurt.runtime.structs.local import TaskDeviceNode, TaskMount
from yurt.runtime.structs.node import ClientHostVolumeConfig

pytestmark = pytest.mark.slow
__all__ = ["no_leftovers"]  # the autouse fixture, shared with test_execdriver.py


def _with(cfg: TaskConfig, **fields: object) -> TaskConfig:
    return TaskConfig(**{**cfg.__dict__, **fields})


def _read(path: str | None) -> str:
    assert path is not None
    return Path(path).read_text()


async def test_device_nodes_are_bound_with_their_permissions(tmp_path: Path) -> None:
    zero, fuse = tmp_path / "devs" / "zero9", tmp_path / "devs" / "fuse9"
    zero.parent.mkdir()
    # char devices made for the test, the way a device plugin's node is: 1:5 is /dev/zero
    # (in runc's default list), 10:229 is /dev/fuse (not in it; opened without privileges)
    os.mknod(zero, 0o666 | stat.S_IFCHR, os.makedev(1, 5))
    os.mknod(fuse, 0o666 | stat.S_IFCHR, os.makedev(10, 229))
    script = ("head -c 4 /dev/gpu/zero9 | od -An -tx1; echo x >/dev/nul0 && echo w=ok; "
              "echo x 2>/dev/null >/dev/gpu/zero9 && echo ro=written || echo ro=refused; "
              "ls -l /dev/nul0 | cut -c1; "
              "(exec 3</dev/fuse9) && echo listed=opened || echo listed=denied; "
              # /dev/loop-control's number, made in /dev (/tmp is nodev)
              "mknod /dev/lc c 10 237 && echo made; "
              "(exec 3</dev/lc) 2>/tmp/e && echo made=opened || cat /tmp/e; rm /dev/lc; "
              "echo $(ls -A /dev); head -c 3 /dev/urandom | wc -c; echo out >>/dev/stdout")
    # The device's node is read-only ("r", or "rm" as Nomad's device plugins say it); the
    # devices cgroup refuses writes to its number (1:5) wherever it is bound, and opens only
    # the default devices and the task's own: not a node the task made itself.
    cfg = _with(task(tmp_path, script), devices=[
        TaskDeviceNode(task_path="/dev/gpu/zero9", host_path=str(zero), permissions="rm"),
        TaskDeviceNode(task_path="/dev/nul0", host_path="/dev/null"),
        TaskDeviceNode(task_path="/dev/fuse9", host_path=str(fuse), permissions="r")])
    d = driver()
    with trio.fail_after(30):
        await d.start_task(cfg)
        result = await d.wait_task(cfg.id)
        await d.destroy_task(cfg.id, force=True)
    assert result.exit_code == 0, _read(cfg.stderr_path)
    lines = _read(cfg.stdout_path).splitlines()
    assert lines[0].split() == ["00", "00", "00", "00"]
    assert lines[1:6] == ["w=ok", "ro=refused", "c", "listed=opened", "made"]
    assert "Operation not permitted" in lines[6]
    assert set(lines[7].split()) == {"fd", "full", "fuse9", "gpu", "nul0", "null", "pts",
                                     "ptmx", "random", "shm", "stderr", "stdin", "stdout",
                                     "tty", "urandom", "zero"}
    assert lines[8:] == ["3", "out"]


async def test_device_permissions_are_checked(tmp_path: Path) -> None:
    cfg = _with(task(tmp_path, "true"), devices=[
        TaskDeviceNode(task_path="/dev/x", host_path="/dev/null", permissions="r w")])
    with trio.fail_after(30), pytest.raises(DriverError, match=r'^device /dev/null: invalid '
                                            r'permissions "r w": expected some of "rwm"$'):
        await driver().start_task(cfg)


def test_destinations_are_checked(tmp_path: Path) -> None:
    chroot.build_rootfs(ROOTFS)
    task_dir, alloc_dir = tmp_path / "a" / "web", tmp_path / "a"
    (task_dir / "local").mkdir(parents=True)
    (task_dir / "local" / "out").symlink_to("/etc")
    places = _host_places(ROOTFS, task_dir, alloc_dir)

    def check(destination: str, is_dir: bool = True) -> None:
        check_destination(places, 'volume mount of /srv/data', destination, is_dir)

    for fine in ("/data", "/data/deep/er", "/local/new", "/tmp/x", "/dev/x", "/etc",
                 "/usr/share"):
        check(fine)
    check("/etc/hostname", is_dir=False)
    refused = {
        "data": "must be an absolute path inside the task",
        "/srv/../etc": 'must not contain ".."',
        "/": "cannot mount over the task's root or /proc",
        "/proc/sys": "cannot mount over the task's root or /proc",
        "/usr/yurt-none": "/usr is read-only in the task root and /usr/yurt-none does not "
                          "exist there",
        "/local/out/x": "/local/out is a symbolic link",
        "/etc/hostname": "it is a file in the task root",
    }
    if os.path.islink(ROOTFS / "bin"):
        refused["/bin/x"] = "/bin is a symbolic link in the task root"
    for destination, why in refused.items():
        with pytest.raises(DriverError) as e:
            check(destination)
        assert str(e.value) == (f'volume mount of /srv/data: invalid destination '
                                f'"{destination}": {why}')
        assert not e.value.recoverable


async def test_a_bad_destination_fails_the_start_before_it_begins(tmp_path: Path) -> None:
    source = tmp_path / "vol"
    source.mkdir()
    cfg = _with(task(tmp_path, "true"), mounts=[
        TaskMount(task_path="/data", host_path=str(source)),
        TaskMount(task_path="../escape", host_path=str(source))])
    with trio.fail_after(30), pytest.raises(DriverError, match="escape") as e:
        await driver().start_task(cfg)
    assert str(e.value) == (f'volume mount of {source}: invalid destination "../escape": '
                            "must be an absolute path inside the task")
    assert not e.value.recoverable
    assert not (tmp_path / "alloc" / "web" / orphans.STATE_DIRS).exists()
    device = _with(task(tmp_path, "true"), devices=[
        TaskDeviceNode(task_path="/proc/x", host_path="/dev/null")])
    with trio.fail_after(30), pytest.raises(DriverError, match=r'^device /dev/null: invalid'):
        await driver().start_task(device)


async def test_a_propagating_volume_mount_is_refused_not_pretended(tmp_path: Path) -> None:
    source = tmp_path / "vol"
    source.mkdir()
    cfg = _with(task(tmp_path, "true"), mounts=[
        TaskMount(task_path="/data", host_path=str(source), propagation_mode="host-to-task")])
    with trio.fail_after(30), pytest.raises(DriverError, match="propagation_mode") as e:
        await driver().start_task(cfg)
    assert '"host-to-task" is not supported by the exec driver' in str(e.value)
    assert not e.value.recoverable
    assert not (tmp_path / "alloc" / "web" / orphans.STATE_DIRS).exists()


def test_work_dir_must_be_absolute() -> None:
    with pytest.raises(msgspec.ValidationError, match='work_dir must be absolute but got '
                       'relative path "srv"'):
        msgspec.convert({"command": "/bin/true", "work_dir": "srv"}, ExecTaskConfig)
    assert msgspec.convert({"command": "/bin/true", "work_dir": "/srv"},
                           ExecTaskConfig).work_dir == "/srv"


async def test_a_job_with_a_bad_volume_destination_reports_a_driver_failure(
        tmp_path: Path) -> None:
    host = tmp_path / "volume"
    host.mkdir()
    agent = Agent(AgentConfig(
        data_dir=tmp_path / "data", port=0, dev_mode=True,
        driver_factories={"exec": execdriver.plugin},
        driver_config={"exec": {"rootfs_dir": str(ROOTFS)}},
        host_volumes={"data": ClientHostVolumeConfig(name="data", path=str(host))}))
    job = {"Job": {"ID": "baddest", "Type": "batch", "TaskGroups": [{
        "Name": "g", "RestartPolicy": {"Attempts": 0, "Mode": "fail"},
        "Volumes": {"v": {"Name": "v", "Type": "host", "Source": "data"}},
        "Tasks": [{"Name": "t", "Driver": "exec", "Config": {"command": "/bin/true"},
                   "VolumeMounts": [{"Volume": "v", "Destination": "/usr/yurt-none"}],
                   "Resources": {"CPU": 100, "MemoryMB": 16}}]}]}}
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            address = await nursery.start(agent.run)
            try:
                async with httpx2.AsyncClient(base_url=address, timeout=20) as client:
                    assert (await client.post("/v1/jobs", json=job)).status_code == 200
                    failed = await wait_status(client, "baddest", "failed")
            finally:
                agent.stop()
    events = failed["TaskStates"]["t"]["Events"]
    assert [e["DisplayMessage"] for e in events if e["Type"] == "Driver Failure"] == [
        f'volume mount of {host}: invalid destination "/usr/yurt-none": /usr is read-only '
        "in the task root and /usr/yurt-none does not exist there"]
    assert "Started" not in [e["Type"] for e in events]


async def _run(cfg: TaskConfig, *, checked: bool = True) -> int:
    """Run `cfg` to its end; its exit code. Unchecked: as if a sibling task had changed the
    alloc dir after `check_destination` looked (execstart.sh must hold on its own)."""
    d = driver()
    if not checked:
        d._check_binds = lambda config: None  # type: ignore[method-assign]
    with trio.fail_after(30):
        await d.start_task(cfg)
        result = await d.wait_task(cfg.id)
        await d.destroy_task(cfg.id, force=True)
    return result.exit_code


async def test_a_file_destination_is_never_truncated(tmp_path: Path) -> None:
    """A file already at a destination under /local is the alloc's: mounted over, not
    emptied."""
    source = tmp_path / "vol.conf"
    source.write_text("from the volume\n")
    cfg = _with(task(tmp_path, "cat /local/app.conf"), mounts=[
        TaskMount(task_path="/local/app.conf", host_path=str(source), readonly=True)])
    existing = tmp_path / "alloc" / "web" / "local" / "app.conf"
    existing.write_text("the task's own\n")
    assert await _run(cfg) == 0, _read(cfg.stderr_path)
    assert _read(cfg.stdout_path) == "from the volume\n"
    assert existing.read_text() == "the task's own\n"


async def test_a_link_planted_at_a_destination_fails_the_start(tmp_path: Path) -> None:
    """A symlink at a destination or on its way, under the alloc dir, is refused by
    execstart.sh itself right before the mount: the host file behind it is neither created,
    emptied nor mounted over."""
    source = tmp_path / "vol.conf"
    source.write_text("from the volume\n")
    victim, outside = tmp_path / "victim", tmp_path / "outside"
    victim.write_text("precious\n")
    outside.mkdir()
    local = tmp_path / "alloc" / "web" / "local"
    for destination, why in (("/local/app.conf", "/local/app.conf"),
                             ("/local/dir/app.conf", "/local/dir")):
        cfg = _with(task(tmp_path, "echo ran"), mounts=[
            TaskMount(task_path=destination, host_path=str(source))])
        (local / "app.conf").symlink_to(victim)
        (local / "dir").symlink_to(outside)
        assert await _run(cfg, checked=False) == 126
        assert (f"yurt: exec: cannot mount {source} at {destination}: {why} is a symbolic "
                "link\n") in _read(cfg.stderr_path)
        assert victim.read_text() == "precious\n"
        assert list(outside.iterdir()) == []
        (local / "app.conf").unlink()
        (local / "dir").unlink()
