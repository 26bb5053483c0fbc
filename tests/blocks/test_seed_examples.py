"""Every assertion of the seed's two examples (Blocks and LeasedBlocks), against our own pool.

The pool runs in debug mode, so the full invariant check also runs after every operation.
"""

from __future__ import annotations

import math

import pytest

from harness.blocks.leases import LeasedPool, StaleTicket, lease_violations
from harness.blocks.pool import PagedPool, PoolExhausted, PoolMisuse, violations


def test_constructor_rejects_bad_sizes():
    for count, width in [(0, 4), (4, 0), (1.0, 4), (-1, 4), (4, "4")]:
        with pytest.raises(ValueError):
            PagedPool(count, width)


def test_blocks_example_fork_cow_release():
    pool = PagedPool(6, 4, debug=True)
    pool.create("A", [1, 2, 3, 4, 5])
    pool.fork("A", "C")
    assert pool.tables["A"] == pool.tables["C"]
    pool.append("C", 9)
    assert pool.read("A") == [1, 2, 3, 4, 5] and pool.read("C") == [1, 2, 3, 4, 5, 9]
    assert pool.tables["A"][0] == pool.tables["C"][0]  # full block still shared
    assert pool.tables["A"][-1] != pool.tables["C"][-1]  # partial tail was copied
    pool.release("A")
    assert pool.read("C") == [1, 2, 3, 4, 5, 9]
    pool.release("C")
    assert len(pool.free_ids) == 6


def test_failed_cow_leaves_both_branches_unchanged_and_negative_control():
    small = PagedPool(1, 4, debug=True)
    small.create("A", [1, 2])
    small.fork("A", "B")
    before = (small.read("A"), small.read("B"), small.refs.copy())
    snapshot = (dict((k, v.copy()) for k, v in small.tables.items()), small.free_ids.copy())
    with pytest.raises(MemoryError):
        small.append("B", 3)
    assert before == (small.read("A"), small.read("B"), small.refs.copy())
    assert snapshot == (small.tables, small.free_ids)
    # Negative control: mutating a shared tail without COW leaks into the other branch.
    small.data[small.tables["B"][-1]].append(99)
    assert small.read("A") == [1, 2, 99]


def test_create_is_atomic_when_pool_is_full():
    pool = PagedPool(2, 4, debug=True)
    pool.create("A", [1])
    with pytest.raises(PoolExhausted):
        pool.create("B", list(range(5)))  # needs 2, one free
    assert set(pool.tables) == {"A"} and pool.free_ids == [1] and not violations(pool)
    with pytest.raises(PoolMisuse):
        pool.create("A", [1])
    with pytest.raises(PoolMisuse):
        pool.create("C", [])


def test_fragmentation_arithmetic_of_the_seed():
    lengths = list(range(200, 2001))
    used = sum(lengths)
    allocated = sum(16 * math.ceil(n / 16) for n in lengths)
    assert allocated - used < 16 * len(lengths)
    # A 50-token request at b=16 uses four blocks with 14 unused slots; a 20-token one leaves 12.
    assert 16 * math.ceil(50 / 16) - 50 == 14 and 16 * math.ceil(20 / 16) - 20 == 12
    pool = PagedPool(8, 16, debug=True)
    pool.create("r", list(range(50)))
    assert len(pool.tables["r"]) == 4
    pool.append("r", 50)  # 51st token: position 50 -> logical block 3, offset 2
    assert pool.data[pool.tables["r"][50 // 16]][50 % 16] == 50
    for t in range(51, 65):
        pool.append("r", t)
    assert len(pool.tables["r"]) == 5  # token 65 needs a fifth block


def test_leased_blocks_example():
    leased = LeasedPool(PagedPool(1, 4, debug=True))
    epoch = leased.create("request", [11, 12])
    ticket = leased.dispatch("request")
    leased.cancel("request")
    assert leased.pool.free_ids == []  # worker still owns a lease
    with pytest.raises(MemoryError):
        leased.create("other", [99])  # recycled before worker acknowledgement would be a bug
    leased.complete(ticket)
    assert len(leased.pool.free_ids) == 1
    assert leased.create("request", [99]) > epoch
    assert leased.pool.read("request") == [99]  # no stale tenant tokens
    with pytest.raises(StaleTicket):
        leased.complete(ticket)  # old epoch
    new_ticket = leased.dispatch("request")
    leased.complete(new_ticket)
    with pytest.raises(StaleTicket):
        leased.complete(new_ticket)  # duplicate
    next_ticket = leased.dispatch("request")
    with pytest.raises(StaleTicket):
        leased.complete(new_ticket)  # older dispatch of the same live request
    leased.complete(next_ticket)
    leased.cancel("request")
    assert len(leased.pool.free_ids) == 1
    assert not lease_violations(leased)


def test_stale_ticket_is_a_value_error_and_changes_nothing():
    leased = LeasedPool(PagedPool(2, 4, debug=True))
    leased.create("r", [1])
    t = leased.dispatch("r")
    with pytest.raises(ValueError):
        leased.complete(("r", t.epoch + 1, t.dispatch))
    assert leased.live["r"].busy
    with pytest.raises(ValueError):
        leased.dispatch("r")  # one live dispatch at a time
    leased.cancel("r")
    with pytest.raises(ValueError):
        leased.dispatch("r")  # none after cancel
    assert leased.complete(t) is True and leased.pool.num_free == 2


def test_negative_control_immediate_reuse_after_cancel():
    """Freeing at cancel time (what the contract forbids) lets another request take the block
    that the outstanding dispatch can still write into."""
    pool = PagedPool(1, 4, debug=True)
    pool.create("request", [11, 12])
    in_flight_block = pool.tables["request"][-1]  # the worker holds this through its dispatch
    pool.release("request")  # naive cancel: no deferral
    pool.create("other", [99])
    assert pool.tables["other"][-1] == in_flight_block  # same physical block, two writers
    pool.data[in_flight_block].append(13)  # the late worker write
    assert pool.read("other") == [99, 13]  # corrupts the new tenant
