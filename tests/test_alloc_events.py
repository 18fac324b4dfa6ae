"""Allocation events carry the allocation as Nomad's API answers it: `AllocatedResources`
(with the group's ports in `Shared`), never yurt's stored `AllocatedShared`. Layer 1 for the
encoding, layer 2 over a real socket for the event stream."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import trio

from tests.agent_support import mock_job, running_agent
from yurt.runtime.eventstream import EventBroker, Published, encode_record
from yurt.runtime.structs import Allocation
from yurt.runtime.structs.network import AllocatedSharedResources, PortMapping


async def test_an_allocation_event_encodes_its_allocated_resources() -> None:
    broker = EventBroker()
    sub, stream = broker.subscribe(), broker.subscribe()
    alloc = Allocation(id="a1", name="web.g[0]", job_id="web", task_group="g",
                       allocated_shared=AllocatedSharedResources(ports=[
                           PortMapping(label="http", value=23456, host_ip="10.0.0.1")]))
    broker.allocation_updated(alloc)
    record = await sub.receive()
    (published,) = await stream.receive_encoded()  # the shared bytes a stream sends
    assert isinstance(published, Published)
    assert published.data == encode_record(record)
    (event,) = msgspec.json.decode(published.data)["Events"]
    payload = event["Payload"]["Allocation"]
    assert "AllocatedShared" not in payload
    assert payload["AllocatedResources"]["Shared"]["Ports"] == [
        {"Label": "http", "Value": 23456, "To": 0, "HostIP": "10.0.0.1",
         "IgnoreCollision": False}]
    assert payload["ID"] == "a1"
    # In-process readers (the foreground run) still get the allocation itself.
    assert record.events[0].payload["Allocation"] is alloc


async def test_the_event_stream_answers_allocated_resources(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            doc: dict[str, Any] = mock_job("web")
            doc["Job"]["TaskGroups"][0]["Networks"] = [{"DynamicPorts": [{"Label": "http"}]}]
            assert (await a.client.post("/v1/jobs", json=doc)).status_code == 200
            async with a.client.stream("GET", "/v1/event/stream",
                                       params={"index": "1", "topic": "Allocation"}) as r:
                async for line in r.aiter_lines():
                    if line == "{}":
                        continue
                    (event, *_) = msgspec.json.decode(line)["Events"]
                    alloc = event["Payload"]["Allocation"]
                    break
            assert "AllocatedShared" not in alloc
            (port,) = alloc["AllocatedResources"]["Shared"]["Ports"]
            assert port["Label"] == "http"
            assert 20000 <= port["Value"] <= 32000
            assert alloc["AllocatedResources"]["Tasks"]["t"]["Memory"]["MemoryMB"] == 10
