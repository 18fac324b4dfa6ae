"""Log rotation arithmetic (layer 0), with Nomad's rotator test cases."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from yurt.runtime.client.logs.rotation import Append, Delete, Rotation


def apply(rotation: Rotation, *writes: bytes, files: dict[int, bytes] | None = None
          ) -> dict[int, bytes]:
    files = dict(files or {})
    for data in writes:
        for op in rotation.plan(data):
            if isinstance(op, Append):
                files[op.index] = files.get(op.index, b"") + op.data
            else:
                del files[op.index]
    return files


def test_no_newline_fills_files() -> None:
    assert apply(Rotation(5, 10), b"abcdefgh") == {0: b"abcde", 1: b"fgh"}


def test_splits_at_newlines() -> None:
    files = apply(Rotation(5, 10), b"ab\ncdef\n", b"1234567890", b"\n")
    assert list(files.values()) == [b"ab\n", b"cdef\n", b"12345", b"67890", b"\n"]


def test_continues_the_highest_existing_file() -> None:
    rotation = Rotation.resume(5, 10, {0: 4})
    files = apply(rotation, b"efghijkl", files={0: b"abcd"})
    assert files == {0: b"abcde", 1: b"fghij", 2: b"kl"}


def test_purges_beyond_max_files() -> None:
    files = apply(Rotation(2, 2), b"abcdefghijklm")
    assert files == {5: b"kl", 6: b"m"}


def test_rotates_early_rather_than_cutting_a_line_that_fits_a_fresh_file() -> None:
    files = apply(Rotation(6, 10), b"abc\n", b"defg\n")
    assert files == {0: b"abc\n", 1: b"defg\n"}


def test_resume_with_a_gap_purges_from_the_oldest() -> None:
    rotation = Rotation.resume(2, 2, {3: 2, 4: 2})
    ops = rotation.plan(b"xy")
    assert ops == [Delete(3), Append(5, b"xy")]


@given(st.lists(st.binary(max_size=40), max_size=30), st.integers(1, 16),
       st.integers(1, 5))
def test_nothing_lost_but_purged_files_and_no_file_over_the_limit(
        writes: list[bytes], limit: int, max_files: int) -> None:
    rotation = Rotation(limit, max_files)
    everything = b"".join(writes)
    files = apply(rotation, *writes)
    assert len(files) <= max_files
    assert all(len(data) <= limit for data in files.values())
    kept = b"".join(files[i] for i in sorted(files))
    assert everything.endswith(kept)
    assert sorted(files) == list(range(min(files), max(files) + 1)) if files else True
