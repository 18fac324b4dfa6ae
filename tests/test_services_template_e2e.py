"""The issue's end-to-end case for templates over the service catalogue (layer 2: a real agent,
raw_exec processes, real clock): a template that renders the addresses of `nomadService
"api"` re-renders and sends its task SIGHUP when a second allocation of the upstream starts
and registers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from tests.agent_support import raw_job, running_agent, wait_status
from tests.runtime_support import eventually

SCRIPT = ('trap \'echo "hup $(cat "$NOMAD_TASK_DIR/upstreams.txt")" >> "$NOMAD_TASK_DIR/seen"\' '
          'HUP; while :; do sleep 0.05; done')


def upstream(count: int) -> dict[str, Any]:
    job = raw_job("api", "sleep 1000")
    group = job["Job"]["TaskGroups"][0]
    group["Count"] = count
    group["Networks"] = [{"DynamicPorts": [{"Label": "http"}]}]
    group["Services"] = [{"Name": "api", "PortLabel": "http"}]
    return job


def downstream() -> dict[str, Any]:
    job = raw_job("web", SCRIPT)
    job["Job"]["TaskGroups"][0]["Tasks"][0]["Templates"] = [{
        "EmbeddedTmpl": '{{ range nomadService "api" }}{{ .Address }}:{{ .Port }} {{ end }}',
        "DestPath": "local/upstreams.txt", "ChangeMode": "signal", "ChangeSignal": "SIGHUP",
        "Splay": 0}]
    return job


async def test_a_second_upstream_allocation_rerenders_and_signals(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            c = a.client
            assert (await c.post("/v1/jobs", json=upstream(1))).status_code == 200
            while len((await c.get("/v1/service/api")).json()) < 1:  # noqa: ASYNC110 - API poll
                await trio.sleep(0.05)
            (first,) = (await c.get("/v1/service/api")).json()
            assert (await c.post("/v1/jobs", json=downstream())).status_code == 200
            web = await wait_status(c, "web", "running")
            local = tmp_path / "alloc" / web["ID"] / "t" / "local"
            rendered = local / "upstreams.txt"
            one = f"{first['Address']}:{first['Port']} "
            assert rendered.read_text() == one

            assert (await c.post("/v1/jobs", json=upstream(2))).status_code == 200
            while len(regs := (await c.get("/v1/service/api")).json()) < 2:  # noqa: ASYNC110
                await trio.sleep(0.05)
            both = "".join(f"{r['Address']}:{r['Port']} " for r in regs)  # in ID order
            seen = local / "seen"
            await eventually(lambda: seen.exists() and both in seen.read_text())
            assert seen.read_text() == f"hup {both}\n"  # one signal, after the render
            assert rendered.read_text() == both
