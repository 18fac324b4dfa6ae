"""Log rotation arithmetic: where each byte of a task's output goes. Pure; no files, no clock.

Nomad's rotator rules (`client/logmon/logging/rotator.go` `FileRotator`), as a planner that
turns "write these bytes" into "append this to file N, then start file N+1, then delete file M":

- A file holds at most `limit` bytes. On start, writing continues in the highest existing
  index, counting its current size.
- When data does not fit, it is split at the last newline that fits (the line ends in this
  file); if the remaining line would not fit here but there is room for it in a fresh file, the
  file is rotated early so lines are not cut; data with no usable newline fills the file.
- After a rotation, files beyond the newest `max_files` are purged, oldest first.
- Sizes are counted per chunk actually written (Nomad adds a cumulative count, an over-count
  the port does not copy).

`Rotation` is the state (current index, its size, oldest index kept); `plan()` returns the
operations and advances the state, so the caller applies them in order and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Append:
    index: int
    data: bytes


@dataclass(frozen=True)
class Delete:
    index: int


Op = Append | Delete


@dataclass
class Rotation:
    limit: int
    max_files: int
    index: int = 0
    size: int = 0
    oldest: int = 0

    @classmethod
    def resume(cls, limit: int, max_files: int, existing: dict[int, int]) -> Rotation:
        """Continue after existing files (`{index: size}`), in the highest index."""
        if not existing:
            return cls(limit, max_files)
        top = max(existing)
        return cls(limit, max_files, index=top, size=existing[top], oldest=min(existing))

    def _rotate(self, ops: list[Op]) -> None:
        self.index += 1
        self.size = 0
        while self.index - self.oldest >= self.max_files:
            ops.append(Delete(self.oldest))
            self.oldest += 1

    def plan(self, data: bytes) -> list[Op]:
        """The appends and deletes that write `data`, in order."""
        ops: list[Op] = []
        p = data
        while p:
            room = self.limit - self.size
            if room <= 0:
                self._rotate(ops)
                continue
            if len(p) <= room:
                ops.append(Append(self.index, p))
                self.size += len(p)
                break
            newline = p.rfind(b"\n", 0, room)
            if newline >= 0:
                cut = newline + 1
            elif self.size > 0 and b"\n" in p[room:] and p.index(b"\n") < self.limit:
                self._rotate(ops)  # the line fits in a fresh file: don't cut it
                continue
            else:
                cut = room
            ops.append(Append(self.index, p[:cut]))
            self.size += cut
            p = p[cut:]
        return ops
