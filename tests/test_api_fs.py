"""/v1/client/fs/{ls,stat,cat,readat,stream} over a real socket with a real raw_exec
allocation (layer 2): Nomad's shapes and statuses, and the confinement to the allocation
directory — `..`, absolute paths, encoded dots and links placed by a task (to `/`, as a
directory component, swapped in between requests or during a stream) never return a byte from
outside it."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx2
import nomad
import pytest
import trio

from tests.agent_support import Running, raw_job, running_agent, wait_status

pytestmark = pytest.mark.slow

#: The task writes its own file, then stays up.
SCRIPT = 'printf "hello from the task\\n" > "$NOMAD_TASK_DIR/hello.txt"; sleep 1000'
OUTSIDE = "outside-secret-content"
VERBS = ("ls", "stat", "cat", "readat", "stream")


@asynccontextmanager
async def fs_alloc(tmp_path: Path) -> AsyncIterator[tuple[Running, str, Path]]:
    """A running agent, its running allocation's ID and directory (the task's file there)."""
    async with running_agent(tmp_path / "data") as a:
        await a.client.post("/v1/jobs", json=raw_job("fs", SCRIPT))
        alloc_id = (await wait_status(a.client, "fs", "running"))["ID"]
        runner = a.agent.client.runners[alloc_id]
        assert runner.alloc_dir is not None
        root = runner.alloc_dir.path
        while True:  # until the task has written its file
            cat = await get(a.client, "cat", alloc_id, "t/local/hello.txt")
            if cat.content == b"hello from the task\n":
                break
            await trio.sleep(0.02)
        yield a, alloc_id, root


def frames_of(text: str) -> list[dict[str, Any]]:
    """Nomad's frames are JSON objects back to back."""
    decoder, frames, at = json.JSONDecoder(), [], 0
    while at < len(text):
        frame, at = decoder.raw_decode(text, at)
        frames.append(frame)
    return frames


def data_of(frames: list[dict[str, Any]]) -> bytes:
    return b"".join(base64.b64decode(f["Data"]) for f in frames if "Data" in f)


async def get(c: httpx2.AsyncClient, verb: str, alloc_id: str, path: str | None,
              **params: str) -> httpx2.Response:
    query = dict(params)
    if path is not None:
        query["path"] = path
    if verb == "readat":
        query.setdefault("offset", "0")
    if verb == "stream":
        query.setdefault("follow", "false")
    return await c.get(f"/v1/client/fs/{verb}/{alloc_id}", params=query)


async def test_ls_stat_cat_readat_shapes_and_errors(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with fs_alloc(tmp_path) as (a, alloc_id, root):
            c = a.client
            top = (await get(c, "ls", alloc_id, None)).json()
            assert [e["Name"] for e in top] == ["alloc", "t"]
            assert (top[0]["IsDir"], top[0]["FileMode"]) == (True, "drwxr-xr-x")
            assert set(top[0]) == {"Name", "IsDir", "Size", "FileMode", "ModTime",
                                   "ContentType"}
            task = {e["Name"]: e for e in (await get(c, "ls", alloc_id, "/t")).json()}
            assert task["secrets"]["FileMode"] == "drwx------"
            assert task["tmp"]["FileMode"] == "drwx------"  # the task's own, as `secrets`
            local = (await get(c, "ls", alloc_id, "t/local/")).json()
            assert [(e["Name"], e["Size"], e["IsDir"]) for e in local] == [
                ("hello.txt", 20, False)]

            info = (await get(c, "stat", alloc_id, "t/local/hello.txt")).json()
            assert (info["Name"], info["Size"], info["FileMode"], info["ContentType"]) == (
                "hello.txt", 20, "-rw-r--r--", "text/plain; charset=utf-8")
            modified = datetime.fromisoformat(info["ModTime"])
            assert abs((datetime.now(UTC) - modified).total_seconds()) < 60
            assert (await get(c, "stat", alloc_id, "/")).json()["Name"] == alloc_id

            cat = await get(c, "cat", alloc_id, "t/local/hello.txt")
            assert (cat.status_code, cat.content) == (200, b"hello from the task\n")
            assert_served_as_data(cat, "hello.txt")
            part = await get(c, "readat", alloc_id, "t/local/hello.txt", offset="6", limit="4")
            assert part.content == b"from"
            rest = await get(c, "readat", alloc_id, "t/local/hello.txt", offset="11")
            assert rest.content == b"the task\n"
            past = await get(c, "readat", alloc_id, "t/local/hello.txt", offset="999")
            assert (past.status_code, past.content) == (200, b"")

            # A file larger than any one read, written by the test as a task would write it.
            big = os.urandom(3 * 64 * 1024 + 123)
            (root / "alloc/data/big.bin").write_bytes(big)
            cat_big = await get(c, "cat", alloc_id, "alloc/data/big.bin")
            assert cat_big.content == big
            assert_served_as_data(cat_big, "big.bin")
            window = await get(c, "readat", alloc_id, "alloc/data/big.bin",
                               offset=str(64 * 1024 - 5), limit=str(64 * 1024 + 10))
            assert window.content == big[64 * 1024 - 5:2 * 64 * 1024 + 5]
            (root / "alloc/data/x.json").write_text("{}")
            assert (await get(c, "stat", alloc_id, "alloc/data/x.json")).json()[
                "ContentType"] == "application/json"

            missing = await get(c, "stat", alloc_id, "t/local/nope")
            assert missing.status_code == 404
            assert missing.text == "stat /t/local/nope: no such file or directory"
            for verb in VERBS:
                # Nomad: 404 from ls and stat, 400 from its one streaming call for the rest.
                missing_status = 404 if verb in ("ls", "stat") else 400
                missing = await get(c, verb, alloc_id, "nope/x")
                assert (missing.status_code, missing.text) == (
                    missing_status, "stat /nope/x: no such file or directory"), verb
                unknown = await get(c, verb, "ffffffff-0000", "t/local/hello.txt")
                assert unknown.status_code == 404, verb
                wrong = await c.post(f"/v1/client/fs/{verb}/{alloc_id}")
                assert wrong.status_code == 405, verb
            for verb in VERBS[1:]:
                no_path = await get(c, verb, alloc_id, None)
                assert (no_path.status_code, no_path.text) == (400, "must provide a file name")
            for verb in ("cat", "readat", "stream"):
                directory = await get(c, verb, alloc_id, "t/local")
                assert (directory.status_code, directory.text) == (
                    400, 'file "t/local" is a directory'), verb
            assert (await get(c, "ls", alloc_id, "t/local/hello.txt")).status_code == 400
            for offset in ("", "x", "1.5", "99999999999999999999", "-1"):
                bad = await get(c, "readat", alloc_id, "t/local/hello.txt", offset=offset)
                assert bad.status_code == 400, offset
            assert (await get(c, "readat", alloc_id, "t/local/hello.txt", offset="0",
                              limit="z")).status_code == 400
            assert (await get(c, "stream", alloc_id, "t/local/hello.txt",
                              origin="middle")).status_code == 400
            assert (await get(c, "stream", alloc_id, "t/local/hello.txt",
                              follow="maybe")).status_code == 400
            assert (await c.head(f"/v1/client/fs/cat/{alloc_id}",
                                 params={"path": "t/local/hello.txt"})).status_code == 405
            # A log pipe is listed but never read: a reader would wait on it forever.
            fifo = [e for e in (await get(c, "ls", alloc_id, "alloc/logs")).json()
                    if e["FileMode"].startswith("p")]
            assert fifo
            assert (await get(c, "cat", alloc_id, f"alloc/logs/{fifo[0]['Name']}")
                    ).status_code == 400


def assert_served_as_data(answer: httpx2.Response, name: str) -> None:
    """A task's file, as cat and readat answer it: data, never a page (runtime/api/fs.py)."""
    assert answer.headers["content-type"] == "application/octet-stream"
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["content-security-policy"] == "sandbox"
    assert answer.headers["content-disposition"] == f"attachment; filename*=UTF-8''{name}"


async def test_task_files_are_served_as_data_never_as_pages(tmp_path: Path) -> None:
    """A task's HTML or XML would be `text/html` or `text/xml` if sniffed, a page of the
    agent's origin in a browser: every verb that returns its bytes says it is data."""
    page = b"<html><script>document.title = 'ran'</script></html>"
    with trio.fail_after(60):
        async with fs_alloc(tmp_path) as (a, alloc_id, root):
            c = a.client
            (root / "alloc/data/x.html").write_bytes(page)
            (root / "alloc/data/x.svg").write_bytes(b'<?xml version="1.0"?><svg/>')
            (root / "alloc/data/n\u00e4me \"q\"; x.html").write_bytes(page)
            for path, name in (("alloc/data/x.html", "x.html"), ("alloc/data/x.svg", "x.svg"),
                               ("alloc/data/n\u00e4me \"q\"; x.html",
                                "n%C3%A4me%20%22q%22%3B%20x.html")):
                for verb in ("cat", "readat"):
                    answer = await get(c, verb, alloc_id, path)
                    assert answer.status_code == 200, (verb, path)
                    assert_served_as_data(answer, name)
                stream = await get(c, "stream", alloc_id, path)
                assert stream.headers["content-type"] == "application/json"
                assert stream.headers["x-content-type-options"] == "nosniff"
                assert stream.headers["content-security-policy"] == "sandbox"
                assert stream.headers["content-disposition"].startswith("attachment")
            assert data_of(frames_of(stream.text)) == page
            empty = root / "alloc/data/empty"
            empty.write_bytes(b"")
            assert_served_as_data(await get(c, "cat", alloc_id, "alloc/data/empty"), "empty")
            # A task's log, read plain or framed: nosniff and sandboxed as well.
            for plain in ("true", "false"):
                log = await c.get(f"/v1/client/fs/logs/{alloc_id}", params={
                    "task": "t", "type": "stdout", "plain": plain, "follow": "false"})
                assert log.status_code == 200
                assert log.headers["x-content-type-options"] == "nosniff"
                assert log.headers["content-security-policy"] == "sandbox"


async def test_python_nomad_reads_files_served_as_data(tmp_path: Path) -> None:
    """python-nomad reads cat and readat bodies as text (`requests`' `.text`, which guesses
    the encoding of an `application/octet-stream` body): still the file's text."""
    text = "h\u00e9llo, w\u00f6rld \u2014 \u65e5\u672c\n"
    with trio.fail_after(60):
        async with fs_alloc(tmp_path) as (a, alloc_id, root):
            (root / "alloc/data/u.txt").write_text(text)
            (root / "alloc/data/x.html").write_text("<html><b>hi</b></html>\n")
            port = urlparse(a.address).port
            client = nomad.Nomad(host="127.0.0.1", port=port, timeout=10)

            def read() -> tuple[str, str, str, str]:
                return (client.client.cat.read_file(alloc_id, "t/local/hello.txt"),
                        client.client.cat.read_file(alloc_id, "alloc/data/u.txt"),
                        client.client.cat.read_file(alloc_id, "alloc/data/x.html"),
                        client.client.read_at.read_file_offset(alloc_id, 6, 4,
                                                               "t/local/hello.txt"))

            assert await trio.to_thread.run_sync(read) == (
                "hello from the task\n", text, "<html><b>hi</b></html>\n", "from")


#: Offsets the kernel cannot seek to (ext4 allows 16 TiB, tmpfs and xfs 2^63 - 1): readat and
#: stream answer a 400 naming the offset, never a 500 (an EINVAL from `lseek` or `pread`, or an
#: OverflowError past what an off_t holds).
UNSEEKABLE = (str(2 ** 63 - 1), "9223372036854775000", str(2 ** 62), str(2 ** 44 + 5))


async def test_offsets_and_limits_past_what_the_file_system_takes(tmp_path: Path) -> None:
    path = "t/local/hello.txt"
    with trio.fail_after(60):
        async with fs_alloc(tmp_path) as (a, alloc_id, root):
            c = a.client
            big_enough = os.statvfs(root).f_frsize  # any offset the file system seeks to
            for offset in UNSEEKABLE:
                for verb in ("readat", "stream"):
                    answer = await get(c, verb, alloc_id, path, offset=offset)
                    if answer.status_code == 200:  # a file system that takes 2^62 (tmpfs)
                        assert answer.content in (b"", b"{}"), (verb, offset)
                        continue
                    assert answer.status_code == 400, (verb, offset, answer.text)
                    assert answer.text.startswith(f"offset {offset} is past the largest "
                                                  "file the file system allows"), answer.text
            # Past what an int64 holds: Go's ParseInt error, naming the parameter.
            for name in ("offset", "limit"):
                for value in (str(2 ** 63), str(-(2 ** 63) - 1), "1" + "0" * 40):
                    params = {"offset": "0", name: value}
                    for verb in ("readat", "stream") if name == "offset" else ("readat",):
                        answer = await get(c, verb, alloc_id, path, **params)
                        assert answer.status_code == 400, (verb, name, value)
                        assert answer.text.startswith(f"error parsing {name}: "), answer.text
            # From the end, an offset that puts the start past 2^63 - 1.
            answer = await get(c, "stream", alloc_id, path, origin="end",
                               offset=str(-(2 ** 63)))
            assert answer.status_code == 400, answer.text
            assert answer.text.startswith(f"offset {-(2 ** 63)} from the end is past"), answer
            for offset in ("-1", str(-(2 ** 63))):
                answer = await get(c, "readat", alloc_id, path, offset=offset)
                assert (answer.status_code, answer.text) == (
                    400, f"can't seek to offset {offset}: invalid argument")
            # Past the end of the file, but a place the file system can seek to: nothing to
            # read, as Nomad answers (its seek succeeds and the first read is at EOF).
            for offset in ("20", "21", str(big_enough)):
                assert (await get(c, "readat", alloc_id, path, offset=offset)).content == b""
                stream = await get(c, "stream", alloc_id, path, offset=offset)
                assert (stream.status_code, data_of(frames_of(stream.text))) == (200, b"")
            # cat takes no offset: whatever is asked, the whole file.
            cat = await get(c, "cat", alloc_id, path, offset=UNSEEKABLE[0], limit="-1")
            assert cat.content == b"hello from the task\n"
            # Any int64 limit is a byte count (0 or less: no limit), as Nomad's LimitReader.
            for limit in (str(2 ** 63 - 1), "-1", str(-(2 ** 63)), "0", str(2 ** 62)):
                answer = await get(c, "readat", alloc_id, path, offset="6", limit=limit)
                assert (answer.status_code, answer.content) == (200, b"from the task\n"), limit


async def test_secrets_are_listed_but_not_read(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with fs_alloc(tmp_path) as (a, alloc_id, root):
            c = a.client
            (root / "t/secrets/token").write_text("s3cret")
            listed = (await get(c, "ls", alloc_id, "t/secrets")).json()
            assert [e["Name"] for e in listed] == ["token"]
            assert (await get(c, "stat", alloc_id, "t/secrets/token")).json()["Size"] == 6
            # A link from local/ into secrets/ is refused like the path itself (Nomad checks
            # the path as given only; the link is resolved here first).
            os.symlink("../secrets/token", root / "t/local/token")
            for path in ("t/secrets/token", "/t/./secrets/../secrets/token", "t/local/token"):
                for verb in ("cat", "readat", "stream"):
                    refused = await get(c, verb, alloc_id, path)
                    assert refused.status_code == 403, (verb, path)
                    assert refused.text == f"Reading secret file prohibited: {path}"
                    assert b"s3cret" not in refused.content


async def test_paths_and_links_never_leave_the_allocation_directory(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text(OUTSIDE)
    with trio.fail_after(60):
        async with fs_alloc(tmp_path) as (a, alloc_id, root):
            c = a.client
            local = root / "t/local"
            os.symlink("/", local / "to-root")
            os.symlink(tmp_path, local / "dir-link")
            os.symlink(outside, local / "abs-link")
            os.symlink("../../../../outside.txt", local / "rel-link")
            os.symlink("loop", local / "loop")
            hops = ["../" * n for n in range(1, 8)]
            attempts = [
                *(f"{h}outside.txt" for h in hops), "../../etc/passwd", "t/../../outside.txt",
                "t/local/to-root/etc/passwd", f"t/local/to-root{tmp_path}/outside.txt",
                "t/local/dir-link/outside.txt", "t/local/abs-link", "t/local/rel-link",
                "t/local/to-root", "t/local/dir-link", "t/local/loop"]
            for verb in VERBS:
                for path in attempts:
                    answer = await get(c, verb, alloc_id, path)
                    assert answer.status_code == 400, (verb, path, answer.text)
                    assert OUTSIDE.encode() not in answer.content
                    assert b"root:" not in answer.content
                # Encoded dots, as a client that escapes everything sends them.
                raw = await c.get(f"/v1/client/fs/{verb}/{alloc_id}?offset=0&follow=false&"
                                  "path=%2e%2e%2f%2e%2e%2f%2e%2e%2foutside.txt")
                assert raw.status_code == 400, verb
                # `/` is the allocation directory: /etc/passwd is a file there, or nothing.
                answer = await get(c, verb, alloc_id, "/etc/passwd")
                assert answer.text == "stat /etc/passwd: no such file or directory", verb
            assert (await get(c, "ls", alloc_id, "..")).text == "Path escapes the alloc directory"

            # Links that stay inside are followed, relative or absolute.
            os.symlink("../local/hello.txt", local / "same")
            os.symlink(root / "t/local/hello.txt", local / "abs-same")
            for path in ("t/local/same", "t/local/abs-same"):
                assert (await get(c, "cat", alloc_id, path)).content == b"hello from the task\n"
            assert [e["FileMode"][0] for e in (await get(c, "ls", alloc_id, "t/local")).json()
                    if e["Name"] == "same"] == ["L"]

            # A file read once, then swapped for a link to the outside between two requests.
            swap = local / "swap.txt"
            swap.write_text("inside\n")
            assert (await get(c, "cat", alloc_id, "t/local/swap.txt")).content == b"inside\n"
            os.unlink(swap)
            os.symlink(outside, swap)
            for verb in VERBS[1:]:
                answer = await get(c, verb, alloc_id, "t/local/swap.txt")
                assert answer.status_code == 400, verb
                assert OUTSIDE.encode() not in answer.content
            # The same with a directory component swapped for a link.
            (local / "sub").mkdir()
            (local / "sub/outside.txt").write_text("inside\n")
            assert (await get(c, "cat", alloc_id, "t/local/sub/outside.txt")).status_code == 200
            os.rename(local / "sub", local / "sub.old")
            os.symlink(tmp_path, local / "sub")
            answer = await get(c, "cat", alloc_id, "t/local/sub/outside.txt")
            assert answer.status_code == 400
            assert OUTSIDE.encode() not in answer.content


async def test_stream_offsets_origin_and_follow(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with fs_alloc(tmp_path) as (a, alloc_id, root):
            c = a.client
            path = "t/local/hello.txt"
            whole = await get(c, "stream", alloc_id, path)
            frames = frames_of(whole.text)
            assert data_of(frames) == b"hello from the task\n"
            assert frames[0] == {"Offset": 20, "File": path,
                                 "Data": base64.b64encode(b"hello from the task\n").decode()}
            tail = await get(c, "stream", alloc_id, f"/{path}", origin="end", offset="5")
            assert data_of(frames_of(tail.text)) == b"task\n"
            assert frames_of(tail.text)[0]["File"] == f"/{path}"  # as asked, as Nomad's
            start = await get(c, "stream", alloc_id, path, offset="6")
            assert data_of(frames_of(start.text)) == b"from the task\n"
            beyond = await get(c, "stream", alloc_id, path, origin="end", offset="500")
            assert data_of(frames_of(beyond.text)) == b"hello from the task\n"

            log = root / "alloc/data/app.log"
            log.write_bytes(b"one\n")
            url = f"/v1/client/fs/stream/{alloc_id}"
            # follow is the default for /fs/stream, as in Nomad.
            async with c.stream("GET", url, params={"path": "alloc/data/app.log"}) as response:
                assert response.status_code == 200
                chunks = response.aiter_text()
                text, events = await read_until(chunks, b"one\n")
                with log.open("ab") as f:  # written after the request arrived
                    f.write(b"two\n")
                text, events = await read_until(chunks, b"one\ntwo\n", text)
                log.write_bytes(b"3\n")  # truncated, then written again
                text, events = await read_until(chunks, b"one\ntwo\n3\n", text)
                assert "file truncated" in events
                # Replaced by a link to the outside: the stream keeps the file it opened,
                # reports it deleted and ends; the link is never followed.
                outside = tmp_path / "outside.txt"
                outside.write_text(OUTSIDE)
                os.unlink(log)
                os.symlink(outside, log)
                async for chunk in chunks:
                    text += chunk
                frames = frames_of(text)
                assert frames[-1]["FileEvent"] == "file deleted"
                assert OUTSIDE.encode() not in data_of(frames)


async def read_until(chunks: AsyncIterator[str], want: bytes, text: str = ""
                     ) -> tuple[str, list[str]]:
    """Read a following stream until its data is `want` (bounded by the caller)."""
    async for chunk in chunks:
        text += chunk
        frames = frames_of(text) if text.endswith("}") else []
        if frames and data_of(frames) == want:
            return text, [f.get("FileEvent", "") for f in frames]
    raise AssertionError(f"the stream ended before {want!r}")  # pragma: no cover
