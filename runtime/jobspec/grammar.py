"""python-hcl2's lark parser, built once per machine and user instead of once per process.

Building the LALR tables from `hcl2.lark` takes about a second; loading them from lark's cache
about 50 ms. python-hcl2 asks lark to cache next to its own sources (`hcl2/.lark_cache.bin`),
which works only where site-packages is writable by whoever runs yurt: a wheel installed by
root and run by a user rebuilds the tables for every job file it reads. So the parser is built
here, with the same grammar and options as `hcl2.parser.parser()`, and cached under the
user's cache directory (`$XDG_CACHE_HOME/yurt`, else `~/.cache/yurt`).

Invariants:
- The cache file's name carries a digest of everything its content depends on (the grammar
  text, the lark and python-hcl2 versions, Python's version), so a file found is never stale;
  lark checks its own digest inside as well.
- The file is read and written under an exclusive `flock` of `hcl2.lock` beside it: lark
  writes its cache in place, and a concurrent reader must never see half of it (lark would
  only rebuild, but that is the second this module saves). The file's path is lark's own
  `cache` option, as lark folds the option into the digest it checks on loading.
- The cache is a pickle, so it is read only from a directory that belongs to this user and
  that nobody else may write to. When the directory cannot be used or written (a read-only
  home, another owner), the parser is python-hcl2's own, silently: slower, never failing.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import stat
import sys
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lark import Lark, Token, Tree


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "yurt"


def _private_dir(path: Path) -> bool:
    """Create `path` (0700) if needed; whether it is ours and closed to others."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = path.lstat()
    except OSError:
        return False
    return (stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()
            and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def _cache_file(directory: Path, grammar: bytes) -> Path:
    import hcl2
    import lark

    key = hashlib.sha256(b"\0".join([
        grammar, lark.__version__.encode(), getattr(hcl2, "__version__", "").encode(),
        sys.version.encode()])).hexdigest()[:32]
    return directory / f"hcl2-{key}.lark"


def _build(cache_path: str | bool) -> Lark:
    import hcl2.parser
    from hcl2.postlexer import PostLexer
    from lark import Lark

    return Lark.open("hcl2.lark", parser="lalr", cache=cache_path,
                     rel_to=hcl2.parser.__file__, propagate_positions=True,
                     postlex=PostLexer())


@cache
def hcl_parser() -> Lark:
    """The HCL2 parser, from the user's cache when possible (see the module's invariants)."""
    import hcl2.parser

    directory = cache_dir()
    try:
        grammar = (Path(hcl2.parser.__file__).parent / "hcl2.lark").read_bytes()
    except OSError:
        return hcl2.parser.parser()
    if not _private_dir(directory):
        return hcl2.parser.parser()
    target = _cache_file(directory, grammar)
    try:
        lock = os.open(directory / "hcl2.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return hcl2.parser.parser()
    try:
        # One process at a time reads or writes the file: lark writes it in place, and a
        # reader must not see half of it. Loading takes ~50 ms, so waiting is cheap.
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build(str(target))  # lark loads the file, or builds and writes it
    finally:
        os.close(lock)


def parse_hcl(text: str) -> Tree[Token]:
    """`hcl2.parses_to_tree` through the cached parser (the same trailing newline: the
    grammar needs one after the last statement)."""
    return hcl_parser().parse(text + "\n")
