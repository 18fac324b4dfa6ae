"""scripts/bench_events: its lean readers parse what the agent sends (layer 0).

The readers replace wsproto and a re-copying chunk parser, so they must count exactly the
records sent however the bytes are cut into `recv`s: records and `Lost` marks from HTTP chunks
(chunk sizes in hex, chunks split anywhere), and websocket frames of every length encoding,
fragmented or not. The records are made by the agent's own encoder (`eventstream`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec
import pytest

from yurt.runtime.eventstream import Event, Record, encode_record, with_lost

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

from bench_events import HttpReader, Tally, WsReader

NOW = 100.0


def task_record(index: int, size: int) -> bytes:
    event = {"Type": "Started", "Time": int((NOW - 0.5) * 1e9), "Pad": "x" * size}
    return encode_record(Record(index=index, events=[Event(
        topic="Task", type="TaskEvent", key="a", index=index,
        payload={"AllocID": "a", "Event": event})]))


RECORDS = [task_record(1, 10), with_lost(task_record(2, 200), 7), task_record(3, 70_000)]


def feed_in_pieces(reader: HttpReader | WsReader, data: bytes, piece: int) -> None:
    for start in range(0, len(data), piece):
        reader.feed(data[start:start + piece], NOW)


def chunked(body: list[bytes]) -> bytes:
    head = b"HTTP/1.1 200 \r\ncontent-type: application/json\r\n\r\n"
    return head + b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in body)


def frame(payload: bytes, opcode: int = 1, fin: bool = True) -> bytes:
    size = len(payload)
    if size < 126:
        length = bytes([size])
    elif size < 1 << 16:
        length = bytes([126]) + size.to_bytes(2)
    else:
        length = bytes([127]) + size.to_bytes(8)
    return bytes([(0x80 if fin else 0) | opcode]) + length + payload


@pytest.mark.parametrize("piece", [1, 7, 4096, 1 << 20])
def test_the_http_reader_counts_every_record_and_lost_mark_however_cut(piece: int) -> None:
    tally = Tally(0, 1e18)
    lines = [b"{}\n", RECORDS[0] + b"\n" + RECORDS[1][:50], RECORDS[1][50:] + b"\n",
             RECORDS[2] + b"\n"]
    feed_in_pieces(HttpReader(tally), chunked(lines), piece)
    assert (tally.records, tally.lost) == (3, 7)
    assert tally.lags == pytest.approx([0.5, 0.5, 0.5])
    assert tally.bytes == sum(len(r) for r in RECORDS)


@pytest.mark.parametrize("piece", [1, 7, 4096, 1 << 20])
def test_the_websocket_reader_counts_every_message_however_cut(piece: int) -> None:
    tally = Tally(0, 1e18)
    data = (b"HTTP/1.1 101 \r\nupgrade: websocket\r\n\r\n" + frame(RECORDS[0])
            + frame(RECORDS[1][:100], fin=False) + frame(RECORDS[1][100:], opcode=0)
            + frame(RECORDS[2]))
    feed_in_pieces(WsReader(tally), data, piece)
    assert (tally.records, tally.lost) == (3, 7)
    assert [msgspec.json.decode(r)["Index"] for r in RECORDS] == [1, 2, 3]
    assert tally.lags == pytest.approx([0.5, 0.5, 0.5])


def test_records_outside_the_window_are_not_counted() -> None:
    tally = Tally(NOW + 1, NOW + 2)
    feed_in_pieces(HttpReader(tally), chunked([RECORDS[0] + b"\n"]), 1 << 20)
    assert tally.records == 0


def test_a_close_frame_ends_the_websocket_reader() -> None:
    reader = WsReader(Tally(0, 1e18))
    with pytest.raises(EOFError):
        reader.feed(b"HTTP/1.1 101 \r\n\r\n" + frame(b"\x03\xe8", opcode=8), NOW)
