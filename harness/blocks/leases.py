"""Leases and epochs over a :class:`~harness.blocks.pool.PagedPool`: the cancellation contract.

A request's block table and a worker's in-flight *lease* on those blocks are separate obligations.

* ``create`` admits a request under a fresh, strictly increasing *epoch*.
* ``dispatch`` hands a worker a ticket ``(name, epoch, dispatch_no)``; one live dispatch per request.
* ``cancel`` retires the request at once (no new dispatch), but recycling its blocks waits until the
  outstanding dispatch is acknowledged by ``complete``. Without an outstanding dispatch it frees at once.
* ``complete`` accepts only the current ticket of the current epoch: a ticket from an older epoch (the
  name was reused), a duplicate, or an older dispatch of the same live request raises :class:`StaleTicket`
  and changes nothing.

Immediate reuse after cancel (freeing while the worker can still write) is the hazard this prevents;
the tests keep it as a negative control.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.blocks.pool import PagedPool, PoolMisuse

__all__ = ["LeasedPool", "Ticket", "StaleTicket", "LeaseState"]


class StaleTicket(ValueError):
    """A completion for an old epoch, an old dispatch, or a duplicate; nothing was changed."""


@dataclass(frozen=True, slots=True)
class Ticket:
    name: str
    epoch: int
    dispatch: int

    def __iter__(self):  # allows ``name, epoch, dispatch = ticket``
        return iter((self.name, self.epoch, self.dispatch))


@dataclass(slots=True)
class LeaseState:
    epoch: int
    busy: bool = False
    retired: bool = False
    dispatch: int = 0


class LeasedPool:
    def __init__(self, pool: PagedPool) -> None:
        self.pool = pool
        self.live: dict[str, LeaseState] = {}
        self.next_epoch = 0
        self.next_dispatch = 0

    def create(self, name: str, tokens: Sequence[int]) -> int:
        """Admit ``name``; returns its epoch. Pool errors propagate with nothing changed."""
        if name in self.live:
            raise PoolMisuse(f"request {name!r} is still live or awaiting acknowledgement")
        self.pool.create(name, tokens)
        self.next_epoch += 1
        self.live[name] = LeaseState(self.next_epoch)
        return self.next_epoch

    def dispatch(self, name: str) -> Ticket:
        state = self._state(name)
        if state.busy or state.retired:
            raise PoolMisuse(f"request {name!r}: one live dispatch at a time, none after cancel")
        self.next_dispatch += 1
        state.dispatch = self.next_dispatch
        state.busy = True
        return Ticket(name, state.epoch, state.dispatch)

    def cancel(self, name: str) -> bool:
        """Retire ``name``. Returns True if its blocks were recycled now, False if deferred."""
        state = self._state(name)
        state.retired = True
        if state.busy:
            return False
        self._recycle(name)
        return True

    def complete(self, ticket: Ticket | tuple[str, int, int]) -> bool:
        """Acknowledge a dispatch. Returns True if this released a cancelled request's blocks."""
        name, epoch, dispatch = ticket
        state = self.live.get(name)
        if state is None or state.epoch != epoch or not state.busy or state.dispatch != dispatch:
            raise StaleTicket(f"stale or duplicate completion {tuple(ticket)!r}")
        state.busy = False
        if state.retired:
            self._recycle(name)
            return True
        return False

    def release(self, name: str) -> None:
        """Normal finish of an idle request (same as cancel without an outstanding dispatch)."""
        state = self._state(name)
        if state.busy:
            raise PoolMisuse(f"request {name!r} has an outstanding dispatch")
        self._recycle(name)

    def _recycle(self, name: str) -> None:
        self.pool.release(name)
        del self.live[name]

    def _state(self, name: str) -> LeaseState:
        try:
            return self.live[name]
        except KeyError:
            raise PoolMisuse(f"unknown request {name!r}") from None


def lease_violations(leased: LeasedPool) -> list[str]:
    """Invariants linking leases to the pool (plus the pool's own)."""
    from harness.blocks.pool import violations

    out = violations(leased.pool)
    if set(leased.live) != set(leased.pool.tables):
        out.append(f"live requests {sorted(leased.live)} != pool tables {sorted(leased.pool.tables)}")
    for name, st in leased.live.items():
        if st.retired and not st.busy:
            out.append(f"{name!r} retired and idle but not recycled")
        if st.epoch > leased.next_epoch or st.dispatch > leased.next_dispatch:
            out.append(f"{name!r} carries a future epoch/dispatch")
    return out


__all__.append("lease_violations")
