"""raw_exec with real processes and the real clock (layer 2), every test bounded by
`fail_after`. Tasks run through the whole runtime (alloc runner, task runner, hooks, shim)."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import msgspec
import pytest
import trio

from tests.runtime_support import eventually, until_running
from yurt.runtime.client.allocrunner.runner import AllocRunner, AllocRunnerConfig
from yurt.runtime.client.drivers.rawexec import RawExecDriver, same_process
from yurt.runtime.client.taskrunner.runner import TaskRunner
from yurt.runtime.jobspec import parse_job
from yurt.runtime.lib.procfs import start_time
from yurt.runtime.structs import Allocation, Node
from yurt.store import MemoryStateDB

pytestmark = pytest.mark.slow

NODE = Node(id="node-1", name="box-1", datacenter="dc9", attributes={"kernel.name": "linux"})


def alloc_of(hcl: str, alloc_id: str = "0123456789abcdef") -> Allocation:
    job = parse_job(hcl)
    return Allocation(id=alloc_id, name=f"{job.id}.g[3]", job=job, job_id=job.id,
                      task_group="g")


def one_task(command: str, *args: str, extra: str = "", job_type: str = "batch") -> str:
    quoted = ", ".join(f'"{a}"' for a in args)
    return f'''job "j" {{
  type = "{job_type}"
  group "g" {{
    restart {{
      attempts = 0
      mode     = "fail"
    }}
    task "t" {{
      driver = "raw_exec"
      config {{
        command = "{command}"
        args    = [{quoted}]
      }}
      {extra}
    }}
  }}
}}'''


@asynccontextmanager
async def runner(hcl: str, tmp_path: Path) -> AsyncIterator[tuple[AllocRunner, RawExecDriver]]:
    driver = RawExecDriver()
    config = AllocRunnerConfig(state_db=MemoryStateDB(), drivers={"raw_exec": driver},
                               unix_clock=time.time_ns, alloc_root=tmp_path / "alloc",
                               node=NODE)
    async with trio.open_nursery() as nursery:
        yield AllocRunner(alloc_of(hcl), config, nursery=nursery), driver


def last(tr: TaskRunner, type_: str) -> str:
    return next(e.display_message for e in reversed(tr.state.events) if e.type == type_)


def stop(ar: AllocRunner) -> None:
    ar.update(msgspec.structs.replace(ar.alloc, desired_status="stop", alloc_modify_index=99))


async def test_task_sees_nomads_environment(tmp_path: Path) -> None:
    hcl = one_task("/bin/sh", "-c", "env; echo arg=${NOMAD_TASK_NAME}/${node.unique.name}",
                   extra='env {\n GREETING = "hi ${NOMAD_JOB_ID} in ${node.datacenter}"\n }\n'
                         'meta {\n team = "red"\n }')
    with trio.fail_after(20):
        async with runner(hcl, tmp_path) as (ar, _):
            await ar.run()
    log = (ar.alloc_dir.logs / "t.stdout.0").read_text()  # type: ignore[union-attr]
    env = dict(line.split("=", 1) for line in log.splitlines() if "=" in line)
    task_dir = tmp_path / "alloc" / "0123456789abcdef" / "t"
    assert env["NOMAD_ALLOC_ID"] == "0123456789abcdef"
    assert env["NOMAD_SHORT_ALLOC_ID"] == "01234567"
    assert env["NOMAD_ALLOC_NAME"] == "j.g[3]"
    assert env["NOMAD_ALLOC_INDEX"] == "3"
    assert (env["NOMAD_TASK_NAME"], env["NOMAD_GROUP_NAME"], env["NOMAD_JOB_ID"]) == (
        "t", "g", "j")
    assert (env["NOMAD_DC"], env["NOMAD_REGION"], env["NOMAD_NAMESPACE"]) == (
        "dc9", "global", "default")
    assert (env["NOMAD_CPU_LIMIT"], env["NOMAD_MEMORY_LIMIT"]) == ("100", "300")
    assert env["NOMAD_TASK_DIR"] == str(task_dir / "local")
    assert env["NOMAD_SECRETS_DIR"] == str(task_dir / "secrets")
    assert env["NOMAD_ALLOC_DIR"] == str(task_dir.parent / "alloc")
    assert env["NOMAD_META_team"] == env["NOMAD_META_TEAM"] == "red"
    assert env["GREETING"] == "hi j in dc9"
    assert env["arg"] == "t/box-1"
    assert (task_dir / "local").is_dir()
    assert (task_dir.parent / "alloc" / "data").is_dir()


async def test_exit_code_is_reported(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with runner(one_task("/bin/sh", "-c", "exit 3"), tmp_path) as (ar, _):
            await ar.run()
    tr = ar.task_runners["t"]
    assert last(tr, "Terminated") == "Exit Code: 3"
    assert ar.alloc_state().client_status == "failed"


async def test_stop_with_sigterm_reports_143_and_signal_15(tmp_path: Path) -> None:
    hcl = one_task("/bin/sleep", "1000", extra='kill_signal = "SIGTERM"', job_type="service")
    with trio.fail_after(20):
        async with runner(hcl, tmp_path) as (ar, _):
            ar._nursery.start_soon(ar.run)
            tr = ar.task_runners["t"]
            await until_running(ar, "t")
            stop(ar)
            await ar.wait_done.wait()
    assert [e.type for e in tr.state.events][-3:] == ["Killing", "Terminated", "Killed"]
    assert last(tr, "Terminated") == "Exit Code: 143, Signal: 15"


async def test_a_task_that_ignores_its_signal_is_killed_after_kill_timeout(
        tmp_path: Path) -> None:
    hcl = one_task("/bin/sh", "-c", "trap '' TERM INT; echo ready; while :; do sleep 0.05; done",
                   extra='kill_signal = "SIGTERM"\n kill_timeout = "500ms"', job_type="service")
    with trio.fail_after(20):
        async with runner(hcl, tmp_path) as (ar, _):
            ar._nursery.start_soon(ar.run)
            tr = ar.task_runners["t"]
            await until_running(ar, "t")
            log = ar.alloc_dir.logs / "t.stdout.0"  # type: ignore[union-attr]
            await eventually(lambda: log.exists() and "ready" in log.read_text())  # trap set
            stop(ar)
            await ar.wait_done.wait()
    assert last(tr, "Terminated") == "Exit Code: 137, Signal: 9"
    killing = next(e.time for e in tr.state.events if e.type == "Killing")
    terminated = next(e.time for e in tr.state.events if e.type == "Terminated")
    assert terminated - killing >= 500_000_000


async def test_stop_removes_grandchildren(tmp_path: Path) -> None:
    hcl = one_task("/bin/sh", "-c", "sleep 1000 & sleep 1000 & wait", job_type="service")
    with trio.fail_after(20):
        async with runner(hcl, tmp_path) as (ar, _):
            ar._nursery.start_soon(ar.run)
            tr = ar.task_runners["t"]
            await until_running(ar, "t")
            assert tr.handle is not None
            pgid = int(tr.handle.driver_state["pgid"])
            await eventually(lambda: len(members(pgid)) == 3)  # sh and its two sleeps
            stop(ar)
            await ar.wait_done.wait()
    assert members(pgid) == []


def sigint_ignored(status: Path) -> bool:
    mask = next(line.split()[1] for line in status.read_text().splitlines()
                if line.startswith("SigIgn:"))
    return bool(int(mask, 16) & (1 << (2 - 1)))


def members(pgid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_bytes()
            except OSError:
                continue
            fields = stat[stat.rindex(b")") + 2:].split()
            if int(fields[2]) == pgid and fields[0] != b"Z":
                found.append(int(entry))
    return found


async def test_three_megabytes_with_one_megabyte_files_leaves_two_files(tmp_path: Path) -> None:
    hcl = one_task("/bin/sh", "-c", "head -c 3145728 /dev/zero | tr '\\\\0' x",
                   extra="logs {\n max_files = 2\n max_file_size = 1\n }")
    with trio.fail_after(30):
        async with runner(hcl, tmp_path) as (ar, _):
            await ar.run()
    logs = ar.alloc_dir.logs  # type: ignore[union-attr]
    files = sorted(p.name for p in logs.iterdir() if p.name.startswith("t.stdout."))
    assert files == ["t.stdout.1", "t.stdout.2"]
    assert all((logs / f).stat().st_size == 1024 * 1024 for f in files)
    assert set((logs / "t.stdout.2").read_bytes()) == {ord("x")}


async def test_disabled_logs_go_nowhere(tmp_path: Path) -> None:
    hcl = one_task("/bin/sh", "-c", "echo quiet", extra="logs {\n disabled = true\n }")
    with trio.fail_after(20):
        async with runner(hcl, tmp_path) as (ar, _):
            await ar.run()
    logs = ar.alloc_dir.logs  # type: ignore[union-attr]
    assert [p.name for p in logs.iterdir()] == []
    assert last(ar.task_runners["t"], "Terminated") == "Exit Code: 0"


async def test_output_of_a_very_short_task_is_kept(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with runner(one_task("/bin/echo", "bye"), tmp_path) as (ar, _):
            await ar.run()
    assert (ar.alloc_dir.logs / "t.stdout.0").read_text() == "bye\n"  # type: ignore[union-attr]


async def test_missing_command_is_a_driver_failure(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with runner(one_task("no-such-binary-xyz"), tmp_path) as (ar, _):
            await ar.run()
    tr = ar.task_runners["t"]
    assert [e.type for e in tr.state.events][-2:] == ["Driver Failure", "Not Restarting"]
    assert 'command "no-such-binary-xyz" not found' in last(tr, "Driver Failure")


async def test_signal_reaches_the_task(tmp_path: Path) -> None:
    hcl = one_task("/bin/sh", "-c",
                   "trap 'echo got-usr1' USR1; echo ready; while :; do sleep 0.05; done",
                   job_type="service")
    with trio.fail_after(20):
        async with runner(hcl, tmp_path) as (ar, _):
            ar._nursery.start_soon(ar.run)
            await until_running(ar, "t")
            log = ar.alloc_dir.logs / "t.stdout.0"  # type: ignore[union-attr]
            await eventually(lambda: log.exists() and "ready" in log.read_text())
            await ar.signal("t", "SIGUSR1")
            await eventually(lambda: "got-usr1" in log.read_text())
            stop(ar)
            await ar.wait_done.wait()


async def test_a_reused_pid_is_never_signalled(tmp_path: Path) -> None:
    """A handle whose pid now belongs to another process (different start time)."""
    # A process group leader, so that a group signal to its pid would reach it.
    other = await trio.lowlevel.open_process(["setsid", "sleep", "1000"])
    try:
        real_start = start_time(other.pid)
        assert real_start is not None
        assert not same_process(other.pid, real_start + 1)
        driver = RawExecDriver()
        from yurt.runtime.structs import TaskHandle

        state_dir = tmp_path / "state"
        state_dir.mkdir()
        (state_dir / "exit").write_text("0\n")
        handle = TaskHandle(driver="raw_exec", task_id="x", driver_state={
            "pid": other.pid, "pgid": other.pid, "start_time": real_start + 1,
            "shim_pid": other.pid, "shim_start_time": real_start + 1,
            "state_dir": str(state_dir)})
        with trio.fail_after(10):
            await driver.recover_task(handle)
            await driver.stop_task("x", 0, "SIGKILL")
        assert other.poll() is None  # still alive: never signalled
    finally:
        other.kill()
        await other.wait()


async def test_default_kill_signal_sigint_reaches_the_task(tmp_path: Path) -> None:
    """Background commands of a non-interactive shell start with SIGINT ignored; the shim
    must hand the task a default SIGINT, or Nomad's default kill signal would do nothing."""
    hcl = one_task("/bin/sleep", "1000", job_type="service")
    with trio.fail_after(20):
        async with runner(hcl, tmp_path) as (ar, _):
            ar._nursery.start_soon(ar.run)
            await until_running(ar, "t")
            handle = ar.task_runners["t"].handle
            assert handle is not None
            status = Path(f"/proc/{handle.driver_state['pid']}/status")
            # Until env(1) has reset it, the signal is still ignored (a start-up window).
            await eventually(lambda: not sigint_ignored(status))
            stop(ar)
            await ar.wait_done.wait()
    tr = ar.task_runners["t"]
    assert last(tr, "Terminated") == "Exit Code: 130, Signal: 2"
    killing = next(e.time for e in tr.state.events if e.type == "Killing")
    terminated = next(e.time for e in tr.state.events if e.type == "Terminated")
    assert terminated - killing < 4_000_000_000  # well before the 5 s kill_timeout


async def test_a_stop_right_after_start_is_never_lost(tmp_path: Path) -> None:
    """No window between start and the task's own process group where a stop misses it."""
    for attempt in range(5):
        hcl = one_task("/bin/sleep", "1000", job_type="service")
        with trio.fail_after(20):
            async with runner(hcl, tmp_path / str(attempt)) as (ar, _):
                ar._nursery.start_soon(ar.run)
                await until_running(ar, "t")
                stop(ar)  # at once
                await ar.wait_done.wait()
        assert last(ar.task_runners["t"], "Terminated") == "Exit Code: 130, Signal: 2"


async def test_children_left_by_a_task_that_exited_are_killed(tmp_path: Path) -> None:
    hcl = one_task("/bin/sh", "-c", "sleep 300 & echo $! > $NOMAD_TASK_DIR/child; exit 0")
    with trio.fail_after(20):
        async with runner(hcl, tmp_path) as (ar, _):
            await ar.run()
    child = int(await trio.Path(tmp_path / "alloc" / "0123456789abcdef" / "t" / "local"
                                / "child").read_text())
    assert not await trio.Path(f"/proc/{child}").exists() or members(child) == []
    assert last(ar.task_runners["t"], "Terminated") == "Exit Code: 0"


async def test_a_killed_shim_takes_its_task_along(tmp_path: Path) -> None:
    import signal as sig

    hcl = one_task("/bin/sleep", "1000", job_type="service")
    with trio.fail_after(20):
        async with runner(hcl, tmp_path) as (ar, _):
            ar._nursery.start_soon(ar.run)
            await until_running(ar, "t")
            handle = ar.task_runners["t"].handle
            assert handle is not None
            pid, shim = int(handle.driver_state["pid"]), int(handle.driver_state["shim_pid"])
            os.kill(shim, sig.SIGKILL)
            await ar.wait_done.wait()
    tr = ar.task_runners["t"]
    assert last(tr, "Terminated").startswith("Exit Code: -1, Exit Message: \"the task's shim")
    await eventually(lambda: not same_process(pid, 0) and members(pid) == [])


async def test_restarts_never_corrupt_the_logs(tmp_path: Path) -> None:
    chatty = ("n=0; while :; do n=$((n+1)); echo run-$$ $n; "
              "if [ $n -ge 400 ]; then sleep 1000; fi; done")
    hcl = one_task("/bin/sh", "-c", chatty, job_type="service")
    with trio.fail_after(30):
        async with runner(hcl, tmp_path) as (ar, _):
            ar._nursery.start_soon(ar.run)
            for run in range(4):
                await until_running(ar, "t")
                log = ar.alloc_dir.logs  # type: ignore[union-attr]
                runs = run + 1
                await eventually(lambda log=log, runs=runs: sum(  # type: ignore[misc]
                    p.read_text().count("\n") for p in log.glob("t.stdout.*")) >= 400 * runs)
                if run < 3:
                    await ar.restart_task("t")
            stop(ar)
            await ar.wait_done.wait()
    lines = "".join(p.read_text() for p in sorted(
        (tmp_path / "alloc" / "0123456789abcdef" / "alloc" / "logs").glob("t.stdout.*"))
        ).splitlines()
    runs: dict[str, list[int]] = {}
    for line in lines:
        tag, number = line.split(" ")  # a cut or interleaved line fails here
        runs.setdefault(tag, []).append(int(number))
    assert len(runs) == 4, {k: (len(v), v[:3], v[-3:]) for k, v in runs.items()}
    for numbers in runs.values():
        assert numbers == list(range(1, 401))  # nothing lost, duplicated or reordered


def test_command_resolution(tmp_path: Path) -> None:
    from yurt.runtime.client.drivers.starts import resolve_command

    task_dir = tmp_path / "task"
    (task_dir / "local").mkdir(parents=True)
    script = task_dir / "local" / "run.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o755)
    assert resolve_command("local/run.sh", task_dir, "/bin") == str(script)
    assert resolve_command(str(script), task_dir, "/bin") == str(script)
    assert resolve_command("local", task_dir, "/bin") is None  # a directory
    assert resolve_command("/etc", task_dir, "/bin") is None
    assert resolve_command("sh", task_dir, "/bin:/usr/bin") is not None
    assert resolve_command("no-such-tool", task_dir, "/bin") is None


async def test_a_command_path_with_an_equals_sign_runs(tmp_path: Path) -> None:
    odd = tmp_path / "a=b"
    odd.mkdir()
    script = odd / "hello"
    script.write_text("#!/bin/sh\necho ran-$1\n")
    script.chmod(0o755)
    with trio.fail_after(20):
        async with runner(one_task(str(script), "x"), tmp_path) as (ar, _):
            await ar.run()
    assert (ar.alloc_dir.logs / "t.stdout.0").read_text() == "ran-x\n"  # type: ignore[union-attr]
