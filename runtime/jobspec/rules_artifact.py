"""The `artifact` block's rules: Nomad's `TaskArtifact.Validate` and `Canonicalize`.

What lives here: `check_artifacts` (source present, mode one of any|file|dir, destination
inside the allocation directory, a well-formed `options.checksum`; Nomad's messages, each at
its own field) and `canonicalize_artifacts` (api/tasks.go: mode `any`, empty option and header
maps dropped, the destination `local/`, or `local/<source basename>` in file mode).

Invariant: a checksum holding `${…}` is not judged here, as Nomad does not: it is only known
once the client interpolates it, and a wrong one then fails the download.
"""

from __future__ import annotations

import json
import posixpath

from yurt.runtime.jobspec.fields import _At, _Problems
from yurt.runtime.structs import Job, Task
from yurt.runtime.structs.artifact import CHECKSUM_SIZES, GETTER_MODES, TaskArtifact


def go_quote(value: str) -> str:
    """Go's `%q` for the strings users type (printable text; control characters escaped)."""
    return json.dumps(value, ensure_ascii=False)


def go_hex_error(value: str) -> str | None:
    """Go's `hex.DecodeString` error for `value`, or None when it decodes."""
    for ch in value:
        if ch not in "0123456789abcdefABCDEF":
            return f"encoding/hex: invalid byte: U+{ord(ch):04X} {_go_rune(ch)}"
    if len(value) % 2:
        return "encoding/hex: odd length hex string"
    return None


def _go_rune(ch: str) -> str:
    """Go's `%q` of a rune: single quotes, with Go's escapes for the unprintable."""
    if ch == "'":
        return "'\\''"
    if ch.isprintable():
        return f"'{ch}'"
    return "'" + json.dumps(ch)[1:-1] + "'"


def checksum_problem(check: str) -> str | None:
    """Nomad's `validateChecksum` for one `options.checksum` value, or None when it is fine."""
    if "${" in check:
        return None
    check = check.strip()
    if not check:
        return "checksum value cannot be empty"
    parts = check.split(":")
    if len(parts) != 2:
        return f'checksum must be given as "type:value"; got {go_quote(check)}'
    kind, value = parts
    bad_hex = go_hex_error(value)
    if bad_hex is not None:
        return f"invalid checksum: {bad_hex}"
    size = CHECKSUM_SIZES.get(kind)
    if size is None:
        return f"unsupported checksum type: {kind}"
    if len(value) // 2 != size:
        return f"invalid {kind} checksum: {value}"
    return None


def escapes_alloc_dir(dest: str) -> bool:
    """Whether `task/<dest>`, cleaned as Go's `filepath.Join` cleans it, leaves the allocation
    directory (Nomad's `escapingfs.PathEscapesAllocViaRelative("task", dest)`)."""
    depth = 1  # the task directory, one level below the allocation directory
    for part in dest.split("/"):
        depth += -1 if part == ".." else 0 if part in ("", ".") else 1
        if depth < 0:
            return True
    return "\0" in dest


def check_artifacts(task: Task, at: _At, problems: _Problems) -> None:
    """Nomad's `TaskArtifact.Validate` for each of the task's artifacts."""
    for i, artifact in enumerate(task.artifacts):
        here = at.item(Task, "artifacts", i, str(i))
        if not artifact.getter_source:
            problems.add(here, "source must be specified")
        if artifact.getter_mode not in ("", *GETTER_MODES):
            problems.add(here.field(TaskArtifact, "getter_mode"),
                         f"invalid artifact mode {go_quote(artifact.getter_mode)}; must be one "
                         f"of: {', '.join(GETTER_MODES)}")
        if escapes_alloc_dir(artifact.relative_dest):
            problems.add(here.field(TaskArtifact, "relative_dest"),
                         "destination escapes allocation directory")
        check = (artifact.getter_options or {}).get("checksum")
        if check is not None:
            problem = checksum_problem(check)
            if problem is not None:
                options = here.field(TaskArtifact, "getter_options")
                problems.add(_At((*options.d, "checksum"), (*options.k, "checksum")), problem)


def _go_base(path: str) -> str:
    """Go's `path.Base`."""
    if not path:
        return "."
    stripped = path.rstrip("/")
    return posixpath.basename(stripped) if stripped else "/"


def canonicalize_artifacts(job: Job) -> None:
    """api/tasks.go `TaskArtifact.Canonicalize` for every artifact of the job, in place."""
    for group in job.task_groups:
        for task in group.tasks:
            for artifact in task.artifacts:
                artifact.getter_mode = artifact.getter_mode or "any"
                artifact.getter_options = artifact.getter_options or None
                artifact.getter_headers = artifact.getter_headers or None
                if not artifact.relative_dest and artifact.getter_mode == "file":
                    base = _go_base(artifact.getter_source)
                    artifact.relative_dest = posixpath.normpath(posixpath.join("local", base))
                elif not artifact.relative_dest:
                    artifact.relative_dest = "local/"
