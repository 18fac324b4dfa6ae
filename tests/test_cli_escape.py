"""The `~.` escape of `yurt alloc exec -t` (Nomad's escapingio), byte by byte (layer 0)."""

from __future__ import annotations

import pytest

from yurt.runtime.cli.escape import EscapeFilter

TILDE = ord("~")


@pytest.mark.parametrize(("chunks", "sent", "closed"), [
    ([b"ls\r"], b"ls\r", False),
    ([b"~."], b"", True),  # the start of input is the start of a line
    ([b"echo\r~.rest"], b"echo\r", True),
    ([b"echo\n~", b".ignored"], b"echo\n", True),  # split across reads
    ([b"a~.b"], b"a~.b", False),  # not at the start of a line
    ([b"~~."], b"~.", False),  # `~~` sends one `~`, and the line has begun
    ([b"~x~."], b"~x~.", False),
    ([b"\r~", b"x"], b"\r~x", False),
    ([b"\r~\r~."], b"\r~\r", True),
])
def test_escape_filter(chunks: list[bytes], sent: bytes, closed: bool) -> None:
    f = EscapeFilter(TILDE)
    assert b"".join(f.feed(c) for c in chunks) == sent
    assert f.closed is closed


def test_a_pending_escape_is_sent_at_the_end_of_input() -> None:
    f = EscapeFilter(TILDE)
    assert f.feed(b"x\r~") == b"x\r"
    assert f.end() == b"~"
    assert not f.closed
    other = EscapeFilter(ord("%"))
    assert other.feed(b"~.%.") == b"~.%."  # mid-line after `~.`
    assert EscapeFilter(ord("%")).feed(b"%.") == b""
