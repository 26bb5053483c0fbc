"""Block-pool operations per second: ours (harness.blocks.prefix.PrefixBlockPool) vs vLLM 0.11.0's BlockPool.

Run with the engine environment's python (vLLM's pool is importable there; harness is imported by path):

    ~/.cache/harness/envs/vllm-0.11.0-<key>/bin/python benchmarks/blocks_ops.py   # the env `harness install` built [--requests 2500] [--repeat 4] [--rounds 3]

1. Record: a simulated continuous-batching workload (shared prefixes, tight cache so it preempts) runs
   through our KV cache manager; every block-pool call is recorded (new blocks, touch, free, cache full
   blocks, hash lookup) with the block ids it used.
2. Replay the same trace on both pools, alternating ours / vLLM in each round, invariant checks off. Each
   trace pass starts from a fresh pool (construction not timed). Block ids are passed as ints to ours and as
   the corresponding ``KVCacheBlock`` objects to vLLM's (materialised before timing).
3. Parity: after every pass the free-queue order, refcounts and cached-block count of both pools must match,
   and every ``get_new_blocks`` must return the same ids: the replay is also a conformance check.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("PYTHONHASHSEED", "0")

from harness.blocks.prefix import PrefixBlockPool  # noqa: E402
from harness.blocks.scenario import (  # noqa: E402
    EngineSettings,
    Lengths,
    SimScenario,
    expand,  # noqa: E402
)
from harness.blocks.simulate import SimResult, Simulator  # noqa: E402


class RecordingPool(PrefixBlockPool):
    __slots__ = ("trace",)

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.trace: list[tuple] = []

    def get_new_blocks(self, n):
        out = super().get_new_blocks(n)
        self.trace.append(("new", n, tuple(out)))
        return out

    def touch(self, blocks):
        blocks = list(blocks)
        if blocks:
            self.trace.append(("touch", tuple(blocks)))
        super().touch(blocks)

    def free_blocks(self, ordered):
        ordered = list(ordered)
        if ordered:
            self.trace.append(("free", tuple(ordered)))
        super().free_blocks(ordered)

    def cache_full_blocks(self, blocks, hashes, num_cached, num_full, group_id=0):
        self.trace.append(("cache", tuple(blocks[:num_full]), tuple(hashes[:num_full]), num_cached, num_full))
        super().cache_full_blocks(blocks, hashes, num_cached, num_full, group_id)

    def get_cached_block(self, block_hash, group_id=0):
        self.trace.append(("lookup", block_hash))
        return super().get_cached_block(block_hash, group_id)


def record(requests: int, num_blocks: int, block_size: int, seed: int) -> tuple[list[tuple], dict]:
    eng = EngineSettings(
        num_blocks=num_blocks, block_size=block_size, max_model_len=2048, max_num_seqs=64, max_num_batched_tokens=2048
    )
    sc = SimScenario(
        "bench",
        requests,
        400.0,
        Lengths("uniform", min=32, max=400),
        Lengths("uniform", min=8, max=128),
        shared_share=0.6,
        shared_tokens=160,
        seed=seed,
        engine=eng,
    )
    sim = Simulator(eng)
    sim.kv.pool = RecordingPool(num_blocks, True)
    res = SimResult("bench", eng)
    pending = list(expand(sc))
    pending.reverse()
    while pending or sim.running or sim.waiting:
        while pending and pending[-1].arrival_s <= sim.t + 1e-12:
            sim.add(pending.pop())
        if not sim.running and not sim.waiting:
            sim.t = pending[-1].arrival_s
            continue
        sim.step(res)
    return sim.kv.pool.trace, {
        "steps": sim.step_no,
        "preemptions": res.preemptions,
        "hits": sim.kv.stats.hits,
        "queries": sim.kv.stats.queries,
    }


class _Req:
    __slots__ = ("block_hashes",)

    def __init__(self, hashes):
        self.block_hashes = hashes


def prepare_ours(trace):
    out = []
    for op in trace:
        k = op[0]
        if k == "new":
            out.append((0, op[1]))
        elif k == "touch":
            out.append((1, op[1]))
        elif k == "free":
            out.append((2, op[1]))
        elif k == "cache":
            out.append((3, (op[1], op[2], op[3], op[4])))
        else:
            out.append((4, op[1]))
    return out


def run_ours(ops, num_blocks, expect=None):
    pool = PrefixBlockPool(num_blocks, True)
    new, touch, free, cache, get = (
        pool.get_new_blocks,
        pool.touch,
        pool.free_blocks,
        pool.cache_full_blocks,
        pool.get_cached_block,
    )
    t0 = time.perf_counter()
    for code, arg in ops:
        if code == 0:
            new(arg)
        elif code == 1:
            touch(arg)
        elif code == 2:
            free(arg)
        elif code == 3:
            cache(*arg)
        else:
            get(arg)
    return time.perf_counter() - t0, pool


def prepare_vllm(trace, num_blocks):
    from vllm.v1.core.block_pool import BlockPool

    proto = BlockPool(num_blocks, True)  # only used to map ids -> objects for materialising args
    del proto

    def materialise(pool):
        b = pool.blocks
        out = []
        for op in trace:
            k = op[0]
            if k == "new":
                out.append((0, op[1]))
            elif k == "touch":
                out.append((1, ([b[i] for i in op[1]],)))
            elif k == "free":
                out.append((2, [b[i] for i in op[1]]))
            elif k == "cache":
                out.append((3, (_Req(list(op[2])), [b[i] for i in op[1]], op[3], op[4], 0, 0)))
            else:
                out.append((4, op[1]))
        return out

    return materialise


def run_vllm(materialise, num_blocks, block_size):
    from vllm.v1.core.block_pool import BlockPool

    pool = BlockPool(num_blocks, True)
    ops = materialise(pool)
    new, touch, free, cache, get = (
        pool.get_new_blocks,
        pool.touch,
        pool.free_blocks,
        pool.cache_full_blocks,
        pool.get_cached_block,
    )
    gids = [0]
    t0 = time.perf_counter()
    for code, arg in ops:
        if code == 0:
            new(arg)
        elif code == 1:
            touch(arg)
        elif code == 2:
            free(arg)
        elif code == 3:
            req, blocks, nc, nf, _, g = arg
            cache(req, blocks, nc, nf, block_size, g)
        else:
            get(arg, gids)
    return time.perf_counter() - t0, pool


def parity(trace, num_blocks, block_size) -> list[str]:
    """Replay op by op on both pools and compare returned ids and state."""
    from vllm.v1.core.block_pool import BlockPool

    ours, theirs = PrefixBlockPool(num_blocks, True), BlockPool(num_blocks, True)
    b = theirs.blocks
    problems = []
    for i, op in enumerate(trace):
        k = op[0]
        if k == "new":
            a = ours.get_new_blocks(op[1])
            v = [x.block_id for x in theirs.get_new_blocks(op[1])]
            if a != v or a != list(op[2]):
                problems.append(f"op {i}: new blocks ours {a} vllm {v} recorded {list(op[2])}")
        elif k == "touch":
            ours.touch(op[1])
            theirs.touch(([b[j] for j in op[1]],))
        elif k == "free":
            ours.free_blocks(op[1])
            theirs.free_blocks([b[j] for j in op[1]])
        elif k == "cache":
            ours.cache_full_blocks(list(op[1]), list(op[2]), op[3], op[4])
            theirs.cache_full_blocks(_Req(list(op[2])), [b[j] for j in op[1]], op[3], op[4], block_size, 0)
        else:
            a = ours.get_cached_block(op[1])
            v = theirs.get_cached_block(op[1], [0])
            if a != (v[0].block_id if v else None):
                problems.append(f"op {i}: lookup ours {a} vllm {v and v[0].block_id}")
        if len(problems) > 5:
            break
    free_v = [x.block_id for x in theirs.free_block_queue.get_all_free_blocks()]
    if free_v != list(ours.free):
        problems.append("free queue order differs at the end")
    if [x.ref_cnt for x in theirs.blocks[1:]] != ours.ref[1:]:
        problems.append("refcounts differ at the end")
    if len(theirs.cached_block_hash_to_block) != len(ours.cached):
        problems.append("cached-key count differs at the end")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2500)
    ap.add_argument("--num-blocks", type=int, default=1024)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=4, help="trace passes per timed run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    trace, info = record(args.requests, args.num_blocks, args.block_size, args.seed)
    kinds = {}
    for op in trace:
        kinds[op[0]] = kinds.get(op[0], 0) + 1
    print(
        f"recorded {len(trace)} pool ops in {time.perf_counter() - t0:.1f}s from {args.requests} requests "
        f"({info}); mix {kinds}"
    )
    problems = parity(trace, args.num_blocks, args.block_size)
    print("parity with vLLM BlockPool:", "identical ids, free-queue order, refcounts" if not problems else problems)

    ours_ops = prepare_ours(trace)
    mat = prepare_vllm(trace, args.num_blocks)
    n_ops = len(trace) * args.repeat
    rates = {"ours": [], "vllm": []}
    for r in range(args.rounds):
        for who in ("ours", "vllm") if r % 2 == 0 else ("vllm", "ours"):
            total = 0.0
            for _ in range(args.repeat):
                if who == "ours":
                    dt, _pool = run_ours(ours_ops, args.num_blocks)
                else:
                    dt, _pool = run_vllm(mat, args.num_blocks, args.block_size)
                total += dt
            rates[who].append(n_ops / total)
            print(f"round {r}: {who:<4} {n_ops} ops in {total:.3f}s = {n_ops / total:,.0f} ops/s")
    mo, mv = statistics.median(rates["ours"]), statistics.median(rates["vllm"])
    print(f"median ops/s: ours {mo:,.0f}  vLLM {mv:,.0f}  ratio ours/vLLM {mo / mv:.2f}x")
    return 0 if not problems else 1


if __name__ == "__main__":
    raise SystemExit(main())
