"""Layer 2: the artifact getter against a hostile neighbourhood — real files, FIFOs, archives.

Covered: a destination directory a sibling task swaps for a link while the download runs
(refused: nothing written or chowned through it, outside the allocation directory or in), tar
header bombs (refused from the header, in a child process whose address space is capped),
FIFO sources (refused at once, skipped inside a tree), a kill during a long copy or unpack
(stops within a chunk), and a `checksum=file:` listing the task's user may not read.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

import yurt.runtime.client.getter.get as getter_get
from tests.getter_support import stop_at_call
from tests.runtime_support import eventually
from yurt.runtime.client.getter.config import ArtifactConfig
from yurt.runtime.client.getter.get import STAGING_PREFIX, ArtifactRequest, get
from yurt.runtime.client.getter.source import GetterError
from yurt.runtime.client.getter.unpack import unpack

pytestmark = pytest.mark.slow

NOBODY = (65534, 65534)


@pytest.fixture
def task_dir(tmp_path: Path) -> Path:
    task = tmp_path / "alloc1" / "web"
    (task / "local").mkdir(parents=True)
    for shared in ("data", "tmp"):
        (tmp_path / "alloc1" / "alloc" / shared).mkdir(parents=True)
        (tmp_path / "alloc1" / "alloc" / shared).chmod(0o1777)
    return task


@pytest.fixture
def public_dir() -> Iterator[Path]:
    """A directory every user can reach (pytest's own tmp tree is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="yurt-getter-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path)


def request(task_dir: Path, source: str, **kw: Any) -> ArtifactRequest:
    return ArtifactRequest(source=source, alloc_dir=task_dir.parent, task_dir=task_dir, **kw)


def tar_gz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def staging_left(task_dir: Path) -> list[str]:
    return [p.name for p in task_dir.iterdir() if p.name.startswith(STAGING_PREFIX)]


def sparse_file(path: Path, size: int) -> None:
    with open(path, "wb") as f:
        f.truncate(size)  # no disk used, and read as fast as memory


def open_growing_download(task_dir: Path) -> int | None:
    """A descriptor of a staged download that has bytes in it, if there is one yet."""
    for download in task_dir.glob(f"{STAGING_PREFIX}*/download"):
        try:
            fd = os.open(download, os.O_RDONLY)
        except FileNotFoundError:
            continue
        if os.fstat(fd).st_size > 0:
            return fd
        os.close(fd)
    return None


def snapshot(path: Path) -> list[tuple[str, int, int, int]]:
    """Every entry below `path` with its owner and mode, `path` included."""
    found = []
    for p in [path, *sorted(path.rglob("*"))]:
        st = p.lstat()
        found.append((str(p.relative_to(path)), st.st_uid, st.st_gid, st.st_mode))
    return found


# 1. The destination is placed through descriptors, not re-resolved by name.

@pytest.mark.parametrize("kind", ["file", "tar.gz"])
@pytest.mark.parametrize("swap_to", ["outside", "inside"])
async def test_a_destination_swapped_for_a_link_during_the_fetch_is_never_followed(
        task_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str,
        swap_to: str) -> None:
    alloc = task_dir.parent
    shared = alloc / "alloc/data/shared"
    (shared / "out").mkdir(parents=True)
    outside = tmp_path / "etc"  # stands for /etc: root's, and no task's to write
    outside.mkdir(mode=0o755)
    (outside / "out").mkdir(mode=0o755)
    (outside / "out/passwd").write_text("root:x:0:0\n")
    # Inside: another task's directory (a root task's `alloc/tmp` stands for its `local/`).
    inside = alloc / "alloc/tmp"
    (inside / "out").mkdir()
    before = snapshot(outside), snapshot(inside)
    src = tmp_path / "srv" / ("tool.tar.gz" if kind == "tar.gz" else "tool")
    src.parent.mkdir()
    src.write_bytes(tar_gz({"passwd": b"evil\n"}) if kind == "tar.gz" else b"evil\n")
    real_copy = getter_get.copy_file
    swapped: list[Path] = []

    def copy_then_swap(*args: Any, **kw: Any) -> int:
        # What a sibling task can do while the download runs: `alloc/data` is theirs too.
        written = real_copy(*args, **kw)
        shared.rename(alloc / "alloc/data/moved")
        shared.symlink_to(outside if swap_to == "outside" else inside)
        swapped.append(shared)
        return written

    monkeypatch.setattr(getter_get, "copy_file", copy_then_swap)
    req = request(task_dir, f"file://{src}", destination="../alloc/data/shared/out",
                  owner=NOBODY, **({"mode": "dir"} if kind == "tar.gz" else {}))
    with trio.fail_after(20):
        # Followed neither out of the allocation directory nor inside it.
        with pytest.raises(GetterError, match="artifact destination alloc/data/shared/out: "
                                              "alloc/data/shared is a symbolic link"):
            await get(req, ArtifactConfig())
    assert swapped
    assert (snapshot(outside), snapshot(inside)) == before  # nothing written or chowned
    assert staging_left(task_dir) == []


async def test_a_link_at_the_destination_is_replaced_never_written_through(
        task_dir: Path, tmp_path: Path) -> None:
    outside = tmp_path / "passwd"
    outside.write_text("root:x:0:0\n")
    (task_dir / "local/conf").symlink_to(outside)
    src = tmp_path / "conf"
    src.write_text("mine\n")
    with trio.fail_after(20):
        await get(request(task_dir, f"file://{src}", mode="file", destination="local/conf"),
                  ArtifactConfig())
    assert outside.read_text() == "root:x:0:0\n"
    assert not (task_dir / "local/conf").is_symlink()
    assert (task_dir / "local/conf").read_text() == "mine\n"


# 2. Tar headers are bounded before tarfile reads them.

_BOMB_CHILD = """
import resource, sys
from pathlib import Path
from yurt.runtime.client.getter.source import GetterError
from yurt.runtime.client.getter.unpack import unpack

limit = 1 << 30  # the bomb's header alone declares 2.4 GB
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
try:
    unpack(Path(sys.argv[1]), "tar.gz", Path(sys.argv[2]), as_dir=True, max_size=0,
           max_files=0)
except GetterError as e:
    print("refused:", e)
# VmHWM, not ru_maxrss: on Linux ru_maxrss carries the parent's peak across exec.
with open("/proc/self/status") as f:
    print("maxrss_kib", next(line.split()[1] for line in f if line.startswith("VmHWM:")))
"""


def header_bomb(kind: bytes) -> bytes:
    """A tar.gz whose first header declares a 2.4 GB special header: a few KB on disk."""
    info = tarfile.TarInfo("././@LongLink" if kind == tarfile.GNUTYPE_LONGNAME else "pax")
    info.type = kind
    info.size = 2_400_000_000
    block = info.tobuf(tarfile.GNU_FORMAT)
    return gzip.compress(block + b"\0" * (8 << 20), compresslevel=9)


@pytest.mark.parametrize(("kind", "what"), [(tarfile.GNUTYPE_LONGNAME, "GNU long name"),
                                            (tarfile.XHDTYPE, "pax"),
                                            (tarfile.XGLTYPE, "pax global")])
def test_a_tar_header_bomb_is_refused_from_its_header_in_bounded_memory(
        tmp_path: Path, kind: bytes, what: str) -> None:
    archive = tmp_path / "bomb.tar.gz"
    archive.write_bytes(header_bomb(kind))
    assert archive.stat().st_size < 64 << 10
    (tmp_path / "out").mkdir()
    child = subprocess.run([sys.executable, "-c", _BOMB_CHILD, str(archive),
                            str(tmp_path / "out")], capture_output=True, text=True, timeout=60,
                           check=False)
    assert child.returncode == 0, child.stderr[-2000:]
    assert f"refused: tar {what} header too large: 2400000000 bytes (limit 1048576)" \
        in child.stdout
    maxrss_kib = int(child.stdout.split("maxrss_kib")[1])
    assert maxrss_kib < 200 << 10  # the interpreter and its imports; no header in memory


def test_a_chain_of_special_headers_is_bounded_as_a_whole(tmp_path: Path) -> None:
    """Each under the cap, together over it: tarfile holds every one of a chain at once."""
    blocks = b""
    for _ in range(3):
        info = tarfile.TarInfo("././@LongLink")
        info.type = tarfile.GNUTYPE_LONGNAME
        info.size = 512 << 10
        blocks += info.tobuf(tarfile.GNU_FORMAT) + b"a" * (512 << 10)
    plain = tarfile.TarInfo("plain")
    plain.size = 1
    blocks += plain.tobuf(tarfile.GNU_FORMAT) + b"x" + b"\0" * 511
    archive = tmp_path / "chain.tar"
    archive.write_bytes(blocks + b"\0" * 1024)
    with pytest.raises(GetterError, match="header too large"):
        unpack(archive, "tar", tmp_path / "out", as_dir=True, max_size=0, max_files=0)


@pytest.mark.parametrize("kind", [tarfile.GNUTYPE_LONGNAME, tarfile.REGTYPE])
@pytest.mark.parametrize("size", [-512, 1 << 80])
def test_a_tar_entry_of_impossible_size_is_a_getter_error(tmp_path: Path, size: int,
                                                          kind: bytes) -> None:
    """Base-256 sizes: negative, tarfile would read all that follows; huge, a seek
    overflows. Either is the download's error, not an agent crash."""
    info = tarfile.TarInfo("././@LongLink" if kind == tarfile.GNUTYPE_LONGNAME else "f")
    info.type = kind
    info.size = size
    archive = tmp_path / "odd.tar.gz"
    archive.write_bytes(gzip.compress(info.tobuf(tarfile.GNU_FORMAT) + b"a" * (1 << 20)))
    with pytest.raises(GetterError):
        unpack(archive, "tar.gz", tmp_path / "out", as_dir=True, max_size=0, max_files=0)


# 3. Only regular files are read, and a long copy stops when cancelled.

@pytest.fixture
def unblock_fifo() -> Iterator[Callable[[Path], None]]:
    """A safety valve: should a reader ever block on the FIFO, a writer opens and closes it
    after 10 s, so a regression fails the test instead of hanging it."""
    timers: list[threading.Timer] = []

    def arm(fifo: Path) -> None:
        def open_and_close() -> None:
            with contextlib.suppress(OSError):  # nobody reading: nothing to unblock
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        timer = threading.Timer(10, open_and_close)
        timer.start()
        timers.append(timer)

    yield arm
    for timer in timers:
        timer.cancel()


async def test_a_fifo_source_is_refused_at_once(task_dir: Path, tmp_path: Path,
                                                unblock_fifo: Callable[[Path], None]) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    unblock_fifo(fifo)
    with trio.fail_after(5):
        with pytest.raises(GetterError, match=f"source path must be a file: {fifo} is a FIFO"):
            await get(request(task_dir, f"file://{fifo}"), ArtifactConfig())
    assert list((task_dir / "local").iterdir()) == []


async def test_fifos_in_a_tree_are_skipped_never_opened(
        task_dir: Path, tmp_path: Path, unblock_fifo: Callable[[Path], None]) -> None:
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub/a.txt").write_text("a")
    os.mkfifo(tree / "sub/pipe")
    unblock_fifo(tree / "sub/pipe")
    with trio.fail_after(5):
        await get(request(task_dir, f"file://{tree}", destination="local/tree"),
                  ArtifactConfig())
    assert sorted(p.name for p in (task_dir / "local/tree/sub").iterdir()) == ["a.txt"]


async def test_a_link_in_a_tree_is_refused_and_nothing_placed(task_dir: Path,
                                                              tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub/a.txt").write_text("a")
    (tree / "sub/shadow").symlink_to("/etc/shadow")
    with trio.fail_after(5):
        with pytest.raises(GetterError, match="copying of symlinks has been disabled: "
                                              f"{tree}/sub/shadow"):
            await get(request(task_dir, f"file://{tree}", destination="local/tree"),
                      ArtifactConfig())
    assert list((task_dir / "local").iterdir()) == []


async def test_a_kill_stops_a_large_copy_within_a_chunk(task_dir: Path,
                                                        tmp_path: Path) -> None:
    big = tmp_path / "big"
    size = 4 << 30
    sparse_file(big, size)
    seen: dict[str, Any] = {}

    async def cancel_once_copying(scope: trio.CancelScope) -> None:
        # The copy runs in a worker thread, with no event to wait on: poll its staging file.
        def copying() -> bool:
            seen["fd"] = open_growing_download(task_dir)
            return seen["fd"] is not None

        await eventually(copying, interval=0.001)
        seen["at"] = trio.current_time()
        scope.cancel()

    with trio.fail_after(60):
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(cancel_once_copying, scope)
                await get(request(task_dir, f"file://{big}"), ArtifactConfig())
        stopped_after = trio.current_time() - seen["at"]
    try:
        copied = os.fstat(seen["fd"]).st_size
    finally:
        os.close(seen["fd"])
    assert scope.cancelled_caught
    assert copied < size // 4  # stopped, not copied to the end
    assert stopped_after < 5
    assert staging_left(task_dir) == []
    assert list((task_dir / "local").iterdir()) == []


def test_an_unpack_stops_at_the_first_check_that_raises(tmp_path: Path) -> None:
    archive = tmp_path / "zeros.gz"
    archive.write_bytes(gzip.compress(b"\0" * (64 << 20), compresslevel=1))
    with pytest.raises(KeyboardInterrupt):
        unpack(archive, "gz", tmp_path / "out", as_dir=False, max_size=0, max_files=0,
               check=stop_at_call(3))
    # Checked before every chunk written and every read of the archive: stopped at once,
    # long before the 64 MiB.
    assert (tmp_path / "out").stat().st_size <= 2 << 20


# 4. A checksum file is read only if the task's user may read it.

async def test_a_checksum_file_the_tasks_user_cannot_read_is_refused(
        task_dir: Path, public_dir: Path, unblock_fifo: Callable[[Path], None]) -> None:
    tool = public_dir / "tool"
    tool.write_bytes(b"payload")
    tool.chmod(0o644)
    sums = public_dir / "SHA256SUMS"
    sums.write_text(f"{hashlib.sha256(b'payload').hexdigest()}  tool\n")
    sums.chmod(0o600)  # root's alone
    pipe = public_dir / "SUMS.pipe"
    os.mkfifo(pipe, 0o644)
    unblock_fifo(pipe)
    source = f"file://{tool}?checksum=file:file://{{}}"
    with trio.fail_after(5):
        with pytest.raises(GetterError,
                           match=f'{sums}: permission denied for user "nobody"'):
            await get(request(task_dir, source.format(sums), user="nobody"), ArtifactConfig())
        with pytest.raises(GetterError, match=f"{pipe} is a FIFO"):
            await get(request(task_dir, source.format(pipe), user="nobody"), ArtifactConfig())
        assert list((task_dir / "local").iterdir()) == []
        sums.chmod(0o644)
        await get(request(task_dir, source.format(sums), user="nobody"), ArtifactConfig())
    assert (task_dir / "local/tool").read_bytes() == b"payload"
    assert stat.S_IMODE(sums.stat().st_mode) == 0o644
