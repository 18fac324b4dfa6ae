"""A task that plants FIFOs in its own directory (layer 2: a real agent, a raw_exec task, a real
socket): at the temporary name the agent once used for a template (`.<name>.yurt-tmp`) and at
the template's destination itself. A change of the template's variable still re-renders the
file (replacing the FIFO, never opening it), the task keeps running, and stopping the job
stops it: nothing waits on a FIFO no one reads."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import trio

from tests.agent_support import raw_job, running_agent, wait_status
from tests.runtime_support import eventually

#: The task plants the FIFOs itself once its file is rendered, then says so.
SCRIPT = (
    'cd "$NOMAD_TASK_DIR" && mkfifo .greeting.txt.yurt-tmp && rm greeting.txt && '
    "mkfifo greeting.txt && touch planted && while :; do sleep 0.05; done"
)


def template_job() -> dict[str, Any]:
    job = raw_job("web", SCRIPT)
    job["Job"]["TaskGroups"][0]["Tasks"][0]["Templates"] = [
        {
            "EmbeddedTmpl": 'greeting={{ with nomadVar "nomad/jobs/web" }}{{ .greeting }}{{ end }}',
            "DestPath": "local/greeting.txt",
            "ChangeMode": "noop",
            "Splay": 0,
        }
    ]
    return job


def rendered(path: Path, text: str) -> bool:
    try:
        st = path.lstat()
    except FileNotFoundError:
        return False
    return stat.S_ISREG(st.st_mode) and path.read_text() == text


async def test_planted_fifos_block_neither_a_rerender_nor_the_stop(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as agent:
            c = agent.client
            await c.put("/v1/var/nomad/jobs/web", json={"Items": {"greeting": "hello"}})
            assert (await c.post("/v1/jobs", json=template_job())).status_code == 200
            alloc = await wait_status(c, "web", "running")
            local = tmp_path / "alloc" / alloc["ID"] / "t" / "local"
            await eventually((local / "planted").exists)
            assert stat.S_ISFIFO((local / "greeting.txt").lstat().st_mode)

            await c.put("/v1/var/nomad/jobs/web", json={"Items": {"greeting": "world"}})
            await eventually(lambda: rendered(local / "greeting.txt", "greeting=world"))
            assert stat.S_ISFIFO((local / ".greeting.txt.yurt-tmp").lstat().st_mode)
            assert not [
                n
                for n in os.listdir(local)
                if n.endswith(".yurt-tmp") and n != ".greeting.txt.yurt-tmp"
            ]  # no temporary file left behind
            now = (await c.get(f"/v1/allocation/{alloc['ID']}")).json()
            assert now["ClientStatus"] == "running"
            assert now["TaskStates"]["t"]["Restarts"] == 0

            assert (await c.delete("/v1/job/web")).status_code == 200
            await wait_status(c, "web", "complete")
