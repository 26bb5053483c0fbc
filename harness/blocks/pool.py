"""A paged block pool with branch sharing and copy-on-write of a shared partial tail.

The pool stores token ids, not K/V tensors. Each named sequence owns a *block table* (list of physical
block ids, logical order). Blocks are reference-counted; ``fork`` shares every block of a table, and the
first ``append`` to a shared, partially filled tail block copies that block before writing
(copy-on-write). Every operation is atomic: when it cannot complete (no free block, unknown or duplicate
name) it raises before touching any table, reference count or the free list.

Cost: ``append`` and ``fork``-per-block are O(1); ``create``/``release`` are O(blocks of that table).
The full structural check lives in :func:`check` / :func:`violations` and is not on the hot path;
pass ``debug=True`` to run it after every operation.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["PagedPool", "PoolExhausted", "PoolMisuse", "InvariantViolation", "violations", "check"]


class PoolExhausted(MemoryError):
    """Not enough free blocks; nothing was changed."""


class PoolMisuse(ValueError):
    """Unknown/duplicate name or empty tokens; nothing was changed."""


class InvariantViolation(AssertionError):
    """The structural check found a broken invariant (a bug in the pool or an outside mutation)."""


class PagedPool:
    """``count`` physical blocks of ``width`` token slots each."""

    __slots__ = ("width", "data", "refs", "free_ids", "tables", "debug")

    def __init__(self, count: int, width: int, *, debug: bool = False) -> None:
        if type(count) is not int or type(width) is not int or count < 1 or width < 1:
            raise PoolMisuse("positive integer pool size and block width required")
        self.width = width
        self.data: list[list[int]] = [[] for _ in range(count)]
        self.refs: list[int] = [0] * count
        # A stack: the next block handed out is free_ids[-1].
        self.free_ids: list[int] = list(range(count - 1, -1, -1))
        self.tables: dict[str, list[int]] = {}
        self.debug = debug

    # ---- queries -------------------------------------------------------------------------------
    @property
    def num_blocks(self) -> int:
        return len(self.refs)

    @property
    def num_free(self) -> int:
        return len(self.free_ids)

    def read(self, name: str) -> list[int]:
        data = self.data
        return [tok for block in self._table(name) for tok in data[block]]

    def length(self, name: str) -> int:
        table = self._table(name)
        return (len(table) - 1) * self.width + len(self.data[table[-1]])

    def blocks_needed_to_append(self, name: str) -> int:
        """0 or 1: free blocks the next ``append`` to ``name`` would take."""
        last = self._table(name)[-1]
        return 1 if len(self.data[last]) == self.width or self.refs[last] > 1 else 0

    # ---- operations ----------------------------------------------------------------------------
    def create(self, name: str, tokens: Sequence[int]) -> list[int]:
        if name in self.tables:
            raise PoolMisuse(f"sequence {name!r} already exists")
        n = len(tokens)
        if n == 0:
            raise PoolMisuse("a sequence needs at least one token")
        width = self.width
        needed = -(-n // width)
        free = self.free_ids
        if needed > len(free):
            raise PoolExhausted(f"pool full: need {needed} blocks, {len(free)} free")
        data, refs = self.data, self.refs
        table = []
        for start in range(0, n, width):
            block = free.pop()
            refs[block] = 1
            data[block] = list(tokens[start : start + width])
            table.append(block)
        self.tables[name] = table
        if self.debug:
            check(self)
        return table

    def fork(self, source: str, name: str) -> list[int]:
        if name in self.tables:
            raise PoolMisuse(f"sequence {name!r} already exists")
        table = self._table(source).copy()
        refs = self.refs
        for block in table:
            refs[block] += 1
        self.tables[name] = table
        if self.debug:
            check(self)
        return table

    def append(self, name: str, token: int) -> int:
        """Append one token; returns the physical block it was written to."""
        table = self._table(name)
        last = table[-1]
        data, refs = self.data, self.refs
        tail = data[last]
        if len(tail) == self.width:  # grow
            if not self.free_ids:
                raise PoolExhausted("no free block to grow into")
            block = self.free_ids.pop()
            refs[block] = 1
            data[block] = [token]
            table.append(block)
        elif refs[last] > 1:  # shared partial tail: copy before writing
            if not self.free_ids:
                raise PoolExhausted("no free block for copy-on-write")
            block = self.free_ids.pop()
            refs[block] = 1
            data[block] = tail + [token]
            refs[last] -= 1  # still >= 1: another table owns it
            table[-1] = block
        else:
            block = last
            tail.append(token)
        if self.debug:
            check(self)
        return block

    def release(self, name: str) -> None:
        """Drop ``name``'s table; blocks whose last owner it was return to the free list (tail first)."""
        table = self.tables.pop(name, None)
        if table is None:
            raise PoolMisuse(f"unknown sequence {name!r}")
        data, refs, free = self.data, self.refs, self.free_ids
        for block in reversed(table):
            r = refs[block] - 1
            refs[block] = r
            if r == 0:
                data[block] = []
                free.append(block)
        if self.debug:
            check(self)

    def _table(self, name: str) -> list[int]:
        try:
            return self.tables[name]
        except KeyError:
            raise PoolMisuse(f"unknown sequence {name!r}") from None


def violations(pool: PagedPool) -> list[str]:
    """Every broken invariant of ``pool``, as sentences (empty list = healthy). O(total table size)."""
    out: list[str] = []
    n = len(pool.refs)
    counts = [0] * n
    for name, table in pool.tables.items():
        if not table:
            out.append(f"table {name!r} is empty")
            continue
        for b in table:
            if not 0 <= b < n:
                out.append(f"table {name!r} points outside the pool: {b}")
            else:
                counts[b] += 1
        for b in table[:-1]:
            if 0 <= b < n and len(pool.data[b]) != pool.width:
                out.append(f"table {name!r}: non-tail block {b} holds {len(pool.data[b])}/{pool.width}")
        last = table[-1]
        if 0 <= last < n and not 1 <= len(pool.data[last]) <= pool.width:
            out.append(f"table {name!r}: tail block {last} holds {len(pool.data[last])}")
    for b in range(n):
        if pool.refs[b] != counts[b]:
            out.append(f"block {b}: refcount {pool.refs[b]} but reachable from {counts[b]} table slots")
    free = pool.free_ids
    if len(set(free)) != len(free):
        out.append("free list holds duplicates")
    zero = {b for b in range(n) if pool.refs[b] == 0}
    if set(free) != zero:
        out.append(f"free list {sorted(set(free))} != unreferenced blocks {sorted(zero)}")
    for b in zero:
        if pool.data[b]:
            out.append(f"free block {b} still holds tokens")
    return out


def check(pool: PagedPool) -> None:
    """Raise :class:`InvariantViolation` listing every broken invariant."""
    bad = violations(pool)
    if bad:
        raise InvariantViolation("; ".join(bad))
