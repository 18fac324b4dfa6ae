"""The exec driver's capabilities: Nomad's arithmetic (pure, layer 1) and the sets a real task
gets (layer 2: real namespaces and setpriv as root): the default set bounds a root task,
`cap_drop`/`cap_add` change it, a task with a `user` keeps the set across the switch (ambient),
`alloc exec` sessions get the same set, and a `cap_add` outside `allow_caps` fails the start
with Nomad's message, a Driver Failure in a real agent.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import trio

from tests.runtime_support import eventually
from tests.test_execdriver import driver, no_leftovers, run_job, task
from yurt.runtime.client.drivers import capabilities as caps
from yurt.runtime.client.drivers import limits, orphans
from yurt.runtime.client.drivers.configs import ExecTaskConfig
from yurt.runtime.client.drivers.execdriver import ExecDriver, plugin, with_capabilities
from yurt.runtime.client.drivers.protocol import ExecInput, ExecOutput, ExecRequest, TaskConfig
from yurt.runtime.errors import DriverError

pytestmark = pytest.mark.slow
__all__ = ["no_leftovers"]  # the autouse fixture, shared with test_execdriver.py
SYSTEM = caps.supported(40)
ALLOW = sorted(c.upper() for c in caps.NOMAD_DEFAULTS)
READ_CAPS = "grep -E '^Cap(Bnd|Eff|Amb):' /proc/self/status"


def test_names_are_normalised_as_nomad() -> None:
    assert caps.normalize(" CAP_Chown ") == "chown"
    assert caps.new(["cap_KILL", "kill", ""], SYSTEM) == {"kill"}
    assert caps.new(["ALL"], SYSTEM) == SYSTEM
    assert caps.supported(3) == {"chown", "dac_override", "dac_read_search", "fowner"}
    assert caps.unsupported(["chown", "CAP_FLY"], SYSTEM) == {"fly"}


def test_calculate_is_nomads() -> None:
    assert caps.calculate(ALLOW, [], [], SYSTEM) == caps.NOMAD_DEFAULTS
    assert caps.calculate(ALLOW, ["kill"], ["all"], SYSTEM) == {"kill"}
    assert caps.calculate(ALLOW, [], ["CAP_CHOWN", "mknod"], SYSTEM) == \
        caps.NOMAD_DEFAULTS - {"chown", "mknod"}
    # allow_caps narrower than the basis narrows the default set too
    assert caps.calculate(["chown", "kill"], [], [], SYSTEM) == {"chown", "kill"}
    # an allowed add beyond the basis
    assert "net_raw" in caps.calculate([*ALLOW, "net_raw"], ["NET_RAW"], [], SYSTEM)
    with pytest.raises(DriverError, match=r"^driver does not allow the following "
                       r"capabilities: net_raw, sys_admin$") as refused:
        caps.calculate(ALLOW, ["sys_admin", "CAP_NET_RAW", "kill"], [], SYSTEM)
    assert not refused.value.recoverable
    with pytest.raises(DriverError, match="sys_admin"):
        caps.calculate(ALLOW, ["all"], [], SYSTEM)


def test_delta_is_nomads_for_docker() -> None:
    docker_allow = sorted(caps.DOCKER_DEFAULTS)
    assert caps.delta(docker_allow, [], [], SYSTEM) == ([], [])
    # the exec default allow list: Docker's NET_RAW is dropped
    assert caps.delta(ALLOW, ["CAP_KILL"], ["chown"], SYSTEM) == (["kill"], ["chown", "net_raw"])
    assert caps.delta(["all"], ["ALL"], ["all"], SYSTEM) == (["all"], ["all"])
    with pytest.raises(DriverError, match=r"following capabilities: sys_admin$"):
        caps.delta(ALLOW, ["sys_admin"], [], SYSTEM)


def test_setpriv_words() -> None:
    assert caps.setpriv_options({"kill", "chown"}, ambient=False) == [
        "--bounding-set=-all,+chown,+kill", "--inh-caps=-all"]
    assert caps.setpriv_options(set(), ambient=True) == [
        "--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all"]
    switch = ["/usr/bin/setpriv", "--reuid=1", "--", ]
    assert with_capabilities(switch, frozenset({"kill"}), ambient=True) == [
        "/usr/bin/setpriv", "--reuid=1", "--bounding-set=-all,+kill", "--inh-caps=-all,+kill",
        "--ambient-caps=-all,+kill", "--"]
    plain = with_capabilities([], frozenset({"kill"}), ambient=False)
    assert plain[0].endswith("setpriv")
    assert plain[-1] == "--"
    assert caps.mask({"chown", "kill"}) == 0x21


def test_plugin_refuses_unknown_allow_caps() -> None:
    with pytest.raises(DriverError, match="allow_caps configured with capabilities not "
                       "supported by system: fly"):
        plugin({"allow_caps": ["chown", "CAP_FLY"]})


def _read(path: str | None) -> str:
    assert path is not None
    return Path(path).read_text()


def _caps_of(out: str) -> dict[str, int]:
    return {k: int(v, 16) for k, v in re.findall(r"^Cap(\w+):\s+([0-9a-f]+)$", out, re.M)}


async def _run(cfg: TaskConfig, **plugin_options: object) -> dict[str, int]:
    d = plugin({"rootfs_dir": driver().exec_config.rootfs_dir, **plugin_options})
    with trio.fail_after(30):
        await d.start_task(cfg)
        result = await d.wait_task(cfg.id)
        await d.destroy_task(cfg.id, force=True)
    assert result.exit_code == 0, _read(cfg.stderr_path)
    return _caps_of(_read(cfg.stdout_path))


def _with(cfg: TaskConfig, **options: object) -> TaskConfig:
    return TaskConfig(**{**cfg.__dict__, "driver_config": {**cfg.driver_config, **options}})


async def test_a_root_task_is_bounded_by_the_default_set(tmp_path: Path) -> None:
    got = await _run(task(tmp_path, READ_CAPS))
    assert got["Bnd"] == got["Eff"] == caps.mask(caps.NOMAD_DEFAULTS)
    assert got["Amb"] == 0


async def test_cap_drop_and_cap_add_change_the_set(tmp_path: Path) -> None:
    cfg = _with(task(tmp_path, READ_CAPS), cap_drop=["ALL"], cap_add=["cap_kill", "Net_Raw"])
    got = await _run(cfg, allow_caps=[*ALLOW, "NET_RAW"])
    assert got["Bnd"] == got["Eff"] == caps.mask({"kill", "net_raw"})


async def test_a_task_with_a_user_keeps_its_set(tmp_path: Path) -> None:
    cfg = _with(task(tmp_path, f"id -u; {READ_CAPS}"), cap_drop=["chown"])
    cfg = TaskConfig(**{**cfg.__dict__, "user": "nobody"})
    got = await _run(cfg)
    wanted = caps.mask(caps.NOMAD_DEFAULTS - {"chown"})
    assert got["Bnd"] == got["Eff"] == got["Amb"] == wanted
    assert _read(cfg.stdout_path).split()[0] == "65534"


async def test_alloc_exec_gets_the_tasks_set(tmp_path: Path) -> None:
    cfg = _with(task(tmp_path, "echo ready >/local/r; exec sleep 1000"), cap_drop=["all"],
                cap_add=["kill"])
    d = driver()
    send_in, inputs = trio.open_memory_channel[ExecInput](0)
    outputs, received = trio.open_memory_channel[ExecOutput](100)
    send_in.close()
    with trio.fail_after(30):
        await d.start_task(cfg)
        await eventually(lambda: (tmp_path / "alloc" / "web" / "local" / "r").exists())
        code = await d.exec_task(cfg.id, ExecRequest(
            command=["/bin/sh", "-c", READ_CAPS], tty=False, task=cfg), inputs, outputs)
        await d.stop_task(cfg.id, kill_timeout=0, signal="SIGKILL")
        await d.wait_task(cfg.id)
        await d.destroy_task(cfg.id, force=True)
    outputs.close()
    out = b"".join([o.data async for o in received if o.stream == "stdout"]).decode()
    assert code == 0
    assert _caps_of(out)["Bnd"] == _caps_of(out)["Eff"] == caps.mask({"kill"})


async def test_a_refused_cap_add_fails_the_start(tmp_path: Path) -> None:
    cfg = _with(task(tmp_path, "true"), cap_add=["SYS_ADMIN"])
    with pytest.raises(DriverError, match=r"^driver does not allow the following "
                       r"capabilities: sys_admin$"):
        await driver().start_task(cfg)
    unknown = _with(task(tmp_path, "true"), cap_drop=["fly"])
    with pytest.raises(DriverError, match=r"^failed driver config validation: cap_drop "
                       r"configured with capabilities not supported by system: fly$"):
        await driver().start_task(unknown)
    assert not (tmp_path / "alloc" / "web" / orphans.STATE_DIRS).exists()  # no start began


async def test_a_job_with_a_refused_cap_add_reports_a_driver_failure(tmp_path: Path) -> None:
    alloc = await run_job(tmp_path, "caps", "true", "failed", cap_add=["sys_admin"])
    events = alloc["TaskStates"]["t"]["Events"]  # type: ignore[index]
    failures = [e for e in events if e["Type"] == "Driver Failure"]
    assert failures, events
    assert failures[0]["DisplayMessage"] == \
        "driver does not allow the following capabilities: sys_admin"


def _without_devices_cgroup(**plugin_options: object) -> ExecDriver:
    """A driver on a host whose v1 hierarchies lack `devices` (as a v2 host: no device rules)."""
    d = plugin({"rootfs_dir": driver().exec_config.rootfs_dir, **plugin_options})
    assert isinstance(d.limits, limits.V1Limits)
    d.limits = dataclasses.replace(d.limits, devices=None)
    return d


MKNOD = ("mknod /tmp/null c 1 3 && echo made || echo refused; "
         "mknod /dev/null2 c 1 3 && echo dev-made || echo dev-refused; "
         "[ -c /tmp/null ] && echo x 2>/dev/null >/tmp/null && echo opened || echo closed; "
         + READ_CAPS)


async def test_without_a_devices_cgroup_a_task_cannot_make_devices(tmp_path: Path) -> None:
    """Secure by default where nothing limits which devices open: no mknod in the set."""
    cfg = task(tmp_path, MKNOD)
    d = _without_devices_cgroup()
    with trio.fail_after(30):
        await d.start_task(cfg)
        result = await d.wait_task(cfg.id)
        await d.destroy_task(cfg.id, force=True)
    out = _read(cfg.stdout_path)
    assert result.exit_code == 0, _read(cfg.stderr_path)
    assert out.split()[:3] == ["refused", "dev-refused", "closed"], out
    assert _caps_of(out)["Bnd"] == caps.mask(caps.NOMAD_DEFAULTS - {"mknod"})


async def test_an_explicit_mknod_is_kept_and_tmp_is_nodev(tmp_path: Path) -> None:
    """`cap_add = ["mknod"]` (allowed) keeps it; a node it makes in /tmp still cannot open."""
    cfg = _with(task(tmp_path, MKNOD), cap_add=["CAP_MKNOD"])
    d = _without_devices_cgroup()
    with trio.fail_after(30):
        await d.start_task(cfg)
        result = await d.wait_task(cfg.id)
        await d.destroy_task(cfg.id, force=True)
    out = _read(cfg.stdout_path)
    assert result.exit_code == 0, _read(cfg.stderr_path)
    assert out.split()[:3] == ["made", "dev-made", "closed"], out
    assert _caps_of(out)["Bnd"] == caps.mask(caps.NOMAD_DEFAULTS)
    with pytest.raises(DriverError, match="driver does not allow the following capabilities: "
                       "mknod"):
        _without_devices_cgroup(allow_caps=["chown"])._capabilities(
            ExecTaskConfig(command="/bin/true", cap_add=["mknod"]))
