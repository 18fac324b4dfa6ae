"""Fuzzing the allocation file system with hypothesis: any path, over a tree with links to the
outside, to the inside, in loops and to `secrets/`, is either refused with a 4xx or resolved to
a file inside the allocation directory (layer 0, checked through the descriptor itself); and
the five /v1/client/fs endpoints of a real agent, as a process with a real raw_exec
allocation, answer any path and query without a 5xx, a traceback or a second's wait (layer 3),
offsets and limits from -2^64 to 2^64 included (a 400 naming the parameter, or Nomad's answer).
A file on a file system that takes any `off_t` (tmpfs) is read from any offset up to 2^63 - 1
without an error (layer 1: the kernel refuses a read that would end past 2^63 - 1).
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.agent_support import raw_job
from tests.proc_support import spawned_agent
from yurt.runtime.client.allocfs import (
    MAX_POSITION,
    FileChunks,
    FsError,
    list_dir,
    open_confined,
    open_file,
    stat_path,
)

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


#: Offsets and limits at the edges: of int64, of what ext4 seeks to (16 TiB), of the file.
EDGES = [2 ** 63 - 1, 2 ** 63, 2 ** 63 + 1, -(2 ** 63), -(2 ** 63) - 1, -1, 0, 1, 2, 3, 4,
         9223372036854775000, 2 ** 62, 2 ** 44 - 4096, 2 ** 44, 2 ** 44 + 5, 2 ** 64, -(2 ** 64)]
numbers = st.one_of(st.sampled_from(EDGES), st.integers(-(2 ** 64), 2 ** 64))


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(verb=st.sampled_from(["cat", "readat", "stream"]), offset=numbers,
       limit=st.one_of(st.none(), numbers), origin=st.sampled_from(["start", "end"]))
def test_any_offset_or_limit_is_read_or_refused_by_name(
        agent: tuple[httpx2.Client, str], verb: str, offset: int, limit: int | None,
        origin: str) -> None:
    """t/local/f.txt holds `hi\n`: any offset and limit read a part of it, or are a 400 that
    names the parameter, as ParseInt and the seek refuse them (runtime/api/fs.py)."""
    client, alloc_id = agent
    params = {"path": "t/local/f.txt", "offset": str(offset), "follow": "false",
              "origin": origin}
    if limit is not None:
        params["limit"] = str(limit)
    response = client.get(f"/v1/client/fs/{verb}/{alloc_id}", params=params)
    assert response.status_code in (200, 400), (verb, params, response.text[:300])
    int64 = -(2 ** 63) <= offset < 2 ** 63
    if verb == "cat":  # no offset, no limit: the whole file
        assert (response.status_code, response.content) == (200, b"hi\n")
    elif verb == "readat" and limit is not None and not -(2 ** 63) <= limit < 2 ** 63 \
            and int64:
        assert response.status_code == 400
        assert response.text.startswith("error parsing limit: "), response.text
    elif not int64:
        assert response.status_code == 400
        assert response.text.startswith("error parsing offset: "), response.text
    elif verb == "readat":
        if offset < 0:
            assert response.text == f"can't seek to offset {offset}: invalid argument"
        elif response.status_code == 400:  # more than the file system seeks to
            assert offset > 2 ** 40, offset
            assert response.text.startswith(f"offset {offset} is past the largest file")
        else:
            end = None if limit is None or limit <= 0 else offset + limit
            assert response.content == b"hi\n"[offset:end], (offset, limit)
    else:  # stream: from the start (negative: 0) or from the end (3 - offset, at least 0)
        start = max(3 - offset if origin == "end" else offset, 0)
        if response.status_code == 400:
            assert start > 2 ** 40, (offset, origin)
            assert response.text.startswith(f"offset {offset} "), response.text
            assert "is past the largest file the file system allows" in response.text
        else:
            data = b"".join(base64.b64decode(f["Data"]) for f in frames(response.text)
                            if "Data" in f)
            assert data == b"hi\n"[start:], (offset, origin)


def frames(text: str) -> list[dict[str, Any]]:
    decoder, found, at = json.JSONDecoder(), [], 0
    while at < len(text):
        frame, at = decoder.raw_decode(text, at)
        found.append(frame)
    return found


@pytest.fixture
def tmpfs_dir() -> Iterator[Path]:
    """A directory on tmpfs (/dev/shm), whose files may be as large as an `off_t` allows."""
    with tempfile.TemporaryDirectory(dir="/dev/shm") as base:
        assert " /dev/shm tmpfs " in Path("/proc/self/mounts").read_text(), "no tmpfs"
        yield Path(base)


async def test_a_file_system_of_any_size_is_read_up_to_the_largest_position(
        tmpfs_dir: Path) -> None:
    """tmpfs takes any position up to 2^63 - 1 (its `lseek` does not refuse them), but a read
    that would end past it is an EINVAL from the kernel: a read there finds nothing instead."""
    root = tmpfs_dir
    (root / "f").write_bytes(b"0123456789")
    with trio.fail_after(10):
        for offset in (MAX_POSITION, MAX_POSITION - 1, MAX_POSITION - 65536,
                       9223372036854775000, 2 ** 62, 10, 11, 4):
            opened = open_file(root, "f", [], offset)
            chunks = FileChunks(opened, follow=False)
            read = b"".join([c.data async for c in chunks])
            assert read == b"0123456789"[offset:], offset
            await chunks.aclose()
        # From the end: 10 - offset, never past MAX_POSITION.
        with pytest.raises(FsError, match=r"^offset -9223372036854775808 from the end is past"):
            open_file(root, "f", [], -(2 ** 63), "end")
        with pytest.raises(FsError, match=r"^offset -9223372036854775798 from the end is past"):
            open_file(root, "f", [], 10 - (2 ** 63), "end")
        assert open_file(root, "f", [], 10, "end").offset == 0
        assert open_file(root, "f", [], 11, "end").offset == 0
