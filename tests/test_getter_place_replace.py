"""Layer 2: replacing a directory in a destination tasks share — real directories and FIFOs.

Covered: a subdirectory a task swaps for a FIFO just before the placement opens it (root's
worker thread must not block in open(2)); a replaced tree holding links, FIFOs and deep
directories removed without following anything; `check` called while removing and able to
stop it; the old directory put back when the new one cannot take its name; the bounds.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import yurt.runtime.client.getter.place as place_module
from yurt.runtime.client.getter.place import ASIDE_PREFIX, Target, place
from yurt.runtime.client.getter.source import GetterError

pytestmark = pytest.mark.slow


class Stop(Exception):
    """What the test's `check` raises, as Trio's `Cancelled` would in the agent."""


@pytest.fixture
def alloc(tmp_path: Path) -> Path:
    data = tmp_path / "alloc" / "alloc" / "data"
    data.mkdir(parents=True)
    return tmp_path / "alloc"


@pytest.fixture
def staged(tmp_path: Path) -> Path:
    stage = tmp_path / "stage"
    stage.mkdir()
    (stage / "out").write_text("artifact")
    return stage / "out"


TARGET = Target(("alloc", "data"), "cfg", is_destination=False)


def data_of(alloc: Path) -> Path:
    return alloc / "alloc" / "data"


def run_bounded(fn: Callable[[], None], fifo: Path) -> list[str]:
    """`fn` in a thread; if it is still blocked after 10 s (on the FIFO), a writer opens the
    FIFO to release it, so a regression fails the test instead of hanging it."""
    result: list[str] = []

    def run() -> None:
        try:
            fn()
            result.append("placed")
        except Exception as e:
            result.append(f"{type(e).__name__}: {e}")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(10)
    blocked = thread.is_alive()
    if blocked:
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(10)
    assert not blocked, "the placement blocked in open(2) on a FIFO a task swapped in"
    return result


def test_a_subdirectory_swapped_for_a_fifo_does_not_block_the_placement(
        alloc: Path, staged: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The task wins the race at the worst instant: right before root opens the
    subdirectory `zz` of the directory being replaced, it becomes a FIFO. shutil.rmtree
    opened it O_RDONLY and blocked for ever."""
    cfg = data_of(alloc) / "cfg"
    (cfg / "zz").mkdir(parents=True)
    real_open = os.open
    swapped: list[int] = []

    def racing_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if path == "zz" and not swapped:
            parent = kwargs.get("dir_fd")
            os.rmdir("zz", dir_fd=parent)
            os.mkfifo("zz", dir_fd=parent)
            swapped.append(flags)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", racing_open)
    result = run_bounded(lambda: place(staged, alloc, TARGET, None), cfg / "zz")
    monkeypatch.undo()
    assert swapped, "the race was not reached"
    assert result == ["placed"]
    assert (data_of(alloc) / "cfg").read_text() == "artifact"
    assert os.listdir(data_of(alloc)) == ["cfg"]  # nothing left aside


def test_a_replaced_tree_is_removed_without_following_anything(alloc: Path, staged: Path,
                                                               tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep")
    cfg = data_of(alloc) / "cfg"
    deep = cfg.joinpath(*["d"] * 20)
    deep.mkdir(parents=True)
    (deep / "f").write_text("x")
    os.symlink(outside, cfg / "link")
    os.symlink(outside, deep / "link")
    os.mkfifo(cfg / "fifo")
    os.mkfifo(deep / "fifo")
    for i in range(100):
        (cfg / f"f{i}").write_text("old")
    checks = [0]

    def check() -> None:
        checks[0] += 1

    place(staged, alloc, TARGET, None, check=check)
    assert cfg.read_text() == "artifact"
    assert os.listdir(data_of(alloc)) == ["cfg"]
    assert (outside / "precious").read_text() == "keep"
    assert checks[0] >= 100 + 20  # an entry, a check


def test_a_check_that_raises_stops_the_removal(alloc: Path, staged: Path) -> None:
    """A kill while a huge replaced tree is removed: the new file is already placed, the
    rest of the old tree stays aside (its random name)."""
    cfg = data_of(alloc) / "cfg"
    cfg.mkdir()
    for i in range(50):
        (cfg / f"f{i}").write_text("old")
    calls = [0]

    def check() -> None:
        calls[0] += 1
        if calls[0] == 10:
            raise Stop

    with pytest.raises(Stop):
        place(staged, alloc, TARGET, None, check=check)
    assert cfg.read_text() == "artifact"
    [aside] = [p for p in data_of(alloc).iterdir() if p.name.startswith(ASIDE_PREFIX)]
    assert 0 < len(os.listdir(aside)) < 50


@pytest.mark.parametrize(("bound", "value"), [("MAX_REMOVED", 20), ("MAX_REMOVE_DEPTH", 5)])
def test_the_removal_is_bounded(alloc: Path, staged: Path, monkeypatch: pytest.MonkeyPatch,
                                bound: str, value: int) -> None:
    monkeypatch.setattr(place_module, bound, value)
    cfg = data_of(alloc) / "cfg"
    cfg.joinpath(*["d"] * 10).mkdir(parents=True)
    for i in range(30):
        (cfg / f"f{i}").write_text("old")
    with pytest.raises(GetterError, match="replaced directory"):
        place(staged, alloc, TARGET, None)
    assert cfg.read_text() == "artifact"


def test_the_old_directory_goes_back_when_the_new_entry_cannot_take_its_name(
        alloc: Path, staged: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = data_of(alloc) / "cfg"
    cfg.mkdir()
    (cfg / "mine").write_text("task data")
    real_replace = os.replace

    def failing_replace(src: Any, dst: Any, **kwargs: Any) -> None:
        if dst == "cfg":
            raise PermissionError(13, "refused by the test")
        real_replace(src, dst, **kwargs)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(PermissionError):
        place(staged, alloc, TARGET, None)
    assert (cfg / "mine").read_text() == "task data"
    assert os.listdir(data_of(alloc)) == ["cfg"]


@pytest.fixture
def no_rmtree(monkeypatch: pytest.MonkeyPatch) -> None:
    """Placement never hands a task-writable tree to shutil.rmtree."""
    import shutil

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("shutil.rmtree used on a shared destination")

    monkeypatch.setattr(shutil, "rmtree", refuse)


def test_a_directory_merged_over_one_with_a_subdirectory_replaces_it_by_the_walk(
        alloc: Path, tmp_path: Path, no_rmtree: None) -> None:
    """A staged file replacing a directory inside a merge goes through the same walk."""
    cfg = data_of(alloc) / "cfg"
    (cfg / "sub").mkdir(parents=True)
    (cfg / "sub" / "old").write_text("old")
    stage = tmp_path / "tree"
    (stage / "cfg").mkdir(parents=True)
    (stage / "cfg" / "sub").write_text("now a file")
    place(stage, alloc, Target(("alloc", "data"), None), None)
    assert (cfg / "sub").read_text() == "now a file"
    assert os.listdir(cfg) == ["sub"]
