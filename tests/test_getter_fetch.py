"""Layer 2: artifact downloads for real — a loopback HTTP server, real files, real archives.

Covered: a tar.gz unpacked (modes kept), a wrong checksum refused with go-getter's message and
nothing placed, tar and zip path escapes refused, an oversize stream cut off without holding
it in memory, `file://` files and trees, checksum files, headers, the destination confined to
the allocation directory, and the decompression limits.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import shutil
import stat
import tarfile
import tempfile
import tracemalloc
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from tests.http_support import Route, open_file_server, self_signed_context
from tests.runtime_support import job_alloc
from yurt.hooks.artifact import ArtifactHook
from yurt.hooks.base import TaskHookContext
from yurt.runtime.client.getter.config import ArtifactConfig
from yurt.runtime.client.getter.get import STAGING_PREFIX, ArtifactRequest, get
from yurt.runtime.client.getter.source import GetterError
from yurt.runtime.structs import TaskEvent

pytestmark = pytest.mark.slow


def tar_gz(members: dict[str, bytes], *, modes: dict[str, int] | None = None,
           links: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = (modes or {}).get(name, 0o644)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)
    return buf.getvalue()


def zip_of(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


@pytest.fixture
def task_dir(tmp_path: Path) -> Path:
    task = tmp_path / "alloc1" / "web"
    (task / "local").mkdir(parents=True)
    (tmp_path / "alloc1" / "alloc").mkdir()
    return task


def request(task_dir: Path, source: str, **kw: object) -> ArtifactRequest:
    return ArtifactRequest(source=source, alloc_dir=task_dir.parent, task_dir=task_dir,
                           **kw)  # type: ignore[arg-type]


def staging_left(task_dir: Path) -> list[str]:
    return [p.name for p in task_dir.iterdir() if p.name.startswith(STAGING_PREFIX)]


async def test_a_tar_gz_is_unpacked_into_local(task_dir: Path) -> None:
    archive = tar_gz({"app/bin/run": b"#!/bin/sh\necho hi\n", "app/conf.txt": b"x=1\n"},
                     modes={"app/bin/run": 0o755})
    digest = hashlib.sha256(archive).hexdigest()
    with trio.fail_after(20):
        async with open_file_server({"/app.tar.gz": Route(archive)}) as server:
            await get(request(task_dir, f"{server.base_url}/app.tar.gz",
                              options={"checksum": f"sha256:{digest}"},
                              headers={"X-Token": "t0k"}), ArtifactConfig())
    run = task_dir / "local/app/bin/run"
    assert run.read_bytes() == b"#!/bin/sh\necho hi\n"
    assert stat.S_IMODE(run.stat().st_mode) & 0o111
    assert (task_dir / "local/app/conf.txt").read_text() == "x=1\n"
    (target, headers), = server.requests
    assert target == "/app.tar.gz"  # the magic checksum parameter is not sent
    assert headers["x-token"] == "t0k"
    assert staging_left(task_dir) == []


async def test_a_wrong_checksum_fails_and_places_nothing(task_dir: Path) -> None:
    archive = tar_gz({"f": b"data"})
    wrong = hashlib.sha256(b"other").hexdigest()
    with trio.fail_after(20):
        async with open_file_server({"/a.tgz": Route(archive)}) as server:
            with pytest.raises(GetterError) as info:
                await get(request(task_dir, f"{server.base_url}/a.tgz?checksum=sha256:{wrong}"),
                          ArtifactConfig())
    message = str(info.value)
    assert message.startswith("Checksums did not match for ")
    assert f"\nExpected: {wrong}\nGot: {hashlib.sha256(archive).hexdigest()}\n" \
           "*sha256.digest" in message
    assert list((task_dir / "local").iterdir()) == []
    assert staging_left(task_dir) == []


@pytest.mark.parametrize(("members", "links", "message"), [
    ({"../evil": b"x"}, {}, "entry contains '..': ../evil"),
    ({"a/../../evil": b"x"}, {}, "entry contains '..'"),
    ({}, {"link": "/etc/passwd"}, "archive entry is a link"),
    ({}, {"link": "../../../outside"}, "archive entry is a link"),
])
async def test_tar_entries_that_escape_are_refused(task_dir: Path, members: dict[str, bytes],
                                                   links: dict[str, str], message: str) -> None:
    archive = tar_gz(members, links=links)
    with trio.fail_after(20):
        async with open_file_server({"/a.tar.gz": Route(archive)}) as server:
            with pytest.raises(GetterError, match=message):
                await get(request(task_dir, f"{server.base_url}/a.tar.gz"), ArtifactConfig())
    assert sorted(p.name for p in task_dir.parent.parent.iterdir()) == ["alloc1"]
    assert list((task_dir / "local").iterdir()) == []


async def test_zip_slip_is_refused_and_a_good_zip_keeps_its_modes(task_dir: Path) -> None:
    good = io.BytesIO()
    with zipfile.ZipFile(good, "w") as zf:
        info = zipfile.ZipInfo("tool")
        info.external_attr = 0o755 << 16
        zf.writestr(info, b"#!/bin/sh\n")
    with trio.fail_after(20):
        async with open_file_server({"/slip.zip": Route(zip_of({"../../evil.txt": b"x"})),
                                     "/good.zip": Route(good.getvalue())}) as server:
            with pytest.raises(GetterError, match=r"entry contains '\.\.': \.\./\.\./evil.txt"):
                await get(request(task_dir, f"{server.base_url}/slip.zip"), ArtifactConfig())
            await get(request(task_dir, f"{server.base_url}/good.zip"), ArtifactConfig())
    assert not (task_dir.parent.parent / "evil.txt").exists()
    assert stat.S_IMODE((task_dir / "local/tool").stat().st_mode) == 0o755


async def test_an_oversize_stream_is_cut_off_without_filling_memory(task_dir: Path) -> None:
    limit = 16 << 20
    tracemalloc.start()
    try:
        with trio.fail_after(30):
            async with open_file_server({"/big": Route(endless=True)}) as server:
                with pytest.raises(GetterError, match=f"exceeds the maximum size of {limit}"):
                    await get(request(task_dir, f"{server.base_url}/big"),
                              ArtifactConfig(http_max_size=limit))
                await server.hung_up.wait()  # the connection was closed, not drained
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert server.sent < limit * 4  # cut off soon after the limit, not read to the end
    assert peak < 8 << 20  # batches of 1 MiB, never the stream
    assert list((task_dir / "local").iterdir()) == []
    assert staging_left(task_dir) == []


async def test_bad_status_and_refused_connections(task_dir: Path) -> None:
    with trio.fail_after(20):
        async with open_file_server({}) as server:
            with pytest.raises(GetterError, match="bad response code: 404"):
                await get(request(task_dir, f"{server.base_url}/missing"), ArtifactConfig())
        with pytest.raises(GetterError, match=r'^Get "http://127\.0\.0\.1:1/x": '):
            await get(request(task_dir, "http://127.0.0.1:1/x"), ArtifactConfig())


async def test_file_sources_files_trees_and_gz_in_file_mode(task_dir: Path,
                                                            tmp_path: Path) -> None:
    src = tmp_path / "srv"
    (src / "tree/sub").mkdir(parents=True)
    (src / "tree/sub/a.txt").write_text("a")
    (src / "tool").write_bytes(b"bin")
    (src / "tool.gz").write_bytes(gzip.compress(b"unzipped"))
    config = ArtifactConfig()
    with trio.fail_after(20):
        await get(request(task_dir, f"file://{src}/tool"), config)
        await get(request(task_dir, f"file://{src}/tree", destination="local/tree"), config)
        await get(request(task_dir, f"{src}/tool.gz", mode="file", destination="local/t2"),
                  config)
        with pytest.raises(GetterError, match="gzip-compressed files can only unarchive"):
            await get(request(task_dir, f"file://{src}/tool.gz"), config)
    assert (task_dir / "local/tool").read_bytes() == b"bin"
    assert (task_dir / "local/tree/sub/a.txt").read_text() == "a"
    assert (task_dir / "local/t2").read_bytes() == b"unzipped"


async def test_checksum_files_are_fetched_and_searched(task_dir: Path) -> None:
    body = b"payload"
    sums = f"{hashlib.sha256(b'x').hexdigest()}  other\n" \
           f"{hashlib.sha256(body).hexdigest()}  tool\n".encode()
    with trio.fail_after(20):
        async with open_file_server({"/dl/tool": Route(body),
                                     "/dl/SHA256SUMS": Route(sums)}) as server:
            await get(request(task_dir, f"{server.base_url}/dl/tool?checksum=file:"
                                        f"{server.base_url}/dl/SHA256SUMS"), ArtifactConfig())
            server.routes["/dl/tool"] = Route(b"tampered")
            with pytest.raises(GetterError, match="Checksums did not match"):
                await get(request(task_dir, f"{server.base_url}/dl/tool?checksum=file:"
                                            f"{server.base_url}/dl/SHA256SUMS",
                                  destination="local/again"), ArtifactConfig())
    assert (task_dir / "local/tool").read_bytes() == body


async def test_the_destination_stays_in_the_allocation_directory(task_dir: Path,
                                                                 tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (task_dir / "local/escape").symlink_to(outside)
    src = tmp_path / "f"
    src.write_text("x")
    with trio.fail_after(20):
        with pytest.raises(GetterError, match="destination path escapes alloc directory"):
            await get(request(task_dir, str(src), destination="../../outside"),
                      ArtifactConfig())
        with pytest.raises(GetterError, match="web/local/escape is a symbolic link"):
            await get(request(task_dir, str(src), destination="local/escape/x"),
                      ArtifactConfig())
        await get(request(task_dir, str(src), destination="../alloc/shared"), ArtifactConfig())
    assert list(outside.iterdir()) == []
    assert (task_dir.parent / "alloc/shared/f").read_text() == "x"


async def test_decompression_limits(task_dir: Path) -> None:
    many = tar_gz({f"f{i}": b"x" for i in range(10)})
    large = tar_gz({"big": b"\0" * 100_000})
    with trio.fail_after(20):
        async with open_file_server({"/many.tgz": Route(many),
                                     "/large.tgz": Route(large)}) as server:
            with pytest.raises(GetterError, match="tar archive contains too many files: 6 > 5"):
                await get(request(task_dir, f"{server.base_url}/many.tgz"),
                          ArtifactConfig(decompression_file_count_limit=5))
            with pytest.raises(GetterError, match="tar archive larger than limit: 50000"):
                await get(request(task_dir, f"{server.base_url}/large.tgz"),
                          ArtifactConfig(decompression_size_limit=50_000))
    assert list((task_dir / "local").iterdir()) == []


@pytest.fixture
def public_dir() -> Iterator[Path]:
    """A directory every user can reach (pytest's own tmp tree is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="yurt-artifact-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path)


async def test_file_sources_must_be_readable_by_the_tasks_user(task_dir: Path,
                                                               public_dir: Path) -> None:
    secret = public_dir / "secret"
    secret.write_text("root only")
    secret.chmod(0o600)
    public = public_dir / "public"
    public.write_text("everyone")
    public.chmod(0o644)
    tree = public_dir / "tree"
    tree.mkdir(mode=0o755)
    (tree / "hidden").write_text("x")
    (tree / "hidden").chmod(0o600)
    with trio.fail_after(20):
        with pytest.raises(GetterError, match='secret: permission denied for user "nobody"'):
            await get(request(task_dir, str(secret), user="nobody"), ArtifactConfig())
        with pytest.raises(GetterError, match='hidden: permission denied for user "nobody"'):
            await get(request(task_dir, str(tree), user="nobody"), ArtifactConfig())
        await get(request(task_dir, str(public), user="nobody"), ArtifactConfig())
        await get(request(task_dir, str(secret)), ArtifactConfig())  # a task without a user
    assert (task_dir / "local/public").read_text() == "everyone"
    assert (task_dir / "local/secret").read_text() == "root only"


async def test_chown_gives_the_destination_to_the_tasks_user(task_dir: Path,
                                                             tmp_path: Path) -> None:
    src = tmp_path / "tree"
    (src / "sub").mkdir(parents=True)
    (src / "sub/f").write_text("x")
    nobody = (65534, 65534)
    with trio.fail_after(20):
        await get(request(task_dir, f"file://{src}", destination="local/out", owner=nobody),
                  ArtifactConfig())
    expected = nobody if os.geteuid() == 0 else (os.getuid(), os.getgid())  # root only
    for path in (task_dir / "local/out", task_dir / "local/out/sub/f"):
        st = path.lstat()
        assert (st.st_uid, st.st_gid) == expected


async def test_concurrent_downloads_of_one_task_keep_to_their_own_staging(
        task_dir: Path) -> None:
    routes = {f"/f{i}": Route(f"content {i}".encode() * 100_000) for i in range(3)}
    with trio.fail_after(30):
        async with open_file_server(routes) as server, trio.open_nursery() as nursery:
            for i in range(3):
                nursery.start_soon(get, request(task_dir, f"{server.base_url}/f{i}"),
                                   ArtifactConfig())
    for i in range(3):
        assert (task_dir / f"local/f{i}").read_bytes() == f"content {i}".encode() * 100_000


async def test_the_hook_removes_staging_a_crash_left_before_downloading(
        task_dir: Path, tmp_path: Path) -> None:
    stale = task_dir / f"{STAGING_PREFIX}crashed"
    stale.mkdir()
    (stale / "download").write_bytes(b"partial")
    src = tmp_path / "f"
    src.write_text("x")
    alloc = job_alloc(f'''job "j" {{
  group "g" {{
    task "web" {{
      driver = "raw_exec"
      config {{ command = "/bin/true" }}
      artifact {{ source = "file://{src}" }}
    }}
  }}
}}''')
    assert alloc.job is not None
    task = alloc.job.task_groups[0].tasks[0]
    seen: list[str] = []

    async def emit(event: TaskEvent) -> None:
        await trio.lowlevel.checkpoint()
        seen.append(event.type)

    ctx = TaskHookContext(alloc=alloc, task=task, task_dir=task_dir, emit_event=emit,
                          unix_clock=lambda: 0)
    with trio.fail_after(20):
        response = await ArtifactHook().prestart(ctx, {})
    assert response.done
    assert seen == ["Downloading Artifacts"]
    assert staging_left(task_dir) == []
    assert (task_dir / "local/f").read_text() == "x"


async def test_https_verifies_certificates_unless_insecure(task_dir: Path) -> None:
    tls = self_signed_context()
    with trio.fail_after(20):
        async with open_file_server({"/tool": Route(b"bin")}, tls=tls) as server:
            with pytest.raises(GetterError, match=r'^Get "https://127\.0\.0\.1:\d+/tool": .*'
                                                  r"CERTIFICATE_VERIFY_FAILED"):
                await get(request(task_dir, f"{server.base_url}/tool"), ArtifactConfig())
            await get(request(task_dir, f"{server.base_url}/tool", insecure=True),
                      ArtifactConfig())
    assert (task_dir / "local/tool").read_bytes() == b"bin"


@pytest.mark.parametrize("kind", [tarfile.SYMTYPE, tarfile.LNKTYPE])
def test_links_in_a_tar_archive_are_refused_whatever_their_target(
        tmp_path: Path, kind: bytes) -> None:
    from yurt.runtime.client.getter.unpack import unpack

    archive = tmp_path / "a.tar"
    with tarfile.open(archive, "w") as tar:
        data = b"hello"
        plain = tarfile.TarInfo("plain.txt")
        plain.size = len(data)
        tar.addfile(plain, io.BytesIO(data))
        # A link that stays inside: the data filter would let it through; a chain of such
        # links is how its path checks are bypassed, so none is recreated.
        link = tarfile.TarInfo("inside")
        link.type = kind
        link.linkname = "plain.txt"
        tar.addfile(link)
    dest = tmp_path / "out"
    dest.mkdir()
    with pytest.raises(GetterError, match="archive entry is a link: inside"):
        unpack(archive, "tar", dest, as_dir=True, max_size=0, max_files=0)
    assert not (dest / "inside").exists()
