"""Prefix-caching block pool and KV cache manager following vLLM 0.11.0 (``vllm/v1/core``).

* Blocks are ints 0..N-1; block 0 is the null block (never free, never cached, never counted).
* The free queue is allocated from the **front**; freed blocks are appended to the **tail**, and a
  request frees its table in **reverse** order, so its tail block is evicted first (LRU across requests).
  An ``OrderedDict`` gives O(1) pop-front, append and unlink-from-the-middle (``touch``).
* Full blocks carry a hash key; cached blocks whose count drops to 0 stay in the hash map *and* the free
  queue until the queue hands them out again (lazy eviction). A hit on such a block (``touch``) takes it
  out of the free queue. Several blocks may hold the same key (no de-duplication).
* Hash chain: ``H((parent or NONE_HASH, tuple(tokens), extra_keys or None))`` with extra keys
  ``[lora_id] + [cache_salt if block 0]``; ``H`` = sha256 of the pickle (vLLM's default "sha256").
  Keys are ``hash + group_id.to_bytes(4, "big")``.
* Lookup stops at the first miss and is capped at ``(num_tokens - 1) // block_size`` blocks.

Pure: no I/O, no clock. :func:`pool_violations` is the (slow) structural check.
"""

from __future__ import annotations

import hashlib
import pickle
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.blocks.pool import InvariantViolation, PoolExhausted

__all__ = [
    "sha256_pickle",
    "none_hash",
    "hash_block_tokens",
    "extend_block_hashes",
    "PrefixBlockPool",
    "KVCacheManager",
    "PrefixStats",
    "CacheRequest",
    "pool_violations",
    "check_pool",
]

Hasher = Callable[[Any], bytes]


def sha256_pickle(obj: Any) -> bytes:
    return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def none_hash(seed: str, hasher: Hasher = sha256_pickle) -> bytes:
    """The chain's root, as vLLM derives it when ``PYTHONHASHSEED`` is set (else it is random per process)."""
    return hasher(seed)


def hash_block_tokens(
    parent: bytes, tokens: Sequence[int], extra_keys: tuple | None, hasher: Hasher = sha256_pickle
) -> bytes:
    return hasher((parent, tuple(tokens), extra_keys))


def extend_block_hashes(
    hashes: list[bytes],
    tokens: Sequence[int],
    block_size: int,
    root: bytes,
    *,
    lora_id: int | None = None,
    cache_salt: str | None = None,
    hasher: Hasher = sha256_pickle,
) -> list[bytes]:
    """Append the hashes of every newly *full* block of ``tokens`` to ``hashes`` (in place); return it."""
    start = len(hashes) * block_size
    parent = hashes[-1] if hashes else root
    lora = [lora_id] if lora_id is not None else []
    while start + block_size <= len(tokens):
        extra = lora + ([cache_salt] if start == 0 and cache_salt else [])
        parent = hasher((parent, tuple(tokens[start : start + block_size]), tuple(extra) if extra else None))
        hashes.append(parent)
        start += block_size
    return hashes


def _key(block_hash: bytes, group_id: int = 0) -> bytes:
    return block_hash + group_id.to_bytes(4, "big")


class PrefixBlockPool:
    """vLLM's ``BlockPool`` semantics over plain ints."""

    __slots__ = ("num_blocks", "enable_caching", "ref", "key", "free", "cached", "debug")

    def __init__(self, num_blocks: int, enable_caching: bool = True, *, debug: bool = False) -> None:
        if type(num_blocks) is not int or num_blocks < 1:
            raise ValueError("need at least one block (block 0 is the null block)")
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self.ref = [0] * num_blocks
        self.key: list[bytes | None] = [None] * num_blocks
        self.free: OrderedDict[int, None] = OrderedDict.fromkeys(range(1, num_blocks))
        # key -> block id, or dict of block ids when several blocks share a key
        self.cached: dict[bytes, int | dict[int, None]] = {}
        self.debug = debug

    @property
    def num_free(self) -> int:
        return len(self.free)

    def usage(self) -> float:
        """``vllm:kv_cache_usage_perc``: 1 - free / (num_blocks - 1)."""
        total = self.num_blocks - 1
        return 1.0 - len(self.free) / total if total else 0.0

    def get_cached_block(self, block_hash: bytes, group_id: int = 0) -> int | None:
        hit = self.cached.get(_key(block_hash, group_id))
        if hit is None or type(hit) is int:
            return hit
        return next(iter(hit))

    def get_new_blocks(self, n: int) -> list[int]:
        free = self.free
        if n > len(free):
            raise PoolExhausted(f"need {n} blocks, {len(free)} free")
        popitem = free.popitem
        ref = self.ref
        out = [popitem(last=False)[0] for _ in range(n)]
        if self.enable_caching:
            key = self.key
            for b in out:
                if key[b] is not None:
                    self._evict(b)
                ref[b] = 1
        else:
            for b in out:
                ref[b] = 1
        if self.debug:
            check_pool(self)
        return out

    def _evict(self, b: int) -> None:
        k = self.key[b]
        entry = self.cached.pop(k, None)
        if type(entry) is dict:
            entry.pop(b, None)
            if len(entry) == 1:
                self.cached[k] = next(iter(entry))
            elif entry:
                self.cached[k] = entry
        elif entry is not None and entry != b:
            self.cached[k] = entry  # key held by another block
        self.key[b] = None

    def touch(self, blocks: Iterable[int]) -> None:
        ref, free = self.ref, self.free
        for b in blocks:
            if ref[b] == 0 and b != 0:
                del free[b]
            ref[b] += 1
        if self.debug:
            check_pool(self)

    def free_blocks(self, ordered: Iterable[int]) -> None:
        """Drop one reference of each block; blocks reaching 0 go to the tail in the given order."""
        ref, free = self.ref, self.free
        for b in ordered:
            r = ref[b] - 1
            ref[b] = r
            if r == 0 and b != 0:
                free[b] = None
        if self.debug:
            check_pool(self)

    def cache_full_blocks(
        self, blocks: Sequence[int], hashes: Sequence[bytes], num_cached: int, num_full: int, group_id: int = 0
    ) -> None:
        cached, key = self.cached, self.key
        for i in range(num_cached, num_full):
            b = blocks[i]
            if key[b] is not None:
                raise InvariantViolation(f"block {b} already has a hash")
            k = _key(hashes[i], group_id)
            key[b] = k
            prev = cached.get(k)
            if prev is None:
                cached[k] = b
            elif type(prev) is int:
                cached[k] = {prev: None, b: None}
            else:
                prev[b] = None
        if self.debug:
            check_pool(self)

    def reset_prefix_cache(self) -> bool:
        if len(self.free) != self.num_blocks - 1:
            return False
        self.cached = {}
        self.key = [None] * self.num_blocks
        return True


def pool_violations(pool: PrefixBlockPool, tables: Iterable[Sequence[int]] | None = None) -> list[str]:
    out: list[str] = []
    free = list(pool.free)
    if 0 in pool.free:
        out.append("null block 0 is in the free queue")
    if pool.key[0] is not None:
        out.append("null block 0 has a hash")
    zero = {b for b in range(1, pool.num_blocks) if pool.ref[b] == 0}
    if set(free) != zero:
        out.append(f"free queue {sorted(free)} != unreferenced blocks {sorted(zero)}")
    neg = [b for b in range(pool.num_blocks) if pool.ref[b] < 0]
    if neg:
        out.append(f"negative refcounts at {neg}")
    mapped: dict[int, bytes] = {}
    for k, entry in pool.cached.items():
        ids = [entry] if type(entry) is int else list(entry)
        if not ids:
            out.append("empty hash entry")
        for b in ids:
            if b in mapped:
                out.append(f"block {b} mapped under two keys")
            mapped[b] = k
            if pool.key[b] != k:
                out.append(f"block {b} is mapped under a key it does not carry")
    for b, k in enumerate(pool.key):
        if k is not None and mapped.get(b) != k:
            out.append(f"block {b} carries a key but is not in the hash map")
    if tables is not None:
        counts = [0] * pool.num_blocks
        for t in tables:
            for b in t:
                counts[b] += 1
        for b in range(1, pool.num_blocks):
            if counts[b] != pool.ref[b]:
                out.append(f"block {b}: refcount {pool.ref[b]} but {counts[b]} table slots")
    return out


def check_pool(pool: PrefixBlockPool, tables=None) -> None:
    bad = pool_violations(pool, tables)
    if bad:
        raise InvariantViolation("; ".join(bad))


@dataclass
class CacheRequest:
    """What the cache manager needs to know about a request (a subset of vLLM's ``Request``)."""

    request_id: str
    all_token_ids: list[int]
    num_prompt_tokens: int
    max_tokens: int
    lora_id: int | None = None
    cache_salt: str | None = None
    num_computed_tokens: int = 0
    block_hashes: list[bytes] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.all_token_ids) - self.num_prompt_tokens


@dataclass
class PrefixStats:
    requests: int = 0
    queries: int = 0  # + request.num_tokens per lookup  (vllm:prefix_cache_queries_total)
    hits: int = 0  # + cached tokens found            (vllm:prefix_cache_hits_total)


class KVCacheManager:
    """``KVCacheManager`` + ``FullAttentionManager`` for one KV cache group."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        max_model_len: int,
        *,
        enable_caching: bool = True,
        hash_seed: str = "0",
        hasher: Hasher = sha256_pickle,
        debug: bool = False,
    ) -> None:
        self.pool = PrefixBlockPool(num_blocks, enable_caching, debug=debug)
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.enable_caching = enable_caching
        self.hasher = hasher
        self.root = none_hash(hash_seed, hasher)
        self.req_to_blocks: dict[str, list[int]] = {}
        self.num_cached_block: dict[str, int] = {}
        self.stats = PrefixStats()
        self.debug = debug

    def update_hashes(self, req: CacheRequest) -> None:
        """Hash newly full blocks (vLLM does this at creation and whenever output tokens are appended)."""
        if self.enable_caching:
            extend_block_hashes(
                req.block_hashes,
                req.all_token_ids,
                self.block_size,
                self.root,
                lora_id=req.lora_id,
                cache_salt=req.cache_salt,
                hasher=self.hasher,
            )

    def get_computed_blocks(self, req: CacheRequest) -> tuple[list[int], int]:
        if not self.enable_caching:
            return [], 0
        limit = (req.num_tokens - 1) // self.block_size
        hits: list[int] = []
        get = self.pool.get_cached_block
        for h in req.block_hashes[:limit]:
            b = get(h)
            if b is None:
                break
            hits.append(b)
        n = len(hits) * self.block_size
        self.stats.requests += 1
        self.stats.queries += req.num_tokens
        self.stats.hits += n
        return hits, n

    def allocate_slots(
        self,
        req: CacheRequest,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: Sequence[int] = (),
    ) -> list[int] | None:
        """Give ``req`` slots for ``num_new_tokens`` more tokens; None (and no change) if they don't fit."""
        if num_new_tokens <= 0:
            raise ValueError("num_new_tokens must be > 0")
        rid = req.request_id
        owned = self.req_to_blocks.get(rid, [])
        num_computed = req.num_computed_tokens + num_new_computed_tokens
        need_tokens = min(num_computed + num_new_tokens, self.max_model_len)
        required = -(-need_tokens // self.block_size)
        ref = self.pool.ref
        evictable = sum(1 for b in new_computed_blocks if ref[b] == 0 and b != 0)
        if required - len(new_computed_blocks) - len(owned) + evictable > self.pool.num_free:
            return None
        if self.enable_caching:
            self.pool.touch(new_computed_blocks)
        if rid not in self.num_cached_block:
            owned = self.req_to_blocks[rid] = list(new_computed_blocks)
            self.num_cached_block[rid] = len(new_computed_blocks)
        new = required - len(owned)
        new_blocks = self.pool.get_new_blocks(new) if new > 0 else []
        owned.extend(new_blocks)
        if self.enable_caching:
            num_full = min(num_computed + num_new_tokens, req.num_tokens) // self.block_size
            done = self.num_cached_block[rid]
            if num_full > done:
                self.pool.cache_full_blocks(owned, req.block_hashes, done, num_full)
                self.num_cached_block[rid] = num_full
        if self.debug:
            self.check()
        return new_blocks

    def free(self, req: CacheRequest | str) -> None:
        rid = req if isinstance(req, str) else req.request_id
        blocks = self.req_to_blocks.pop(rid, [])
        self.pool.free_blocks(reversed(blocks))
        self.num_cached_block.pop(rid, None)
        if self.debug:
            self.check()

    def usage(self) -> float:
        return self.pool.usage()

    def check(self) -> None:
        check_pool(self.pool, self.req_to_blocks.values())
