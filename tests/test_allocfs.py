"""The confined walk of runtime/client/allocfs.py on a plain directory (layer 0, no agent): Nomad's
lexical cleaning, Go's mode strings and content sniffing, and — with a thread swapping a file,
a link and a directory under it the whole time — no read ever returning a byte from outside."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from yurt.runtime.client.allocfs import (
    ESCAPES,
    FsError,
    clean_parts,
    go_file_mode,
    list_dir,
    open_confined,
    open_file,
    sniff,
    stat_path,
)

OUTSIDE = b"outside-secret-content"


@pytest.mark.parametrize(("path", "parts"), [
    ("/", []), ("", []), ("a/./b//c/", ["a", "b", "c"]), ("a/../b", ["b"]),
    ("/t/local/../secrets", ["t", "secrets"])])
def test_paths_are_cleaned_as_go_joins_them(path: str, parts: list[str]) -> None:
    assert clean_parts(path) == parts


@pytest.mark.parametrize("path", ["..", "../x", "/../x", "a/../../x", "a/b/../../.."])
def test_dots_above_the_top_escape(path: str) -> None:
    with pytest.raises(FsError, match=ESCAPES) as caught:
        clean_parts(path)
    assert caught.value.status == 400


@pytest.mark.parametrize(("mode", "text"), [
    (stat.S_IFDIR | 0o755, "drwxr-xr-x"), (stat.S_IFREG | 0o644, "-rw-r--r--"),
    (stat.S_IFLNK | 0o777, "Lrwxrwxrwx"), (stat.S_IFDIR | 0o1777, "dtrwxrwxrwx"),
    (stat.S_IFIFO | 0o600, "prw-------"), (stat.S_IFCHR | 0o666, "Dcrw-rw-rw-"),
    (stat.S_IFREG | 0o4755, "urwxr-xr-x"), (stat.S_IFSOCK | 0o755, "Srwxr-xr-x")])
def test_modes_are_spelled_as_gos(mode: int, text: str) -> None:
    assert go_file_mode(mode) == text


@pytest.mark.parametrize(("head", "kind"), [
    (b"hello\n", "text/plain; charset=utf-8"), (b"\x7fELF\x02\x01\x00", "application/octet-stream"),
    (b"%PDF-1.4", "application/pdf"), (b"\x89PNG\r\n\x1a\n....", "image/png"),
    (b"  <html><body>", "text/html; charset=utf-8"), (b"<?xml version", "text/xml; charset=utf-8"),
    (b"\x1f\x8b\x08\x00", "application/x-gzip")])
def test_content_is_sniffed_as_go_sniffs_it(head: bytes, kind: str) -> None:
    assert sniff(head) == kind


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "alloc-id"
    (root / "t/local").mkdir(parents=True)
    (root / "t/secrets").mkdir()
    (root / "t/local/f.txt").write_bytes(b"inside\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_bytes(OUTSIDE)
    return root, outside


def test_links_are_resolved_inside_and_refused_outside(tmp_path: Path) -> None:
    root, outside = _tree(tmp_path)
    local = root / "t/local"
    os.symlink("../../t/local/f.txt", local / "rel")
    os.symlink(root / "t/local/f.txt", local / "abs")
    os.symlink("a", local / "b")
    os.symlink("b", local / "a")
    os.symlink(outside, local / "out")
    os.symlink("../../../outside/f.txt", local / "up")
    assert stat_path(root, "t/local/rel")["Size"] == 7
    assert stat_path(root, "t/local/abs")["Name"] == "abs"
    assert [e["Name"] for e in list_dir(root, "t/local")] == [
        "a", "abs", "b", "f.txt", "out", "rel", "up"]
    for path in ("t/local/out/f.txt", "t/local/up", "t/local/out"):
        with pytest.raises(FsError, match=ESCAPES):
            open_confined(root, path)
    with pytest.raises(FsError, match="too many levels of symbolic links"):
        open_confined(root, "t/local/a")
    with pytest.raises(FsError, match="not a directory"):
        open_confined(root, "t/local/f.txt/x")


def test_a_swapping_task_never_gets_outside_content_read(tmp_path: Path) -> None:
    """A file swapped with a link to the outside, and a directory swapped with a link to an
    outside directory, as fast as a thread can, while the same paths are read."""
    root, outside = _tree(tmp_path)
    local = root / "t/local"
    (local / "d").mkdir()
    (local / "d/f.txt").write_bytes(b"inside\n")
    os.symlink(outside / "f.txt", local / "link-file")
    os.symlink(outside, local / "link-dir")
    os.mkdir(local / "real-dir")
    (local / "real-dir/f.txt").write_bytes(b"inside\n")
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            os.rename(local / "link-file", local / "swap.tmp")
            os.rename(local / "f.txt", local / "link-file")
            os.rename(local / "swap.tmp", local / "f.txt")
            os.rename(local / "link-dir", local / "swap-dir.tmp")
            os.rename(local / "real-dir", local / "link-dir")
            os.rename(local / "swap-dir.tmp", local / "real-dir")

    swapper = threading.Thread(target=swap)
    swapper.start()
    outcomes: dict[str, int] = {}
    try:
        for _ in range(3000):
            for path in ("t/local/f.txt", "t/local/real-dir/f.txt"):
                try:
                    opened = open_file(root, path, ["t"])
                except FsError as e:
                    outcomes[str(e)[:20]] = outcomes.get(str(e)[:20], 0) + 1
                    continue
                try:
                    data = os.pread(opened.fd, 100, 0)
                finally:
                    os.close(opened.fd)
                assert data == b"inside\n"
                outcomes["read"] = outcomes.get("read", 0) + 1
    finally:
        stop.set()
        swapper.join()
    # Both outcomes happened: the race was really run, and refused when it was lost.
    assert outcomes.get("read", 0) > 0
    assert sum(v for k, v in outcomes.items() if k != "read") > 0


def test_secrets_and_non_regular_files_are_not_opened(tmp_path: Path) -> None:
    root, _ = _tree(tmp_path)
    (root / "t/secrets/token").write_bytes(b"s3cret")
    os.mkfifo(root / "t/local/pipe")
    (root / "T").symlink_to("t")  # other spellings of the same directories
    (root / "t/Secrets").symlink_to("secrets")
    with pytest.raises(FsError, match="Reading secret file prohibited: T/Secrets/token") as e:
        open_file(root, "T/Secrets/token", ["t"])
    assert e.value.status == 403
    with pytest.raises(FsError, match='file "t/local/pipe" is not a regular file'):
        open_file(root, "t/local/pipe", ["t"])
    with pytest.raises(FsError, match='file "t/local" is a directory'):
        open_file(root, "t/local", ["t"])
