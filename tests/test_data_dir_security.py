"""Who can read the agent's data dir: its databases (layer 2: real files), and what its
allocations hold, against a local user who runs nothing there (layer 2: a real agent and
real tasks; the attacker is uid 4242 in a child process)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from tests.agent_support import running_agent, wait_status
from tests.runtime_support import eventually
from yurt.runtime.client.allocdir import AllocDir, make_data_dir
from yurt.runtime.errors import StateError
from yurt.runtime.server.state.sqlite import ServerStore
from yurt.store import open_state_db

ATTACKER = 4242


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_server_db_holding_job_env_is_private(tmp_path: Path) -> None:
    with trio.fail_after(10):
        store = await ServerStore.open(tmp_path / "server")
        await store.aclose()
    assert mode(tmp_path / "server") == 0o700
    assert mode(tmp_path / "server" / "server.db") == 0o600


async def test_databases_left_readable_by_an_older_yurt_are_narrowed(tmp_path: Path) -> None:
    with trio.fail_after(10):
        store = await ServerStore.open(tmp_path / "server")
        await store.aclose()
        async with open_state_db(tmp_path / "client"):
            pass
        for path in (tmp_path / "server", tmp_path / "client"):
            path.chmod(0o755)
        for path in (tmp_path / "server" / "server.db", tmp_path / "client" / "state.db"):
            path.chmod(0o644)
        store = await ServerStore.open(tmp_path / "server")
        await store.aclose()
        async with open_state_db(tmp_path / "client"):
            pass
    for path in (tmp_path / "server", tmp_path / "client"):
        assert mode(path) == 0o700, path
    for path in (tmp_path / "server" / "server.db", tmp_path / "client" / "state.db"):
        assert mode(path) == 0o600, path


def test_the_data_dir_is_made_0711_and_a_wider_one_narrowed(tmp_path: Path) -> None:
    make_data_dir(tmp_path / "new")
    assert mode(tmp_path / "new") == 0o711
    (tmp_path / "old").mkdir(mode=0o755)
    (tmp_path / "old").chmod(0o775)  # as an older yurt (or a umask of 002) left it
    make_data_dir(tmp_path / "old")
    assert mode(tmp_path / "old") == 0o711
    (tmp_path / "private").mkdir(mode=0o700)
    make_data_dir(tmp_path / "private")
    assert mode(tmp_path / "private") == 0o700  # tighter stays tighter


def test_a_data_dir_every_user_may_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    with pytest.raises(StateError, match=f"the data dir {shared} is writable by every user "
                                         r"\(mode 1777\)"):
        make_data_dir(shared)
    assert mode(shared) == 0o1777  # left as it was


@pytest.fixture
def public_root() -> Iterator[Path]:
    """A directory every user can search, as /var/lib is (pytest's tmp tree is root's only)."""
    path = Path(tempfile.mkdtemp(prefix="yurt-datadir-"))
    path.chmod(0o711)
    try:
        yield path
    finally:
        shutil.rmtree(path)


#: What a local user tries, each on its own, reporting the errno name (or "done").
_ATTACK = """
import errno, json, os, sys
found = {}
for what, path in json.loads(sys.argv[1]):
    try:
        if what == "list":
            os.listdir(path)
        elif what == "read":
            with open(path, "rb") as f:
                f.read(1)
        else:
            os.symlink("/etc/shadow", path)
        found[f"{what} {path}"] = "done"
    except OSError as e:
        found[f"{what} {path}"] = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(found))
"""


def attack(steps: list[tuple[str, Path]]) -> dict[str, str]:
    """`steps` tried by uid 4242 (no groups), as a local user with a shell would."""
    ran = subprocess.run(
        ["setpriv", f"--reuid={ATTACKER}", f"--regid={ATTACKER}", "--clear-groups",
         sys.executable, "-I", "-c", _ATTACK, json.dumps([(w, str(p)) for w, p in steps])],
        capture_output=True, text=True, timeout=30, check=False)
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout)  # type: ignore[no-any-return]


APP = "echo app-output; echo from-app > $NOMAD_ALLOC_DIR/data/shared; exec sleep 1000"
#: Another user, of another primary group: waits for what `app` wrote, answers in kind.
READER = ("until [ -f $NOMAD_ALLOC_DIR/data/shared ]; do sleep 0.05; done; "
          "cat $NOMAD_ALLOC_DIR/data/shared; echo from-reader > $NOMAD_ALLOC_DIR/data/back; "
          "exec sleep 1000")
JOB = """job "private" {
  group "g" {
    task "app" {
      driver = "raw_exec"
      user   = "nobody"
      config {
        command = "/bin/sh"
        args    = ["-c", %(app)s]
      }
      template {
        data        = "password=s3cret"
        destination = "local/app.conf"
      }
    }
    task "reader" {
      driver = "raw_exec"
      user   = "daemon"
      config {
        command = "/bin/sh"
        args    = ["-c", %(reader)s]
      }
    }
  }
}"""


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="runs tasks as other users and the attacker as uid 4242")
async def test_a_local_user_reads_nothing_of_an_allocation_and_plants_no_link(
        public_root: Path) -> None:
    data = public_root / "data"
    alloc_id = ""
    try:
        with trio.fail_after(60):
            async with running_agent(data) as a:
                hcl = JOB % {"app": json.dumps(APP), "reader": json.dumps(READER)}
                parsed = await a.client.post("/v1/jobs/parse", json={"JobHCL": hcl})
                assert parsed.status_code == 200, parsed.text
                put = await a.client.post("/v1/jobs", json={"Job": parsed.json()})
                assert put.status_code == 200, put.text
                alloc_id = str((await wait_status(a.client, "private", "running"))["ID"])
                alloc = data / "alloc" / alloc_id
                # Tasks of two users (no primary group in common) still share alloc/data.
                reader_log = alloc / "alloc/logs/reader.stdout.0"
                await eventually(lambda: reader_log.exists()
                                 and reader_log.read_text() == "from-app\n")
                await eventually(lambda: (alloc / "alloc/data/back").exists())
                await eventually(lambda: (alloc / "app/local/app.conf").exists()
                                 and (alloc / "alloc/logs/app.stdout.0").exists())
                tried = await trio.to_thread.run_sync(attack, [
                    ("list", data),
                    ("list", data / "alloc"),
                    ("list", alloc / "alloc/logs"),
                    ("read", alloc / "alloc/logs/app.stdout.0"),
                    ("list", alloc / "app/local"),
                    ("read", alloc / "app/local/app.conf"),
                    ("list", alloc / "alloc/data"),
                    ("read", alloc / "alloc/data/shared"),
                    ("link", alloc / "alloc/data/planted"),
                    ("link", alloc / "alloc/tmp/planted"),
                    ("link", alloc / "app/tmp/planted"),
                ])
                await a.client.delete("/v1/job/private")
    finally:
        if alloc_id:  # the group made for the allocation goes with its directory
            await AllocDir(data / "alloc", alloc_id).destroy()
    assert tried == dict.fromkeys(tried, "EACCES"), tried
    assert len(tried) == 11
