"""`yurt job run` as Nomad's monitor, `job plan` as Nomad prints it, and `job init|allocs|
deployments|promote`, through real `yurt` processes against one real `yurt agent` (layer 3).

What is held: `job run` returns once the job is placed (a 120 s batch job in seconds), exits
2 with Nomad's placement failure, follows a service job's deployment to "successful";
`-check-index` refuses a stale index with Nomad's text; `-` reads stdin; `job plan` of a new
job is Nomad's three lines, its exit codes and its `-check-index` hint; the new verbs' columns
and exit codes are Nomad's.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_agent_e2e import YURT
from tests.test_cli_jobs import agent

pytestmark = pytest.mark.slow

BATCH = '''job "%s" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "mock_driver"
      config { run_for = "120s" }
      resources {
        cpu    = 1
        memory = 10
      }
    }
  }
}
'''

SERVICE = '''job "svc" {
  update {
    min_healthy_time = "1s"
    healthy_deadline = "30s"
  }
  group "web" {
    count = 2
    task "t" {
      driver = "mock_driver"
      config { run_for = "1h" }
      resources {
        cpu    = 1
        memory = 10
      }
    }
  }
}
'''

IMPOSSIBLE = '''job "nowhere" {
  type = "batch"
  constraint {
    attribute = "${attr.kernel.name}"
    value     = "plan9"
  }
  group "g" {
    task "t" {
      driver = "mock_driver"
      config { run_for = "1s" }
    }
  }
}
'''

#: Nomad's `job allocs` and `deployment list` columns.
ALLOC_COLUMNS = ["ID", "Node ID", "Task Group", "Version", "Desired", "Status", "Created",
                 "Modified"]
DEPLOYMENT_COLUMNS = ["ID", "Job ID", "Job Version", "Status", "Description"]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with agent(tmp_path_factory.mktemp("agent")) as e:
        yield e


def yurt(env: dict[str, str], *args: str, stdin: str | None = None,
         cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([YURT, *args], capture_output=True, text=True, env=env,
                          input=stdin, cwd=cwd, timeout=60, check=False)


def columns(line: str) -> list[str]:
    """A plain table's header cells (two or more spaces apart)."""
    return re.split(r"\s{2,}", line.strip())


def write(tmp: Path, name: str, text: str) -> str:
    path = tmp / name
    path.write_text(text)
    return str(path)


def test_batch_job_returns_once_placed(env: dict[str, str], tmp_path: Path) -> None:
    started = time.monotonic()
    out = yurt(env, "job", "run", write(tmp_path, "b.hcl", BATCH % "long"))
    assert out.returncode == 0, out.stderr + out.stdout
    assert time.monotonic() - started < 15  # the task runs 120 s: never waited for
    lines = out.stdout.splitlines()
    assert re.fullmatch(r'==> \S+: Monitoring evaluation "[0-9a-f]{8}"', lines[0]), lines
    assert any(re.fullmatch(r'    \S+: Allocation "[0-9a-f]{8}" created: node "[0-9a-f]{8}", '
                            r'group "g"', line) for line in lines), lines

    assert 'Evaluation triggered by job "long"' in out.stdout
    assert re.search(r'==> \S+: Evaluation "[0-9a-f]{8}" finished with status "complete"$',
                     out.stdout.rstrip()), out.stdout
    assert "Monitoring deployment" not in out.stdout  # a batch job has none
    # job allocs: Nomad's columns; -verbose adds the full IDs and absolute times.
    allocs = yurt(env, "job", "allocs", "long")
    assert allocs.returncode == 0, allocs.stderr
    header, row = allocs.stdout.splitlines()
    assert columns(header) == ALLOC_COLUMNS
    assert columns(row)[2:6] == ["g", "0", "run", "running"]
    verbose = yurt(env, "job", "allocs", "-verbose", "long").stdout.splitlines()
    assert columns(verbose[0]) == ["ID", "Eval ID", "Node ID", "Node Name", *ALLOC_COLUMNS[2:]]
    assert re.match(r"[0-9a-f-]{36}  [0-9a-f-]{36}", verbose[1])
    assert yurt(env, "job", "allocs", "-json", "long").stdout.lstrip().startswith("[")
    assert yurt(env, "job", "deployments", "long").stdout.strip() == "No deployments found"
    missing = yurt(env, "job", "allocs", "nosuchjob")
    assert missing.returncode == 1
    assert 'No job(s) with prefix or ID "nosuchjob" found' in missing.stderr


def test_placement_failure_exits_2(env: dict[str, str], tmp_path: Path) -> None:
    out = yurt(env, "job", "run", write(tmp_path, "n.hcl", IMPOSSIBLE))
    assert out.returncode == 2, out.stderr + out.stdout
    assert re.search(r'==> \S+: Evaluation "[0-9a-f]{8}" finished with status "complete" but '
                     "failed to place all allocations:", out.stdout), out.stdout
    assert re.search(r'    \S+: Task Group "g" \(failed to place 1 allocation\):',
                     out.stdout), out.stdout
    assert '      * Constraint "${attr.kernel.name} = plan9": 1 nodes excluded by filter' \
        in out.stdout, out.stdout
    assert "waiting for additional capacity to place remainder" in out.stdout


def test_service_deployment_followed(env: dict[str, str], tmp_path: Path) -> None:
    out = yurt(env, "job", "run", write(tmp_path, "s.hcl", SERVICE))
    assert out.returncode == 0, out.stderr + out.stdout
    assert re.search(r'Evaluation within deployment: "[0-9a-f]{8}"', out.stdout), out.stdout
    assert re.search(r'==> \S+: Monitoring deployment "[0-9a-f]{8}"', out.stdout)
    assert "\nDeployed\n" in out.stdout
    blocks = out.stdout.split("\nDeployed\n")[1:]
    assert columns(blocks[0].splitlines()[0]) == [
        "Task Group", "Desired", "Placed", "Healthy", "Unhealthy", "Progress Deadline"]
    assert re.search(r"Status\s+= successful\nDescription = Deployment completed successfully",
                     out.stdout), out.stdout
    latest = yurt(env, "job", "deployments", "-latest", "svc")
    assert latest.returncode == 0
    assert re.search(r"Status\s+= successful", latest.stdout)
    listed = yurt(env, "job", "deployments", "svc").stdout.splitlines()
    assert columns(listed[0]) == DEPLOYMENT_COLUMNS
    assert columns(listed[1])[1:4] == ["svc", "0", "successful"]
    # A deployment without canaries has nothing to promote: Nomad's refusal, exit 1.
    promote = yurt(env, "job", "promote", "svc")
    assert promote.returncode == 1, promote.stdout
    assert "Error promoting deployment" in promote.stderr
    none = yurt(env, "job", "promote", "nowhere")
    assert none.returncode == 1
    assert 'Job "nowhere" has no deployment to promote' in none.stderr


def test_check_index_and_stdin(env: dict[str, str], tmp_path: Path) -> None:
    text = BATCH % "indexed"
    # `-` reads stdin for validate, plan and run.
    valid = yurt(env, "job", "validate", "-", stdin=text)
    assert valid.returncode == 0, valid.stderr
    assert 'job "indexed"' in valid.stdout
    plan = yurt(env, "job", "plan", "-", stdin=text)
    assert plan.returncode == 1, plan.stderr  # allocations would be created
    assert plan.stdout.splitlines()[:3] == ['+ Job: "indexed"', '+ Task Group: "g" (1 create)',
                                           '  + Task: "t" (forces create)']
    assert "\nScheduler dry-run:\n- All tasks successfully allocated.\n" in plan.stdout
    assert "Job Modify Index: 0\nTo submit the job with version verification run:\n\n" \
        "yurt job run -check-index 0 -\n" in plan.stdout, plan.stdout
    run = yurt(env, "job", "run", "-detach", "-check-index", "0", "-", stdin=text)
    assert run.returncode == 0, run.stderr
    assert re.fullmatch(r"Job registration successful\nEvaluation ID: [0-9a-f-]{36}\n",
                        run.stdout), run.stdout
    # The job exists now: index 0 is refused, and so is a stale one, with Nomad's texts.
    again = yurt(env, "job", "run", "-check-index", "0", "-", stdin=text)
    assert again.returncode == 1
    assert again.stderr == ("Enforcing job modify index 0: job already exists\n"
                            "Job not updated\n"), again.stderr
    path = write(tmp_path, "i.hcl", text.replace("120s", "60s"))
    replan = yurt(env, "job", "plan", path)
    found = re.search(r"Job Modify Index: (\d+)", replan.stdout)
    assert found is not None, replan.stdout
    index = int(found.group(1))
    assert f"yurt job run -check-index {index} {path}\n" in replan.stdout
    stale = yurt(env, "job", "run", "-check-index", str(index + 1000), path)
    assert stale.returncode == 1
    assert stale.stderr.startswith(
        f"Enforcing job modify index {index + 1000}: job exists with conflicting job modify "
        f"index: {index}\n"), stale.stderr
    fresh = yurt(env, "job", "run", "-check-index", str(index), path)
    assert fresh.returncode == 0, fresh.stderr + fresh.stdout
    unchanged = yurt(env, "job", "plan", path)
    assert unchanged.returncode == 0, unchanged.stdout  # nothing created or destroyed
    verbose = yurt(env, "job", "plan", "-verbose", write(tmp_path, "v.hcl", BATCH % "fresh"))
    assert verbose.returncode == 1
    assert re.search(r'\n  \+ Task: "t" \(forces create\)\n    \+ Driver: +"mock_driver"\n',
                     verbose.stdout), verbose.stdout


def test_job_init(env: dict[str, str], tmp_path: Path) -> None:
    first = yurt(env, "job", "init", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert first.stdout == "Example job file written to example.nomad.hcl\n"
    again = yurt(env, "job", "init", cwd=tmp_path)
    assert again.returncode == 1
    assert "Job 'example.nomad.hcl' already exists" in again.stderr
    short = yurt(env, "job", "init", "-short", "short.nomad.hcl", cwd=tmp_path)
    assert short.returncode == 0, short.stderr
    assert "#" not in (tmp_path / "short.nomad.hcl").read_text()
    for name in ("example.nomad.hcl", "short.nomad.hcl"):
        valid = yurt(env, "job", "validate", name, cwd=tmp_path)
        assert valid.returncode == 0, valid.stderr
        assert 'job "example" (service' in valid.stdout
    connect = yurt(env, "job", "init", "-connect", "c.hcl", cwd=tmp_path)
    assert connect.returncode == 2
    assert "Consul Connect" in connect.stderr
    assert not (tmp_path / "c.hcl").exists()
    assert os.path.getsize(tmp_path / "example.nomad.hcl") > 1000  # the commented one


def test_job_restart(env: dict[str, str], tmp_path: Path) -> None:
    job = write(tmp_path, "r.hcl", SERVICE.replace('"svc"', '"restarted"'))
    assert yurt(env, "job", "run", job).returncode == 0
    # Nomad's rule: `ask` (the -on-error default) needs a terminal; this is no terminal.
    asked = yurt(env, "job", "restart", "restarted")
    assert asked.returncode == 2
    assert ('Invalid -on-error value "ask": "ask" cannot be used when terminal is not '
            "interactive") in asked.stderr
    done = yurt(env, "job", "restart", "-yes", "-batch-size", "100%", "restarted")
    assert done.returncode == 0, done.stderr + done.stdout
    lines = done.stdout.splitlines()
    assert re.fullmatch(r"==> \S+: Restarting 2 allocations", lines[0]), lines
    assert re.fullmatch(r"==> \S+: Restarting 1st batch of 2 allocations", lines[1]), lines
    assert sum(bool(re.fullmatch(r'    \S+: Restarting running tasks in allocation '
                                 r'"[0-9a-f]{8}" for group "web"', line))
               for line in lines) == 2, lines
    assert done.stdout.endswith("Job restart finished\n\nJob restarted successfully!\n")
    none = yurt(env, "job", "restart", "-yes", "-task", "nosuch", "restarted")
    assert none.returncode == 0
    assert none.stdout == "No allocations to restart\n"
    conflict = yurt(env, "job", "restart", "-yes", "-reschedule", "-task", "t", "restarted")
    assert conflict.returncode == 2
    assert "The -reschedule option cannot be used with -task" in conflict.stderr
    before = {row.split()[0] for row in yurt(env, "job", "allocs", "restarted")
              .stdout.splitlines()[1:]}
    moved = yurt(env, "job", "restart", "-yes", "-reschedule", "restarted")
    assert moved.returncode == 0, moved.stderr + moved.stdout
    assert re.search(r'Rescheduling allocation "[0-9a-f]{8}" for group "web"', moved.stdout)
    assert re.search(r'Allocation "[0-9a-f]{8}" replaced by "([0-9a-f]{8})", waiting for '
                     r'"\1" to start running', moved.stdout), moved.stdout
    running = [row.split() for row in yurt(env, "job", "allocs", "restarted")
               .stdout.splitlines()[1:]]
    assert {r[0] for r in running if r[5] == "running"}.isdisjoint(before)


def test_output_then_json_input(env: dict[str, str], tmp_path: Path) -> None:
    """`-output` prints the API payload and registers nothing; `-json` reads it back."""
    path = write(tmp_path, "o.hcl", BATCH % "printed")
    printed = yurt(env, "job", "run", "-output", path)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.startswith('{\n    "Job": {\n')
    assert yurt(env, "job", "allocs", "printed").returncode == 1  # nothing registered
    again = yurt(env, "job", "run", "-json", "-detach", "-", stdin=printed.stdout)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("Job registration successful\n")
    not_json = yurt(env, "job", "run", "-json", path)
    assert not_json.returncode == 2  # an HCL file read as JSON: a bad job file
    assert f"{path}:1:1: syntax:" in not_json.stderr


CANARY = '''job "canary" {
  update {
    canary           = 1
    min_healthy_time = "1s"
    healthy_deadline = "30s"
  }
  group "web" {
    task "t" {
      driver = "mock_driver"
      config { run_for = "%s" }
      resources {
        cpu    = 1
        memory = 10
      }
    }
  }
}
'''


def test_job_promote_monitors_the_rollout(env: dict[str, str], tmp_path: Path) -> None:
    import json

    assert yurt(env, "job", "run", write(tmp_path, "c0.hcl", CANARY % "1h")).returncode == 0
    assert yurt(env, "job", "run", "-detach",
                write(tmp_path, "c1.hcl", CANARY % "2h")).returncode == 0
    deadline = time.monotonic() + 30
    while True:  # until the canary is healthy (promotion needs it)
        latest = json.loads(yurt(env, "job", "deployments", "-latest", "-json",
                                 "canary").stdout)
        if latest["TaskGroups"]["web"]["HealthyAllocs"] >= 1:
            break
        assert time.monotonic() < deadline, latest
        time.sleep(0.2)
    promoted = yurt(env, "job", "promote", "canary")
    assert promoted.returncode == 0, promoted.stderr + promoted.stdout
    assert re.match(r'==> \S+: Monitoring evaluation "[0-9a-f]{8}"', promoted.stdout)
    assert re.search(r'==> \S+: Monitoring deployment "[0-9a-f]{8}"', promoted.stdout)
    assert re.search(r"Promoted\s+Desired\s+Canaries\s+Placed", promoted.stdout)
    assert re.search(r"Status\s+= successful", promoted.stdout), promoted.stdout


def test_job_init_from_a_template_variable(env: dict[str, str], tmp_path: Path) -> None:
    put = yurt(env, "var", "put", "nomad/job-templates/mine", 'template=job "t" {}')
    assert put.returncode == 0, put.stderr
    listed = yurt(env, "job", "init", "-list-templates", cwd=tmp_path)
    assert listed.stdout == ("Use yurt job init -template=<template> with any of the "
                             "following:\n  mine\n"), listed.stderr
    made = yurt(env, "job", "init", "-template", "mine", "t.hcl", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert made.stdout == ("Initializing a job template from mine\n"
                           "Example job file written to t.hcl\n")
    assert (tmp_path / "t.hcl").read_text() == 'job "t" {}'
    missing = yurt(env, "job", "init", "-template", "nosuch", "u.hcl", cwd=tmp_path)
    assert missing.returncode == 1
    assert not (tmp_path / "u.hcl").exists()
