"""Preemption and sticky disks end to end with the agent (layer 2: real processes, socket)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from tests.agent_support import raw_job, running_agent, wait_status
from tests.runtime_support import eventually

pytestmark = pytest.mark.slow


def with_resources(body: dict[str, Any], *, priority: int, memory: int) -> dict[str, Any]:
    body["Job"]["Priority"] = priority
    body["Job"]["TaskGroups"][0]["Tasks"][0]["Resources"] = {"CPU": 100, "MemoryMB": memory}
    return body


def events_of(alloc: dict[str, Any]) -> list[dict[str, Any]]:
    return alloc["TaskStates"]["t"]["Events"]  # type: ignore[no-any-return]


async def test_high_priority_job_preempts_and_starts_after_the_evicted_tasks_died(
        tmp_path: Path) -> None:
    slow_to_die = "trap 'sleep 0.5; exit 0' INT; while :; do sleep 0.05; done"
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            total = a.agent.node.node_resources.memory.memory_mb
            low = with_resources(raw_job("low", slow_to_die), priority=20, memory=total - 300)
            assert (await c.post("/v1/jobs", json=low)).json()["Warnings"] == ""
            low_alloc = await wait_status(c, "low", "running")
            high = with_resources(raw_job("high", "sleep 1000"), priority=80, memory=500)
            assert (await c.post("/v1/jobs", json=high)).json()["Warnings"] == ""
            high_alloc = await wait_status(c, "high", "running")
            full_high = (await c.get(f"/v1/allocation/{high_alloc['ID']}")).json()
            assert full_high["PreemptedAllocations"] == [low_alloc["ID"]]
            evicted = (await c.get(f"/v1/allocation/{low_alloc['ID']}")).json()
            assert evicted["DesiredStatus"] == "evict"
            assert evicted["PreemptedByAllocation"] == high_alloc["ID"]
            assert evicted["ClientDescription"].startswith("Preempted by allocation")
            died = next(e["Time"] for e in events_of(evicted) if e["Type"] == "Terminated")
            started = next(e["Time"] for e in events_of(full_high) if e["Type"] == "Started")
            assert started > died
            killing = next(e for e in events_of(evicted) if e["Type"] == "Killing")
            assert killing["DisplayMessage"].startswith("Preempted by allocation")


async def test_sticky_disk_carries_data_and_local_across_a_job_update(tmp_path: Path) -> None:
    script = ("[ -f $NOMAD_ALLOC_DIR/data/kept ] || echo from-$VERSION > "
              "$NOMAD_ALLOC_DIR/data/kept; [ -f $NOMAD_TASK_DIR/kept ] || "
              "echo local-$VERSION > $NOMAD_TASK_DIR/kept; sleep 1000")

    def version(v: str) -> dict[str, Any]:
        body = raw_job("sticky", script)
        group = body["Job"]["TaskGroups"][0]
        group["EphemeralDisk"] = {"Sticky": True, "SizeMB": 300}
        group["Tasks"][0]["Env"] = {"VERSION": v}
        return body

    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            await c.post("/v1/jobs", json=version("v1"))
            first = await wait_status(c, "sticky", "running")
            kept = tmp_path / "alloc" / first["ID"] / "alloc" / "data" / "kept"
            await eventually(lambda: kept.exists() and bool(kept.read_text()))
            await c.post("/v1/jobs", json=version("v2"))
            while True:
                allocs = (await c.get("/v1/job/sticky/allocations")).json()
                current = [x for x in allocs if x["DesiredStatus"] == "run"]
                if current and current[0]["ClientStatus"] == "running":
                    break
                await trio.sleep(0.05)
            (second,) = current
            assert second["PreviousAllocation"] == first["ID"]
            new_dir = tmp_path / "alloc" / second["ID"]
            assert (new_dir / "alloc" / "data" / "kept").read_text() == "from-v1\n"
            assert (new_dir / "t" / "local" / "kept").read_text() == "local-v1\n"
