"""Server cross-check and client self-check, as pure functions over the scrapes and requests in events.jsonl.

Server side, with the series the engine's profile names (harness.engines: `profile.metrics`): the client's token totals
against the engine's generation / prompt token counter deltas and against `usage`; the client's first-token times
against the engine's time-to-first-token histogram delta, compared bucket by bucket; finished requests, preemptions and
queueing. Every disagreement becomes a flag with the numbers that show it. A check whose series the profile does not
have is reported under `not_available` as "not available on <engine>: <why>" (the profile's notes): never skipped in
silence, never passed.
"""

from __future__ import annotations

import math

from harness.engines import DEFAULT_KIND, PROFILES, EngineProfile, MetricNames, profile_for
from harness.errors import DataError
from harness.load.metrics import CHOICE_KINDS, OUTPUT_KINDS, percentile
from harness.metrics import Exposition, keep_series, parse_exposition

__all__ = ["client_selfcheck", "histogram", "server_crosscheck", "timeline", "CHECKS", "not_available"]

# what each server check reads: check -> (what the report calls it, the MetricNames fields it needs)
CHECKS: dict[str, tuple[str, tuple[str, ...]]] = {
    "output_tokens": ("output tokens", ("generation_tokens",)),
    "prompt_tokens": ("prompt tokens", ("prompt_tokens",)),
    "requests": ("finished requests", ("request_success",)),
    "ttft": ("TTFT histogram", ("ttft",)),
    "preemptions": ("preemptions", ("preemptions",)),
    "queue_time": ("queue time", ("queue_time",)),
    "waiting": ("requests waiting", ("waiting",)),
}


def _profile(engine: EngineProfile | str | None) -> EngineProfile:
    if isinstance(engine, EngineProfile):
        return engine
    return profile_for(engine or DEFAULT_KIND)


def not_available(profile: EngineProfile, field: str) -> str:
    """The line for a series the profile has none of: "not available on <engine>: <why>" (why: the notes)."""
    why = profile.notes.get(field) or f"the {profile.title} profile names no such series"
    return f"not available on {profile.title}: {why}"


def _exposition(scrape: dict, only: tuple[str, ...] = ()) -> Exposition | None:
    """The scrape's text as the one Prometheus model reads it; None when it is not the format (a flag, not a crash).
    `only`: parse just these series (the timeline reads three gauges from every scrape; parsing whole scrapes cost
    ~7 ms each, seconds for a long run)."""
    text = keep_series(scrape["text"], only) if only else scrape["text"]
    try:
        return parse_exposition(text)
    except DataError:
        return None


def histogram(expo: Exposition, name: str) -> dict | None:
    """Cumulative buckets summed over label sets: {"le": [...], "cum": [...], "count": n, "sum": s}."""
    h = expo.histogram(name)
    return h.to_dict() if h else None


def _delta_hist(a: dict | None, b: dict | None) -> dict | None:
    if not a or not b or a["le"] != b["le"]:
        return None
    return {
        "le": b["le"],
        "cum": [y - x for x, y in zip(a["cum"], b["cum"])],
        "count": b["count"] - a["count"],
        "sum": b["sum"] - a["sum"],
    }


def _bucket_of(h: dict, q: float) -> tuple[float, float] | None:
    """The (lower, upper] bucket edges that contain quantile q of a cumulative histogram (bucket-aware, no interpolation)."""
    total = h["cum"][-1] if h["cum"] else 0
    if total <= 0:
        return None
    rank = q * total
    lower = 0.0
    for le, c in zip(h["le"], h["cum"]):
        if c >= rank:
            return (lower, le)
        lower = le
    return (lower, math.inf)


def _delta(before: Exposition, after: Exposition, name: str) -> float | None:
    a, b = before.value(name), after.value(name)
    return None if a is None or b is None else b - a


def _foreign_prefixes(profile: EngineProfile, scrapes: list[dict]) -> list[str]:
    """Other engines' metric prefixes seen in the scrapes, when none of this profile's series are there."""
    texts = [s["text"] for s in scrapes if s.get("text")]
    if not texts or any(profile.metrics.prefix in t for t in texts):
        return []
    return [p.kind for p in PROFILES.values() if p.kind != profile.kind and any(p.metrics.prefix in t for t in texts)]


def server_crosscheck(
    requests: list[dict], scrapes: list[dict], engine: EngineProfile | str | None = None, *, source: str = "default"
) -> dict:
    """`requests` = every request record (warm-up included: the server saw those too). `engine`: the profile (or
    kind) whose series are read, DEFAULT_KIND when None; `source` says where that choice came from (for the report)."""
    profile = _profile(engine)
    names: MetricNames = profile.metrics
    res: dict = {
        "available": False,
        "engine": {"kind": profile.kind, "title": profile.title, "source": source},
        "flags": [],
        "notes": [],
        "not_available": {
            check: f"{label}: {not_available(profile, f)}"
            for check, (label, fields) in CHECKS.items()
            for f in fields
            if getattr(names, f) is None
        },
    }
    before = next((s for s in scrapes if s.get("phase") == "before" and s.get("text") is not None), None)
    after = next((s for s in reversed(scrapes) if s.get("phase") == "after" and s.get("text") is not None), None)
    res["available"] = bool(before and after)
    if before and not after:
        after = next((s for s in reversed(scrapes) if s.get("phase") == "during" and s.get("text")), None)
        if after:
            res["available"] = True
            res["flags"].append(
                f"the scrape after the run failed; compared with the last scrape during it "
                f"(t={after['t_ns'] / 1e9:.2f} s): requests still running then make the totals differ"
            )
            requests = [r for r in requests if r.get("end_ns") is not None and r["end_ns"] <= after["t_ns"]]
    if not res["available"]:
        res["flags"].append("no /metrics scrape before and after the run: server cross-check skipped")
        return res
    sb, sa = _exposition(before), _exposition(after)
    flags, notes = res["flags"], res["notes"]
    if sb is None or sa is None:
        res["available"] = False
        flags.append(
            f"the {'before' if sb is None else 'after'} /metrics scrape is not Prometheus text: "
            "server cross-check skipped"
        )
        return res
    foreign = _foreign_prefixes(profile, [before, after])
    if foreign:
        flags.append(
            f"the scrapes hold no {names.prefix} series but those of {', '.join(foreign)}: judged with the "
            f"{profile.title} profile ({source}); re-render with `harness report DIR --engine {foreign[0]}`"
        )

    def delta(name: str | None, what: str) -> float | None:
        """The counter's change over the run; None (with a note) when the profile names it but a scrape lacks it."""
        if name is None:
            return None
        d = _delta(sb, sa, name)
        if d is None:
            notes.append(f"{name} is not in the scrapes before and after the run: {what} not compared")
        return d

    usage_out = sum((r.get("usage") or {}).get("completion_tokens", 0) or 0 for r in requests)
    usage_in = sum((r.get("usage") or {}).get("prompt_tokens", 0) or 0 for r in requests)
    chunks_out = sum(sum(1 for c in (r.get("ev_k") or "") if c in OUTPUT_KINDS) for r in requests)
    no_usage = [r["id"] for r in requests if not r.get("usage") and r.get("sent_ns") is not None]
    srv_out = delta(names.generation_tokens, "output tokens")
    srv_in = delta(names.prompt_tokens, "prompt tokens")
    if srv_in is not None and names.prompt_tokens_cached:
        cached = delta(names.prompt_tokens_cached, "prompt tokens")
        srv_in = None if cached is None else srv_in + cached
        if cached is not None:
            notes.append(
                f"server prompt tokens = {names.prompt_tokens} + {names.prompt_tokens_cached} "
                f"({cached:.0f} reused from the cache)"
            )
    res["tokens"] = {
        "output": {"client_chunks": chunks_out, "client_usage": usage_out, "server": srv_out},
        "prompt": {"client_usage": usage_in, "server": srv_in},
        "requests_without_usage": len(no_usage),
    }
    if srv_out is not None and srv_out != usage_out:
        why = (
            (
                f"{len(no_usage)} request(s) ended without a usage chunk (failed or cancelled); the server counts the "
                "tokens it generated for them, the client cannot"
            )
            if no_usage
            else "unexplained"
        )
        flags.append(
            f"output tokens: server counted {srv_out:.0f}, client usage sums to {usage_out} "
            f"(diff {srv_out - usage_out:+.0f}): {why}"
        )
    if srv_in is not None and srv_in != usage_in:
        flags.append(
            f"prompt tokens: server counted {srv_in:.0f}, client usage sums to {usage_in} (diff {srv_in - usage_in:+.0f})"
            + (f"; {len(no_usage)} request(s) without usage" if no_usage else "")
        )
    with_usage_chunks = sum(
        sum(1 for c in (r.get("ev_k") or "") if c in OUTPUT_KINDS) for r in requests if r.get("usage")
    )
    if with_usage_chunks != usage_out:
        notes.append(
            f"output chunks ({with_usage_chunks}) != usage completion_tokens ({usage_out}) over requests with usage: "
            "some chunks carry more or fewer than one token (an engine whose API process falls behind may merge "
            "pending outputs into one chunk), so ITL is per chunk, not per token"
        )

    succ = delta(names.request_success, "finished requests")
    ok = sum(1 for r in requests if r["outcome"] == "ok")
    res["requests"] = {"client_ok": ok, "server_success": succ}
    if succ is not None and succ != ok:
        flags.append(f"requests: server finished {succ:.0f} successfully, client saw {ok} ok")

    if names.ttft is not None:
        _ttft(res, names.ttft, sb, sa, requests)

    pre = delta(names.preemptions, "preemptions")
    qh = None
    if names.queue_time:
        qb, qa = histogram(sb, names.queue_time), histogram(sa, names.queue_time)
        qh = _delta_hist(qb, qa)
        if qb is None or qa is None:
            notes.append(f"{names.queue_time} is not in the scrapes before and after the run: queue time not compared")
    during = [_exposition(s) for s in scrapes if s.get("phase") == "during" and s.get("text")]
    waiting_name = names.waiting
    waiting = [e.value(waiting_name) for e in during if e is not None] if waiting_name else []
    waiting = [w for w in waiting if w is not None]
    res["scheduler"] = {
        "preemptions": pre,
        "queue_time_mean_s": (qh["sum"] / qh["count"]) if qh and qh["count"] else None,
        "max_waiting_seen": max(waiting) if waiting else None,
        "scrapes_during": len(during),
    }
    if pre:
        flags.append(f"the engine preempted {pre:.0f} request(s) during the run (KV cache pressure)")
    return res


def _ttft(res: dict, name: str, sb: Exposition, sa: Exposition, requests: list[dict]) -> None:
    """TTFT: the client's first-token time (first chunk with choices, what the server times) vs the server histogram."""
    flags, notes = res["flags"], res["notes"]
    hb, ha = histogram(sb, name), histogram(sa, name)
    h = _delta_hist(hb, ha)
    client = sorted(
        r["ev_t"][i] / 1e9
        for r in requests
        for i in [next((j for j, c in enumerate(r.get("ev_k") or "") if c in CHOICE_KINDS), None)]
        if i is not None
    )
    if not (h and h["count"] > 0):
        if hb is None or ha is None:
            notes.append(f"{name} is not in the scrapes before and after the run: TTFT histogram not compared")
        elif h is None:
            notes.append(f"{name} changed its buckets during the run: TTFT histogram not compared")
        else:
            notes.append(f"{name} unchanged over the run (no first token counted): TTFT histogram not compared")
        return
    total = h["cum"][-1]
    rows, max_gap = [], 0.0
    for le, c in zip(h["le"], h["cum"]):
        cf = sum(1 for x in client if x <= le) / len(client) if client else 0.0
        sf = c / total if total else 0.0
        max_gap = max(max_gap, abs(cf - sf))
        rows.append({"le": le, "server_frac": round(sf, 4), "client_frac": round(cf, 4)})
    qs = {}
    for q in (0.5, 0.9, 0.99):
        edges = _bucket_of(h, q)
        cq = percentile(client, q * 100) if client else None
        state = "n/a"
        if edges and cq is not None:
            lo, hi = edges
            if cq < lo:
                state = "below"  # the client saw a first token before the server could have produced it
            elif cq <= hi:
                state = "inside"
            else:
                state = "above"  # client-side delay beyond the server's measurement (network, client lag)
        qs[f"p{int(q * 100)}"] = {
            "server_bucket_s": list(edges) if edges else None,
            "client_s": cq,
            "client_vs_bucket": state,
        }
        if edges and cq is not None and state == "below":
            flags.append(
                f"TTFT p{int(q * 100)}: client {cq * 1e3:.1f} ms is below the server's bucket "
                f"({edges[0] * 1e3:g}, {edges[1] * 1e3:g}] ms: the two are not timing the same requests"
            )
        elif edges and cq is not None and state == "above" and cq > edges[1] * 1.5 + 0.02:
            flags.append(
                f"TTFT p{int(q * 100)}: client {cq * 1e3:.1f} ms is well above the server's bucket "
                f"({edges[0] * 1e3:g}, {edges[1] * 1e3:g}] ms: delay outside the engine (HTTP layer or client)"
            )
    res["ttft_histogram"] = {
        "server_count": h["count"],
        "client_count": len(client),
        "server_mean_s": h["sum"] / h["count"],
        "client_mean_s": sum(client) / len(client) if client else None,
        "max_cdf_gap": round(max_gap, 4),
        "buckets": rows,
        "quantiles": qs,
    }
    if h["count"] != len(client):
        flags.append(f"TTFT histogram counted {h['count']:.0f} first tokens, client saw {len(client)}")


WAIT_WARN_FRACTION = 0.10  # the client runnable but not run for a tenth of the measured phase: its latencies queue


def client_selfcheck(
    per: list[dict],
    client_cpu_s: float | None,
    wall_s: float | None,
    lag_warn_ms: float = 5.0,
    client_cpu_wait_s: float | None = None,
) -> dict:
    """Send lag, client CPU and the client's wait for a CPU: is the client, not the server, the bottleneck?
    client_cpu_wait_s is the kernel's count for the load loop's thread (harness.cpuwait): a starved client inflates
    every latency it measures however idle its own CPU share looks (seen here: 50 s of wait in 49 s of wall time)."""
    lags = [m["send_lag_ms"] for m in per if m.get("send_lag_ms") is not None]
    p99 = percentile(lags, 99) if lags else None
    # a measured phase under a second (a run cut short) says nothing about the client's CPU share
    judged = bool(wall_s and wall_s >= 1.0)
    cpu_frac = (client_cpu_s / wall_s) if client_cpu_s is not None and judged and wall_s else None
    wait_frac = (client_cpu_wait_s / wall_s) if client_cpu_wait_s is not None and judged and wall_s else None
    warnings = []
    if p99 is not None and p99 > lag_warn_ms:
        warnings.append(
            f"send lag p99 {p99:.1f} ms > {lag_warn_ms} ms: requests left later than scheduled; "
            "the client may be the bottleneck"
        )
    if cpu_frac is not None and cpu_frac > 0.85:
        warnings.append(f"the client used {cpu_frac:.0%} of a CPU core: measurements may include client queueing")
    if wait_frac is not None and wait_frac > WAIT_WARN_FRACTION:
        warnings.append(
            f"the client waited {client_cpu_wait_s:.2f} s for a CPU ({wait_frac:.0%} of the measured phase): "
            "latencies include time the client was not scheduled"
        )
    return {
        "send_lag_ms": {"p50": percentile(lags, 50), "p99": p99, "max": max(lags) if lags else None},
        "client_cpu_s": client_cpu_s,
        "client_cpu_fraction": cpu_frac,
        "client_cpu_wait_s": client_cpu_wait_s,
        "client_cpu_wait_fraction": wait_frac,
        "warnings": warnings,
        "client_bound": bool(warnings),
    }


def timeline(
    requests: list[dict],
    scrapes: list[dict],
    t_start_ns: int,
    t_end_ns: int,
    bin_s: float = 1.0,
    engine: EngineProfile | str | None = None,
) -> dict:
    """Per-bin output tokens/s and finished requests/s, concurrency steps, and server gauges over time (s from t_start).
    The gauges are the profile's KV usage, running and waiting series; one the profile lacks is None in every bin."""
    span = max((t_end_ns - t_start_ns) / 1e9, bin_s)
    nb = int(math.ceil(span / bin_s))
    toks, reqs = [0] * nb, [0] * nb
    steps = []
    for r in requests:
        if r.get("warmup"):
            continue
        sent = r["sent_ns"]
        for t, k in zip(r.get("ev_t") or [], r.get("ev_k") or ""):
            if k in OUTPUT_KINDS:
                i = int((sent + t - t_start_ns) / 1e9 / bin_s)
                if 0 <= i < nb:
                    toks[i] += 1
        if r.get("end_ns") is not None:
            i = int((r["end_ns"] - t_start_ns) / 1e9 / bin_s)
            if 0 <= i < nb and r["outcome"] == "ok":
                reqs[i] += 1
            steps.append(((sent - t_start_ns) / 1e9, 1))
            steps.append(((r["end_ns"] - t_start_ns) / 1e9, -1))
    steps.sort()
    conc, level = [], 0
    for t, d in steps:
        level += d
        conc.append((t, level))
    names = _profile(engine).metrics
    series = (names.kv_usage, names.running, names.waiting)
    wanted = names.timeline()
    gauges: dict[str, list] = {"t": [], "kv_usage": [], "running": [], "waiting": []}
    for s in scrapes:
        if not s.get("text") or s.get("t_ns") is None:
            continue
        # parse only the gauges read here; a scrape that is not the format shows no gauge values
        expo = (_exposition(s, wanted) if wanted else None) or Exposition()
        kv, running, waiting = (expo.value(name) if name else None for name in series)
        gauges["t"].append((s["t_ns"] - t_start_ns) / 1e9)
        gauges["kv_usage"].append(kv)
        gauges["running"].append(running)
        gauges["waiting"].append(waiting)
    return {
        "bin_s": bin_s,
        "output_tokens_per_s": [x / bin_s for x in toks],
        "requests_per_s": [x / bin_s for x in reqs],
        "concurrency": conc,
        "gauges": gauges,
    }
