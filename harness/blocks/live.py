"""Cross-check the block model against a running engine (loopback only).

The block model is a reference model of vLLM 0.11.0's allocator; the series it is checked against are the ones the
engine's profile names (harness.engines: `profile.metrics`). An engine whose profile has no block configuration
(`cache_config`) or KV usage gauge keeps its KV cache some other way: the checks do not apply to it, and say why
(`profile.notes["blocks"]`) without sending anything (see `does_not_apply`).

Each check returns a :class:`Verdict` (agree / disagree with predicted, measured and an explanation, or
``agree=None`` when it could not be run); disagreement is never an exception. The network I/O is here;
every prediction comes from the pure modules (capacity, prefix, simulate).

Checks (the profile's series in brackets):
* ``num_blocks``  : planner vs [cache_config]{num_gpu_blocks}.
* ``usage``       : one long completion stream; [kv_usage] * (num_gpu_blocks - 1) vs the blocks the request must
                    hold (cdiv(prompt + generated so far, block_size)).
* ``prefix_hits`` : sequential requests sharing a prefix; delta of [prefix_hits] vs the KV cache manager's
                    predicted hits.
* ``preemptions`` : concurrent requests on a deliberately small cache (``--num-gpu-blocks-override``);
                    delta of [preemptions] vs the simulator.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import httpx

from harness.blocks import capacity as cap_mod
from harness.blocks.prefix import CacheRequest, KVCacheManager
from harness.blocks.scenario import EngineSettings, Lengths, SimScenario
from harness.blocks.simulate import run as simulate
from harness.client import Timeouts, make_sync_client
from harness.client.sse import DATA, SSEParser
from harness.engines import DEFAULT_KIND, EngineProfile, MetricNames, profile_for
from harness.errors import DataError, HarnessError
from harness.metrics import Exposition, parse_exposition
from harness.net import loopback_url
from harness.readers import parse_json

__all__ = [
    "CHECKS",
    "Verdict",
    "does_not_apply",
    "scrape",
    "cache_config",
    "check_num_blocks",
    "check_usage_single_stream",
    "check_prefix_hits",
    "check_preemptions",
    "predict_prefix_hits",
    "crosscheck",
]


@dataclass
class Verdict:
    check: str
    agree: bool | None  # None: could not be run (error/skip)
    predicted: object = None
    measured: object = None
    explanation: str = ""
    details: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


# check -> the MetricNames fields it reads
CHECKS: dict[str, tuple[str, ...]] = {
    "num_blocks": ("cache_config",),
    "usage": ("cache_config", "kv_usage", "running", "waiting"),
    "prefix_hits": ("cache_config", "prefix_hits", "prefix_queries"),
    "preemptions": ("cache_config", "preemptions"),
}


def _profile(engine: EngineProfile | str | None) -> EngineProfile:
    return engine if isinstance(engine, EngineProfile) else profile_for(engine or DEFAULT_KIND)


def _names(engine: EngineProfile | str | None) -> MetricNames:
    return _profile(engine).metrics


def _missing(profile: EngineProfile, check: str) -> list[str]:
    return [f for f in CHECKS[check] if getattr(profile.metrics, f) is None]


def _why_not(profile: EngineProfile, check: str) -> str | None:
    """Why `check` does not apply to this engine (None: it does)."""
    missing = _missing(profile, check)
    if not missing:
        return None
    why = profile.notes.get("blocks") or profile.notes.get(missing[0])
    return why or f"the {profile.title} profile names no {' / '.join(missing)} series"


def does_not_apply(engine: EngineProfile | str | None, checks: Sequence[str] | None = None) -> str | None:
    """Why none of `checks` (default: all) apply to this engine, in one line; None when at least one does."""
    profile = _profile(engine)
    whys = [_why_not(profile, c) for c in (checks or CHECKS)]
    if all(whys):
        return f"does not apply to {profile.title}: {whys[0]}"
    return None


MAX_BODY_BYTES = 16 << 20  # /metrics of one engine is tens of KB; a completion of a few hundred tokens less
TIMEOUT_S = 30.0  # whole-response bound of a scrape (completions get 300 s)
MAX_SAMPLES = 3000  # usage scrapes kept per stream: at ~40 KB each, bounded at ~120 MB
SIDE_TIMEOUTS = Timeouts.total(5.0)  # the usage poller: httpx's default, 5 s per phase


def _fetch(client: httpx.Client, method: str, url: str, *, json: object = None, timeout: float | None = None) -> bytes:
    """A whole response body, bounded in bytes and in wall time: an endless or dripping answer ends the check
    (per-read timeouts alone would let a server that sends a byte a second hold it forever)."""
    timeout = TIMEOUT_S if timeout is None else timeout
    end = time.monotonic() + timeout
    body = bytearray()
    with client.stream(method, url, json=json, timeout=timeout) as r:
        r.raise_for_status()
        for chunk in r.iter_bytes():
            body += chunk
            if len(body) > MAX_BODY_BYTES:
                raise ValueError(f"{url}: response is over {MAX_BODY_BYTES} bytes")
            if time.monotonic() > end:
                raise httpx.ReadTimeout(f"{url}: response took over {timeout:g} s", request=r.request)
    return bytes(body)


def _fetch_json(client: httpx.Client, method: str, url: str, **kw) -> object:
    return parse_json(_fetch(client, method, url, **kw).decode("utf-8", "replace"), url, "response", error=DataError)


def scrape(client: httpx.Client, base_url: str) -> Exposition:
    """/metrics as the one Prometheus model reads it (DataError when it is not the format)."""
    return parse_exposition(_fetch(client, "GET", f"{base_url}/metrics").decode("utf-8", "replace"))


def cache_config(m: Exposition, engine: EngineProfile | str | None = None) -> dict:
    """The labels of the profile's block-configuration info gauge ({} when it has none or the scrape lacks it)."""
    name = _names(engine).cache_config
    return m.labels(name) if name else {}


def _opt_int(text: str | None) -> int | None:
    return None if text in (None, "", "None") else int(float(text))


def _not_applicable(check: str, engine: EngineProfile | str | None) -> Verdict | None:
    profile = _profile(engine)
    why = _why_not(profile, check)
    return Verdict(check, None, explanation=f"does not apply to {profile.title}: {why}") if why else None


def check_num_blocks(
    client: httpx.Client,
    base_url: str,
    model_dir,
    *,
    dtype: str = "auto",
    kv_bytes: int | None = None,
    engine: EngineProfile | str | None = None,
) -> Verdict:
    if (na := _not_applicable("num_blocks", engine)) is not None:
        return na
    cc = cache_config(scrape(client, base_url), engine)
    if not cc:
        return Verdict(
            "num_blocks", None, explanation=f"no {_names(engine).cache_config} (started with --disable-log-stats?)"
        )
    measured = _opt_int(cc.get("num_gpu_blocks"))
    block_size = _opt_int(cc.get("block_size"))
    space = kv_bytes if kv_bytes is not None else _opt_int(cc.get("cpu_kvcache_space_bytes"))
    if space is None or block_size is None:
        return Verdict(
            "num_blocks",
            None,
            measured=measured,
            explanation="engine did not report cpu_kvcache_space_bytes/block_size; pass --kv-bytes",
        )
    shape = cap_mod.load_shape(model_dir)
    plan = cap_mod.plan(
        shape,
        space,
        block_size,
        dtype=dtype,
        kv_cache_dtype=cc.get("cache_dtype", "auto"),
        num_gpu_blocks_override=_opt_int(cc.get("num_gpu_blocks_override")),
    )
    agree = plan.num_blocks == measured
    override = _opt_int(cc.get("num_gpu_blocks_override"))
    why = (
        f"{space} B // page {plan.page_size_bytes} B // {plan.num_layers} layers = {plan.num_blocks}"
        if override is None
        else f"--num-gpu-blocks-override {override}"
    )
    if not agree:
        why += (
            f"; engine says {measured}. Check --dtype (model dtype {plan.model_dtype}), KV dtype "
            f"{cc.get('cache_dtype')}, and whether the engine's KV space differs from {space} B"
        )
    return Verdict("num_blocks", agree, plan.num_blocks, measured, why, {"plan": plan.to_dict(), "cache_config": cc})


def _tokens(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(0, 256) for _ in range(n)]


def _complete(
    client: httpx.Client, base_url: str, model: str, prompt: list[int] | list[list[int]], max_tokens: int
) -> dict:
    return _fetch_json(
        client,
        "POST",
        f"{base_url}/v1/completions",
        json={"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True},
        timeout=300,
    )


def _served_name(client: httpx.Client, base_url: str, name: str | None) -> tuple[str, int | None]:
    data = _fetch_json(client, "GET", f"{base_url}/v1/models")["data"]
    entry = next((d for d in data if d["id"] == name), data[0]) if data else {}
    return (name or entry.get("id", "")), entry.get("max_model_len")


def _settled(client, base_url, name, target=None, timeout=5.0) -> float:
    """Read a counter once it has stopped changing (metrics are recorded as outputs are processed)."""
    last, deadline = None, time.monotonic() + timeout
    while True:
        v = scrape(client, base_url).value(name) or 0.0
        if (target is not None and v >= target) or (v == last) or time.monotonic() > deadline:
            return v
        last = v
        time.sleep(0.2)


def check_usage_single_stream(
    client: httpx.Client,
    base_url: str,
    *,
    served_name: str | None = None,
    prompt_tokens: int = 100,
    max_tokens: int = 600,
    seed: int | None = None,
    poll_s: float = 0.01,
    attempts: int = 8,
    engine: EngineProfile | str | None = None,
) -> Verdict:
    if (na := _not_applicable("usage", engine)) is not None:
        return na
    names = _names(engine)
    gauge, running, waiting = str(names.kv_usage), str(names.running), str(names.waiting)  # all set: checked above
    m0 = scrape(client, base_url)
    cc = cache_config(m0, engine)
    n_blocks, bs = _opt_int(cc.get("num_gpu_blocks")), _opt_int(cc.get("block_size"))
    if not n_blocks or not bs:
        return Verdict("usage", None, explanation=f"no num_gpu_blocks/block_size in {names.cache_config}")
    if (m0.value(running) or 0) or (m0.value(waiting) or 0):
        return Verdict("usage", None, explanation="engine is busy; the check needs it idle")
    model, mml = _served_name(client, base_url, served_name)
    if mml:
        max_tokens = min(max_tokens, mml - prompt_tokens)
    # The last step computes position prompt+max_tokens-2 and needs slots for prompt+max_tokens-1 tokens.
    # End those slots on a block boundary, so the peak block count is held for a whole block of decode
    # steps: the widest window the usage poller gets to see it in.
    held = (prompt_tokens + max_tokens - 1) // bs * bs
    if held > prompt_tokens:
        max_tokens = held - prompt_tokens + 1
    first, peak = -(-prompt_tokens // bs), -(-(prompt_tokens + max_tokens - 1) // bs)
    rng = random.Random(seed if seed is not None else time.time_ns())
    tries: list[dict] = []
    for _ in range(max(1, attempts)):
        samples, after = _usage_trace(
            client, base_url, model, _tokens(rng, prompt_tokens), max_tokens, n_blocks - 1, poll_s, gauge
        )
        seen = sorted({b for _, b in samples if b})
        top = seen[-1] if seen else 0
        problems = [
            why
            for why, ok in (
                (f"peak {top} != {peak}", top == peak),
                ("a count outside the range", all(first <= b <= peak for b in seen)),
                (
                    "usage went down mid-stream",
                    all(b1 <= b2 for (_, b1), (_, b2) in zip(samples, samples[1:]) if b1 and b2),
                ),
                (f"{after} blocks still used after finish", after == 0),
            )
            if not ok
        ]
        tries.append({"seen": seen, "peak": top, "after": after, "samples": len(samples), "problems": problems})
        # Only a peak that fell between two scrapes (a slow poller on a busy machine) is worth another try:
        # any other problem is something the engine did, and repeating would only hide it.
        if not (len(problems) == 1 and top < peak):
            break
    last = tries[-1]
    agree = not last["problems"]
    why = (
        f"prompt {prompt_tokens} + {max_tokens} generated, block {bs}: the request holds {first}..{peak} blocks "
        f"(usage = used/(num_gpu_blocks-1) = used/{n_blocks - 1}); observed block counts {last['seen']}, "
        f"{last['after']} after finish"
    )
    if len(tries) > 1:
        why += (
            f" (attempt {len(tries)}; earlier attempts saw peaks {[t['peak'] for t in tries[:-1]]} in "
            f"{[t['samples'] for t in tries[:-1]]} samples)"
        )
    if not agree:
        why += "; DISAGREE: " + ", ".join(last["problems"])
    return Verdict(
        "usage",
        agree,
        {"first": first, "peak": peak},
        {"seen": last["seen"], "peak": last["peak"], "after": last["after"]},
        why,
        {"samples": last["samples"], "num_gpu_blocks": n_blocks, "attempts": len(tries)},
    )


def _usage_trace(
    client: httpx.Client,
    base_url: str,
    model: str,
    prompt: list[int],
    max_tokens: int,
    denom: int,
    poll_s: float,
    gauge: str,
) -> tuple[list[tuple[int, int]], int]:
    """Stream one completion while a second connection polls the usage gauge (`gauge`, the profile's kv_usage).

    Returns the samples as (chunks received so far, used blocks) and the used blocks after it finished."""
    texts: list[tuple[int, bytes]] = []
    received = [0]
    polling, done = threading.Event(), threading.Event()

    def poll():
        # Only fetch here and parse afterwards: parsing a scrape costs more than fetching it, and every scrape
        # saved is one more chance to see the peak, which lasts one block of decode steps (tens of ms when
        # the engine is fast or the machine busy).
        with make_sync_client(timeout=SIDE_TIMEOUTS) as c:
            while not done.is_set():
                if len(texts) >= MAX_SAMPLES:  # a stream that outlasts its tokens must not fill memory with scrapes
                    break
                texts.append((received[0], _fetch(c, "GET", f"{base_url}/metrics")))
                polling.set()
                time.sleep(poll_s)

    t = threading.Thread(target=poll, daemon=True)
    t.start()
    try:
        polling.wait(TIMEOUT_S)  # a warm poller before the request leaves: a first, cold scrape can outlast it
        with client.stream(
            "POST",
            f"{base_url}/v1/completions",
            json={
                "model": model,
                "prompt": prompt,
                "max_tokens": max_tokens,
                "temperature": 0,
                "ignore_eos": True,
                "stream": True,
            },
            timeout=300,
        ) as r:
            r.raise_for_status()
            end = time.monotonic() + 300
            framer = SSEParser()
            for chunk in r.iter_raw():
                received[0] += sum(1 for ev in framer.feed(chunk) if ev.kind == DATA)
                if received[0] > max_tokens + 16 or time.monotonic() > end:  # an endless stream is not an answer
                    raise ValueError(f"the stream did not end after {received[0]} chunks")
    finally:
        done.set()
        t.join()
    samples = [
        (n, round((parse_exposition(text.decode("utf-8", "replace")).value(gauge) or 0.0) * denom)) for n, text in texts
    ]
    time.sleep(0.3)
    after = round((scrape(client, base_url).value(gauge) or 0.0) * denom)
    return samples, after


def predict_prefix_hits(
    prompts: Sequence[Sequence[int]],
    max_tokens: int,
    block_size: int,
    num_blocks: int = 1 << 16,
    max_model_len: int = 1 << 20,
) -> list[int]:
    """Cached tokens found for each prompt when they run one after another to completion."""
    kv = KVCacheManager(num_blocks, block_size, max_model_len)
    out = []
    for i, p in enumerate(prompts):
        r = CacheRequest(f"p{i}", list(p), len(p), max_tokens)
        kv.update_hashes(r)
        hits, n = kv.get_computed_blocks(r)
        kv.allocate_slots(r, r.num_tokens - n, n, hits)
        r.num_computed_tokens = r.num_tokens
        for j in range(max_tokens - 1):  # generated tokens are unique here; they only add blocks
            r.all_token_ids.append(-1 - j - 1000 * i)
            kv.update_hashes(r)
            kv.allocate_slots(r, 1)
            r.num_computed_tokens += 1
        kv.free(r)
        out.append(n)
    return out


def check_prefix_hits(
    client: httpx.Client,
    base_url: str,
    *,
    served_name: str | None = None,
    shared_tokens: int = 300,
    suffix_tokens: int = 20,
    requests: int = 4,
    max_tokens: int = 4,
    seed: int | None = None,
    engine: EngineProfile | str | None = None,
) -> Verdict:
    if (na := _not_applicable("prefix_hits", engine)) is not None:
        return na
    names = _names(engine)
    hits_name, queries_name = str(names.prefix_hits), str(names.prefix_queries)  # both set: checked above
    m0 = scrape(client, base_url)
    cc = cache_config(m0, engine)
    bs = _opt_int(cc.get("block_size"))
    if cc.get("enable_prefix_caching") not in ("True", "true"):
        return Verdict("prefix_hits", None, explanation=f"prefix caching is off ({cc.get('enable_prefix_caching')})")
    model, _ = _served_name(client, base_url, served_name)
    rng = random.Random(seed if seed is not None else time.time_ns())
    shared = _tokens(rng, shared_tokens)
    prompts = [shared + _tokens(rng, suffix_tokens) for _ in range(requests)]
    predicted = predict_prefix_hits(prompts, max_tokens, bs)
    h0 = m0.value(hits_name) or 0.0
    q0 = m0.value(queries_name) or 0.0
    for p in prompts:
        _complete(client, base_url, model, p, max_tokens)
    q1 = _settled(client, base_url, queries_name, q0 + sum(map(len, prompts)))
    h1 = _settled(client, base_url, hits_name, h0 + sum(predicted))
    hits, queries = int(h1 - h0), int(q1 - q0)
    agree = hits == sum(predicted)
    why = (
        f"{requests} sequential requests of {shared_tokens} shared + {suffix_tokens} unique tokens, block {bs}: "
        f"{shared_tokens // bs} full shared blocks -> predicted hits per request {predicted}; "
        f"measured hits {hits}, queries {queries} (predicted {sum(map(len, prompts))})"
    )
    if not agree:
        why += (
            "; DISAGREE: a request may have been looked up more than once (waiting on blocks) or the "
            "shared prefix was already cached by an earlier run"
        )
    return Verdict("prefix_hits", agree, sum(predicted), hits, why, {"per_request": predicted, "queries": queries})


def check_preemptions(
    client: httpx.Client,
    base_url: str,
    *,
    served_name: str | None = None,
    requests: int = 8,
    prompt_tokens: int = 100,
    max_tokens: int = 200,
    max_num_seqs: int = 128,
    max_num_batched_tokens: int = 2048,
    seed: int | None = None,
    engine: EngineProfile | str | None = None,
) -> Verdict:
    if (na := _not_applicable("preemptions", engine)) is not None:
        return na
    counter = str(_names(engine).preemptions)  # set: checked above
    m0 = scrape(client, base_url)
    cc = cache_config(m0, engine)
    n_blocks, bs = _opt_int(cc.get("num_gpu_blocks")), _opt_int(cc.get("block_size"))
    if not cc.get("num_gpu_blocks_override") or cc.get("num_gpu_blocks_override") == "None":
        return Verdict("preemptions", None, explanation="start the engine with a small --num-gpu-blocks-override")
    model, mml = _served_name(client, base_url, served_name)
    sc = SimScenario(
        "live-preempt",
        requests,
        None,
        Lengths("fixed", prompt_tokens),
        Lengths("fixed", max_tokens),
        engine=EngineSettings(
            num_blocks=n_blocks,
            block_size=bs,
            max_model_len=mml or 1024,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            enable_prefix_caching=cc.get("enable_prefix_caching") == "True",
        ),
    )
    sim = simulate(sc)
    rng = random.Random(seed if seed is not None else time.time_ns())
    prompts = [_tokens(rng, prompt_tokens) for _ in range(requests)]
    _complete(client, base_url, model, _tokens(rng, 8), 1)  # warm-up: the first request of a cold engine is slow
    p0 = _settled(client, base_url, counter)
    # One request carrying every prompt: the server hands them to the engine together, so they are admitted in
    # one step as the simulator assumes. Separate connections reach it spread over as many steps as a busy
    # machine makes of them, and then fewer run at once than the cache was sized to overflow.
    _complete(client, base_url, model, prompts, max_tokens)
    p1 = _settled(client, base_url, counter, p0 + sim.preemptions)
    measured = int(p1 - p0)
    agree = measured == sim.preemptions
    why = (
        f"{requests} prompts in one request x ({prompt_tokens} prompt + {max_tokens} output) on "
        f"{n_blocks - 1} usable blocks of {bs}: simulator predicts {sim.preemptions} preemptions "
        f"(all arriving in one step), engine counted {measured}"
    )
    if not agree:
        why += (
            "; DISAGREE: the simulator admits all requests in the same step; an engine that admitted them over "
            "several steps changes who is running when the cache fills"
            if measured and sim.preemptions
            else "; DISAGREE"
        )
    return Verdict(
        "preemptions",
        agree,
        sim.preemptions,
        measured,
        why,
        {"simulated": sim.summary(), "both_preempt": bool(measured) == bool(sim.preemptions)},
    )


def crosscheck(
    base_url: str,
    model_dir,
    *,
    served_name: str | None = None,
    dtype: str = "auto",
    kv_bytes: str | int | None = None,
    checks: Sequence[str] | None = None,
    engine: EngineProfile | str | None = None,
) -> list[Verdict]:
    """The wanted checks against the engine at base_url, read with `engine`'s profile (DEFAULT_KIND when None). A check
    that does not apply to that engine is a verdict saying why (agree=None), decided before any request."""
    base_url = loopback_url(base_url, what="--url")  # the one loopback rule, on the parsed address, before any socket
    profile = _profile(engine)
    wanted = list(checks or CHECKS)
    if does_not_apply(profile, wanted):  # nothing to send, and the model directory is not read
        return [v for name in wanted if (v := _not_applicable(name, profile)) is not None]
    kvb = cap_mod.parse_bytes(kv_bytes) if isinstance(kv_bytes, str) else kv_bytes
    cap_mod.load_shape(model_dir)  # a bad --model is the user's error (exit 2), found before any request
    out: list[Verdict] = []
    with make_sync_client(timeout=30.0) as client:
        for name in wanted:
            try:
                if name == "num_blocks":
                    out.append(check_num_blocks(client, base_url, model_dir, dtype=dtype, kv_bytes=kvb, engine=profile))
                elif name == "usage":
                    out.append(check_usage_single_stream(client, base_url, served_name=served_name, engine=profile))
                elif name == "prefix_hits":
                    out.append(check_prefix_hits(client, base_url, served_name=served_name, engine=profile))
                elif name == "preemptions":
                    out.append(check_preemptions(client, base_url, served_name=served_name, engine=profile))
            except httpx.HTTPError as exc:
                out.append(Verdict(name, None, explanation=f"could not run: {type(exc).__name__}: {exc}"))
            except (HarnessError, ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
                # what the server sent did not make sense (garbage /metrics, a block size of 0, a non-list
                # /v1/models): a check that could not be run, not a crash
                out.append(
                    Verdict(
                        name,
                        None,
                        explanation=f"could not run: the server's answer is unusable: "
                        f"{type(exc).__name__}: {str(exc)[:200]}",
                    )
                )
    return out
