"""The pure parts of the daily verbs (layer 0) and the log fan-out behind `yurt monitor`
(layer 1: Trio, no I/O): Nomad's shapes, and a slow follower losing lines, never the agent
waiting."""

from __future__ import annotations

import base64
import json
import logging

import pytest
import trio

from yurt.runtime.api.evaluations import delete_safe
from yurt.runtime.cli.eval_delete import deleted_text
from yurt.runtime.cli.monitor import decode_frames
from yurt.runtime.cli.server import is_leader, members_rows
from yurt.runtime.cli.service import list_table, resolve_service
from yurt.runtime.lib.logformat import HumanFormatter
from yurt.runtime.lib.logmonitor import LogFanout
from yurt.runtime.structs import Allocation, Job

LISTING = [{"Namespace": "prod", "Services": [{"ServiceName": "web", "Tags": ["b", "a"]},
                                               {"ServiceName": "web-api", "Tags": []}]},
           {"Namespace": "default", "Services": [{"ServiceName": "db", "Tags": ["x"]}]}]


def test_service_list_is_nomads_table_with_namespaces_only_for_star() -> None:
    assert list_table(LISTING, "").splitlines() == [
        "Service Name  Tags", "db            [x]", "web           [a,b]", "web-api       []"]
    assert list_table(LISTING, "*").splitlines()[0].split() == [
        "Service", "Name", "Namespace", "Tags"]


def test_a_service_prefix_resolves_as_nomads_get_service_by_prefix() -> None:
    assert resolve_service(LISTING, "d") == ("default", "db", [])
    assert resolve_service(LISTING, "web") == ("prod", "web", [])  # exact among several
    ns, name, possible = resolve_service(LISTING, "we")
    assert (ns, name) == ("", "")
    assert len(possible[0]["Services"]) == 2
    with pytest.raises(LookupError, match='No service registrations with prefix "z" found'):
        resolve_service(LISTING, "z")


def test_server_members_leader_is_the_regions_leader_address() -> None:
    member = {"Name": "a.global", "Addr": "10.0.0.1", "Port": 4648, "Status": "alive",
              "ProtocolCur": 2, "Tags": {"port": "4647", "region": "global", "dc": "dc1",
                                         "build": "1", "raft_vsn": "3"}}
    assert is_leader(member, {"global": "10.0.0.1:4647"})
    assert not is_leader(member, {"global": "10.0.0.2:4647"})
    header, row = members_rows([member], {}, verbose=False)
    assert header == ["Name", "Address", "Port", "Status", "Leader", "Raft Version", "Build",
                      "Datacenter", "Region"]
    assert row == ["a.global", "10.0.0.1", "4648", "alive", "false", "3", "1", "dc1",
                   "global"]


def test_eval_delete_says_nomads_counts() -> None:
    assert deleted_text(0) == "No evaluations were deleted"
    assert deleted_text(1) == "Successfully deleted 1 evaluation"
    assert deleted_text(3) == "Successfully deleted 3 evaluations"


def test_an_eval_is_unsafe_to_delete_while_its_allocation_may_run() -> None:
    job = Job(id="web", type="service")
    running = Allocation(id="a", job_id="web", task_group="g", client_status="running")
    done = Allocation(id="b", job_id="web", task_group="g", client_status="complete")
    assert not delete_safe([running], job)
    assert delete_safe([done], job)
    assert delete_safe([running], None)  # the job is gone: every allocation is over
    job.stop = True
    assert delete_safe([running], job)


def test_frames_are_decoded_across_any_split() -> None:
    frames = (b'{"Data":"' + base64.b64encode(b"one\n") + b'"}{}'
              + b'{"Data":"' + base64.b64encode(b"two\n") + b'"}')
    for cut in range(len(frames)):
        assert b"".join(decode_frames(iter([frames[:cut], frames[cut:]]))) == b"one\ntwo\n"
    with pytest.raises(ValueError, match="ended inside a frame"):
        list(decode_frames(iter([b'{"Data": "x'])))


def _record(level: int, message: str) -> logging.LogRecord:
    return logging.LogRecord("yurt.test", level, __file__, 1, message, None, None)


async def test_a_slow_follower_loses_the_oldest_lines_and_is_told_how_many() -> None:
    logger = logging.getLogger("yurt.fanout-test")
    logger.setLevel(logging.INFO)
    fanout = LogFanout("yurt.fanout-test")
    with fanout.subscribe(logging.DEBUG, HumanFormatter(), capacity=2) as sub:
        assert logger.level == logging.DEBUG  # lowered for the follower
        for i in range(5):
            logger.debug("line %d", i)  # never blocks, whoever reads
        with trio.fail_after(5):
            lines, lost = await sub.take()
        assert lost == 3
        assert [line.rsplit(": ", 1)[1] for line in lines] == ["line 3", "line 4"]
        logger.info("again")
        with trio.fail_after(5):
            lines, lost = await sub.take()
        assert (len(lines), lost) == (1, 0)
    assert logger.level == logging.INFO
    assert fanout not in logger.handlers


async def test_a_follower_takes_only_its_level_and_the_json_format_is_hclogs() -> None:
    from yurt.runtime.lib.logformat import JsonFormatter

    fanout = LogFanout("yurt.fanout-test2")
    with fanout.subscribe(logging.WARNING, JsonFormatter()) as sub:
        fanout.handle(_record(logging.INFO, "quiet"))
        fanout.handle(_record(logging.WARNING, "loud"))
        with trio.fail_after(5):
            lines, _ = await sub.take()
    assert [json.loads(line)["@message"] for line in lines] == ["loud"]
    assert json.loads(lines[0])["@level"] == "warn"


def test_location_is_hclogs_caller() -> None:
    from yurt.runtime.lib.logformat import JsonFormatter

    record = logging.LogRecord("yurt.alloc", logging.INFO, "/x/yurt/runtime/agent/agent.py",
                               12, "started", None, None)
    assert " [INFO]  runtime/agent/agent.py:12: alloc: started" in HumanFormatter(
        include_location=True).format(record)
    assert "agent.py" not in HumanFormatter().format(record)
    assert json.loads(JsonFormatter(include_location=True).format(record))[
        "@caller"] == "runtime/agent/agent.py:12"
