"""Server cross-check and client self-check, as pure functions over the scrapes and requests in events.jsonl.

Server side (vLLM 0.11.0 names; TGI names are used when present): the client's token totals against
`vllm:generation_tokens_total` / `vllm:prompt_tokens_total` deltas and against `usage`; the client's first-token times
against the `vllm:time_to_first_token_seconds` histogram delta, compared bucket by bucket; preemptions and queueing.
Every disagreement becomes a flag with the numbers that show it.
"""

from __future__ import annotations

import math

from harness.errors import DataError
from harness.load.metrics import CHOICE_KINDS, OUTPUT_KINDS, percentile
from harness.metrics import Exposition, keep_series, parse_exposition

__all__ = ["client_selfcheck", "histogram", "server_crosscheck", "timeline"]


TIMELINE_GAUGES = ("vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:num_requests_waiting")


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


def server_crosscheck(requests: list[dict], scrapes: list[dict]) -> dict:
    """`requests` = every request record (warm-up included: the server saw those too)."""
    before = next((s for s in scrapes if s.get("phase") == "before" and s.get("text") is not None), None)
    after = next((s for s in reversed(scrapes) if s.get("phase") == "after" and s.get("text") is not None), None)
    res: dict = {"available": bool(before and after), "flags": [], "notes": []}
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

    usage_out = sum((r.get("usage") or {}).get("completion_tokens", 0) or 0 for r in requests)
    usage_in = sum((r.get("usage") or {}).get("prompt_tokens", 0) or 0 for r in requests)
    chunks_out = sum(sum(1 for c in (r.get("ev_k") or "") if c in OUTPUT_KINDS) for r in requests)
    no_usage = [r["id"] for r in requests if not r.get("usage") and r.get("sent_ns") is not None]
    srv_out = _delta(sb, sa, "vllm:generation_tokens_total")
    srv_in = _delta(sb, sa, "vllm:prompt_tokens_total")
    if srv_out is None:
        srv_out = _delta(sb, sa, "tgi_request_generated_tokens_sum")
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
            "some chunks carry more or fewer than one token (vLLM v1 merges pending outputs into one chunk when its API "
            "process falls behind the engine, so ITL is per chunk, not per token)"
        )

    succ = _delta(sb, sa, "vllm:request_success_total")
    ok = sum(1 for r in requests if r["outcome"] == "ok")
    res["requests"] = {"client_ok": ok, "server_success": succ}
    if succ is not None and succ != ok:
        flags.append(f"requests: server finished {succ:.0f} successfully, client saw {ok} ok")

    # TTFT: the client's first-token time (first chunk with choices, what the server times) vs the server histogram
    h = _delta_hist(
        histogram(sb, "vllm:time_to_first_token_seconds"), histogram(sa, "vllm:time_to_first_token_seconds")
    )
    client = sorted(
        r["ev_t"][i] / 1e9
        for r in requests
        for i in [next((j for j, c in enumerate(r.get("ev_k") or "") if c in CHOICE_KINDS), None)]
        if i is not None
    )
    if h and h["count"] > 0:
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
            if state == "below":
                flags.append(
                    f"TTFT p{int(q * 100)}: client {cq * 1e3:.1f} ms is below the server's bucket "
                    f"({edges[0] * 1e3:g}, {edges[1] * 1e3:g}] ms: the two are not timing the same requests"
                )
            elif state == "above" and cq > edges[1] * 1.5 + 0.02:
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
    else:
        notes.append("vllm:time_to_first_token_seconds not available or unchanged")

    pre = _delta(sb, sa, "vllm:num_preemptions_total")
    qh = _delta_hist(histogram(sb, "vllm:request_queue_time_seconds"), histogram(sa, "vllm:request_queue_time_seconds"))
    during = [_exposition(s) for s in scrapes if s.get("phase") == "during" and s.get("text")]
    waiting = [e.value("vllm:num_requests_waiting") for e in during if e is not None]
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


def client_selfcheck(
    per: list[dict], client_cpu_s: float | None, wall_s: float | None, lag_warn_ms: float = 5.0
) -> dict:
    """Send lag and client CPU: is the client, not the server, the bottleneck?"""
    lags = [m["send_lag_ms"] for m in per if m.get("send_lag_ms") is not None]
    p99 = percentile(lags, 99) if lags else None
    # a measured phase under a second (a run cut short) says nothing about the client's CPU share
    cpu_frac = (client_cpu_s / wall_s) if client_cpu_s is not None and wall_s and wall_s >= 1.0 else None
    warnings = []
    if p99 is not None and p99 > lag_warn_ms:
        warnings.append(
            f"send lag p99 {p99:.1f} ms > {lag_warn_ms} ms: requests left later than scheduled; "
            "the client may be the bottleneck"
        )
    if cpu_frac is not None and cpu_frac > 0.85:
        warnings.append(f"the client used {cpu_frac:.0%} of a CPU core: measurements may include client queueing")
    return {
        "send_lag_ms": {"p50": percentile(lags, 50), "p99": p99, "max": max(lags) if lags else None},
        "client_cpu_s": client_cpu_s,
        "client_cpu_fraction": cpu_frac,
        "warnings": warnings,
        "client_bound": bool(warnings),
    }


def timeline(requests: list[dict], scrapes: list[dict], t_start_ns: int, t_end_ns: int, bin_s: float = 1.0) -> dict:
    """Per-bin output tokens/s and finished requests/s, concurrency steps, and server gauges over time (s from t_start)."""
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
    gauges = {"t": [], "kv_usage": [], "running": [], "waiting": []}
    for s in scrapes:
        if not s.get("text") or s.get("t_ns") is None:
            continue
        expo = _exposition(s, TIMELINE_GAUGES) or Exposition()  # a scrape that is not the format shows no gauge values
        kv, running, waiting = (expo.value(name) for name in TIMELINE_GAUGES)
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
