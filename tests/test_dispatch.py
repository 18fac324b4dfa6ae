"""Child jobs of parameterized and periodic jobs (sans-io), and the payload writer's
confinement to the allocation directory."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest

from yurt.hooks.dispatch_payload import DispatchPayloadError, write_payload
from yurt.runtime.server.dispatch import (
    DispatchError,
    check_dispatch,
    dispatched_child,
    is_parameterized,
    is_periodic_active,
    is_template,
    periodic_child,
)
from yurt.runtime.structs import Job, ParameterizedJobConfig, PeriodicConfig, TaskGroup


def parent(**kw: object) -> Job:
    return Job(id="p", type="batch", meta={"a": "parent"}, task_groups=[TaskGroup(name="g")],
               **kw)  # type: ignore[arg-type]


def test_dispatched_child_is_a_deep_copy_with_nomads_fields() -> None:
    p = parent(parameterized=ParameterizedJobConfig(meta_optional=["a", "b"]), priority=40)
    child = dispatched_child(p, b"\x00\xffdata", {"b": "x"}, 70, now=1_780_000_000.9)
    prefix, unix, suffix = child.id.split("/", 1)[1].split("-")
    assert (prefix, unix, len(suffix)) == ("dispatch", "1780000000", 8)
    assert (child.name, child.parent_id, child.dispatched, child.priority) == (
        child.id, "p", True, 70)
    assert child.meta == {"a": "parent", "b": "x"}
    assert child.parameterized == p.parameterized  # kept, as Nomad; not a template any more
    assert is_parameterized(p)
    assert not is_parameterized(child)
    assert not is_template(child)
    child.task_groups[0].name = "changed"
    child.meta["a"] = "changed"
    assert (p.task_groups[0].name, p.meta["a"]) == ("g", "parent")
    encoded = msgspec.json.decode(msgspec.json.encode(child))
    assert (encoded["Payload"], encoded["ParentID"], encoded["Dispatched"]) == (
        "AP9kYXRh", "p", True)
    assert msgspec.json.decode(msgspec.json.encode(child), type=Job).payload == b"\x00\xffdata"


def test_periodic_child_and_tracking() -> None:
    p = parent(periodic=PeriodicConfig(cron="@daily"))
    assert is_periodic_active(p)
    assert is_template(p)
    child = periodic_child(p, datetime(2026, 3, 8, 5, tzinfo=UTC))
    assert child.id == "p/periodic-1772946000"
    assert (child.periodic, child.parent_id, child.dispatched) == (None, "p", False)
    assert not is_template(child)
    assert not is_periodic_active(parent(periodic=PeriodicConfig(cron="@daily"), stop=True))
    assert not is_periodic_active(parent(periodic=PeriodicConfig(cron="@daily",
                                                                 enabled=False)))
    both = parent(periodic=PeriodicConfig(cron="@daily"),
                  parameterized=ParameterizedJobConfig())
    assert not is_periodic_active(both)  # parameterized wins: its dispatches are periodic
    assert is_periodic_active(dispatched_child(both, b"", {}, 50, 0.0))


def test_check_dispatch_order_is_nomads() -> None:
    p = parent(parameterized=ParameterizedJobConfig(payload="required", meta_required=["r"]))
    # Payload problems come before meta problems, as in Nomad's validateDispatchRequest.
    with pytest.raises(DispatchError, match=r"^Payload is not provided"):
        check_dispatch(p, b"", {"zzz": "1"}, 50)
    with pytest.raises(DispatchError, match=r"unpermitted metadata keys: \[zzz\]$"):
        check_dispatch(p, b"x", {"zzz": "1"}, 50)
    check_dispatch(p, b"x" * 16 * 1024, {"r": "1"}, 50)
    with pytest.raises(DispatchError, match=r"^Payload exceeds maximum size; 16385 > 16384$"):
        check_dispatch(p, b"x" * (16 * 1024 + 1), {"r": "1"}, 50)


def test_payload_lands_in_local_and_never_outside(tmp_path: Path) -> None:
    task_dir = tmp_path / "alloc1" / "t"
    (task_dir / "local").mkdir(parents=True)
    assert write_payload(task_dir, "/in/x.json", b"{}") == task_dir / "local" / "in" / "x.json"
    assert (task_dir / "local" / "in" / "x.json").read_bytes() == b"{}"
    # A directory link planted in local/ by an earlier task: refused.
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, task_dir / "local" / "link")
    with pytest.raises(DispatchPayloadError):
        write_payload(task_dir, "link/x", b"secret")
    # A file link: replaced by the payload, never followed.
    os.symlink(outside / "target", task_dir / "local" / "file")
    write_payload(task_dir, "file", b"secret")
    assert not (task_dir / "local" / "file").is_symlink()
    assert (task_dir / "local" / "file").read_bytes() == b"secret"
    assert list(outside.iterdir()) == []


def test_a_fifo_or_hard_link_at_the_payload_is_replaced_never_opened(tmp_path: Path) -> None:
    task_dir = tmp_path / "alloc1" / "t"
    (task_dir / "local").mkdir(parents=True)
    # A FIFO a previous task left (a sticky disk): opening it for writing would block forever.
    os.mkfifo(task_dir / "local" / "p.json")
    assert write_payload(task_dir, "p.json", b"{}") == task_dir / "local" / "p.json"
    assert (task_dir / "local" / "p.json").read_bytes() == b"{}"
    # A hard link to a file elsewhere: truncating it in place would write into that file.
    other = tmp_path / "other"
    other.write_bytes(b"keep")
    os.link(other, task_dir / "local" / "h.json")
    write_payload(task_dir, "h.json", b"payload")
    assert other.read_bytes() == b"keep"
    assert (task_dir / "local" / "h.json").read_bytes() == b"payload"
    assert os.stat(task_dir / "local" / "h.json").st_mode & 0o777 == 0o777 & ~_umask()


def _umask() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))


def test_payload_directories_are_never_made_through_a_link(tmp_path: Path) -> None:
    task_dir = tmp_path / "alloc1" / "t"
    (task_dir / "local").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink("../../../outside", task_dir / "local" / "link")
    with pytest.raises(DispatchPayloadError, match="escapes the alloc"):
        write_payload(task_dir, "link/made/by/root/p", b"secret")
    assert list(outside.iterdir()) == []
    # A link that stays inside the allocation directory is followed there.
    shared = tmp_path / "alloc1" / "alloc"
    shared.mkdir()
    os.symlink("../../alloc", task_dir / "local" / "data")
    written = write_payload(task_dir, "data/sub/p", b"ok")
    assert written == shared.resolve() / "sub" / "p"
    assert (shared / "sub" / "p").read_bytes() == b"ok"
    # A dangling link where a directory is to be made: not followed, nothing made.
    os.symlink("../../nothing", task_dir / "local" / "dangling")
    with pytest.raises(DispatchPayloadError, match="no such file"):
        write_payload(task_dir, "dangling/p", b"secret")
    assert not (tmp_path / "alloc1" / "nothing").exists()
