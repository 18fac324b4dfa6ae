"""A shell set up for Nomad drives yurt unchanged (issue 30): `yurt` as a real process whose
environment holds only NOMAD_ADDR, NOMAD_TOKEN and NOMAD_NAMESPACE (every YURT_* and NOMAD_*
variable of the suite scrubbed, a fresh $HOME so no bootstrap token file is found), against a
real agent on a non-default port with ACLs on and a second namespace (layer 2).

Also: the general flags beat the environment, `-token` is refused, a region yurt does not serve
is refused, a request without the token is refused with the Nomad names in the message.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import trio

from tests.agent_support import running_agent
from tests.cli_proc_support import YURT
from tests.token_support import SUITE_TOKEN

JOB_FILE = """\
job "web" {
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo hello-from-team; exec sleep 600"]
      }
    }
  }
}
"""


def nomad_shell(home: Path, **nomad: str) -> dict[str, str]:
    """The suite's environment without any YURT_*/NOMAD_* setting, plus `nomad`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("YURT_", "NOMAD_")) and k != "XDG_DATA_HOME"}
    return {**env, "HOME": str(home), **nomad}


async def yurt(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = await trio.run_process([YURT, *args], capture_stdout=True, capture_stderr=True,
                                  check=False, env=env)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(),
                                       done.stderr.decode())


async def test_a_nomad_shell_drives_yurt_with_no_change(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    job_file = tmp_path / "web.nomad.hcl"
    job_file.write_text(JOB_FILE)
    with trio.fail_after(120):
        async with running_agent(tmp_path / "data", token=SUITE_TOKEN) as agent:
            assert not agent.address.endswith(":4646")
            made = await agent.client.put("/v1/namespace/team", json={"Name": "team"})
            assert made.status_code == 200, made.text
            env = nomad_shell(tmp_path / "home", NOMAD_ADDR=agent.address,
                              NOMAD_TOKEN=SUITE_TOKEN, NOMAD_NAMESPACE="team")

            run = await yurt(env, "job", "run", str(job_file))
            assert run.returncode == 0, (run.stdout, run.stderr)
            # Registered into NOMAD_NAMESPACE: the file names no namespace.
            in_team = await agent.client.get("/v1/job/web", params={"namespace": "team"})
            assert in_team.status_code == 200
            assert in_team.json()["Namespace"] == "team"
            assert (await agent.client.get("/v1/job/web")).status_code == 404

            listed = await yurt(env, "job", "status")
            assert listed.returncode == 0, listed
            assert "web" in listed.stdout
            shown = await yurt(env, "job", "status", "web")
            assert shown.returncode == 0, shown
            allocs = (await agent.client.get("/v1/job/web/allocations",
                                             params={"namespace": "team"})).json()
            alloc_id = allocs[0]["ID"]
            status = await yurt(env, "alloc", "status", alloc_id[:8])
            assert status.returncode == 0, status
            assert alloc_id in status.stdout
            while "hello-from-team" not in (logs := await yurt(env, "alloc", "logs",
                                                               alloc_id[:8])).stdout:
                assert logs.returncode == 0, logs
                await trio.sleep(0.1)
            # The exec websocket: the same address, token and namespace.
            execd = await yurt(env, "alloc", "exec", "-i=false", alloc_id[:8], "/bin/echo",
                               "exec-ok")
            assert (execd.returncode, execd.stdout) == (0, "exec-ok\n"), execd

            # In the default namespace there is nothing: NOMAD_NAMESPACE was what found it.
            default = await yurt({**env, "NOMAD_NAMESPACE": ""}, "job", "status")
            assert (default.returncode, default.stdout) == (0, "No running jobs\n"), default
            # Flags beat the environment, Nomad's position after the verb.
            flagged = await yurt(env, "job", "status", "-namespace=default")
            assert flagged.stdout == "No running jobs\n", flagged
            both = await yurt(env, "job", "status", "-address=http://127.0.0.1:1", "web")
            assert both.returncode == 1
            assert "cannot reach the agent at http://127.0.0.1:1" in both.stderr, both
            long_form = await yurt(env, "job", "status", "--namespace", "default")
            assert long_form.stdout == "No running jobs\n", long_form
            # ... and YURT_* beats NOMAD_*.
            yurt_ns = await yurt({**env, "YURT_NAMESPACE": "default"}, "job", "status")
            assert yurt_ns.stdout == "No running jobs\n", yurt_ns

            anonymous = await yurt({**env, "NOMAD_TOKEN": ""}, "job", "status")
            assert anonymous.returncode == 1
            assert "permission denied" in anonymous.stderr
            assert "NOMAD_TOKEN" in anonymous.stderr, anonymous.stderr

            refused = await yurt(env, "job", "status", "-token", SUITE_TOKEN)
            assert refused.returncode == 2
            assert "-token is refused" in refused.stderr
            assert "$NOMAD_TOKEN" in refused.stderr
            assert SUITE_TOKEN not in refused.stderr + refused.stdout

            tls = await yurt(env, "job", "status",
                             "-address=" + agent.address.replace("http:", "https:"))
            assert tls.returncode == 1
            assert "the agent does not speak TLS there: is its address http://" in tls.stderr

            elsewhere = await yurt(env, "job", "status", "-region=eu-west")
            assert elsewhere.returncode == 1
            assert 'No path to region "eu-west" (-region)' in elsewhere.stderr, elsewhere
            assert (await yurt(env, "job", "status", "-region=global")).returncode == 0

            stopped = await yurt(env, "job", "stop", "web")
            assert stopped.returncode == 0, stopped
            job = await agent.client.get("/v1/job/web", params={"namespace": "team"})
            assert job.json()["Stop"] is True
