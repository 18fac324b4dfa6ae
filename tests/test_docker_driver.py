"""The docker driver (drivers/docker/driver.py) in-process against a real dockerd: start,
the real exit code, OOM kills, stops with and without a kill signal, signals, re-attach by a
new driver instance (the agent restarted), reconcile of starts no handle accounts for, an
image neither present nor pullable, the alloc dir and host volume mounts, and the
fingerprint. Every container a test starts carries its alloc root's label and is removed
after it."""

from __future__ import annotations

import logging
import os
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.docker_support import IMAGE, DockerDaemon, import_image, start_dockerd, stop_dockerd
from yurt.runtime.client.drivers.docker.create import LABEL_ALLOC_ID, LABEL_ALLOC_ROOT
from yurt.runtime.client.drivers.docker.driver import DockerDriver
from yurt.runtime.client.drivers.docker.images import LOAD_CHUNK
from yurt.runtime.client.drivers.docker.plugin import plugin_config
from yurt.runtime.client.drivers.protocol import ExitResult, TaskConfig
from yurt.runtime.errors import DriverError, TaskNotFoundError
from yurt.runtime.structs import TaskMount

TIMEOUT = 60


@pytest.fixture
def alloc_root(tmp_path: Path, dockerd: DockerDaemon) -> Iterator[Path]:
    root = tmp_path / "allocs"
    root.mkdir()
    yield root
    leftovers = dockerd.containers(f"label={LABEL_ALLOC_ROOT}={root}")
    if leftovers:
        dockerd.cli("rm", "-f", *leftovers, check=False)


@pytest.fixture
async def driver(dockerd: DockerDaemon) -> AsyncIterator[DockerDriver]:
    d = DockerDriver(plugin_config({"endpoint": dockerd.host}))
    try:
        yield d
    finally:
        await d.engine.aclose()


def task(root: Path, config: dict[str, Any], *, name: str = "main", alloc_id: str = "",
         **over: Any) -> TaskConfig:
    alloc_id = alloc_id or str(uuid.uuid4())
    alloc_dir = root / alloc_id
    task_dir = alloc_dir / name
    for d in (alloc_dir / "alloc" / "logs", task_dir / "local", task_dir / "secrets"):
        d.mkdir(parents=True, exist_ok=True)
    return TaskConfig(id=f"{alloc_id}/{name}/{uuid.uuid4().hex[:8]}", name=name,
                      alloc_id=alloc_id, job_id="job", task_group="group",
                      driver_config={"image": IMAGE, **config},
                      env={"NOMAD_JOB_NAME": "job", "GREETING": "hello"},
                      alloc_dir=alloc_dir, task_dir=task_dir, **over)


def sh(script: str) -> dict[str, Any]:
    return {"command": "/bin/sh", "args": ["-c", script]}


async def test_a_container_runs_with_its_env_and_dirs_and_reports_its_exit_code(
        driver: DockerDriver, dockerd: DockerDaemon, alloc_root: Path) -> None:
    config = task(alloc_root, sh('echo "$GREETING $NOMAD_TASK_DIR" > /alloc/out; exit 3'))
    with trio.fail_after(TIMEOUT):
        handle = await driver.start_task(config)
        state = handle.driver_state
        assert state["container_id"]
        assert state["image"].startswith("sha256:")
        assert state["state_dir"].endswith(f".docker/{config.id.rsplit('/', 1)[-1]}")
        assert await driver.wait_task(config.id) == ExitResult(exit_code=3)
        assert config.alloc_dir is not None
        assert (config.alloc_dir / "alloc" / "out").read_text() == "hello /local\n"
        labels = dockerd.cli("inspect", "--format", "{{json .Config.Labels}}",
                             state["container_id"]).stdout
        assert f'"{LABEL_ALLOC_ID}":"{config.alloc_id}"' in labels
        await driver.destroy_task(config.id, force=False)
    assert dockerd.containers(f"label={LABEL_ALLOC_ID}={config.alloc_id}") == []
    with pytest.raises(TaskNotFoundError):
        await driver.wait_task(config.id)


async def test_over_memory_max_the_container_is_oom_killed(
        driver: DockerDriver, alloc_root: Path) -> None:
    # `tail` of an endless line keeps all of it in memory.
    config = task(alloc_root, sh("tail /dev/zero"), memory_mb=8, memory_max_mb=16)
    with trio.fail_after(TIMEOUT):
        await driver.start_task(config)
        result = await driver.wait_task(config.id)
        assert result.oom_killed
        assert result.err == "OOM Killed"
        assert result.exit_code == 137
        await driver.destroy_task(config.id, force=True)


async def test_stop_with_a_kill_signal_then_sigkill_after_the_timeout(
        driver: DockerDriver, alloc_root: Path) -> None:
    polite = task(alloc_root, sh("trap 'exit 7' USR1; while true; do sleep 0.1; done"))
    stubborn = task(alloc_root, sh("trap '' TERM; while true; do sleep 0.1; done"))
    with trio.fail_after(TIMEOUT):
        await driver.start_task(polite)
        await driver.start_task(stubborn)
        await driver.signal_task(polite.id, "SIGUSR1")
        assert await driver.wait_task(polite.id) == ExitResult(exit_code=7)
        with pytest.raises(DriverError, match="not running"):
            await driver.signal_task(polite.id, "SIGUSR1")
        started = trio.current_time()
        await driver.stop_task(stubborn.id, kill_timeout=1_000_000_000, signal="SIGTERM")
        assert (await driver.wait_task(stubborn.id)).exit_code == 137
        assert trio.current_time() - started >= 1.0
        for t in (polite, stubborn):
            await driver.destroy_task(t.id, force=False)


async def test_docker_stop_without_a_kill_signal(driver: DockerDriver,
                                                 alloc_root: Path) -> None:
    config = task(alloc_root, sh("trap 'exit 9' TERM; while true; do sleep 0.1; done"))
    with trio.fail_after(TIMEOUT):
        await driver.start_task(config)
        await driver.stop_task(config.id, kill_timeout=10_000_000_000, signal="")
        assert await driver.wait_task(config.id) == ExitResult(exit_code=9)
        await driver.destroy_task(config.id, force=False)


async def test_limits_reach_the_container(driver: DockerDriver, dockerd: DockerDaemon,
                                          alloc_root: Path) -> None:
    config = task(alloc_root, {**sh("sleep 600"), "cpu_hard_limit": True, "pids_limit": 20},
                  memory_mb=32, memory_max_mb=64, cpu_shares=250)
    with trio.fail_after(TIMEOUT):
        handle = await driver.start_task(config)
        limits = dockerd.cli("inspect", "--format",
                             "{{.HostConfig.Memory}} {{.HostConfig.MemoryReservation}} "
                             "{{.HostConfig.CpuShares}} {{.HostConfig.CpuQuota}} "
                             "{{.HostConfig.PidsLimit}}",
                             handle.driver_state["container_id"]).stdout.split()
        await driver.destroy_task(config.id, force=True)
    assert limits[:3] == [str(64 << 20), str(32 << 20), "250"]
    assert int(limits[3]) > 0
    assert limits[4] == "20"


async def test_destroying_a_running_container_needs_force(driver: DockerDriver,
                                                          dockerd: DockerDaemon,
                                                          alloc_root: Path) -> None:
    config = task(alloc_root, sh("sleep 600"))
    with trio.fail_after(TIMEOUT):
        await driver.start_task(config)
        with pytest.raises(DriverError, match="set force to true"):
            await driver.destroy_task(config.id, force=False)
        await driver.destroy_task(config.id, force=True)
    assert dockerd.containers(f"label={LABEL_ALLOC_ID}={config.alloc_id}") == []


async def test_a_new_driver_reattaches_and_gets_the_real_exit_codes(
        driver: DockerDriver, dockerd: DockerDaemon, alloc_root: Path) -> None:
    running = task(alloc_root, sh("trap 'exit 5' USR1; while true; do sleep 0.1; done"))
    exits = task(alloc_root, sh("sleep 0.3; exit 4"))
    with trio.fail_after(TIMEOUT):
        handles = [await driver.start_task(running), await driver.start_task(exits)]
        # The agent restarts: a new driver, the handles as persisted.
        again = DockerDriver(plugin_config({"endpoint": dockerd.host}))
        try:
            dockerd.cli("wait", handles[1].driver_state["container_id"])
            for handle in handles:
                await again.recover_task(handle)
            assert await again.reconcile(alloc_root) == 0  # both accounted for
            assert await again.wait_task(exits.id) == ExitResult(exit_code=4)
            await again.signal_task(running.id, "SIGUSR1")
            assert await again.wait_task(running.id) == ExitResult(exit_code=5)
            for t in (running, exits):
                await again.destroy_task(t.id, force=False)
            with pytest.raises(TaskNotFoundError):
                await again.recover_task(handles[0])  # removed: gone
        finally:
            await again.engine.aclose()


async def test_reconcile_removes_only_unaccounted_containers_of_this_agent(
        driver: DockerDriver, dockerd: DockerDaemon, alloc_root: Path) -> None:
    kept = task(alloc_root, sh("sleep 600"))
    orphan = task(alloc_root, sh("sleep 600"))
    with trio.fail_after(TIMEOUT):
        kept_handle = await driver.start_task(kept)
        await driver.start_task(orphan)
        restarted = DockerDriver(plugin_config({"endpoint": dockerd.host}))
        try:
            await restarted.recover_task(kept_handle)
            assert await restarted.reconcile(alloc_root, alloc_ids=[kept.alloc_id]) == 0
            assert await restarted.reconcile(alloc_root / "elsewhere") == 0
            assert await restarted.reconcile(alloc_root) == 1
            assert dockerd.containers(f"label={LABEL_ALLOC_ID}={orphan.alloc_id}") == []
            await restarted.destroy_task(kept.id, force=True)
        finally:
            await restarted.engine.aclose()


async def test_a_container_the_daemon_cannot_remove_is_logged_and_reconciled_later(
        driver: DockerDriver, dockerd: DockerDaemon, alloc_root: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    """An immutable file in the container's root directory makes Docker's removal fail
    (500, "operation not permitted"): destroy logs Docker's message and forgets the task;
    the container keeps its labels and the next `reconcile` removes it once it can."""
    config = task(alloc_root, sh("exit 0"))
    with trio.fail_after(TIMEOUT):
        handle = await driver.start_task(config)
        await driver.wait_task(config.id)
    cid = handle.driver_state["container_id"]
    data = dockerd.root / "data"  # the vfs storage driver: the layer's directory
    mount_id = (data / "image" / "vfs" / "layerdb" / "mounts" / cid / "mount-id").read_text()
    rootfs = data / "vfs" / "dir" / mount_id.strip()
    (rootfs / "pinned").write_text("")
    await trio.run_process(["chattr", "+i", str(rootfs / "pinned")])
    try:
        with (trio.fail_after(TIMEOUT),
              caplog.at_level(logging.WARNING, "yurt.drivers.docker")):
            await driver.destroy_task(config.id, force=False)
            assert await driver.reconcile(alloc_root) == 0  # still pinned: not removed
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 2
        assert all(w.startswith(f"docker: cannot remove container {cid}: ") for w in warnings)
        assert "operation not permitted" in warnings[0]  # Docker's own words
        assert cid in dockerd.containers(f"label={LABEL_ALLOC_ROOT}={alloc_root}")
        with pytest.raises(TaskNotFoundError):
            driver._task(config.id)
    finally:
        await trio.run_process(["chattr", "-i", str(rootfs / "pinned")])
    with trio.fail_after(TIMEOUT):
        assert await driver.reconcile(alloc_root) == 1
    assert dockerd.containers(f"label={LABEL_ALLOC_ID}={config.alloc_id}") == []


async def test_reconcile_spares_a_container_whose_start_is_under_way(
        driver: DockerDriver, dockerd: DockerDaemon, alloc_root: Path) -> None:
    """A start between its create and its return has a container no handle names yet: a
    reconcile running beside it (the restore's, while restarted tasks start) leaves it."""
    start_id = f"{uuid.uuid4()}/t/0badf00d"
    cid = dockerd.cli("create", "--label", f"{LABEL_ALLOC_ROOT}={alloc_root}",
                      "--label", f"io.yurt.task_id={start_id}", IMAGE, "true").stdout.strip()
    with trio.fail_after(TIMEOUT):
        driver._starting.add(start_id)  # as start_task holds it until it returns
        assert await driver.reconcile(alloc_root) == 0
        driver._starting.discard(start_id)
        assert await driver.reconcile(alloc_root) == 1
    assert cid not in dockerd.containers()


async def test_an_image_neither_present_nor_pullable_is_a_recoverable_failure(
        driver: DockerDriver, dockerd: DockerDaemon, alloc_root: Path) -> None:
    config = task(alloc_root, {"image": "127.0.0.1:9/nowhere/app:1",
                               "image_pull_timeout": "30s"})
    with trio.fail_after(TIMEOUT), pytest.raises(DriverError) as failed:
        await driver.start_task(config)
    assert failed.value.recoverable
    assert str(failed.value).startswith("Failed to pull `127.0.0.1:9/nowhere/app:1`: ")
    assert "127.0.0.1:9" in str(failed.value).split(": ", 1)[1]  # Docker's own words
    assert dockerd.containers(f"label={LABEL_ALLOC_ID}={config.alloc_id}") == []


async def test_a_config_the_plugin_refuses_fails_before_any_container(
        driver: DockerDriver, dockerd: DockerDaemon, alloc_root: Path) -> None:
    config = task(alloc_root, {"privileged": True})
    with trio.fail_after(TIMEOUT), pytest.raises(DriverError, match="privileged mode"):
        await driver.start_task(config)
    assert dockerd.containers(f"label={LABEL_ALLOC_ID}={config.alloc_id}") == []


async def test_a_link_out_of_the_alloc_dir_is_not_mounted(driver: DockerDriver,
                                                         dockerd: DockerDaemon,
                                                         alloc_root: Path) -> None:
    """A container (root) leaves `local/x -> /`; the next start binding `local/x` is refused
    (driver.go `containerBinds`) instead of mounting the host's root."""
    config = task(alloc_root, {"volumes": ["local/x:/host"], **sh("ls /host")})
    assert config.task_dir is not None
    (config.task_dir / "local" / "x").symlink_to("/")
    with trio.fail_after(TIMEOUT), pytest.raises(
            DriverError, match="volumes are not enabled; cannot mount host path: "
                               "'local/x:/host'"):
        await driver.start_task(config)
    assert dockerd.containers(f"label={LABEL_ALLOC_ID}={config.alloc_id}") == []


async def test_host_volume_mounts_honour_read_only(driver: DockerDriver, tmp_path: Path,
                                                   alloc_root: Path) -> None:
    volume = tmp_path / "vol"
    volume.mkdir()
    (volume / "seed").write_text("from the host\n")
    writable = tmp_path / "rw"
    writable.mkdir()
    config = task(alloc_root, sh("cat /data/seed > /out/copy; touch /data/new"),
                  mounts=[TaskMount(task_path="/data", host_path=str(volume), readonly=True),
                          TaskMount(task_path="/out", host_path=str(writable))])
    with trio.fail_after(TIMEOUT):
        await driver.start_task(config)
        result = await driver.wait_task(config.id)
        await driver.destroy_task(config.id, force=False)
    assert result.exit_code == 1  # touch on the read-only mount failed
    assert (writable / "copy").read_text() == "from the host\n"
    assert not (volume / "new").exists()


async def test_the_fingerprint_of_a_daemon_and_of_none(driver: DockerDriver,
                                                       tmp_path: Path) -> None:
    with trio.fail_after(TIMEOUT):
        fp = await anext(aiter(driver.fingerprint()))
        assert fp.health == "healthy"
        assert fp.attributes["driver.docker"] == "1"
        assert fp.attributes["driver.docker.version"].startswith("20.10")
        assert fp.attributes["driver.docker.os_type"] == "linux"
        assert "runc" in fp.attributes["driver.docker.runtimes"].split(",")
        assert "driver.docker.privileged.enabled" not in fp.attributes
        absent = DockerDriver(plugin_config({"endpoint": f"unix://{tmp_path}/none.sock",
                                             "allow_privileged": True}))
        try:
            fp = await anext(aiter(absent.fingerprint()))
            assert (fp.health, fp.description) == ("undetected",
                                                   "Failed to connect to docker daemon")
            with pytest.raises(DriverError) as failed:
                await absent.start_task(task(tmp_path / "allocs", sh("true")))
            assert failed.value.recoverable
        finally:
            await absent.engine.aclose()


async def test_output_reaches_the_log_paths(driver: DockerDriver, tmp_path: Path,
                                            alloc_root: Path) -> None:
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    out.touch()
    err.touch()
    config = task(alloc_root, sh("echo to-out; echo to-err >&2"), stdout_path=str(out),
                  stderr_path=str(err))
    with trio.fail_after(TIMEOUT):
        handle = await driver.start_task(config)
        assert handle.driver_state["logs"]["container_id"] == handle.driver_state[
            "container_id"]
        assert await driver.wait_task(config.id) == ExitResult()
        await driver.destroy_task(config.id, force=False)  # drains the copier
    assert out.read_text() == "to-out\n"
    assert err.read_text() == "to-err\n"


async def test_an_unused_image_is_removed_after_image_delay_a_used_one_never(
        dockerd: DockerDaemon, alloc_root: Path) -> None:
    import_image(dockerd, "yurt-test/gc:1")
    driver = DockerDriver(plugin_config({"endpoint": dockerd.host,
                                         "gc": {"image": True, "image_delay": "1s"}}))
    driver.fingerprint_period = 0.2
    first = task(alloc_root, {"image": "yurt-test/gc:1", **sh("sleep 600")})
    second = task(alloc_root, {"image": "yurt-test/gc:1", **sh("sleep 600")})

    def present() -> bool:
        return dockerd.cli("image", "inspect", "yurt-test/gc:1", check=False).returncode == 0

    try:
        with trio.fail_after(TIMEOUT):
            async with trio.open_nursery() as nursery:
                async def fingerprints() -> None:
                    async for _ in driver.fingerprint():
                        pass
                nursery.start_soon(fingerprints)
                await driver.start_task(first)
                await driver.start_task(second)
                await driver.destroy_task(first.id, force=True)
                await trio.sleep(1.5)  # past image_delay: the other task still uses it
                assert present()
                await driver.destroy_task(second.id, force=True)
                assert present()  # not before image_delay
                # The daemon is the witness; it has no event to wait on here.
                while present():  # noqa: ASYNC110
                    await trio.sleep(0.1)
                nursery.cancel_scope.cancel()
    finally:
        await driver.engine.aclose()


def _stop_keeping_containers(daemon: DockerDaemon) -> None:
    os.killpg(daemon.process.pid, signal.SIGTERM)
    daemon.process.wait(60)


async def test_unhealthy_while_the_daemon_is_away_healthy_when_it_returns(
        tmp_path: Path) -> None:
    """A private daemon (the session's must stay up): seen, stopped, started again on the
    same root; the driver's task survives the outage in its table."""
    daemon = await trio.to_thread.run_sync(start_dockerd)
    driver = DockerDriver(plugin_config({"endpoint": daemon.host}))
    driver.retry_period = 0.2
    healths: list[str] = []
    try:
        with trio.fail_after(TIMEOUT * 2):
            await trio.to_thread.run_sync(import_image, daemon)
            config = task(tmp_path / "allocs", sh("true"))
            await driver.start_task(config)
            async for fp in driver.fingerprint():
                healths.append(fp.health)
                if len(healths) == 1:
                    await trio.to_thread.run_sync(_stop_keeping_containers, daemon)
                elif fp.health == "unhealthy" and "healthy" not in healths[1:]:
                    daemon = await trio.to_thread.run_sync(start_dockerd, daemon.root)
                elif fp.health == "healthy":
                    break
            assert healths[0] == "healthy"
            assert "unhealthy" in healths
            assert (await driver.wait_task(config.id)).exit_code == 0
            await driver.destroy_task(config.id, force=True)
    finally:
        await driver.engine.aclose()
        await trio.to_thread.run_sync(stop_dockerd, daemon)


async def test_load_takes_the_image_from_a_tarball_in_local(
        driver: DockerDriver, dockerd: DockerDaemon, alloc_root: Path) -> None:
    tag = f"yurt-test/load:{uuid.uuid4().hex[:8]}"
    config = task(alloc_root, {"image": tag, "load": "image.tar", **sh("exit 6")})
    assert config.task_dir is not None
    dockerd.cli("tag", IMAGE, tag)
    dockerd.cli("save", "-o", str(config.task_dir / "local" / "image.tar"), tag)
    dockerd.cli("rmi", tag)
    try:
        with trio.fail_after(TIMEOUT):
            await driver.start_task(config)
            assert await driver.wait_task(config.id) == ExitResult(exit_code=6)
            await driver.destroy_task(config.id, force=False)
        broken = task(alloc_root, {"image": tag, "load": "missing.tar"})
        with trio.fail_after(TIMEOUT), pytest.raises(DriverError,
                                                     match=r"Failed to load image 'missing\.tar'"):
            await driver.start_task(broken)
    finally:
        dockerd.cli("rmi", tag, check=False)


async def test_load_never_reads_an_archive_outside_local(
        driver: DockerDriver, dockerd: DockerDaemon, alloc_root: Path, tmp_path: Path) -> None:
    """A `load` that resolves outside `local/` (`..`, or a link the task made) is refused
    before anything reaches the daemon; an absolute name is local's, as driver.go
    `loadImage`'s `filepath.Join`. The archive (over one `LOAD_CHUNK`) is streamed."""
    tag = f"yurt-test/load:{uuid.uuid4().hex[:8]}"
    outside = tmp_path / "outside.tar"
    dockerd.cli("tag", IMAGE, tag)
    dockerd.cli("save", "-o", str(outside), tag)
    dockerd.cli("rmi", tag)
    assert outside.stat().st_size > LOAD_CHUNK
    try:
        for load, link in (("../../../../outside.tar", False), ("image.tar", True),
                           ("/image.tar", True)):
            config = task(alloc_root, {"image": tag, "load": load, **sh("exit 0")})
            assert config.task_dir is not None
            if link:
                (config.task_dir / "local" / "image.tar").symlink_to(outside)
            with trio.fail_after(TIMEOUT), pytest.raises(
                    DriverError, match=r"the archive must be inside the task's local/"):
                await driver.start_task(config)
            assert dockerd.cli("images", "-q", tag).stdout.strip() == ""
        config = task(alloc_root, {"image": tag, "load": "/image.tar", **sh("exit 4")})
        assert config.task_dir is not None
        os.link(outside, config.task_dir / "local" / "image.tar")
        with trio.fail_after(TIMEOUT):
            await driver.start_task(config)
            assert await driver.wait_task(config.id) == ExitResult(exit_code=4)
            await driver.destroy_task(config.id, force=False)
    finally:
        dockerd.cli("rmi", tag, check=False)


async def test_force_pull_pulls_even_a_present_image(driver: DockerDriver,
                                                     alloc_root: Path) -> None:
    """The test image exists only here: a forced pull of it fails (no registry has it, or
    none can be reached), where without force_pull it runs."""
    config = task(alloc_root, {"force_pull": True, "image_pull_timeout": "30s"})
    with trio.fail_after(TIMEOUT), pytest.raises(DriverError) as failed:
        await driver.start_task(config)
    assert failed.value.recoverable
    assert str(failed.value).startswith(f"Failed to pull `{IMAGE}`: ")
