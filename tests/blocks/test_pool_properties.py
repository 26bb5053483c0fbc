"""Property tests: random operation sequences on the pool (and leases) keep every invariant."""

from __future__ import annotations

import copy

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from harness.blocks.leases import LeasedPool, StaleTicket, lease_violations
from harness.blocks.pool import PagedPool, PoolExhausted, PoolMisuse, violations

NAMES = st.sampled_from(["a", "b", "c", "d", "e", "f"])
TOKENS = st.lists(st.integers(0, 999), min_size=0, max_size=12)


def snapshot(pool: PagedPool):
    return copy.deepcopy((pool.data, pool.refs, pool.free_ids, pool.tables))


class PoolMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.pool = PagedPool(8, 3)
        self.model: dict[str, list[int]] = {}  # what each sequence must read back

    def _attempt(self, fn, *args):
        before = snapshot(self.pool)
        try:
            fn(*args)
        except (PoolExhausted, PoolMisuse):
            assert snapshot(self.pool) == before, "a failed operation changed state"
            return False
        return True

    @rule(name=NAMES, tokens=TOKENS)
    def create(self, name, tokens):
        if self._attempt(self.pool.create, name, tokens):
            self.model[name] = list(tokens)

    @rule(src=NAMES, dst=NAMES)
    def fork(self, src, dst):
        if self._attempt(self.pool.fork, src, dst):
            self.model[dst] = list(self.model[src])

    @rule(name=NAMES, token=st.integers(0, 999))
    def append(self, name, token):
        if self._attempt(self.pool.append, name, token):
            self.model[name].append(token)

    @rule(name=NAMES)
    def release(self, name):
        if self._attempt(self.pool.release, name):
            del self.model[name]

    @invariant()
    def structure(self):
        assert violations(self.pool) == []

    @invariant()
    def contents(self):
        for name, toks in self.model.items():
            assert self.pool.read(name) == toks
            assert self.pool.length(name) == len(toks)

    @invariant()
    def sharing_is_counted(self):
        # a block in two tables (or twice) must have a count saying so
        seen: dict[int, int] = {}
        for table in self.pool.tables.values():
            for b in table:
                seen[b] = seen.get(b, 0) + 1
        for b, n in seen.items():
            assert self.pool.refs[b] == n

    @precondition(lambda self: self.model)
    @rule()
    def release_everything_frees_everything(self):
        for name in list(self.model):
            self.pool.release(name)
        self.model.clear()
        assert sorted(self.pool.free_ids) == list(range(self.pool.num_blocks))
        assert all(r == 0 for r in self.pool.refs) and not any(self.pool.data)


class LeaseMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.leased = LeasedPool(PagedPool(4, 2))
        self.tickets: list = []

    def _attempt(self, fn, *args):
        before = (snapshot(self.leased.pool), copy.deepcopy(self.leased.live))
        try:
            return fn(*args)
        except (PoolExhausted, PoolMisuse, StaleTicket):
            assert (snapshot(self.leased.pool), copy.deepcopy(self.leased.live)) == before
            return None

    @rule(name=NAMES, tokens=TOKENS)
    def create(self, name, tokens):
        self._attempt(self.leased.create, name, tokens)

    @rule(name=NAMES)
    def dispatch(self, name):
        t = self._attempt(self.leased.dispatch, name)
        if t is not None:
            self.tickets.append(t)

    @rule(name=NAMES)
    def cancel(self, name):
        self._attempt(self.leased.cancel, name)

    @precondition(lambda self: self.tickets)
    @rule(i=st.integers(0, 50))
    def complete(self, i):
        t = self.tickets[i % len(self.tickets)]
        st_ = self.leased.live.get(t.name)
        current = st_ is not None and st_.busy and st_.epoch == t.epoch and st_.dispatch == t.dispatch
        result = self._attempt(self.leased.complete, t)
        assert (result is not None) == current  # exactly the current ticket is accepted

    @invariant()
    def ok(self):
        assert lease_violations(self.leased) == []
        # a retired busy request's blocks are never on the free list
        for name, s in self.leased.live.items():
            if s.retired:
                assert s.busy
                assert not set(self.leased.pool.tables[name]) & set(self.leased.pool.free_ids)


SETTINGS = settings(
    max_examples=60, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestPoolMachine = PoolMachine.TestCase
TestPoolMachine.settings = SETTINGS
TestLeaseMachine = LeaseMachine.TestCase
TestLeaseMachine.settings = SETTINGS
