"""scripts/bench_api and scripts/python_nomad_suite: the parts that decide their numbers (layer 0).

bench_api's load generator parses responses itself (no HTTP library), so it must find the end of
every response however `recv` cuts the bytes, or requests/s and latencies are wrong; and it must
notice the agent's `Connection: close`. python_nomad_suite's verdict comes from pytest's junit
file and the recorded exchanges: a `flaky` rerun leaves empty testcases before the real one,
which must not count as passes, and a failure is filed under the first endpoint that answered
badly, with IDs folded so that one endpoint is one group. ACL tests count (the agent runs with
ACLs on, as python-nomad's CI runs Nomad) and are also shown apart; Sentinel, Quotas and
enterprise tests are shown and left out of the verdict.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

from bench_api import Exchange
from python_nomad_suite import (
    by_category,
    category,
    counted,
    endpoint,
    failure_list,
    results,
    summary_table,
)

BODY = b'[{"ID":"a"}]' * 50
RESPONSE = (b"HTTP/1.1 200 \r\ncontent-length: " + str(len(BODY)).encode()
            + b"\r\ncontent-type: application/json\r\nx-nomad-index: 42\r\n\r\n" + BODY)


@pytest.fixture
def listener() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.mark.parametrize("piece", [1, 7, 64, len(RESPONSE)])
def test_a_response_is_complete_exactly_at_its_last_byte(listener: int, piece: int) -> None:
    ex = Exchange(listener, b"")
    try:
        for round_ in range(2):  # the same connection, a second response
            ex.buf.clear()
            ex.need = -1
            done = [ex.feed(RESPONSE[i:i + piece]) for i in range(0, len(RESPONSE), piece)]
            assert done[-1], round_
            assert not any(done[:-1]), round_
            assert ex.status == b"200"
            assert ex.header(b"x-nomad-index") == b"42"
            assert not ex.closing()
    finally:
        ex.sock.close()


def test_connection_close_and_missing_length_are_seen(listener: int) -> None:
    ex = Exchange(listener, b"")
    try:
        assert ex.feed(b"HTTP/1.1 404 \r\nconnection: close\r\ncontent-length: 3\r\n\r\nno!")
        assert ex.status == b"404"
        assert ex.closing()
        ex.buf.clear()
        ex.need = -1
        with pytest.raises(RuntimeError, match="Content-Length"):
            ex.feed(b"HTTP/1.1 200 \r\ntransfer-encoding: chunked\r\n\r\n")
    finally:
        ex.sock.close()


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.test_event" name="test_stream" file="tests/test_event.py" time="0.001"/>
<testcase classname="tests.test_event" name="test_stream" file="tests/test_event.py" time="5.0">
  <failure message="_queue.Empty">trace</failure></testcase>
<testcase classname="tests.test_job" name="test_retry" file="tests/test_job.py" time="0.001"/>
<testcase classname="tests.test_job" name="test_retry" file="tests/test_job.py" time="1"/>
<testcase classname="tests.test_acl" name="test_token" file="tests/test_acl.py" time="1">
  <failure message="404">trace</failure></testcase>
<testcase classname="tests.test_node" name="test_old" file="tests/test_node.py" time="0">
  <skipped message="Not supported in version"/></testcase>
<testcase classname="tests.test_acl" name="test_bootstrap" file="tests/test_acl.py" time="1"/>
<testcase classname="tests.test_sentinel" name="test_policy" file="tests/test_sentinel.py"
  time="1"><failure message="404">trace</failure></testcase>
</testsuite></testsuites>"""


def test_flaky_reruns_do_not_count_and_categories_are_kept(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    listed = results(junit)
    assert len(listed) == 6  # one row per test, not per attempt
    rows = {r["test"]: r for r in listed}
    assert {t: r["outcome"] for t, r in rows.items()} == {
        "test_event.py::test_stream": "failed", "test_job.py::test_retry": "passed",
        "test_acl.py::test_token": "failed", "test_node.py::test_old": "skipped",
        "test_acl.py::test_bootstrap": "passed", "test_sentinel.py::test_policy": "failed"}
    assert rows["test_acl.py::test_token"]["category"] == "ACL"
    assert rows["test_event.py::test_stream"]["category"] == ""
    assert category("test_base.py::test_base_get_connnection_not_authorized") == "ACL"
    assert category("test_sentinel.py::test_policy") == "Sentinel"
    assert category("test_namespaces.py::test_quota_create") == "Quotas"


def test_acl_tests_count_and_sentinel_quotas_enterprise_do_not(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    rows = results(junit)
    verdict = {r["test"] for r in rows if counted(r)}
    assert "test_acl.py::test_token" in verdict
    assert "test_acl.py::test_bootstrap" in verdict
    assert "test_sentinel.py::test_policy" not in verdict
    assert not counted({"category": "Quotas"})
    assert not counted({"category": "enterprise"})
    assert by_category(rows) == {
        "general": {"passed": 1, "failed": 1, "skipped": 1},
        "ACL": {"passed": 1, "failed": 1, "skipped": 0},
        "Sentinel": {"passed": 0, "failed": 1, "skipped": 0}}
    table = summary_table(rows, {"test_acl.py::test_token", "test_job.py::test_retry"}).splitlines()
    # The verdict: the general tests and the ACL tests, not Sentinel's failure.
    assert "| passed | 2 | 1 |" in table
    assert "| failed | 2 | 1 |" in table
    assert "| skipped | 1 | 0 |" in table
    assert "| ACL | yes | 1 | 1 | 0 |" in table
    assert "| Sentinel | no | 0 | 1 | 0 |" in table


def test_failures_are_filed_under_the_first_bad_endpoint() -> None:
    alloc = "6ade1326-c521-494c-bbf1-aaa9ae986b55"
    assert endpoint(f"http://127.0.0.1:1/v1/client/fs/ls/{alloc}?path=/") == "/v1/client/fs/ls/:id"
    rows = [{"test": "a.py::t1", "outcome": "failed", "message": "Not Found", "category": ""},
            {"test": "a.py::t2", "outcome": "failed", "message": "KeyError", "category": ""},
            {"test": "a.py::t3", "outcome": "failed", "message": "TypeError", "category": ""},
            {"test": "a.py::t4", "outcome": "failed", "message": "403", "category": "Sentinel"},
            {"test": "test_acl.py::t6", "outcome": "failed", "message": "403", "category": "ACL"},
            {"test": "a.py::t5", "outcome": "passed", "message": "", "category": ""},
            {"test": "test_job.py::test_delete_job_with_purge", "outcome": "failed",
             "message": "404", "category": ""}]
    seen = {
        "a.py::t1": [{"method": "GET", "url": "http://h/v1/jobs", "status": 200, "mocked": False,
                      "body": "[]"},
                     {"method": "GET", "url": f"http://h/v1/evaluation/{alloc}", "status": 404,
                      "mocked": False, "body": "Not Found"}],
        "a.py::t2": [{"method": "GET", "url": "http://h/v1/nodes", "status": 200,
                      "mocked": False, "body": "[{}]"}],
        "a.py::t3": [{"method": "GET", "url": "http://h/v1/jobs", "status": 500, "mocked": True,
                      "body": ""}],
        "test_acl.py::t6": [{"method": "PUT", "url": "http://h/v1/acl/token", "status": 403,
                             "mocked": False, "body": "Permission denied"}],
    }
    text = failure_list(rows, seen)
    assert "### GET /v1/evaluation/:id (1)" in text
    assert "### GET /v1/nodes (answered, shape or behaviour wrong) (1)" in text
    assert "### (no request reached the agent: fails against any agent) (1)" in text
    assert "### python-nomad's own defects (fail against Nomad too) (1)" in text
    assert "a.py::t4" not in text  # an excluded category is not in the list
    assert "### PUT /v1/acl/token (1)" in text  # an ACL test's failure is
    assert "a.py::t5" not in text
