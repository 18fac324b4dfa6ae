"""The archive file as the decompressors, `tarfile` and `zipfile` read it: a check per read.

Why: `unpack.py` calls `check` (the cancellation point) between the chunks it writes, but a
reader may do unbounded work between two chunks without producing a byte. The case found: a
.gz of empty gzip members, where one `GzipFile.read(1 MiB)` walks through every member (some
2.5 s per 10 MB of archive) before it returns, so a killed task's unpack could not be stopped
meanwhile. Whatever a reader does, it must read its input, so the check goes where the input
is read: every read of the raw archive file calls `check` first, and no single read of the
file is larger than `STEP`, so the work between two checks is bounded by what `STEP` bytes of
input (or the decompressors' own 8 KiB buffers of it) can cost.

A read of n bytes still returns n bytes unless the file ends: plain `tarfile` takes a short
read for a truncated archive. The wrapper never closes the file it wraps: its owner does.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Final, final

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

#: The most read from the archive file between two checks.
STEP: Final = 1 << 20


@final
class CheckedReader(io.RawIOBase):
    """`raw` (a seekable binary file open for reading), calling `check` before every read;
    `check` may raise to stop the reader (a cancellation)."""

    def __init__(self, raw: IO[bytes], check: Callable[[], None]) -> None:
        super().__init__()
        self._raw = raw
        self._check = check

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET, /) -> int:
        return self._raw.seek(offset, whence)

    def tell(self) -> int:
        return self._raw.tell()

    def read(self, size: int | None = -1, /) -> bytes:
        """Up to `size` bytes (all that is left when negative), read `STEP` at a time."""
        left = size if size is not None and size >= 0 else None
        parts = []
        while left is None or left > 0:
            self._check()
            chunk = self._raw.read(STEP if left is None else min(left, STEP))
            if not chunk:
                break
            parts.append(chunk)
            if left is not None:
                left -= len(chunk)
        return b"".join(parts)

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer: WriteableBuffer, /) -> int:
        view = memoryview(buffer).cast("B")
        data = self.read(len(view))
        view[:len(data)] = data
        return len(data)
