"""Writing into a directory a task shares (layer 2: real files, FIFOs and links, real clock):
template destinations (`write_confined`) and identity tokens (`write_token`) go through a fresh
temporary file created with O_EXCL under a random name, then renamed over the destination.

What a task may plant first, at the temporary name the agent used to use (`.<name>.yurt-tmp`),
at the destination, or at the very name the agent will pick: a FIFO (an open for writing
would wait forever, and the kill waiting on the hook with it), a symbolic link or a hard link
(the write would land in another file). Each write here must finish within a bound, write
the right bytes, leave the planted things and everything outside the directory as they were,
and leave no temporary file behind. A hang must fail, not stall the run: the write runs in a
worker thread the test abandons when `fail_after` expires."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trio

from yurt.hooks.identity import write_token
from yurt.runtime.client import confined_write
from yurt.runtime.client.templating.files import (
    MAX_SOURCE_BYTES,
    TemplateFileError,
    read_confined,
    write_confined,
)

BOUND = 10  # seconds; each write takes milliseconds


async def bounded(fn: Callable[[], object]) -> object:
    """`fn()` in a worker thread, failing the test (TooSlowError) if it blocks."""
    with trio.fail_after(BOUND):
        return await trio.to_thread.run_sync(fn, abandon_on_cancel=True)


def tree(root: Path) -> dict[str, tuple[str, bytes | str | None]]:
    """Every entry under `root`: its kind and its content or link target (FIFOs unread)."""
    out: dict[str, tuple[str, bytes | str | None]] = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        rel = str(path.relative_to(root))
        if stat.S_ISLNK(st.st_mode):
            out[rel] = ("link", os.readlink(path))
        elif stat.S_ISFIFO(st.st_mode):
            out[rel] = ("fifo", None)
        elif stat.S_ISREG(st.st_mode):
            out[rel] = ("file", path.read_bytes())
        else:
            out[rel] = ("dir", None)
    return out


def outside_of(
    tree_now: dict[str, tuple[str, bytes | str | None]], inside: str
) -> dict[str, tuple[str, bytes | str | None]]:
    return {k: v for k, v in tree_now.items() if not k.startswith(inside + "/")}


@pytest.fixture
def alloc(tmp_path: Path) -> Path:
    """`<tmp>/alloc` with a task directory `web/local`, and a file outside the allocation."""
    (tmp_path / "alloc" / "web" / "local").mkdir(parents=True)
    (tmp_path / "alloc" / "web" / "secrets").mkdir()
    (tmp_path / "outside").write_text("keep")
    return tmp_path / "alloc"


def fifo(path: Path) -> None:
    os.mkfifo(path, 0o666)


def kinds(directory: Path) -> dict[str, str]:
    return {
        p.name: (
            "fifo" if stat.S_ISFIFO(p.lstat().st_mode) else "link" if p.is_symlink() else "file"
        )
        for p in directory.iterdir()
    }


# --------------------------------------------------------------------------- templates


async def test_a_template_source_is_read_up_to_its_cap(alloc: Path) -> None:
    local = alloc / "web" / "local"
    (local / "at_cap.tmpl").write_bytes(b"x" * MAX_SOURCE_BYTES)
    data = await bounded(lambda: read_confined(alloc, "web/local/at_cap.tmpl"))
    assert data == b"x" * MAX_SOURCE_BYTES
    # The task writes the source: a larger one is refused, not read whole.
    with (local / "huge.tmpl").open("wb") as f:
        f.truncate(1 << 40)  # a terabyte, sparse
    with pytest.raises(TemplateFileError) as caught:
        await bounded(lambda: read_confined(alloc, "web/local/huge.tmpl"))
    assert str(caught.value) == (
        f"template source 'web/local/huge.tmpl' is larger than {MAX_SOURCE_BYTES} bytes"
    )


async def test_a_fifo_source_is_refused_without_blocking(alloc: Path) -> None:
    local = alloc / "web" / "local"
    fifo(local / "app.tmpl")
    os.symlink("app.tmpl", local / "via_link.tmpl")  # a link inside leads to it all the same
    for name in ("app.tmpl", "via_link.tmpl"):
        with pytest.raises(TemplateFileError, match="is not a regular file"):
            await bounded(lambda name=name: read_confined(alloc, f"web/local/{name}"))


async def test_a_source_link_leading_outside_is_refused(alloc: Path) -> None:
    os.symlink(alloc.parent / "outside", alloc / "web" / "local" / "out.tmpl")
    with pytest.raises(TemplateFileError, match="escapes alloc directory"):
        await bounded(lambda: read_confined(alloc, "web/local/out.tmpl"))


async def test_a_fifo_at_the_old_temporary_name_does_not_block_a_rerender(alloc: Path) -> None:
    local = alloc / "web" / "local"
    (local / "app.conf").write_bytes(b"old")
    fifo(local / ".app.conf.yurt-tmp")
    before = outside_of(tree(alloc.parent), "alloc/web/local")
    written = await bounded(
        lambda: write_confined(alloc, "web/local/app.conf", b"new", 0o644, if_changed=True)
    )
    assert written is True
    assert (local / "app.conf").read_bytes() == b"new"
    assert kinds(local) == {"app.conf": "file", ".app.conf.yurt-tmp": "fifo"}
    assert outside_of(tree(alloc.parent), "alloc/web/local") == before


async def test_a_fifo_at_the_destination_is_replaced_never_opened(alloc: Path) -> None:
    local = alloc / "web" / "local"
    fifo(local / "app.conf")
    fifo(local / ".app.conf.yurt-tmp")
    written = await bounded(
        lambda: write_confined(alloc, "web/local/app.conf", b"new", 0o640, if_changed=True)
    )
    assert written is True
    assert (local / "app.conf").read_bytes() == b"new"
    assert stat.S_IMODE((local / "app.conf").stat().st_mode) == 0o640
    assert kinds(local) == {"app.conf": "file", ".app.conf.yurt-tmp": "fifo"}
    # Rendered again with the same text: a regular file holding it is left alone.
    inode = (local / "app.conf").stat().st_ino
    assert (
        await bounded(
            lambda: write_confined(alloc, "web/local/app.conf", b"new", 0o640, if_changed=True)
        )
        is False
    )
    assert (local / "app.conf").stat().st_ino == inode


async def test_links_at_the_old_temporary_name_redirect_nothing(alloc: Path) -> None:
    local = alloc / "web" / "local"
    other = alloc / "web" / "secrets" / "other"  # a file the task could not write itself
    other.write_text("theirs")
    os.symlink(alloc.parent / "outside", local / ".a.conf.yurt-tmp")
    os.link(other, local / ".b.conf.yurt-tmp")
    before = outside_of(tree(alloc.parent), "alloc/web/local")
    for name in ("a.conf", "b.conf"):
        await bounded(lambda name=name: write_confined(alloc, f"web/local/{name}", b"x", 0o644))
        assert (local / name).read_bytes() == b"x"
    assert (alloc.parent / "outside").read_text() == "keep"
    assert other.read_text() == "theirs"
    assert outside_of(tree(alloc.parent), "alloc/web/local") == before
    assert kinds(local) == {
        "a.conf": "file",
        "b.conf": "file",
        ".a.conf.yurt-tmp": "link",
        ".b.conf.yurt-tmp": "file",
    }


def predictable(monkeypatch: pytest.MonkeyPatch, suffixes: list[str]) -> None:
    """Make the random part of temporary names the given sequence."""
    it: Iterator[str] = iter(suffixes)
    monkeypatch.setattr(confined_write.secrets, "token_hex", lambda n: next(it))


async def test_a_guessed_temporary_name_is_skipped_for_a_fresh_one(
    alloc: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = alloc / "web" / "local"
    predictable(monkeypatch, ["guessed1", "guessed2", "fresh"])
    fifo(local / ".app.conf.guessed1.yurt-tmp")
    os.symlink(alloc.parent / "outside", local / ".app.conf.guessed2.yurt-tmp")
    await bounded(lambda: write_confined(alloc, "web/local/app.conf", b"new", 0o644))
    assert (local / "app.conf").read_bytes() == b"new"
    assert (alloc.parent / "outside").read_text() == "keep"
    assert kinds(local) == {
        "app.conf": "file",
        ".app.conf.guessed1.yurt-tmp": "fifo",
        ".app.conf.guessed2.yurt-tmp": "link",
    }


async def test_every_name_taken_fails_without_writing(
    alloc: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = alloc / "web" / "local"
    predictable(monkeypatch, ["same"] * confined_write.ATTEMPTS)
    fifo(local / ".app.conf.same.yurt-tmp")
    with pytest.raises(FileExistsError):
        await bounded(lambda: write_confined(alloc, "web/local/app.conf", b"new", 0o644))
    assert kinds(local) == {".app.conf.same.yurt-tmp": "fifo"}  # the planted FIFO is kept


async def test_a_failed_write_leaves_no_temporary_file(
    alloc: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = alloc / "web" / "local"
    (local / "dir.conf").mkdir()
    with pytest.raises(IsADirectoryError):
        await bounded(lambda: write_confined(alloc, "web/local/dir.conf", b"x", 0o644))
    assert [p.name for p in local.iterdir()] == ["dir.conf"]

    def no_space(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(confined_write.os, "fsync", no_space)
    (local / "app.conf").write_bytes(b"old")
    with pytest.raises(OSError, match="No space"):
        await bounded(lambda: write_confined(alloc, "web/local/app.conf", b"new", 0o644))
    assert sorted(p.name for p in local.iterdir()) == ["app.conf", "dir.conf"]
    assert (local / "app.conf").read_bytes() == b"old"


async def test_a_long_destination_name_still_gets_a_temporary_file(alloc: Path) -> None:
    name = "n" * 255  # NAME_MAX: the temporary name must not be longer
    await bounded(lambda: write_confined(alloc, f"web/local/{name}", b"x", 0o644))
    assert (alloc / "web" / "local" / name).read_bytes() == b"x"


async def test_the_owner_is_set_and_the_mode_survives_it(alloc: Path) -> None:
    assert os.geteuid() == 0, "the agent runs as root; so do its tests"
    await bounded(
        lambda: write_confined(alloc, "web/local/app.conf", b"x", 0o2750, uid=4321, gid=4322)
    )
    st = (alloc / "web" / "local" / "app.conf").stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (4321, 4322, 0o2750)


# --------------------------------------------------------------------------- identity tokens


async def test_a_token_is_written_past_fifos_and_links(alloc: Path) -> None:
    task_dir = alloc / "web"
    secrets_dir = task_dir / "secrets"
    fifo(secrets_dir / "nomad_token")
    fifo(secrets_dir / ".nomad_token.yurt-tmp")
    os.symlink(alloc.parent / "outside", secrets_dir / "nomad_api.jwt")
    before = outside_of(tree(alloc.parent), "alloc/web/secrets")
    await bounded(lambda: write_token(task_dir, "secrets/nomad_token", "tok", (4321, 4322)))
    await bounded(lambda: write_token(task_dir, "secrets/nomad_api.jwt", "api", None))
    token = secrets_dir / "nomad_token"
    assert token.read_text() == "tok"
    st = token.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (4321, 4322, 0o600)
    assert (secrets_dir / "nomad_api.jwt").read_text() == "api"
    assert (alloc.parent / "outside").read_text() == "keep"
    assert kinds(secrets_dir) == {
        "nomad_token": "file",
        ".nomad_token.yurt-tmp": "fifo",
        "nomad_api.jwt": "file",
    }
    assert outside_of(tree(alloc.parent), "alloc/web/secrets") == before
