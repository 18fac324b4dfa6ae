"""Template files on disk, confined to the allocation directory (blocking; run in a thread).

Paths follow Nomad's `TaskEnv.ClientPath`: a relative path is joined to the task directory;
an absolute one is kept when it lies inside the allocation directory, and a destination
outside it is joined to the task directory instead (a source outside it is an error).
Either way the result must stay inside the allocation directory: "template destination path
escapes alloc directory" otherwise.

Links are resolved by the allocation directory's confined walk (runtime/client/allocfs.py): a link
that leads outside is refused, and nothing is ever created or opened through a path the
kernel resolves, since a task can plant links in its own directory. A template `source` is
read the same way, non-blocking, only when it is a regular file, and only up to
`MAX_SOURCE_BYTES`: the task can write it. A write goes to a fresh
temporary file in the destination's directory, then renames over the destination, so a task
never reads half a file (consul-template writes atomically too); runtime/client/confined_write.py
says why that temporary file has a random name and is created with `O_EXCL`, and why the
destination is never opened: a link, FIFO or device a task put there is replaced, not
followed, not waited on.

`parse_env(text)`: the rendered file of an `env = true` template, in the env-file format
(KEY=value, `export`, quotes, comments), without variable expansion (go-envparse expands none).
"""

from __future__ import annotations

import io
import os
import posixpath
import stat
from pathlib import Path
from typing import Final

from dotenv import dotenv_values

from yurt.runtime.client.allocfs import FsError, clean_parts, open_confined
from yurt.runtime.client.confined_write import holds_at, replace_file_at

SOURCE_ESCAPES = "template source path escapes alloc directory"
#: Largest template `source` file read, in bytes: the job text's own cap (jobspec's
#: MAX_JOB_CHARS, 1 MiB), so a template read from a file can be no larger than one given
#: inline. The task can write the file, so without a cap it could make the agent read (and
#: parse) gigabytes.
MAX_SOURCE_BYTES: Final = 1 << 20
DEST_ESCAPES = "template destination path escapes alloc directory"


class TemplateFileError(Exception):
    """A template's source or destination cannot be used."""


def client_path(raw: str, task_dir: Path, *, destination: bool) -> str:
    """The path below the allocation directory (`a/b`, no leading slash) for `raw`.

    Raises:
        TemplateFileError: the path leaves the allocation directory.
    """
    alloc_root = str(task_dir.parent)
    path = raw
    inside = posixpath.isabs(path) and _below(posixpath.normpath(path), alloc_root)
    if not posixpath.isabs(path) or (destination and not inside):
        path = posixpath.join(str(task_dir), path.lstrip("/"))
    path = posixpath.normpath(path)
    if not _below(path, alloc_root):
        raise TemplateFileError(DEST_ESCAPES if destination else SOURCE_ESCAPES)
    return posixpath.relpath(path, alloc_root)


def _below(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def read_confined(alloc_root: Path, rel: str, limit: int = MAX_SOURCE_BYTES) -> bytes | None:
    """The file's bytes, or None if it does not exist.

    The file is opened through the descriptor the confined walk ended on (never through its
    name again, so no link is followed), non-blocking, and must be a regular file: a FIFO or
    a device a task put there is refused, not waited on. At most `limit` bytes are read.

    Raises:
        TemplateFileError: a link leads outside, the path is not a regular file, or the file
            is larger than `limit` bytes.
    """
    try:
        opened = open_confined(alloc_root, rel)
    except FsError as e:
        if e.status == 404:
            return None
        raise TemplateFileError(f"{SOURCE_ESCAPES}: {e}") from None
    try:
        if not stat.S_ISREG(opened.st.st_mode):
            raise TemplateFileError(f"{rel!r} is not a regular file")
        fd = os.open(f"/proc/self/fd/{opened.fd}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    finally:
        os.close(opened.fd)
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # the very inode checked above; still
            raise TemplateFileError(f"{rel!r} is not a regular file")
        data = f.read(limit + 1)  # one byte more tells a file at the limit from a longer one
    if len(data) > limit:
        raise TemplateFileError(f"template source {rel!r} is larger than {limit} bytes")
    return data


def write_confined(alloc_root: Path, rel: str, data: bytes, mode: int,
                   uid: int | None = None, gid: int | None = None, *,
                   if_changed: bool = False) -> bool:
    """Write `data` atomically at `rel`, making missing directories (mode 0755).

    Args:
        if_changed: leave a destination that is a regular file holding `data` already alone
            (its mode and owner too), as consul-template skips an unchanged render.

    Returns:
        Whether the file was written.

    Raises:
        TemplateFileError: a component is a link leading outside, or not a directory.
        OSError: the write itself failed (a directory at the destination: IsADirectoryError).
    """
    try:
        *dirs, name = clean_parts(rel)
    except (FsError, ValueError):
        raise TemplateFileError(DEST_ESCAPES) from None
    try:
        where = open_confined(alloc_root, "")
        for part in dirs:
            below = "/".join((*where.resolved, part))
            try:
                nxt = open_confined(alloc_root, below)
            except FsError as e:
                if e.status != 404:
                    raise
                os.mkdir(part, 0o755, dir_fd=where.fd)  # a dangling link: EEXIST, not followed
                nxt = open_confined(alloc_root, below)
            os.close(where.fd)
            where = nxt
            if not stat.S_ISDIR(where.st.st_mode):
                os.close(where.fd)
                raise TemplateFileError(f"{below!r} is not a directory")
    except FsError as e:
        raise TemplateFileError(f"{DEST_ESCAPES}: {e}") from None
    try:
        if if_changed and holds_at(where.fd, name, data):
            return False
        replace_file_at(where.fd, name, data, mode, uid, gid)
        return True
    finally:
        os.close(where.fd)


def parse_env(text: str) -> dict[str, str]:
    values = dotenv_values(stream=io.StringIO(text), interpolate=False)
    return {k: v or "" for k, v in values.items()}
