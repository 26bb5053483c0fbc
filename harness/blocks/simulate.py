"""Continuous-batching simulator over the vLLM-like KV cache manager (``vllm/v1/core/sched/scheduler.py``).

One loop iteration = one engine step of ``step_time_s`` simulated seconds:

1. running requests (in order) get their next tokens within the token budget; when a running request
   cannot get slots, the **last** running request is preempted (recompute: blocks freed, computed count
   reset to 0, prepended to waiting) until it fits or the request itself was the victim;
2. only if nothing was preempted in this step: waiting requests are admitted FCFS (prefix-cache lookup,
   chunked prefill within the remaining budget, ``max_num_seqs``); the first one that does not fit stops
   admission (no preemption for waiting requests);
3. every request whose computed tokens reach its length samples one output token; requests reaching
   ``max_tokens`` finish and free their blocks (tail first).

Outputs are unique token ids (no EOS), so a request produces exactly ``max_tokens`` tokens.
Pure: the clock is simulated (the real time a run may take is bounded, see :func:`run`).
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field

from harness.blocks import limits
from harness.blocks.prefix import CacheRequest, KVCacheManager
from harness.blocks.scenario import EngineSettings, SimRequestSpec, SimScenario, expand
from harness.errors import UsageError

__all__ = ["StepRecord", "SimResult", "Simulator", "SimulationLimit", "run"]


@dataclass(frozen=True, slots=True)
class StepRecord:
    step: int
    t: float
    running: int
    waiting: int
    used_blocks: int
    usage: float  # as vllm:kv_cache_usage_perc (after the step's frees)
    scheduled_tokens: int
    preempted: int


@dataclass
class SimResult:
    scenario: str
    engine: EngineSettings
    steps: int = 0
    finished: int = 0
    preemptions: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    peak_used_blocks: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    timeline: list[StepRecord] = field(default_factory=list)
    preemptions_by_request: dict[str, int] = field(default_factory=dict)
    rejected: list[str] = field(default_factory=list)  # longer than max_model_len

    def summary(self, timeline: bool = False) -> dict:
        usable = self.engine.num_blocks - 1
        usages = [s.usage for s in self.timeline]
        out = {
            "scenario": self.scenario,
            "engine": self.engine.__dict__,
            "steps": self.steps,
            "simulated_seconds": round(self.steps * self.engine.step_time_s, 6),
            "finished": self.finished,
            "rejected": self.rejected,
            "num_preemptions": self.preemptions,
            "preempted_requests": {k: v for k, v in self.preemptions_by_request.items() if v},
            "prefix_cache_queries": self.prefix_queries,
            "prefix_cache_hits": self.prefix_hits,
            "prefix_cache_hit_rate": self.prefix_hits / self.prefix_queries if self.prefix_queries else 0.0,
            "prompt_tokens": self.prompt_tokens,
            "generation_tokens": self.generation_tokens,
            "peak_used_blocks": self.peak_used_blocks,
            "peak_kv_cache_usage": self.peak_used_blocks / usable if usable else 0.0,
            "mean_kv_cache_usage": sum(usages) / len(usages) if usages else 0.0,
        }
        if timeline:
            out["timeline"] = [
                s.__dict__ if hasattr(s, "__dict__") else {k: getattr(s, k) for k in StepRecord.__slots__}
                for s in self.timeline
            ]
        return out


class Simulator:
    def __init__(self, engine: EngineSettings, *, debug: bool = False, hash_seed: str = "0") -> None:
        self.cfg = engine
        self.kv = KVCacheManager(
            engine.num_blocks,
            engine.block_size,
            engine.max_model_len,
            enable_caching=engine.enable_prefix_caching,
            hash_seed=hash_seed,
            debug=debug,
        )
        self.debug = debug
        self.running: list[CacheRequest] = []
        self.waiting: deque[CacheRequest] = deque()
        self.step_no = 0
        self.t = 0.0
        self._next_token = 2_000_000_000

    def add(self, spec: SimRequestSpec) -> CacheRequest:
        r = CacheRequest(spec.request_id, list(spec.prompt), len(spec.prompt), spec.max_tokens)
        self.kv.update_hashes(r)
        self.waiting.append(r)
        return r

    def step(self, result: SimResult) -> None:
        cfg, kv = self.cfg, self.kv
        budget = cfg.max_num_batched_tokens
        scheduled: list[tuple[CacheRequest, int]] = []
        preempted = 0
        i = 0
        running = self.running
        while i < len(running) and budget > 0:
            r = running[i]
            n = r.num_tokens - r.num_computed_tokens
            if 0 < cfg.long_prefill_token_threshold < n:
                n = cfg.long_prefill_token_threshold
            n = min(n, budget, cfg.max_model_len - 1 - r.num_computed_tokens)
            if n <= 0:
                i += 1
                continue
            while kv.allocate_slots(r, n) is None:
                victim = running.pop()
                kv.free(victim)
                victim.num_computed_tokens = 0
                self.waiting.appendleft(victim)
                preempted += 1
                result.preemptions_by_request[victim.request_id] = (
                    result.preemptions_by_request.get(victim.request_id, 0) + 1
                )
                if victim is r:
                    break
            else:
                scheduled.append((r, n))
                budget -= n
                i += 1
                continue
            break
        if not preempted:
            while self.waiting and budget > 0 and len(running) < cfg.max_num_seqs:
                r = self.waiting[0]
                hits, k = kv.get_computed_blocks(r)
                n = r.num_tokens - k
                if 0 < cfg.long_prefill_token_threshold < n:
                    n = cfg.long_prefill_token_threshold
                n = min(n, budget)
                if kv.allocate_slots(r, n, k, hits) is None:
                    break
                self.waiting.popleft()
                running.append(r)
                r.num_computed_tokens = k
                scheduled.append((r, n))
                budget -= n
        # execute
        finished = []
        for r, n in scheduled:
            r.num_computed_tokens += n
            if r.num_computed_tokens >= r.num_tokens:
                if r.num_output_tokens == 0:
                    result.prompt_tokens += r.num_prompt_tokens
                self._next_token += 1
                r.all_token_ids.append(self._next_token)
                kv.update_hashes(r)
                result.generation_tokens += 1
                if r.num_output_tokens >= r.max_tokens or r.num_tokens >= cfg.max_model_len:
                    finished.append(r)
        for r in finished:
            running.remove(r)
            kv.free(r)
            result.finished += 1
        if self.debug:
            kv.check()
        result.preemptions += preempted
        used = cfg.num_blocks - 1 - kv.pool.num_free
        result.peak_used_blocks = max(result.peak_used_blocks, used)
        result.timeline.append(
            StepRecord(
                self.step_no,
                round(self.t, 9),
                len(running),
                len(self.waiting),
                used,
                kv.usage(),
                sum(n for _, n in scheduled),
                preempted,
            )
        )
        self.step_no += 1
        self.t += cfg.step_time_s


def _blocks_to_finish(spec: SimRequestSpec, engine: EngineSettings) -> int:
    """Blocks a request holds at its last step: every token but the last sampled one is computed."""
    tokens = min(len(spec.prompt) + spec.max_tokens - 1, engine.max_model_len - 1)
    return -(-tokens // engine.block_size)


class SimulationLimit(UsageError):
    """The run would not end, or not in reasonable time: one line saying which bound it hit."""


def run(
    sc: SimScenario,
    *,
    specs: list[SimRequestSpec] | None = None,
    debug: bool = False,
    max_steps: int | None = None,
    max_wall_s: float | None = None,
    **engine_overrides,
) -> SimResult:
    """Replay sc's requests (or the given specs, e.g. from a load-test scenario) until every one has finished.

    Bounded: more than ``max_steps`` engine steps or ``max_wall_s`` real seconds (default: harness.blocks.limits)
    raise SimulationLimit, and so does a request that can never finish or never be admitted."""
    max_steps = limits.MAX_STEPS if max_steps is None else max_steps
    max_wall_s = limits.MAX_WALL_S if max_wall_s is None else max_wall_s
    engine = EngineSettings(**{**sc.engine.__dict__, **engine_overrides})
    if not engine.step_time_s > 0:  # also false for NaN: the clock would never reach the next arrival
        raise UsageError(f"engine.step_time_s must be > 0, got {engine.step_time_s!r}")
    sim = Simulator(engine, debug=debug)
    result = SimResult(sc.name, engine)
    pending = deque(sorted(specs, key=lambda r: r.arrival_s) if specs is not None else expand(sc))
    deadline = time.monotonic() + max_wall_s
    while pending or sim.running or sim.waiting:
        while pending and pending[0].arrival_s <= sim.t + 1e-12:
            spec = pending.popleft()
            if len(spec.prompt) + 1 > engine.max_model_len:
                result.rejected.append(spec.request_id)  # the API server answers 400
                continue
            if _blocks_to_finish(spec, engine) > engine.num_blocks - 1:  # it would preempt itself forever
                raise SimulationLimit(
                    f"request {spec.request_id} ({len(spec.prompt)} prompt + {spec.max_tokens} output tokens) needs "
                    f"{_blocks_to_finish(spec, engine)} blocks of {engine.block_size} to finish; the cache has "
                    f"{engine.num_blocks - 1} usable, so it would preempt itself forever: raise num_blocks"
                )
            sim.add(spec)
        if not sim.running and not sim.waiting:
            if pending:
                # jump to the first step at or after the next arrival; max() so float rounding cannot stall the clock
                due = pending[0].arrival_s
                sim.t = max(sim.t + engine.step_time_s, math.ceil(due / engine.step_time_s) * engine.step_time_s, due)
            continue
        before = len(result.timeline)
        sim.step(result)
        rec = result.timeline[before]
        if not sim.running and sim.waiting and not rec.scheduled_tokens and not rec.preempted:  # nothing can change
            raise SimulationLimit(
                f"request {sim.waiting[0].request_id} can never be admitted: its first chunk needs "
                f"more than the {engine.num_blocks - 1} usable blocks; raise num_blocks"
            )
        if sim.step_no >= max_steps:
            raise SimulationLimit(
                f"simulation stopped after {max_steps} engine steps ({result.finished} of "
                f"{result.finished + len(sim.running) + len(sim.waiting) + len(pending)} requests "
                "finished): fewer requests or shorter outputs, or more blocks / max_num_seqs"
            )
        if sim.step_no % 1024 == 0 and time.monotonic() > deadline:
            raise SimulationLimit(
                f"simulation stopped after {max_wall_s:g} s of real time at step {sim.step_no} "
                f"({result.finished} requests finished): the scenario is too large to simulate"
            )
    result.steps = sim.step_no
    result.prefix_queries = sim.kv.stats.queries
    result.prefix_hits = sim.kv.stats.hits
    return result
