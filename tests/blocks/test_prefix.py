"""Prefix cache semantics of vLLM 0.11.0 (§8): hash chain, lookup cap, free-queue order, lazy eviction."""

from __future__ import annotations

import copy

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.blocks.prefix import (
    CacheRequest,
    KVCacheManager,
    PrefixBlockPool,
    extend_block_hashes,
    none_hash,
    pool_violations,
    sha256_pickle,
)

B = 4


def req(rid, tokens, **kw):
    r = CacheRequest(rid, list(tokens), len(tokens), max_tokens=8, **kw)
    return r


def admit(m: KVCacheManager, r: CacheRequest):
    m.update_hashes(r)
    hits, n = m.get_computed_blocks(r)
    got = m.allocate_slots(r, r.num_tokens - n, n, hits)
    if got is not None:
        r.num_computed_tokens = r.num_tokens
    return hits, n, got


def test_hash_chain_shape():
    root = none_hash("0")
    assert root == sha256_pickle("0")
    toks = list(range(10))
    h = extend_block_hashes([], toks, B, root)
    assert len(h) == 2  # only full blocks
    assert h[0] == sha256_pickle((root, (0, 1, 2, 3), None))
    assert h[1] == sha256_pickle((h[0], (4, 5, 6, 7), None))
    salted = extend_block_hashes([], toks, B, root, cache_salt="s", lora_id=7)
    assert salted[0] == sha256_pickle((root, (0, 1, 2, 3), (7, "s")))
    assert salted[1] == sha256_pickle((salted[0], (4, 5, 6, 7), (7,)))  # salt only in block 0
    # incremental extension equals one-shot hashing
    inc = extend_block_hashes([], toks[:5], B, root)
    assert extend_block_hashes(inc, toks + [10, 11], B, root) == extend_block_hashes([], toks + [10, 11], B, root)


def test_lookup_capped_so_last_token_is_recomputed():
    m = KVCacheManager(16, B, 1024, debug=True)
    a = req("a", range(8))
    admit(m, a)
    assert m.num_cached_block["a"] == 2
    b = req("b", range(8))  # exact multiple of the block size: last block recomputed
    hits, n, _ = admit(m, b)
    assert n == 4 and hits == m.req_to_blocks["a"][:1]
    c = req("c", range(9))
    hits, n, _ = admit(m, c)
    assert n == 8 and hits == m.req_to_blocks["a"][:2]
    assert m.stats.queries == 8 + 8 + 9 and m.stats.hits == 12
    assert m.pool.ref[m.req_to_blocks["a"][0]] == 3


def test_salt_and_lora_isolate():
    m = KVCacheManager(16, B, 1024, debug=True)
    admit(m, req("a", range(9), cache_salt="tenant1"))
    assert admit(m, req("b", range(9), cache_salt="tenant2"))[1] == 0
    assert admit(m, req("c", range(9), cache_salt="tenant1"))[1] == 8
    assert admit(m, req("d", range(9), lora_id=1))[1] == 0


def test_free_queue_order_and_lazy_eviction():
    m = KVCacheManager(8, B, 1024, debug=True)  # blocks 1..7 usable
    assert list(m.pool.free) == [1, 2, 3, 4, 5, 6, 7]
    a = req("a", range(10))  # 3 blocks: 1, 2, 3 (2 full -> cached)
    admit(m, a)
    assert m.req_to_blocks["a"] == [1, 2, 3]
    b = req("b", range(100, 105))
    admit(m, b)
    assert m.req_to_blocks["b"] == [4, 5]
    m.free(a)
    assert list(m.pool.free) == [6, 7, 3, 2, 1]  # appended in reverse order of a's table
    m.free(b)
    assert list(m.pool.free) == [6, 7, 3, 2, 1, 5, 4]
    assert m.pool.usage() == 0.0
    # cached free blocks still hit; a hit takes them out of the free queue (touch)
    hits, n, _ = admit(m, req("a2", range(10)))
    assert hits == [1, 2] and n == 8
    assert 1 not in m.pool.free and 2 not in m.pool.free
    m.free("a2")
    # lazy eviction: allocation from the front evicts the hash of a reused cached block
    m.pool.get_new_blocks(5)  # 6, 7, 3, 5, 4 ... then 2, 1 remain
    assert list(m.pool.free) == [2, 1]
    got = m.pool.get_new_blocks(1)
    assert got == [2] and m.pool.key[2] is None
    assert m.pool.get_cached_block(a.block_hashes[1]) is None
    assert m.pool.get_cached_block(a.block_hashes[0]) == 1


def test_allocation_failure_changes_nothing_and_counts_evictable_hits():
    m = KVCacheManager(5, B, 1024, debug=True)  # 4 usable
    a = req("a", range(9))
    admit(m, a)  # 3 blocks, 2 cached
    m.free(a)
    state = copy.deepcopy((m.pool.ref, m.pool.key, list(m.pool.free), m.pool.cached, m.req_to_blocks))
    big = req("big", list(range(8)) + list(range(500, 512)))  # 20 tokens = 5 blocks; 2 hit, both ref 0
    hits, n, got = admit(m, big)
    assert n == 8 and got is None  # 3 new + 2 evictable hits > 4 free
    assert state == (m.pool.ref, m.pool.key, list(m.pool.free), m.pool.cached, m.req_to_blocks)
    ok = req("ok", list(range(8)) + [600, 601, 602, 603, 604])  # 4 blocks: 2 hit + 2 new
    assert admit(m, ok)[2] is not None and m.pool.num_free == 0


def test_duplicate_keys_allowed():
    p = PrefixBlockPool(8, debug=True)
    x, y = p.get_new_blocks(2)
    h = sha256_pickle("h")
    p.cache_full_blocks([x], [h], 0, 1)
    p.cache_full_blocks([y], [h], 0, 1)
    assert p.get_cached_block(h) == x
    p.free_blocks([x])
    p.get_new_blocks(5)
    p.get_new_blocks(1)  # reallocates x, evicting only x's entry
    assert p.get_cached_block(h) == y and not pool_violations(p)


OPS = st.lists(
    st.tuples(st.sampled_from(["admit", "grow", "free"]), st.integers(0, 5), st.integers(1, 14), st.integers(0, 2)),
    max_size=40,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_random_manager_ops_keep_invariants(ops):
    m = KVCacheManager(10, B, 64, debug=True)
    live: dict[str, CacheRequest] = {}
    for op, i, n, prefix in ops:
        rid = f"r{i}"
        if op == "admit" and rid not in live:
            r = req(rid, [prefix] * 3 + list(range(1000 * i, 1000 * i + n)))
            before = copy.deepcopy((m.pool.ref, list(m.pool.free), m.pool.cached, m.req_to_blocks))
            hits, k, got = admit(m, r)
            if got is None:
                assert before == (m.pool.ref, list(m.pool.free), m.pool.cached, m.req_to_blocks)
            else:
                live[rid] = r
        elif op == "grow" and rid in live:
            r = live[rid]
            r.all_token_ids.append(n)
            m.update_hashes(r)
            if m.allocate_slots(r, 1) is not None:
                r.num_computed_tokens += 1
            else:
                r.all_token_ids.pop()
                del r.block_hashes[r.num_tokens // B :]
        elif op == "free" and rid in live:
            m.free(live.pop(rid))
        assert pool_violations(m.pool, m.req_to_blocks.values()) == []
        for r in live.values():
            assert len(m.req_to_blocks[r.request_id]) * B >= r.num_computed_tokens
    for r in list(live.values()):
        m.free(r)
    assert m.pool.num_free == 9 and all(x == 0 for x in m.pool.ref[1:])
