"""The exec driver against real processes (layer 2: real namespaces, mounts, cgroups and the
real clock; the agent runs as root here): the task is pid 1 of its own PID namespace with its
own hostname, chrooted into the host's chroot_env with the alloc dir at /alloc, /local,
/secrets, host volume mounts honour read_only, a stop leaves no process, a second driver (the
agent restarted) re-attaches to the one running copy, and memory_max is enforced with Nomad's
OOM report. The rootfs is built once per host (`ROOTFS`), then reused by every run.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
import trio

from tests.agent_support import wait_status
from tests.runtime_support import eventually
from yurt.runtime.agent.agent import Agent, AgentConfig
from yurt.runtime.client.drivers import cgroups, chroot, limits, ptys
from yurt.runtime.client.drivers.execdriver import (
    REQUIRES_ROOT,
    ExecDriver,
    ExecPluginConfig,
    _namespaces_usable,
    in_task_root,
    plugin,
)
from yurt.runtime.client.drivers.protocol import (
    ExecInput,
    ExecOutput,
    ExecRequest,
    ExecStdin,
    TaskConfig,
)
from yurt.runtime.errors import DriverError
from yurt.runtime.structs.hostvolumes import host_volume_mounts
from yurt.runtime.structs.local import TaskMount
from yurt.runtime.structs.node import ClientHostVolumeConfig
from yurt.runtime.structs.volume import VolumeMount, VolumeRequest

pytestmark = pytest.mark.slow

ALLOC = "exec0000-0000-4000-8000-" + uuid.uuid4().hex[:12]
#: Shared by every run on this host: built once (seconds), then reused.
ROOTFS = Path("/tmp/yurt-test-exec-rootfs")


@pytest.fixture(autouse=True)
def no_leftovers() -> Iterator[None]:
    """A failing test's processes and cgroups are killed and removed."""
    yield
    for root in ("cgroup2", "cgroup1"):
        found = cgroups.select_root(root)
        for cgroup in found.path.glob(f"{ALLOC}.*") if found else ():
            cgroups.destroy_blocking(cgroup)
    host = limits.select_limits()
    assert isinstance(host, limits.V1Limits)
    for hierarchy in (h for h in (host.memory, host.cpu, host.devices) if h is not None):
        for cgroup in (hierarchy / "yurt").glob(f"{ALLOC}.*"):
            cgroups.destroy_blocking(cgroup)


def driver() -> ExecDriver:
    return plugin({"rootfs_dir": str(ROOTFS)})


def task(tmp_path: Path, script: str, *, memory_max: int = 0,
         mounts: list[TaskMount] | None = None) -> TaskConfig:
    alloc_dir = tmp_path / "alloc"
    task_dir = alloc_dir / "web"
    for d in (alloc_dir / "alloc", task_dir / "local", task_dir / "secrets"):
        d.mkdir(parents=True, exist_ok=True)
    return TaskConfig(id=f"{ALLOC}/web/{uuid.uuid4().hex[:8]}", name="web", alloc_id=ALLOC,
                      job_id="j", task_group="g",
                      driver_config={"command": "/bin/sh", "args": ["-c", script]},
                      alloc_dir=alloc_dir, task_dir=task_dir,
                      stdout_path=str(tmp_path / "out"), stderr_path=str(tmp_path / "err"),
                      memory_mb=16, memory_max_mb=memory_max, cpu_shares=100,
                      mounts=mounts or [])


def processes(marker: str) -> int:
    """How many processes on the host have `marker` as an argument."""
    count = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        count += marker.encode() in args
    return count


def test_the_rootfs_is_built_once() -> None:
    chroot.build_rootfs(ROOTFS)
    assert (ROOTFS / chroot.MARKER).exists()
    assert (ROOTFS / "usr" / "bin" / "sh").exists()
    assert os.path.islink(ROOTFS / "bin") == os.path.islink("/bin")
    assert chroot.build_rootfs(ROOTFS) == 0.0  # found built


def test_paths_are_mapped_into_the_task_root(tmp_path: Path) -> None:
    t = tmp_path / "a" / "web"
    assert in_task_root(str(t / "local" / "run.sh"), t, tmp_path / "a") == "/local/run.sh"
    assert in_task_root(str(tmp_path / "a" / "alloc" / "x"), t, tmp_path / "a") == "/alloc/x"
    assert in_task_root("/usr/bin/env", t, tmp_path / "a") == "/usr/bin/env"


def test_fingerprint_requires_root(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _namespaces_usable() == ""  # root here, with namespaces
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert _namespaces_usable() == REQUIRES_ROOT


async def test_fingerprint_is_healthy_as_root() -> None:
    with trio.fail_after(20):
        async for fp in driver().fingerprint():
            assert (fp.health, fp.attributes) == ("healthy", {"driver.exec": "true"})
            break


async def test_task_is_isolated_and_sees_its_dirs(tmp_path: Path) -> None:
    script = ('echo "pid=$$"; echo "host=$(hostname)"; echo "dir=$NOMAD_TASK_DIR"; '
              'test -e /root && echo root=visible || echo root=hidden; '
              'echo shared >/alloc/a; echo mine >/local/l; '
              'echo x >/usr/x 2>/dev/null && echo usr=written || echo usr=ro; '
              'echo "procs=$(ls /proc | grep -c "^[0-9]")"')
    d, cfg = driver(), task(tmp_path, script)
    with trio.fail_after(30):
        await d.start_task(cfg)
        result = await d.wait_task(cfg.id)
        await d.destroy_task(cfg.id, force=True)
    out = (tmp_path / "out").read_text().split()
    assert result.exit_code == 0, (tmp_path / "err").read_text()
    assert "pid=1" in out
    assert "host=web" in out
    assert "dir=/local" in out
    assert "root=hidden" in out
    assert "usr=ro" in out
    assert int(out[-1].removeprefix("procs=")) <= 5  # sh, its subshell, ls, grep: not the host's
    assert (tmp_path / "alloc" / "alloc" / "a").read_text() == "shared\n"
    assert (tmp_path / "alloc" / "web" / "local" / "l").read_text() == "mine\n"


async def test_host_volume_mounts_honour_read_only(tmp_path: Path) -> None:
    ro_dir, rw_dir = tmp_path / "ro", tmp_path / "rw"
    ro_dir.mkdir()
    rw_dir.mkdir()
    (ro_dir / "seed").write_text("seed\n")
    resolved = host_volume_mounts(
        {"ro": VolumeRequest(name="ro", type="host", source="ro"),
         "rw": VolumeRequest(name="rw", type="host", source="rw")},
        [VolumeMount(volume="ro", destination="/data/ro"),
         VolumeMount(volume="rw", destination="/srv/rw")],
        {"ro": ClientHostVolumeConfig(name="ro", path=str(ro_dir), read_only=True),
         "rw": ClientHostVolumeConfig(name="rw", path=str(rw_dir))}, "j.g[0]")
    mounts = [TaskMount(task_path=m.task_path, host_path=m.host_path, readonly=m.readonly)
              for m in resolved]
    script = ('cat /data/ro/seed; echo no >/data/ro/x 2>/dev/null && echo ro=written '
              '|| echo ro=refused; echo yes >/srv/rw/x && echo rw=written')
    d, cfg = driver(), task(tmp_path, script, mounts=mounts)
    with trio.fail_after(30):
        await d.start_task(cfg)
        result = await d.wait_task(cfg.id)
        await d.destroy_task(cfg.id, force=True)
    assert result.exit_code == 0, (tmp_path / "err").read_text()
    assert (tmp_path / "out").read_text().split() == ["seed", "ro=refused", "rw=written"]
    assert not (ro_dir / "x").exists()
    assert (rw_dir / "x").read_text() == "yes\n"


async def test_stop_leaves_no_process(tmp_path: Path) -> None:
    marker = str(3000 + int(uuid.uuid4().hex[:4], 16))
    d, cfg = driver(), task(tmp_path, f"sleep {marker} & exec sleep {marker}")
    with trio.fail_after(30):
        await d.start_task(cfg)
        await eventually(lambda: processes(marker) == 2)
        # pid 1 (sleep) ignores SIGINT without a handler, as in Nomad, and so does the
        # background sleep (sh starts it with SIGINT ignored): the timeout SIGKILLs both.
        await d.stop_task(cfg.id, kill_timeout=200_000_000, signal="SIGINT")
        result = await d.wait_task(cfg.id)
        await d.destroy_task(cfg.id, force=True)
    assert result.signal == 9
    assert processes(marker) == 0


async def test_a_new_driver_reattaches_to_the_one_copy(tmp_path: Path) -> None:
    marker = str(3000 + int(uuid.uuid4().hex[:4], 16))
    first, cfg = driver(), task(tmp_path, f"trap 'exit 7' TERM; sleep {marker} & wait")
    with trio.fail_after(30):
        handle = await first.start_task(cfg)
        await eventually(lambda: processes(marker) == 1)
        second = driver()  # the agent restarted: only the handle is left
        await second.recover_task(handle)
        assert processes(marker) == 1
        await second.stop_task(cfg.id, kill_timeout=5_000_000_000, signal="SIGTERM")
        result = await second.wait_task(cfg.id)
        await second.destroy_task(cfg.id, force=True)
    assert result.exit_code == 7  # the trap ran: pid 1 with a handler gets the signal
    await _wait_for_none(marker)


async def test_over_memory_max_is_oom_killed(tmp_path: Path) -> None:
    hog = "/usr/bin/python3 -c 'b = b\"x\" * (100 << 20)'"
    d, cfg = driver(), task(tmp_path, f"exec {hog}", memory_max=32)
    with trio.fail_after(30):
        await d.start_task(cfg)
        result = await d.wait_task(cfg.id)
        await d.destroy_task(cfg.id, force=True)
    assert result.oom_killed
    assert result.err == "OOM Killed"
    assert (result.exit_code, result.signal) == (137, 9)


async def _wait_for_none(marker: str) -> None:
    with trio.fail_after(10):
        await eventually(lambda: processes(marker) == 0)


def test_plugin_config_errors_name_the_option() -> None:
    with pytest.raises(Exception, match="rootfs_dir"):
        plugin({"rootfs_dir": 3})
    assert ExecPluginConfig().default_pid_mode == "private"


async def run_job(tmp_path: Path, job_id: str, script: str, status: str,
                  memory_max: int = 0, **options: object) -> dict[str, object]:
    """`script` as a batch job's exec task through a real agent with the exec driver; the
    allocation once it reaches `status`."""
    agent = Agent(AgentConfig(data_dir=tmp_path / "data", port=0, dev_mode=True,
                              driver_factories={"exec": plugin},
                              driver_config={"exec": {"rootfs_dir": str(ROOTFS)}}))
    job = {"Job": {"ID": job_id, "Type": "batch", "TaskGroups": [{
        "Name": "g", "RestartPolicy": {"Attempts": 0, "Mode": "fail"},
        "Tasks": [{"Name": "t", "Driver": "exec",
                   "Config": {"command": "/bin/sh", "args": ["-c", script], **options},
                   "Resources": {"CPU": 100, "MemoryMB": 16, "MemoryMaxMB": memory_max}}]}]}}
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            address = await nursery.start(agent.run)
            try:
                async with httpx2.AsyncClient(base_url=address, timeout=20) as client:
                    assert (await client.post("/v1/jobs", json=job)).status_code == 200
                    first = await wait_status(client, job_id, status)
                    alloc: dict[str, object] = (
                        await client.get(f"/v1/allocation/{first['ID']}")).json()
                    if status == "complete":
                        cat = await client.get(f"/v1/client/fs/cat/{first['ID']}",
                                               params={"path": "alloc/out"})
                        alloc["out"] = cat.text
            finally:
                agent.stop()
    return alloc


async def test_a_job_runs_its_exec_task_isolated(tmp_path: Path) -> None:
    alloc = await run_job(tmp_path, "iso", 'echo "pid=$$ host=$(hostname)" >/alloc/out; '
                          'ls -d /local /secrets >>/alloc/out', "complete")
    assert str(alloc["out"]).split() == ["pid=1", "host=t", "/local", "/secrets"]


async def test_a_job_reports_the_oom_kill_of_its_exec_task(tmp_path: Path) -> None:
    alloc = await run_job(tmp_path, "oom", "exec /usr/bin/python3 -c "
                          "'b = b\"x\" * (100 << 20)'", "failed", memory_max=32)
    state = alloc["TaskStates"]["t"]  # type: ignore[index]
    terminated = [e for e in state["Events"] if e["Type"] == "Terminated"]
    assert terminated, state["Events"]
    assert terminated[-1]["Details"]["oom_killed"] == "true"
    assert terminated[-1]["Details"]["exit_message"] == "OOM Killed"


async def test_alloc_exec_runs_inside_the_tasks_namespaces(tmp_path: Path) -> None:
    d, cfg = driver(), task(tmp_path, "echo ready >/local/r; exec sleep 1000")
    send_in, inputs = trio.open_memory_channel[ExecInput](0)
    outputs, received = trio.open_memory_channel[ExecOutput](100)
    send_in.close()
    with trio.fail_after(30):
        await d.start_task(cfg)
        await eventually(lambda: (tmp_path / "alloc" / "web" / "local" / "r").exists())
        code = await d.exec_task(cfg.id, ExecRequest(
            command=["/bin/sh", "-c", 'echo "$(hostname) $(cat /proc/1/cmdline | tr "\\0" " ")"'
                     "; cat /local/r; test -e /root || echo hidden"], tty=False, task=cfg),
            inputs, outputs)
        await d.stop_task(cfg.id, kill_timeout=0, signal="SIGKILL")
        await d.wait_task(cfg.id)
        await d.destroy_task(cfg.id, force=True)
    out = b""
    while True:
        try:
            got = received.receive_nowait()
        except trio.WouldBlock:
            break
        out += got.data if got.stream == "stdout" else b""
    assert code == 0
    assert out.decode().split("\n")[:3] == ["web sleep 1000 ", "ready", "hidden"]


async def exec_in(tmp_path: Path, command: str, *, tty: bool, work_dir: str = "",
                  setup: str = "") -> tuple[int, bytes, bytes]:
    """`alloc exec` of `sh -c COMMAND` in a running exec task (which runs `setup` first):
    its code, stdout, stderr."""
    cfg = task(tmp_path, f"{setup}echo ready >/local/r; exec sleep 1000")
    if work_dir:
        cfg = dataclasses.replace(cfg, driver_config={**cfg.driver_config, "work_dir": work_dir})
    d = driver()
    send_in, inputs = trio.open_memory_channel[ExecInput](1)
    outputs, received = trio.open_memory_channel[ExecOutput](100)
    send_in.send_nowait(ExecStdin(b"", close=True))
    with trio.fail_after(30):
        await d.start_task(cfg)
        await eventually(lambda: (tmp_path / "alloc" / "web" / "local" / "r").exists())
        code = await d.exec_task(cfg.id, ExecRequest(command=["/bin/sh", "-c", command],
                                                     tty=tty, task=cfg), inputs, outputs)
        await d.stop_task(cfg.id, kill_timeout=0, signal="SIGKILL")
        await d.wait_task(cfg.id)
        await d.destroy_task(cfg.id, force=True)
    out = {"stdout": b"", "stderr": b""}
    while True:
        try:
            got = received.receive_nowait()
        except trio.WouldBlock:
            break
        out[got.stream] += got.data
    return code, out["stdout"], out["stderr"]


async def test_alloc_exec_starts_in_the_tasks_work_dir_inside_its_root(tmp_path: Path) -> None:
    code, stdout, stderr = await exec_in(tmp_path, "pwd; cat r", tty=False, work_dir="/local")
    assert (code, stdout, stderr) == (0, b"/local\nready\n", b"")


async def test_alloc_exec_with_a_tty_gets_a_terminal_of_the_tasks_own(tmp_path: Path) -> None:
    """The pty comes from the task's devpts, so the command finds it under its /dev/pts, and
    the command leads its own session there, its terminal's foreground (job control works)."""
    script = 'tty; ps -o sid=,tty= -p $$; [ "$(ps -o tpgid= -p $$)" -eq $$ ] && echo fg'
    code, stdout, _ = await exec_in(tmp_path, script, tty=True)
    lines = stdout.decode().replace("\r", "").split("\n")
    assert code == 0, stdout
    assert lines[0].startswith("/dev/pts/"), stdout
    sid, terminal = lines[1].split()
    assert terminal == lines[0].removeprefix("/dev/"), stdout
    assert lines[2] == "fg", stdout
    assert int(sid) > 1  # a session of the task's PID namespace, not the agent's


async def test_alloc_exec_tty_follows_no_link_the_task_planted(tmp_path: Path) -> None:
    """The task's /dev is its own to change: a root task that replaces /dev/ptmx with a link
    to a host path (resolved against the agent's root, were it followed) does not make the
    agent open that host file; the session gets its terminal from the task's devpts."""
    host_file = tmp_path / "host-file"
    host_file.write_text("precious\n")
    before = os.stat(host_file)
    setup = f"rm /dev/ptmx && ln -s {host_file} /dev/ptmx && "
    code, stdout, _ = await exec_in(tmp_path, "tty", tty=True, setup=setup)
    assert code == 0, stdout
    assert stdout.decode().startswith("/dev/pts/"), stdout
    assert host_file.read_text() == "precious\n"
    after = os.stat(host_file)
    assert (after.st_mtime_ns, after.st_size) == (before.st_mtime_ns, before.st_size)


def test_the_tasks_ptmx_is_reached_through_no_link(tmp_path: Path) -> None:
    """`open_task_ptmx` refuses a symlinked /dev or /dev/pts and a /dev/pts that is not a
    devpts (where a file could be planted); a root without /dev/pts is "not found"."""
    root = tmp_path / "root"
    root.mkdir()
    with pytest.raises(FileNotFoundError):
        ptys.open_task_ptmx(str(root))
    (root / "dev").symlink_to("/dev")
    with pytest.raises(DriverError, match=r"^cannot open the task's terminal: /dev: "):
        ptys.open_task_ptmx(str(root))
    (root / "dev").unlink()
    (root / "dev").mkdir()
    (root / "dev" / "pts").symlink_to("/dev/pts")
    with pytest.raises(DriverError, match=r"terminal: /dev/pts: "):
        ptys.open_task_ptmx(str(root))
    (root / "dev" / "pts").unlink()
    (root / "dev" / "pts").mkdir()
    (root / "dev" / "pts" / "ptmx").symlink_to("/dev/ptmx")
    with pytest.raises(DriverError, match="/dev/pts is not a devpts filesystem"):
        ptys.open_task_ptmx(str(root))
