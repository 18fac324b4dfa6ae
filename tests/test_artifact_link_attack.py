"""Layer 2: a task plants a link in `alloc/data` to steer a sibling's artifact (real files,
a real unprivileged process planting the link, the real getter and artifact hook).

The attack: a `nobody` task links `alloc/data/tools` to a root task's `local/`; a sibling's
`chown = true` artifact with destination `../alloc/data/tools` then lands in the root task's
directory, owned by `nobody`, which can rewrite the program the root task runs. The link
stays inside the allocation directory, which Nomad's rules allowed. The placement must refuse
it, with a task event that names the link.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from tests.runtime_support import job_alloc
from yurt.hooks.artifact import ArtifactDownloadError, ArtifactHook
from yurt.hooks.base import TaskHookContext
from yurt.runtime.client.allocdir import AllocDir
from yurt.runtime.client.drivers.users import owner_of
from yurt.runtime.client.getter.config import ArtifactConfig
from yurt.runtime.client.getter.get import ArtifactRequest, get
from yurt.runtime.client.getter.source import GetterError
from yurt.runtime.structs import TaskEvent

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                 reason="plants the link as nobody: needs root and setpriv")]

NOBODY = owner_of("nobody")
JOB = '''job "j" {
  group "g" {
    task "evil" {
      driver = "raw_exec"
      user   = "nobody"
      config { command = "/bin/true" }
    }
    task "fetch" {
      driver = "raw_exec"
      user   = "nobody"
      config { command = "/bin/true" }
      artifact {
        source      = "file://%(src)s"
        destination = "../alloc/data/tools"
        chown       = true
      }
    }
    task "admin" {
      driver = "raw_exec"
      config { command = "local/tool" }
    }
  }
}'''


@pytest.fixture
def data_root() -> Iterator[Path]:
    """A root every user can search, as /var/lib is (pytest's own tmp tree is root's only)."""
    path = Path(tempfile.mkdtemp(prefix="yurt-artifact-link-"))
    path.chmod(0o711)
    try:
        yield path
    finally:
        shutil.rmtree(path)


def as_nobody(*argv: str) -> subprocess.CompletedProcess[str]:
    assert NOBODY is not None
    uid, gid = NOBODY
    return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
                           *argv], capture_output=True, text=True, timeout=30, check=False)


def snapshot(path: Path) -> list[tuple[str, int, int, int, bytes]]:
    found = []
    for p in [path, *sorted(path.rglob("*"))]:
        st = p.lstat()
        body = p.read_bytes() if p.is_file() and not p.is_symlink() else b""
        found.append((str(p.relative_to(path)), st.st_uid, st.st_gid, st.st_mode, body))
    return found


async def test_a_link_a_task_plants_in_alloc_data_never_steers_a_siblings_artifact(
        data_root: Path) -> None:
    alloc = AllocDir(data_root / "alloc", "a1")
    with trio.fail_after(30):
        await alloc.build_all({"evil": "nobody", "fetch": "nobody", "admin": ""},
                              resolve_owner=owner_of)
    admin_local = alloc.task_dir("admin") / "local"
    (admin_local / "tool").write_text("#!/bin/sh\necho the admin's own tool\n")
    before = snapshot(admin_local)
    # The evil task, as itself: what its own `ln -s` can do in the allocation's shared dir.
    planted = as_nobody("ln", "-s", "../../admin/local", str(alloc.shared / "data/tools"))
    assert planted.returncode == 0, planted.stderr
    src = data_root / "tool"
    src.write_text("#!/bin/sh\nevil\n")
    src.chmod(0o644)

    events: list[TaskEvent] = []

    async def emit(event: TaskEvent) -> None:
        await trio.lowlevel.checkpoint()
        events.append(event)

    job = job_alloc(JOB % {"src": src})
    fetch = job.job.task_groups[0].tasks[1] if job.job else None
    assert fetch is not None
    assert fetch.name == "fetch"
    ctx = TaskHookContext(alloc=job, task=fetch,
                          task_dir=alloc.task_dir("fetch"), emit_event=emit,
                          unix_clock=lambda: 0)
    with trio.fail_after(30):
        with pytest.raises(ArtifactDownloadError) as refused:
            await ArtifactHook(ArtifactConfig(), resolve_owner=owner_of).prestart(ctx, {})
    message = refused.value.task_event.details["download_error"]
    assert message == (f'failed to download artifact "file://{src}": artifact destination '
                       "alloc/data/tools: alloc/data/tools is a symbolic link, and an artifact "
                       "is never placed through one")
    assert snapshot(admin_local) == before  # nothing planted, nothing chowned
    assert (alloc.shared / "data/tools").is_symlink()  # refused, not "fixed" behind its back
    await alloc.destroy()


async def test_a_link_deeper_in_the_destination_path_is_refused_too(data_root: Path) -> None:
    alloc = AllocDir(data_root / "alloc", "a1")
    with trio.fail_after(30):
        await alloc.build_all({"evil": "nobody", "admin": ""}, resolve_owner=owner_of)
    made = as_nobody("mkdir", str(alloc.shared / "data/app"))
    planted = as_nobody("ln", "-s", "../../../admin/local", str(alloc.shared / "data/app/bin"))
    assert made.returncode == planted.returncode == 0, (made.stderr, planted.stderr)
    before = snapshot(alloc.task_dir("admin"))
    src = data_root / "tool"
    src.write_text("evil\n")
    request = ArtifactRequest(source=str(src), alloc_dir=alloc.path,
                              task_dir=alloc.task_dir("evil"),
                              destination="../alloc/data/app/bin/x", owner=NOBODY)
    with trio.fail_after(30):
        with pytest.raises(GetterError, match="alloc/data/app/bin is a symbolic link"):
            await get(request, ArtifactConfig())
    assert snapshot(alloc.task_dir("admin")) == before
    await alloc.destroy()
