"""`freeze_long_lived`: what is alive is frozen, and cyclic garbage left in a frozen set that
has mostly died is collected by the next freeze (layer 0, the real collector)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from yurt.runtime.agent import heap


@pytest.fixture(autouse=True)
def clean_collector() -> Iterator[None]:
    """Only the tests' own collections run (automatic ones would race the assertions)."""
    gc.unfreeze()
    heap._frozen_after_last = heap._frozen_after_thaw = 0
    gc.disable()
    yield
    gc.enable()
    gc.unfreeze()
    heap._frozen_after_last = heap._frozen_after_thaw = 0
    gc.collect()


class Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector frees it


def test_freeze_moves_live_containers_out_of_the_collectors_reach() -> None:
    held = [[i] for i in range(10_000)]
    result = heap.freeze_long_lived()
    assert result.frozen >= len(held)
    assert gc.get_freeze_count() == result.frozen
    assert not result.thawed
    before = gc.get_freeze_count()
    del held  # reference counting still frees frozen objects
    assert gc.get_freeze_count() <= before - 10_000


def test_a_release_thaws_what_died_in_cycles_even_when_the_set_did_not_shrink() -> None:
    """Destroyed allocations die as cycles inside the frozen set: no count shows it, so the
    caller says so, and the freeze collects them."""
    nodes = [Node() for _ in range(1_000)]
    dead = weakref.ref(nodes[0])
    heap.freeze_long_lived()
    del nodes
    assert not heap.freeze_long_lived().thawed  # the set did not halve: still frozen
    assert dead() is not None
    result = heap.freeze_long_lived(released=True)
    assert result.thawed
    assert result.collected >= 1_000
    assert dead() is None


def test_closing_freezing_survivors_thaws_everything() -> None:
    with heap.freezing_survivors():
        heap.freeze_long_lived()
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0


def test_cyclic_garbage_in_a_frozen_set_is_collected_once_most_of_it_died() -> None:
    # Most of the heap (twice what the test process holds), long-lived until it is not.
    bulk = [[i] for i in range(2 * len(gc.get_objects()) + 10_000)]
    node = Node()
    dead = weakref.ref(node)
    heap.freeze_long_lived()
    del node  # now cyclic garbage inside the frozen set
    gc.collect()
    assert dead() is not None  # frozen: a collection does not see it
    result = heap.freeze_long_lived()  # most of the frozen set is still alive
    assert not result.thawed
    assert dead() is not None
    del bulk
    result = heap.freeze_long_lived()
    assert result.thawed
    assert dead() is None


def test_cyclic_garbage_in_a_frozen_set_is_collected_once_it_doubled() -> None:
    node = Node()
    dead = weakref.ref(node)
    heap.freeze_long_lived()
    del node
    frozen = gc.get_freeze_count()
    grown = [[i] for i in range(frozen // 2)]  # half as much again: kept
    result = heap.freeze_long_lived()
    assert not result.thawed
    assert dead() is not None
    grown += [[i] for i in range(frozen)]  # more than doubled: thawed
    result = heap.freeze_long_lived()
    assert result.thawed
    assert dead() is None


def test_survivors_of_full_collections_are_frozen_while_open() -> None:
    held = [[i] for i in range(10_000)]
    thresholds = gc.get_threshold()
    with heap.freezing_survivors():
        assert gc.get_threshold() == (heap.YOUNG_THRESHOLD, *thresholds[1:])
        gc.collect(1)
        assert gc.get_freeze_count() == 0  # young collections freeze nothing
        gc.collect()
        frozen = gc.get_freeze_count()
        assert frozen >= len(held)
    assert gc.get_threshold() == thresholds
    more = [[i] for i in range(1_000)]
    gc.collect()
    assert gc.get_freeze_count() <= frozen  # closed: nothing more is frozen
    assert len(more) == 1_000


def test_a_doubled_frozen_set_is_thawed_by_the_next_full_collection() -> None:
    node = Node()
    dead = weakref.ref(node)
    with heap.freezing_survivors():
        gc.collect()
        del node
        grown = [[i] for i in range(2 * gc.get_freeze_count() + 10)]
        gc.collect()  # the frozen set more than doubled since its last thaw: thawed
        assert gc.get_freeze_count() == 0
        assert dead() is not None
        gc.collect()  # a full collection of everything, survivors frozen again
        assert dead() is None
        assert gc.get_freeze_count() >= len(grown)


def test_young_collections_get_rarer_as_the_frozen_set_grows() -> None:
    with heap.freezing_survivors():
        held = [[i] for i in range(20 * heap.YOUNG_THRESHOLD)]
        gc.collect()
        frozen = gc.get_freeze_count()
        assert frozen >= len(held)
        assert gc.get_threshold()[0] >= frozen // heap.YOUNG_PER_FROZEN > (
            heap.YOUNG_THRESHOLD)
