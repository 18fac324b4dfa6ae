"""Fuzzing the allocation file system with hypothesis: any path, over a tree with links to the
outside, to the inside, in loops and to `secrets/`, is either refused with a 4xx or resolved to
a file inside the allocation directory (layer 0, checked through the descriptor itself); and
the five /v1/client/fs endpoints of a real agent, as a process with a real raw_exec
allocation, answer any path and query without a 5xx, a traceback or a second's wait (layer 3).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.agent_support import raw_job
from tests.proc_support import spawned_agent
from yurt.runtime.client.allocfs import FsError, list_dir, open_confined, open_file, stat_path

NAMES = ["..", ".", "", "t", "local", "secrets", "f.txt", "out", "up", "abs", "in", "loop",
         "T", "nope", "%2e%2e", "\x00", "x" * 300, "é", "pipe", "alloc", "data"]
#: Where the interesting names are: a path starts at one of these, then wanders.
PLACES = ["", "/", "t", "t/local", "/t/local/", "T/local", "t/secrets", "alloc/data",
          "t/local/in", "t/local/out", "t/local/up", "t/local/abs"]
paths = st.one_of(
    st.tuples(st.sampled_from(PLACES), st.lists(st.sampled_from(NAMES), max_size=5)).map(
        lambda p: "/".join([p[0], *p[1]])),
    st.lists(st.sampled_from(NAMES), max_size=8).map("/".join), st.text(max_size=40))


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("fsfuzz").resolve()
    root = base / "alloc-id"
    local = root / "t/local"
    local.mkdir(parents=True)
    (root / "t/secrets").mkdir()
    (root / "t/secrets/f.txt").write_text("s3cret")
    (root / "alloc/data").mkdir(parents=True)
    (local / "f.txt").write_text("inside")
    os.mkfifo(local / "pipe")
    (base / "f.txt").write_text("outside")
    os.symlink("/", local / "out")
    os.symlink("../../..", local / "up")
    os.symlink(base, local / "abs")
    os.symlink("../../alloc", local / "in")
    os.symlink("loop", local / "loop")
    os.symlink("../secrets", local / "secrets")
    os.symlink("t", root / "T")
    return root


@settings(max_examples=400, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=paths)
def test_any_path_is_refused_or_inside(tree: Path, path: str) -> None:
    status, opened = attempt(open_confined, tree, path)
    if opened is not None:
        try:
            where = os.readlink(f"/proc/self/fd/{opened.fd}")
        finally:
            os.close(opened.fd)
        assert where == str(tree) or where.startswith(f"{tree}/"), (path, where)
    else:
        assert status in (400, 403, 404), path
    for read in (stat_path, list_dir):
        status, _ = attempt(read, tree, path)
        assert status in (200, 400, 403, 404), path
    status, file = attempt(open_file, tree, path, ["t"])
    if file is not None:
        try:
            assert os.pread(file.fd, 100, 0) == b"inside", path
        finally:
            os.close(file.fd)
    else:
        assert status in (400, 403, 404), path


def attempt(fn: Any, *args: Any) -> tuple[int, Any]:
    """(200, what `fn` returned), or (the status of its `FsError`, None)."""
    try:
        return 200, fn(*args)
    except FsError as e:
        return e.status, None


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx2.Client, str]]:
    with spawned_agent(tmp_path_factory.mktemp("fsfuzz-agent") / "data") as (_, client):
        script = 'ln -s / "$NOMAD_TASK_DIR/out"; echo hi > "$NOMAD_TASK_DIR/f.txt"; sleep 1000'
        assert client.post("/v1/jobs", json=raw_job("fz", script)).status_code == 200
        deadline = time.monotonic() + 20
        while True:  # until the task has written its file (bounded by the deadline)
            allocs = client.get("/v1/job/fz/allocations").json()
            if allocs and client.get(f"/v1/client/fs/cat/{allocs[0]['ID']}",
                                     params={"path": "t/local/f.txt"}).text == "hi\n":
                break
            assert time.monotonic() < deadline, allocs
            time.sleep(0.05)
        yield client, allocs[0]["ID"]
        # The agent leaves its tasks running when it stops (the next one re-attaches): stop
        # the task first, so the run leaves no process behind.
        assert client.delete("/v1/job/fz").status_code == 200
        deadline = time.monotonic() + 20
        while client.get(f"/v1/allocation/{allocs[0]['ID']}").json()[
                "ClientStatus"] not in ("complete", "failed"):
            assert time.monotonic() < deadline
            time.sleep(0.05)


query_text = st.one_of(
    st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=30), paths,
    st.sampled_from(["-1", "0", "99999999999999999999999", "1e400", "nan", "start", "end",
                     "true", "t/local/f.txt", "t/local/out/etc/passwd", "t/secrets", "/"]))


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(verb=st.sampled_from(["ls", "stat", "cat", "readat", "stream"]),
       params=st.dictionaries(st.sampled_from(["path", "offset", "limit", "origin", "follow"]),
                              query_text, max_size=5))
def test_fs_endpoints_never_answer_5xx(agent: tuple[httpx2.Client, str], verb: str,
                                       params: dict[str, str]) -> None:
    client, alloc_id = agent
    if verb == "stream":
        params["follow"] = "false"  # a followed file never ends by itself
    started = time.monotonic()
    response = client.get(f"/v1/client/fs/{verb}/{alloc_id}", params=params)
    took = time.monotonic() - started
    assert response.status_code < 500, (verb, params, response.text[:300])
    assert took < 1.0, (verb, params, took)
    assert b"root:" not in response.content, (verb, params)
