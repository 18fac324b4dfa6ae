"""One group, three drivers: a docker task, an exec task and a raw_exec task share a host volume
and the alloc dir; they run, log, are `alloc exec`'d into, survive `kill -9` of their agent with
one copy each, report the exit codes they really had while no agent ran, are restarted by
their restart policy, and stop cleanly (layer 3: real `yurt agent` processes, a real dockerd,
the real clock).

raw_exec isolates nothing and mounts nothing (Nomad's raw_exec has no mount support, and
yurt's refuses a `volume_mount` as Nomad's does), so it shares the host volume by its host
path; docker and exec mount it at `/shared`.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.docker_support import IMAGE, DockerDaemon
from tests.proc_support import wait_for
from tests.test_agent_e2e import User
from tests.test_exec_reattach_e2e import start_agent
from tests.test_execdriver import ROOTFS

pytestmark = pytest.mark.slow

#: Each task's exit code when it finds `exit-now` in the shared volume.
CODES = {"box": 3, "iso": 4, "raw": 5}


def task_script(name: str, shared: str, alloc: str) -> str:
    """Say it is up, write to the shared volume and the alloc dir, then poll for `exit-now`
    (every task's copy is the one `sh` whose command line carries `mark-<name>`)."""
    return (f": mark-{name}; echo {name}-up; echo {name} > {shared}/{name}; "
            f"echo {name} >> {alloc}/seen; "
            f"while [ ! -e {shared}/exit-now ]; do sleep 0.2; done; exit {CODES[name]}")


def copies(name: str) -> int:
    """Processes on the host running task `name`'s script (container processes included)."""
    count = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        count += len(args) >= 3 and args[0].endswith(b"sh") and f": mark-{name};".encode() \
            in args[2]
    return count


def job_file(tmp: Path, shared: Path) -> Path:
    def task(name: str, driver: str, config: str, mount: bool) -> str:
        volume = ('      volume_mount {\n        volume = "shared"\n'
                  '        destination = "/shared"\n      }\n') if mount else ""
        return (f'    task "{name}" {{\n      driver = "{driver}"\n      config {{\n{config}'
                f'      }}\n{volume}      kill_timeout = "2s"\n'
                '      resources {\n        cpu = 50\n        memory = 32\n      }\n    }\n')

    def words(script: str) -> str:
        return f'        args = ["-c", {script!r}]\n'.replace("'", '"')

    box = task("box", "docker", f'        image = "{IMAGE}"\n        command = "/bin/sh"\n'
               + words(task_script("box", "/shared", "/alloc")), mount=True)
    iso = task("iso", "exec", '        command = "/bin/sh"\n'
               + words(task_script("iso", "/shared", "/alloc")), mount=True)
    raw = task("raw", "raw_exec", '        command = "/bin/sh"\n'
               + words(task_script("raw", str(shared), "${NOMAD_ALLOC_DIR}")), mount=False)
    path = tmp / "three.nomad.hcl"
    path.write_text(
        'job "three" {\n  group "g" {\n'
        '    volume "shared" {\n      type = "host"\n      source = "shared"\n    }\n'
        '    restart {\n      attempts = 2\n      delay = "1s"\n      mode = "fail"\n    }\n'
        + box + iso + raw + "  }\n}\n")
    return path


def test_docker_exec_and_raw_exec_in_one_group(tmp_path: Path, dockerd: DockerDaemon) -> None:
    user = User(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    config = tmp_path / "agent.toml"
    config.write_text(f'[drivers.config.exec]\nrootfs_dir = "{ROOTFS}"\n\n'
                      f'[drivers.config.docker]\nendpoint = "{dockerd.host}"\n\n'
                      f'[host_volume.shared]\npath = "{shared}"\n')
    job = job_file(tmp_path, shared)
    agent = start_agent(user, config)

    def alloc() -> dict[str, object]:
        (only,) = user.json("job", "status", "three")["Allocations"]
        return user.json("alloc", "status", only["ID"])  # type: ignore[no-any-return]

    def states() -> dict[str, dict[str, object]]:
        return alloc()["TaskStates"]  # type: ignore[return-value]

    def all_running() -> bool:
        return all(s["State"] == "running" for s in states().values()) and len(states()) == 3

    try:
        user.yurt("job", "run", str(job))
        wait_for(all_running, timeout=90)
        alloc_id = str(alloc()["ID"])
        wait_for(lambda: sorted(p.name for p in shared.iterdir()) == ["box", "iso", "raw"])
        assert all(copies(name) == 1 for name in CODES)
        # Logs of every driver reach `alloc logs`.
        for name in CODES:
            wait_for(lambda name=name: f"{name}-up" in user.yurt(  # type: ignore[misc]
                "alloc", "logs", alloc_id, name).stdout)
        # The alloc dir is shared: each wrote to /alloc/seen (the raw task at its host path).
        for name in ("box", "iso"):
            seen = user.yurt("alloc", "exec", "-task", name, alloc_id, "/bin/sh", "-c",
                             "cat /alloc/seen; cat /shared/raw").stdout.split()
            assert sorted(seen[:-1]) == ["box", "iso", "raw"], seen
            assert seen[-1] == "raw", seen
        hostname = user.yurt("alloc", "exec", "-task", "box", alloc_id, "hostname").stdout
        assert hostname.strip(), hostname
        # kill -9: the tasks live on, one copy each; they end while no agent runs.
        agent.send_signal(signal.SIGKILL)
        agent.wait(timeout=30)
        assert all(copies(name) == 1 for name in CODES)
        assert len(dockerd.containers("status=running")) == 1
        (shared / "exit-now").touch()
        wait_for(lambda: all(copies(name) == 0 for name in CODES), timeout=30)
        (shared / "exit-now").unlink()
        agent = start_agent(user, config)
        # The new agent reports the codes they had, and the restart policy starts them again.
        wait_for(lambda: all(s["Restarts"] == 1 for s in states().values())
                 and all_running(), timeout=90)
        for name, code in CODES.items():
            ended = [e for e in states()[name]["Events"]  # type: ignore[attr-defined]
                     if e["Type"] == "Terminated"]
            assert [e["ExitCode"] for e in ended] == [code], (name, ended)
        wait_for(lambda: all(copies(name) == 1 for name in CODES))
        assert len(dockerd.containers("status=running")) == 1
        user.yurt("job", "stop", "three")
        wait_for(lambda: alloc()["ClientStatus"] == "complete", timeout=60)
        wait_for(lambda: all(copies(name) == 0 for name in CODES))
        assert dockerd.containers("status=running") == []
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=30)
