"""`yurt operator snapshot save|inspect|restore|redact|state`, as Nomad's
command/operator_snapshot_*.go.

- `save [-stale] [-redact] [FILE]`: `GET /v1/operator/snapshot` into FILE (default
  `yurt-state-YYYYMMDD-UNIX.snap`), created 0600 and never over an existing file ("Destination
  file already exists", 1); "State file written to FILE". The archive holds the root key that
  seals the variables (runtime/lib/snapshot.py) unless `-redact`: treat it as a secret.
- `inspect [-json] FILE`: from the file alone, verified first: Nomad's `Created`, `ID`,
  `Size`, `Index`, `Term`, `Version` lines, then the `Type Count Size` table and its `Total`.
- `redact FILE`: the file rewritten without the root key (verified first; written beside it
  and renamed over it, so it is never half rewritten): "Snapshot redacted".
- `state FILE`: the snapshot's state as JSON, keyed as Nomad's `StateAsMap` (Jobs, Allocs,
  Evals, ..., SnapshotMeta): runtime/lib/snapshot.py `state_map`; `-filter` keeps the objects
  a filter expression matches (runtime/lib/bexpr_eval.py), as nomad/fsm.go `FSMFilter` does.
- `restore [-data-dir DIR] FILE`: offline. Nomad restores into a running server through raft;
  a yurt agent holds its state in memory as well as in its files, so a live swap would leave
  the two apart. The restore takes the agent's lock on DIR (default: the default data dir), so
  it refuses while an agent runs there (exit 1, naming its pid), verifies the archive before
  writing anything, and keeps the files it replaces in `DIR/server/pre-restore-<ms>/`. The
  next `yurt agent` on DIR starts from the snapshot's state. "Snapshot Restored" (0).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from yurt.runtime.cli.output import echo, fail
from yurt.runtime.errors import EXIT_FAILED


@click.group("snapshot")
def snapshot_group() -> None:
    """Save, inspect and restore the server's state."""


def ibytes(n: int) -> str:
    """go-humanize's `IBytes`: `512 B`, `1.5 KiB`, `81 KiB`."""
    if n < 10:
        return f"{n} B"
    units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"]
    value, unit = float(n), 0
    while value >= 1024 and unit < len(units) - 1:
        value, unit = value / 1024, unit + 1
    if unit == 0:
        return f"{n} B"
    return f"{value:.1f} {units[unit]}" if value < 10 else f"{value:.0f} {units[unit]}"


@snapshot_group.command("save")
@click.option("-stale", "--stale", is_flag=True, help="Accepted: the agent is its own leader.")
@click.option("-redact", "--redact", is_flag=True,
              help="Leave the root key out (variables cannot be read after a restore "
                   "elsewhere).")
@click.argument("file", required=False)
def snapshot_save(stale: bool, redact: bool, file: str | None) -> None:
    """Save a snapshot of the server's state."""
    from yurt.runtime.cli.api_client import api, fail_on_error

    name = file or time.strftime("yurt-state-%Y%m%d-", time.localtime()) + \
        f"{int(time.time())}.snap"
    if os.path.lexists(name):
        fail(f'Destination file already exists: "{name}"')
    with api() as client:
        response = client.get("/v1/operator/snapshot", params={"redact": ""} if redact else {},
                              timeout=300)
        fail_on_error(response, "Failed to get snapshot file")
        data = response.content
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except FileExistsError:
        fail(f'Destination file already exists: "{name}"')
    except OSError as e:
        fail(f"Failed to create file: {e.strerror or e}")
    echo(f"State file written to {name}")


def _read(file: str) -> Any:
    from yurt.runtime.lib.snapshot import SnapshotError, read

    try:
        return read(Path(file))
    except OSError as e:
        fail(f"Error opening snapshot file: {file}: {e.strerror or e}")
    except SnapshotError as e:
        fail(f"Error inspecting snapshot: {e}")


@snapshot_group.command("inspect")
@click.option("-json", "--json", "json_output", is_flag=True, help="Print JSON.")
@click.argument("file")
def snapshot_inspect(json_output: bool, file: str) -> None:
    """Display the metadata of a snapshot file."""
    from datetime import datetime

    from yurt.runtime.cli.output import emit_json, format_kv
    from yurt.runtime.lib.snapshot import stats

    snap = _read(file)
    rows = stats(snap)
    if json_output:
        emit_json({"Meta": snap.meta, "Stats": [{"Name": n, "Count": c, "Sum": s}
                                                for n, c, s in rows]})
        return
    meta = snap.meta
    created = ""
    parts = str(meta.get("ID", "")).split("-")
    if len(parts) == 3 and parts[2].isdigit():
        created = datetime.fromtimestamp(int(parts[2]) / 1000).astimezone().isoformat(
            timespec="seconds")
    echo(format_kv([("Created", created), ("ID", str(meta.get("ID", ""))),
                    ("Size", ibytes(int(meta.get("Size") or 0))),
                    ("Index", str(meta.get("Index", 0))), ("Term", str(meta.get("Term", 0))),
                    ("Version", str(meta.get("Version", 0)))]))
    echo()
    table = [["Type", "Count", "Size"], *([n, str(c), ibytes(s)] for n, c, s in rows),
             [" ", " ", " "],
             ["Total", str(sum(c for _, c, _ in rows)), ibytes(sum(s for _, _, s in rows))]]
    widths = [max(len(r[i]) for r in table) for i in range(3)]
    for row in table:
        echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


@snapshot_group.command("redact")
@click.argument("file")
def snapshot_redact(file: str) -> None:
    """Remove the root key from a snapshot file, in place (Nomad's "Snapshot redacted")."""
    from yurt.runtime.lib.snapshot import redact

    snap = _read(file)  # verified whole: a damaged archive is never rewritten
    tmp = file + ".tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(redact(snap))
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        fail(f"Failed to create temporary file: {e.strerror or e}")
    try:
        os.replace(tmp, file)  # whole or not at all: the file is never half rewritten
    except OSError as e:
        fail(f"Failed to finalize snapshot file: {e.strerror or e}")
    echo("Snapshot redacted")


@snapshot_group.command("state")
@click.option("-filter", "--filter", "filter_expr", default="", metavar="EXPR",
              help="Keep only the objects this filter expression (Nomad's) matches.")
@click.argument("file")
def snapshot_state(filter_expr: str, file: str) -> None:
    """Display a JSON representation of the state in a snapshot file."""
    import json

    from yurt.runtime.cli.output import echo_raw
    from yurt.runtime.errors import EXIT_USAGE
    from yurt.runtime.lib.snapshot import state_map

    keep = None
    if filter_expr:
        from yurt.runtime.lib.bexpr import BexprError
        from yurt.runtime.lib.bexpr_eval import compile_filter

        try:
            keep = compile_filter(filter_expr)
        except BexprError as e:
            fail(f"Invalid filter expression {filter_expr!r}: {e}", EXIT_USAGE)
    snap = _read(file)
    state = state_map(snap)
    if keep is not None:
        state = {kind: items if kind == "SnapshotMeta" else
                 [item for item in items if _included(keep, item)]
                 for kind, items in state.items()}
    echo_raw(json.dumps(state, indent=2))


def _included(keep: Callable[[Any], bool], item: Any) -> bool:
    """nomad/fsm.go `FSMFilter.Include`: an object the expression cannot be evaluated on
    (a selector it lacks) is left out, as one it does not match."""
    from yurt.runtime.lib.bexpr_eval import BexprEvalError

    try:
        return keep(item)
    except BexprEvalError:
        return False


def _hold_agent_lock(data_dir: Path) -> int:
    """The agent's own lock on `data_dir` (store/sqlite_file.py `_acquire_lock`: `client/
    state.lock`, flocked while an agent runs), held by this process until it exits."""
    import fcntl

    client_dir = data_dir / "client"
    client_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(client_dir / "state.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        fail(f"Failed to restore snapshot: an agent (pid {holder}) is running on "
             f"{data_dir}: stop it first (yurt restores a snapshot into a stopped agent's "
             "data dir)")
    return fd


@snapshot_group.command("restore")
@click.option("-data-dir", "--data-dir", "data_dir", default=None,
              type=click.Path(file_okay=False, path_type=Path),
              help="The stopped agent's data dir (default: the agent's default).")
@click.argument("file")
def snapshot_restore(data_dir: Path | None, file: str) -> None:
    """Restore a snapshot into a stopped agent's data dir."""
    from yurt.runtime.lib.datadir import default_data_dir
    from yurt.runtime.lib.snapshot import restore

    snap = _read(file)  # verified whole before anything is touched
    target = data_dir if data_dir is not None else default_data_dir()
    if not target.is_dir():
        fail(f"Failed to restore snapshot: the data dir {target} does not exist")
    fd = _hold_agent_lock(target)
    try:
        kept = restore(target / "server", snap)
    except OSError as e:
        fail(f"Failed to restore snapshot: {e}: the replaced files are kept in "
             f"{target / 'server'}/pre-restore-*", EXIT_FAILED)
    finally:
        os.close(fd)
    echo("Snapshot Restored")
    echo(f"(into {target}; the replaced state is kept in {kept})", err=True)
    sys.stdout.flush()
