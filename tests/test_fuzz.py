"""Fuzzing job files and the HTTP API with hypothesis: no traceback, no 5xx, no request over a
second, no agent growth past 50 MB.

Random text alone rarely gets past a parser's first character, so the strategies aim at the
classes of bad input that once hurt: a valid job with one value swapped for something hostile
(deep nesting, huge numbers, NaN, wrong types, lone surrogates, tens of thousands of keys, long
names), HCL with hostile expressions or nesting, and the same bodies sent to every endpoint of a
real agent. Layer 0 for the job files (plain functions, hypothesis' own deadline); layer 3 for
the API (the agent as a process, the real clock, each request timed).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.proc_support import spawned_agent
from yurt.runtime.errors import JobSpecError
from yurt.runtime.jobspec import parse_job

#: Stands for a raw JSON fragment in a document; replaced after `json.dumps`.
RAW = "\x00raw\x00"

BASE_JOB: dict[str, Any] = {"Job": {
    "ID": "fz", "Type": "service", "Priority": 50, "Meta": {"a": "b"},
    "TaskGroups": [{
        "Name": "g", "Count": 1, "RestartPolicy": {"Attempts": 1, "Mode": "fail"},
        "EphemeralDisk": {"SizeMB": 300},
        "Tasks": [{"Name": "t", "Driver": "mock_driver", "KillSignal": "SIGTERM",
                   "KillTimeout": 1_000_000_000, "Env": {"A": "1"},
                   "Config": {"run_for": "10m"},
                   "Resources": {"CPU": 100, "MemoryMB": 64},
                   "LogConfig": {"MaxFiles": 2, "MaxFileSizeMB": 1}}]}]}}


def deep_text(depth: int, opener: str) -> str:
    closer = {"[": "]", "{": '"k": 1}', "(": "1)"}[opener]
    if opener == "{":
        return '{"k": ' * depth + "1" + "}" * depth
    return opener * depth + ("1" if opener == "(" else "") + closer[-1] * depth


def wide_object(keys: int) -> str:
    return "{" + ",".join(f'"k{i}": {i}' for i in range(keys)) + "}"


odd_text = st.text(alphabet=st.one_of(
    st.characters(),  # any code point hypothesis likes, control characters included
    st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),  # lone surrogates
    st.sampled_from(["/", "\0", ".", "$", "%", "{", "}", "\\", "\u202e", "\ufeff"])),
    max_size=40)

#: Raw JSON fragments: the values `json.dumps` would never write.
raw_fragments = st.one_of(
    st.builds(deep_text, st.integers(60, 3000), st.sampled_from(["[", "{"])),
    st.builds(wide_object, st.sampled_from([2_000, 30_000])),
    st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "-0", "1" + "0" * 5000,
                     '"\\ud800"', '"\\udfff\\ud800"', '"\\u0000"', "1.0", "1e2"]),
)

hostile_values = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
    st.sampled_from([2**63, -(2**63) - 1, 10**30, 1001, -1, "", "x" * 300, "a/b", "..",
                     "SIGFOO", "%{ for x in y }", "${", "-5s", "1h", "soon"]),
    odd_text,
    st.lists(st.integers(), max_size=3),
    st.dictionaries(odd_text, st.integers(), max_size=3),
    raw_fragments.map(lambda raw: (RAW, raw)),
)


@st.composite
def mutated_jobs(draw: st.DrawFn) -> str:
    """BASE_JOB as JSON text with one value replaced (or one key added) somewhere in it."""
    doc = json.loads(json.dumps(BASE_JOB))
    node: Any = doc
    while True:
        if isinstance(node, dict):
            key = draw(st.sampled_from([*sorted(node), "Unknown"]))
        else:
            key = draw(st.integers(0, len(node) - 1))
        child = node[key] if (isinstance(node, list) or key in node) else None
        if isinstance(child, dict | list) and child and draw(st.booleans()):
            node = child
            continue
        value = draw(hostile_values)
        raw = None
        if isinstance(value, tuple):
            value, raw = value
        node[key] = value
        text = json.dumps(doc)
        return text.replace(json.dumps(RAW), raw) if raw is not None else text


HCL_HOLES = st.one_of(
    st.builds(lambda n: "[" * n + "]" * n, st.integers(50, 1500)),
    st.builds(lambda n: "(" * n + "1" + ")" * n, st.integers(50, 1500)),
    st.builds(lambda n: "{ a = " * n + "1" + " }" * n, st.integers(50, 800)),
    st.sampled_from(['"%{ for x in y }"', '"%{ if }"', '"${"', '"${a.b[}"', "1e999", "0x",
                     "<<EOF\nx\n", '"\\ud800"', "-", "[1, 2", '"' + "x" * 300 + '"',
                     "10000000000000000000000000000000", "NaN", "null", "true"]),
    odd_text.map(json.dumps),
    odd_text,
)


@st.composite
def hostile_hcl(draw: st.DrawFn) -> str:
    hole = draw(HCL_HOLES)
    where = draw(st.sampled_from(["count", "meta", "kill_timeout", "task", "nest", "label"]))
    task = 'task "t" {\n driver = "mock_driver"\n config { run_for = "1s" }\n'
    if where == "count":
        return f'job "j" {{\n group "g" {{\n count = {hole}\n {task} }}\n }}\n}}\n'
    if where == "meta":
        return f'job "j" {{\n meta = {{ a = {hole} }}\n group "g" {{\n {task} }}\n }}\n}}\n'
    if where == "kill_timeout":
        return f'job "j" {{\n group "g" {{\n {task} kill_timeout = {hole}\n }}\n }}\n}}\n'
    if where == "label":
        return f'job {hole} {{\n group "g" {{\n {task} }}\n }}\n}}\n'
    if where == "nest":
        depth = draw(st.integers(50, 2500))
        return 'job "j" {\n' + 'group "g" {\n' * depth + "}\n" * (depth + 1)
    return f'job "j" {{\n group "g" {{\n task {hole} {{\n driver = "mock_driver"\n }}\n }}\n}}\n'


def parse_or_refuse(text: str, filename: str) -> None:
    """A job is parsed, or refused with a JobSpecError that renders; nothing else escapes."""
    try:
        parse_job(text, filename=filename)
    except JobSpecError as e:
        problems, rendered = e.problems, e.render()
    else:
        return
    assert problems
    rendered.encode("utf-8", "backslashreplace")


FAST = settings(max_examples=150, deadline=1000, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.large_base_example])


@FAST
@given(mutated_jobs())
def test_fuzz_json_jobs(text: str) -> None:
    parse_or_refuse(text, "job.json")


@FAST
@given(hostile_hcl())
def test_fuzz_hcl_jobs(text: str) -> None:
    parse_or_refuse(text, "job.nomad.hcl")


@FAST
@given(st.one_of(odd_text, st.text(max_size=300), raw_fragments))
def test_fuzz_any_text_as_either_format(text: str) -> None:
    parse_or_refuse(text, "job.json")
    parse_or_refuse(text, "job.nomad.hcl")


# --------------------------------------------------------------------------- the HTTP API


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")  # pragma: no cover


class FuzzAgent:
    def __init__(self, pid: int, client: httpx2.Client, alloc_id: str) -> None:
        self.pid = pid
        self.client = client
        self.alloc_id = alloc_id
        self.baseline = rss_bytes(pid)


@pytest.fixture(scope="module")
def fuzz_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzAgent]:
    with spawned_agent(tmp_path_factory.mktemp("fuzz") / "data") as (agent, client):
        assert client.post("/v1/jobs", json=BASE_JOB).status_code == 200
        deadline = time.monotonic() + 20
        while True:  # until the job's allocation runs (bounded by the deadline)
            allocs = client.get("/v1/job/fz/allocations").json()
            if allocs and allocs[0]["ClientStatus"] == "running":
                break
            assert time.monotonic() < deadline, allocs
            time.sleep(0.05)
        yield FuzzAgent(agent.pid, client, allocs[0]["ID"])


ENDPOINTS = ["/v1/jobs", "/v1/job/fz", "/v1/jobs/parse", "/v1/client/allocation/{a}/signal",
             "/v1/client/allocation/{a}/restart", "/v1/allocation/{a}/stop"]


@st.composite
def api_requests(draw: st.DrawFn) -> tuple[str, bytes]:
    path = draw(st.sampled_from(ENDPOINTS))
    kind = draw(st.sampled_from(["job", "hcl", "field", "raw", "bytes"]))
    if kind == "job":
        body = draw(mutated_jobs())
    elif kind == "hcl":
        body = json.dumps({"JobHCL": draw(hostile_hcl())})
    elif kind == "field":
        name = draw(st.sampled_from(["Signal", "Task", "TaskName", "AllTasks", "Job",
                                     "JobHCL"]))
        value = draw(hostile_values)
        if isinstance(value, tuple):
            body = json.dumps({name: RAW}).replace(json.dumps(RAW), value[1])
        else:
            body = json.dumps({name: value})
    elif kind == "raw":
        body = draw(raw_fragments)
    else:
        return path, draw(st.binary(max_size=200))
    return path, body.encode("utf-8", "surrogatepass")


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture,
                                 HealthCheck.large_base_example])
@given(request=api_requests())
def test_fuzz_http_api(fuzz_agent: FuzzAgent, request: tuple[str, bytes]) -> None:
    path, body = request
    path = path.format(a=fuzz_agent.alloc_id)
    started = time.monotonic()
    response = fuzz_agent.client.post(path, content=body)
    took = time.monotonic() - started
    assert response.status_code < 500, (path, body[:200], response.text[:500])
    assert took < 1.0, (path, body[:200], took)
    growth = rss_bytes(fuzz_agent.pid) - fuzz_agent.baseline
    assert growth < 50 << 20, (path, body[:200], growth)


query_text = st.one_of(
    st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=30),
    st.sampled_from(["-1", "0", "99999999999999999999999", "1e400", "nan", "start", "end",
                     "stdout", "stderr", "true", "t", "..", "../../etc/passwd", "%00"]))


@st.composite
def api_queries(draw: st.DrawFn) -> tuple[str, dict[str, str]]:
    segment = draw(st.one_of(st.just("{a}"), query_text.filter(bool).map(
        lambda s: quote(s, safe=""))))
    path = draw(st.sampled_from([
        "/v1/jobs", "/v1/job/{s}", "/v1/job/{s}/allocations", "/v1/allocations",
        "/v1/allocation/{s}", "/v1/client/allocation/{s}/stats", "/v1/client/fs/logs/{s}",
        "/v1/node/{s}", "/v1/nodes"]))
    names = st.sampled_from(["prefix", "task", "type", "offset", "origin", "plain", "follow",
                             "purge", "topic"])
    params = draw(st.dictionaries(names, query_text, max_size=4))
    if params.get("follow") is not None:
        params["follow"] = "false"  # a followed log never ends by itself
    return path.replace("{s}", segment), params


@settings(max_examples=100, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(query=api_queries())
def test_fuzz_http_api_queries(fuzz_agent: FuzzAgent, query: tuple[str, dict[str, str]]) -> None:
    path, params = query
    path = path.replace("{a}", fuzz_agent.alloc_id)
    started = time.monotonic()
    response = fuzz_agent.client.get(path, params=params)
    took = time.monotonic() - started
    assert response.status_code < 500, (path, params, response.text[:500])
    assert took < 1.0, (path, params, took)
    assert rss_bytes(fuzz_agent.pid) - fuzz_agent.baseline < 50 << 20, (path, params)
