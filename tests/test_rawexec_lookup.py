"""raw_exec's command lookup as Nomad's drivers/shared/executor/executor.go `lookupBin` does:
the task dir's `local/`, then the task dir, then an absolute host path, then `$PATH`; a script
found in the task dir is made executable (`makeExecutable`). Layer 0 for the lookup itself,
layer 2 for a template-rendered `run.sh` started by a real agent under both spellings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from tests.agent_support import running_agent, wait_status
from yurt.runtime.client.drivers.starts import resolve_command


def test_lookup_order_is_nomads(tmp_path: Path) -> None:
    task_dir = tmp_path / "task"
    (task_dir / "local").mkdir(parents=True)
    local = task_dir / "local" / "run.sh"
    local.write_text("#!/bin/sh\necho local\n")
    root = task_dir / "tool.sh"
    root.write_text("#!/bin/sh\necho root\n")
    assert resolve_command("run.sh", task_dir, "/bin") == str(local)
    assert resolve_command("/local/run.sh", task_dir, "/bin") == str(local)
    assert resolve_command("local/run.sh", task_dir, "/bin") == str(local)
    assert resolve_command("tool.sh", task_dir, "/bin") == str(root)
    # Rendered 0644, made executable as Nomad's makeExecutable does.
    assert local.stat().st_mode & 0o555 == 0o555
    # A local/ file shadows $PATH, as in Nomad.
    (task_dir / "local" / "sh").write_text("#!/bin/sh\n")
    assert resolve_command("sh", task_dir, "/bin:/usr/bin") == str(task_dir / "local" / "sh")
    assert resolve_command("/bin/sh", task_dir, "/bin") == "/bin/sh"


def test_a_host_file_is_never_made_executable(tmp_path: Path) -> None:
    task_dir = tmp_path / "task"
    (task_dir / "local").mkdir(parents=True)
    outside = tmp_path / "host.sh"
    outside.write_text("#!/bin/sh\n")
    outside.chmod(0o644)
    (task_dir / "local" / "link.sh").symlink_to(outside)
    assert resolve_command(str(outside), task_dir, "/bin") is None
    assert resolve_command("link.sh", task_dir, "/bin") is None
    assert outside.stat().st_mode & 0o777 == 0o644


def script_job(job_id: str, command: str) -> dict[str, Any]:
    task = {"Name": "t", "Driver": "raw_exec", "Config": {"command": command},
            "Templates": [{"EmbeddedTmpl": '#!/bin/sh\necho "ran {{ env "NOMAD_JOB_ID" }}" '
                                           '> "$NOMAD_TASK_DIR/out"\n',
                           "DestPath": "local/run.sh", "ChangeMode": "noop", "Splay": 0}]}
    return {"Job": {"ID": job_id, "Type": "batch",
                    "TaskGroups": [{"Name": "g", "Tasks": [task],
                                    "RestartPolicy": {"Attempts": 0, "Mode": "fail"}}]}}


async def test_template_rendered_script_runs_by_either_name(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as agent:
            c = agent.client
            for job_id, command in (("bare", "run.sh"), ("rooted", "/local/run.sh")):
                assert (await c.post("/v1/jobs", json=script_job(job_id, command))
                        ).status_code == 200
                alloc = await wait_status(c, job_id, "complete")
                out = tmp_path / "alloc" / alloc["ID"] / "t" / "local" / "out"
                assert out.read_text() == f"ran {job_id}\n"
