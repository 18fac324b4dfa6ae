"""Placing a verified download at its destination without following a link a task planted.

Why descriptors: the agent runs as root, the destination lies in a directory the tasks share
(`alloc/data`) or own (`local/`), and a download takes minutes. A path checked before the
download and used by name after it loses the race: a sibling task swaps `alloc/data/x` for a
link to `/etc` meanwhile, and root merges (and chowns) into `/etc`. Nor may a link that stays
inside the allocation directory be followed: a `nobody` task that links `alloc/data/x` to a
root task's `local/` has a sibling's `chown = true` artifact land there, owned by `nobody`, and
plants a program the root task runs. So no name below the allocation directory is ever handed
to the kernel whole, and no link is followed: the destination is opened, at placement time,
one component at a time from a descriptor of the allocation directory, each opened
`O_NOFOLLOW | O_DIRECTORY` relative to its parent's descriptor (as runtime/client/allocfs.py
`open_confined` walks, without its resolution of links); a link on the way is refused ("is a
symbolic link, and an artifact is never placed through one", naming it), a missing directory
is made relative to its parent's descriptor (`mkdirat`, which never follows a link either: a
dangling one is EEXIST, then found a link). Everything after that (the merge's renames and
replacements, removals, the chown) is relative to the descriptors the walk returned, each
subdirectory opened `O_NOFOLLOW | O_DIRECTORY` from its parent's: a link swapped in later is
replaced or refused, never followed.

Replacing a directory: the old one is first renamed aside, in the same directory, to a random
name (`ASIDE_PREFIX`; one atomic rename), the new entry renamed in, and only then is the old
tree removed, by a walk of our own (`_Removal`). `shutil.rmtree` was rejected: it opens each
subdirectory it found with `O_RDONLY` alone, so a task that swapped one for a FIFO between
rmtree's `lstat` and its `open` left root's worker thread blocked in `open(2)` for ever (no
cancellation reaches it). The walk opens each entry `O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK`
relative to its parent's descriptor: a FIFO, device, file or link is never opened (the kernel
refuses with ENOTDIR or ELOOP before opening anything) and is unlinked by name instead. It
calls `check` between entries and stops after `MAX_REMOVED` entries or `MAX_REMOVE_DEPTH`
levels, so a task that keeps filling the tree being removed cannot keep the agent busy.

Nomad's rules, kept: the destination is the task directory joined with `destination`
(`..` may not rise above the allocation directory: "artifact destination path escapes alloc
directory"); a directory merges into one already there, a file replaces what has its name (a
link included, never followed). Not kept: Nomad follows a link on the way that stays inside
the allocation directory; here any link on the way is refused (see above).

Chown (the artifact's `chown`): the downloaded tree is given to the task's user in the
staging directory, which only the agent can reach, then moved; of what was already in the
destination only the directories merged into are changed (by their descriptors). Nomad walks
the whole destination by name instead; here a file a sibling task hard-linked into a shared
destination is never chowned.

Everything here blocks: run it in a worker thread.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import secrets
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, final

from yurt.runtime.client.allocfs import clean_parts
from yurt.runtime.client.getter.source import GetterError, Plan
from yurt.runtime.client.getter.unpack import Check, no_check

DEST_ESCAPES: Final = "artifact destination path escapes alloc directory"
#: The name an old directory is renamed to before it is removed (a random suffix follows).
ASIDE_PREFIX: Final = ".yurt-replaced-"
#: The most entries and levels removed of one replaced directory (see the header).
MAX_REMOVED: Final = 1_000_000
MAX_REMOVE_DEPTH: Final = 128
_DIR: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: O_NONBLOCK: never wait in open(2), whatever a task swapped in (O_DIRECTORY refuses a FIFO
#: or device before opening it; this holds should anything else ever get that far).
_WALK: Final = _DIR | os.O_NONBLOCK
#: A directory made and found gone again this many times in a row: a task is racing us.
_MAKE_ATTEMPTS: Final = 8

Owner = tuple[int, int]


@final
@dataclass(frozen=True)
class Target:
    """Where a download lands: the directory `parts` below the allocation directory, and
    `name` inside it for a single file (None: the tree is merged into the directory).
    `is_destination`: `parts` is the artifact's destination (chowned, as Nomad chowns it),
    not the parent of a destination file."""

    parts: tuple[str, ...]
    name: str | None
    is_destination: bool = True


def target_of(alloc_dir: Path, task_dir: Path, destination: str, how: Plan) -> Target:
    """The destination (Go's `filepath.Join(taskDir, dest)`: an absolute destination is
    task-relative too), cleaned lexically. Raises `GetterError` when it rises above the
    allocation directory."""
    joined = posixpath.normpath(posixpath.join(str(task_dir), destination.lstrip("/")))
    root = posixpath.normpath(str(alloc_dir))
    if joined != root and not joined.startswith(root.rstrip("/") + "/"):
        raise GetterError(DEST_ESCAPES)
    parts = tuple(clean_parts(posixpath.relpath(joined, root)))
    if how.copy_dir or how.unpack == "dir":
        return Target(parts, None)
    if how.target:
        return Target(parts, how.target)
    if not parts:
        raise GetterError("the artifact's destination is the allocation directory, which a "
                          "file cannot replace")
    return Target(parts[:-1], parts[-1], is_destination=False)


def _link_found(shown: str, at: str) -> GetterError:
    return GetterError(f"artifact destination {shown}: {at} is a symbolic link, and an "
                       "artifact is never placed through one")


def _open_dir(parent: int, name: str, parts: Sequence[str], n: int) -> int:
    """The directory `name` in `parent` (`parts[:n + 1]` below the allocation directory),
    opened `O_NOFOLLOW | O_DIRECTORY`. Raises `FileNotFoundError` when it is missing and
    `GetterError` when it is a link or not a directory."""
    try:
        return os.open(name, _WALK, dir_fd=parent)
    except OSError as e:
        if e.errno not in (errno.ENOTDIR, errno.ELOOP):
            raise
        shown, at = "/".join(parts), "/".join(parts[:n + 1])
        # FileNotFoundError if it is gone meanwhile: the caller tries again.
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            raise _link_found(shown, at) from None
        raise GetterError(f"artifact destination {shown}: {at} is not a directory") from None


def _walk(alloc_dir: Path, parts: Sequence[str], make: bool) -> int | None:
    """A read descriptor of the directory `parts` below `alloc_dir`, reached one component at
    a time, each opened `O_NOFOLLOW | O_DIRECTORY` relative to its parent's descriptor (see
    the header); with `make`, a missing directory is made (0755, `mkdirat`), else None is
    the answer. Raises `GetterError` for a link or a non-directory on the way."""
    fd = os.open(alloc_dir, _DIR)  # the agent's own: data dir, alloc/, <alloc id>
    try:
        for n, name in enumerate(parts):
            for _ in range(_MAKE_ATTEMPTS):
                try:
                    below = _open_dir(fd, name, parts, n)
                    break
                except FileNotFoundError:
                    if not make:
                        os.close(fd)
                        return None
                    # mkdirat never follows a link: a dangling one there is EEXIST, and the
                    # next open finds it a link.
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, 0o755, dir_fd=fd)
            else:
                raise GetterError(f"artifact destination {'/'.join(parts)}: "
                                  f"{'/'.join(parts[:n + 1])} keeps disappearing")
            os.close(fd)
            fd = below
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_destination(alloc_dir: Path, target: Target) -> None:
    """Refuse now, before anything is fetched, a destination whose existing part already
    holds a link or a file. Placement walks again: this is only the early answer."""
    fd = _walk(alloc_dir, target.parts, make=False)
    if fd is not None:
        os.close(fd)


def open_destination(alloc_dir: Path, parts: Sequence[str]) -> int:
    """A read descriptor of the directory `parts` below `alloc_dir`, missing directories made
    (0755) one at a time. Raises `GetterError`."""
    fd = _walk(alloc_dir, parts, make=True)
    if fd is None:  # pragma: no cover - only a walk that makes nothing answers None
        raise GetterError(f"artifact destination {'/'.join(parts)}: not found")
    return fd


def chown_staged(path: Path, owner: Owner) -> None:
    """Give the staged tree (or file) `path` to the task's user. Only root can; Nomad's
    `chownDestination` quietly does nothing otherwise, as here. The staging directory is the
    agent's alone, so its names can be trusted."""
    if os.geteuid() != 0:
        return
    uid, gid = owner
    os.lchown(path, uid, gid)
    for dirpath, dirnames, filenames in os.walk(path):
        for name in (*dirnames, *filenames):
            os.lchown(os.path.join(dirpath, name), uid, gid)


def _fchown(fd: int, owner: Owner | None) -> None:
    if owner is not None and os.geteuid() == 0:
        os.fchown(fd, *owner)


def place(staged: Path, alloc_dir: Path, target: Target, owner: Owner | None, *,
          check: Check = no_check) -> None:
    """Move the staged download (a tree to merge, or the file `target.name`) to `target`;
    the staged tree is already chowned. `check` is called while a replaced directory is
    removed and may raise to stop (a cancellation). Raises `GetterError`, or OSError when a
    task changed the destination under the placement."""
    dest = open_destination(alloc_dir, target.parts)
    try:
        if target.name is None:
            _fchown(dest, owner)  # the destination itself, by its descriptor
            src = os.open(staged, _DIR)
            try:
                _merge(src, dest, owner, check)
            finally:
                os.close(src)
            return
        if target.is_destination:
            _fchown(dest, owner)
        _replace(str(staged), None, target.name, dest, check)
    finally:
        os.close(dest)


def _replace(src: str, src_dir: int | None, name: str, dst_dir: int, check: Check) -> None:
    """Put `src` in place of `name` in `dst_dir`, whatever is there (a link is replaced)."""
    try:
        st = os.stat(name, dir_fd=dst_dir, follow_symlinks=False)
    except FileNotFoundError:
        pass
    else:
        src_is_dir = stat.S_ISDIR(os.stat(src, dir_fd=src_dir, follow_symlinks=False).st_mode)
        if stat.S_ISDIR(st.st_mode):
            _replace_dir(src, src_dir, name, dst_dir, check)
            return
        if src_is_dir:
            os.unlink(name, dir_fd=dst_dir)  # a directory cannot replace a file
    os.replace(src, name, src_dir_fd=src_dir, dst_dir_fd=dst_dir)


def _replace_dir(src: str, src_dir: int | None, name: str, dst_dir: int, check: Check) -> None:
    """Replace the directory `name`: aside, new one in, old one removed (see the header).
    Whatever a task put at `name` since it was found a directory goes aside the same way."""
    aside = f"{ASIDE_PREFIX}{secrets.token_hex(16)}"
    os.rename(name, aside, src_dir_fd=dst_dir, dst_dir_fd=dst_dir)
    try:
        os.replace(src, name, src_dir_fd=src_dir, dst_dir_fd=dst_dir)
    except OSError:
        # A task made something new at `name` meanwhile: the old entry goes back if it can,
        # so a failed placement leaves the destination as it found it.
        try:
            os.rename(aside, name, src_dir_fd=dst_dir, dst_dir_fd=dst_dir)
        except OSError:
            _Removal(check).remove(dst_dir, aside, 0)
        raise
    _Removal(check).remove(dst_dir, aside, 0)


@final
class _Removal:
    """Removes one tree a task may be changing meanwhile, by descriptors (see the header)."""

    def __init__(self, check: Check) -> None:
        self.check = check
        self.left = MAX_REMOVED

    def _spend(self) -> None:
        self.check()
        self.left -= 1
        if self.left < 0:
            raise GetterError(f"a replaced directory holds more than {MAX_REMOVED} entries")

    def remove(self, parent: int, name: str, depth: int) -> None:
        """Remove the entry `name` of the directory open as `parent`, whatever it is."""
        self._spend()
        try:
            fd = os.open(name, _WALK, dir_fd=parent)
        except FileNotFoundError:
            return  # gone meanwhile
        except OSError as e:
            if e.errno not in (errno.ENOTDIR, errno.ELOOP):
                raise
            # Not a directory (a file, link, FIFO, device): its name goes, nothing opened.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=parent)
            return
        try:
            if depth >= MAX_REMOVE_DEPTH:
                raise GetterError(f"a replaced directory is deeper than {MAX_REMOVE_DEPTH} "
                                  "levels")
            while True:
                with os.scandir(fd) as entries:  # lazily: a directory may be huge
                    for entry in entries:
                        self.remove(fd, entry.name, depth + 1)
                try:
                    os.rmdir(name, dir_fd=parent)
                    return
                except OSError as e:
                    # ENOTEMPTY: filled again meanwhile, emptied again (within the budget).
                    if e.errno != errno.ENOTEMPTY:
                        raise
                self._spend()
        finally:
            os.close(fd)


def _merge(src: int, dst: int, owner: Owner | None, check: Check) -> None:
    """Move the entries of directory `src` into directory `dst` (Nomad's
    `mergeDirectories`), both descriptors."""
    with os.scandir(src) as entries:
        names = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
    for name, is_dir in names:
        if is_dir:
            try:
                sub_dst = os.open(name, _DIR, dir_fd=dst)
            except (FileNotFoundError, NotADirectoryError):
                pass  # nothing there, a file or a link: replaced below
            except OSError as e:
                if e.errno != errno.ELOOP:  # a link: replaced below
                    raise
            else:
                try:
                    _fchown(sub_dst, owner)
                    sub_src = os.open(name, _DIR, dir_fd=src)
                    try:
                        _merge(sub_src, sub_dst, owner, check)
                    finally:
                        os.close(sub_src)
                finally:
                    os.close(sub_dst)
                continue
        _replace(name, src, name, dst, check)
