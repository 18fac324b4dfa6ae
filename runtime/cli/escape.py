"""The escape sequence of `yurt alloc exec -t`: `~.` at the start of a line ends the session.

Nomad's (helper/escapingio), itself OpenSSH's: in raw mode Ctrl-C belongs to the remote
command, so the user needs another way out of a hung session. The escape character (`-e`,
default `~`) is recognised only at the start of a line (the start of input, or after a CR
or LF); there `~.` ends the session, `~~` sends one `~`, and `~` before anything else is
sent as typed. A `~` that is the last byte read waits for the next read to be decided; at
the end of input it is sent.

A pure state machine, fed with what stdin gives, that returns what to send: no I/O, so it is
tested byte by byte.
"""

from __future__ import annotations

from typing import Final, final

CLOSE: Final = ord(".")
_NEWLINES: Final = frozenset(b"\r\n")


@final
class EscapeFilter:
    def __init__(self, escape: int) -> None:
        self.escape = escape
        self._line_start = True
        self._pending = False  # an escape char at a line start, not decided yet
        self.closed = False

    def feed(self, data: bytes) -> bytes:
        """What to send of `data`; once `~.` is seen, `closed` is set and the rest dropped."""
        out = bytearray()
        for byte in data:
            if self.closed:
                break
            if self._pending:
                self._pending = False
                if byte == CLOSE:
                    self.closed = True
                    break
                if byte != self.escape:
                    out.append(self.escape)
                out.append(byte)
                self._line_start = byte in _NEWLINES
            elif self._line_start and byte == self.escape:
                self._pending = True
            else:
                out.append(byte)
                self._line_start = byte in _NEWLINES
        return bytes(out)

    def end(self) -> bytes:
        """At the end of input: a pending escape char is sent as typed."""
        pending, self._pending = self._pending, False
        return bytes([self.escape]) if pending and not self.closed else b""
