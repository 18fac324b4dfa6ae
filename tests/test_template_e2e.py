"""Templates end to end (layer 2): a real agent on a real socket, a raw_exec task whose
template renders a Nomad Variable; the task starts only once the variable exists (Nomad's
"Missing: …" event meanwhile), and a change of the variable through the API re-renders the
file and sends the task SIGHUP (change_mode signal)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from tests.agent_support import raw_job, running_agent, stop_job, wait_status
from tests.runtime_support import eventually

#: Appends the template's file to `seen` on every SIGHUP; polls so the trap runs promptly.
SCRIPT = ('trap \'echo "hup $(cat "$NOMAD_TASK_DIR/greeting.txt")" >> "$NOMAD_TASK_DIR/seen"\' '
          'HUP; while :; do sleep 0.05; done')


def template_job() -> dict[str, Any]:
    job = raw_job("web", SCRIPT)
    job["Job"]["TaskGroups"][0]["Tasks"][0]["Templates"] = [{
        "EmbeddedTmpl": 'greeting={{ with nomadVar "nomad/jobs/web" }}{{ .greeting }}{{ end }}',
        "DestPath": "local/greeting.txt", "ChangeMode": "signal", "ChangeSignal": "SIGHUP",
        "Splay": 0, "Perms": "0640"}]
    return job


def task_dir(data_dir: Path, alloc_id: str) -> Path:
    return data_dir / "alloc" / alloc_id / "t" / "local"


async def events_of(client: Any, alloc_id: str) -> list[dict[str, Any]]:
    alloc = (await client.get(f"/v1/allocation/{alloc_id}")).json()
    return alloc["TaskStates"]["t"]["Events"]  # type: ignore[no-any-return]


async def test_variable_change_rerenders_and_signals_the_task(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as agent:
            c = agent.client
            put = await c.put("/v1/var/nomad/jobs/web", json={"Items": {"greeting": "hello"}})
            assert put.status_code == 200
            assert (await c.post("/v1/jobs", json=template_job())).status_code == 200
            alloc = await wait_status(c, "web", "running")
            local = task_dir(tmp_path, alloc["ID"])
            rendered = local / "greeting.txt"
            assert rendered.read_text() == "greeting=hello"
            assert oct(rendered.stat().st_mode & 0o777) == "0o640"

            put = await c.put("/v1/var/nomad/jobs/web", json={"Items": {"greeting": "world"}})
            assert put.status_code == 200
            seen = local / "seen"
            await eventually(lambda: seen.exists() and "hup greeting=world" in seen.read_text())
            assert seen.read_text() == "hup greeting=world\n"  # one signal, after the write
            events = await events_of(c, alloc["ID"])
            signaling = [e for e in events if e["Type"] == "Signaling"]
            assert [(e["DisplayMessage"], e["Details"].get("task_signal")) for e in signaling] == [
                ("Template re-rendered", "hangup")]
            # Still the same run: a signal, not a restart.
            assert (await c.get(f"/v1/allocation/{alloc['ID']}")).json()[
                "TaskStates"]["t"]["Restarts"] == 0


async def test_task_waits_for_a_missing_variable(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as agent:
            c = agent.client
            assert (await c.post("/v1/jobs", json=template_job())).status_code == 200
            while True:
                allocs = (await c.get("/v1/job/web/allocations")).json()
                if allocs and any(e["Type"] == "Template" for e in
                                  await events_of(c, allocs[0]["ID"])):
                    break
                await trio.sleep(0.1)
            alloc_id = allocs[0]["ID"]
            (missing,) = [e for e in await events_of(c, alloc_id) if e["Type"] == "Template"]
            assert missing["DisplayMessage"] == (
                "Missing: nomad.var.block(nomad/jobs/web@default.global)")
            assert allocs[0]["ClientStatus"] == "pending"
            assert not (task_dir(tmp_path, alloc_id) / "greeting.txt").exists()

            await c.put("/v1/var/nomad/jobs/web", json={"Items": {"greeting": "late"}})
            await wait_status(c, "web", "running")
            assert (task_dir(tmp_path, alloc_id) / "greeting.txt").read_text() == (
                "greeting=late")


def doubling(levels: int) -> str:
    """Templates that each call the next twice: 2^levels calls, far over the step budget."""
    defs = "".join(f'{{{{ define "d{i}" }}}}{{{{ template "d{i + 1}" }}}}'
                   f'{{{{ template "d{i + 1}" }}}}{{{{ end }}}}' for i in range(levels))
    return defs + f'{{{{ define "d{levels}" }}}}x{{{{ end }}}}{{{{ template "d0" }}}}'


async def test_a_template_over_its_budget_fails_the_task_while_the_api_answers(
        tmp_path: Path) -> None:
    job = raw_job("web", "sleep 3600")
    job["Job"]["TaskGroups"][0]["Tasks"][0]["Templates"] = [{
        "EmbeddedTmpl": doubling(24), "DestPath": "local/x.conf"}]
    with trio.fail_after(60):
        async with running_agent(tmp_path) as agent:
            c = agent.client
            assert (await c.post("/v1/jobs", json=job)).status_code == 200
            slowest = 0.0
            while True:  # the render runs meanwhile, in a worker thread
                started = trio.current_time()
                allocs = (await c.get("/v1/job/web/allocations")).json()
                slowest = max(slowest, trio.current_time() - started)
                if allocs and allocs[0]["ClientStatus"] == "failed":
                    break
                await trio.sleep(0.02)
            (failed,) = [e for e in await events_of(c, allocs[0]["ID"])
                         if e["Type"] == "Task hook failed"]
            assert failed["DisplayMessage"].startswith(
                "template: Template failed: template: local/x.conf:1:")
            assert "exceeded the render budget of 5000000 steps" in failed["DisplayMessage"]
            assert not (task_dir(tmp_path, allocs[0]["ID"]) / "x.conf").exists()
            # A render on the event loop would hold every request for its whole length.
            assert slowest < 1.0, f"a request took {slowest:.2f} s during the render"


async def test_agent_restart_reattaches_without_acting_then_keeps_watching(
        tmp_path: Path) -> None:
    with trio.fail_after(90):
        async with running_agent(tmp_path, dev_mode=False) as agent:
            c = agent.client
            await c.put("/v1/var/nomad/jobs/web", json={"Items": {"greeting": "hello"}})
            assert (await c.post("/v1/jobs", json=template_job())).status_code == 200
            alloc = await wait_status(c, "web", "running")
            before = await events_of(c, alloc["ID"])
        local = task_dir(tmp_path, alloc["ID"])
        inode_before = (local / "greeting.txt").stat().st_ino
        async with running_agent(tmp_path, dev_mode=False) as agent:
            c = agent.client
            await wait_status(c, "web", "running")
            # Re-attached: the file was already current, so no new start and no signal.
            after = await events_of(c, alloc["ID"])
            assert [e["Type"] for e in after] == [e["Type"] for e in before]
            assert (local / "greeting.txt").stat().st_ino == inode_before  # not rewritten
            await c.put("/v1/var/nomad/jobs/web", json={"Items": {"greeting": "again"}})
            seen = local / "seen"
            await eventually(lambda: seen.exists() and "hup greeting=again" in seen.read_text())
            # The job, not the allocation: a stopped allocation of a service job is replaced.
            await stop_job(c, "web")


async def test_agent_source_reads_a_variable_once_per_change(tmp_path: Path,
                                                             monkeypatch: Any) -> None:
    from yurt.runtime.agent.templatedata import AgentTemplateData
    from yurt.runtime.server.state.objects_sqlite import ObjectStore

    reads: list[str] = []
    original = ObjectStore.variable

    async def counting(self: ObjectStore, namespace: str, path: str) -> Any:
        reads.append(path)
        return await original(self, namespace, path)

    monkeypatch.setattr(ObjectStore, "variable", counting)
    with trio.fail_after(30):
        async with running_agent(tmp_path) as running:
            await running.client.put("/v1/var/app", json={"Items": {"k": "v1"}})
            source = AgentTemplateData(running.agent)
            first = [await source.variable("default", "app") for _ in range(5)]
            assert reads == ["app"]  # one read for five readers at one index
            assert {v.items["k"] for v in first if v is not None and v.items} == {"v1"}
            index = source.index()
            await running.client.put("/v1/var/app", json={"Items": {"k": "v2"}})
            assert await source.wait_changed(index) > index
            second = await source.variable("default", "app")
            assert second is not None
            assert second.items == {"k": "v2"}
            assert reads == ["app", "app"]
