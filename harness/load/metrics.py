"""Metrics as pure functions over the raw request records of events.jsonl. No clocks, no I/O.

The definitions (and how they differ from `vllm bench serve` 0.11.0) are written down once, in DEFINITIONS.md next to
this file; the names here match it. Every per-request function returns None when the input does not define it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = [
    "percentile",
    "distribution",
    "request_metrics",
    "aggregate",
    "goodput",
    "OUTPUT_KINDS",
    "CHOICE_KINDS",
]

NS_PER_MS = 1e6
OUTPUT_KINDS = "ce"  # events carrying an engine output step
CHOICE_KINDS = "rce"  # events with a non-empty `choices` list
PCTS = (50, 90, 95, 99)


def percentile(values: list[float], p: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default `linear`, the one vllm bench uses)."""
    if not values:
        return None
    xs = sorted(values)
    k = (len(xs) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    if lo == hi:
        return xs[lo]
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def distribution(values: Iterable[float | None]) -> dict:
    xs = [v for v in values if v is not None]
    if not xs:
        return {"count": 0, "mean": None, "min": None, "max": None, **{f"p{p}": None for p in PCTS}}
    return {
        "count": len(xs),
        "mean": sum(xs) / len(xs),
        "min": min(xs),
        "max": max(xs),
        **{f"p{p}": percentile(xs, p) for p in PCTS},
    }


def _first(rec: dict, kinds: str) -> int | None:
    k = rec.get("ev_k") or ""
    for i, c in enumerate(k):
        if c in kinds:
            return i
    return None


def request_metrics(rec: dict) -> dict:
    """Per-request derived values (ms unless named otherwise). See DEFINITIONS.md."""
    sent = rec["sent_ns"]
    ev_t, ev_k = rec.get("ev_t") or [], rec.get("ev_k") or ""
    out_idx = [i for i, c in enumerate(ev_k) if c in OUTPUT_KINDS]
    choice_idx = [i for i, c in enumerate(ev_k) if c in CHOICE_KINDS]
    i_content = _first(rec, "c")
    usage = rec.get("usage") or {}
    ct = usage.get("completion_tokens")
    tokens = ct if isinstance(ct, int) else len(out_idx)
    m = {
        "id": rec["id"],
        "ok": rec["outcome"] == "ok",
        "outcome": rec["outcome"],
        "send_lag_ms": (sent - rec.get("ready_ns", rec["scheduled_ns"])) / NS_PER_MS,
        "ttft_ms": ev_t[i_content] / NS_PER_MS if i_content is not None else None,
        "ttft_role_ms": ev_t[choice_idx[0]] / NS_PER_MS if choice_idx else None,
        "ttfb_ms": (rec["first_byte_ns"] - sent) / NS_PER_MS if rec.get("first_byte_ns") is not None else None,
        "e2e_ms": (rec["end_ns"] - sent) / NS_PER_MS if rec.get("end_ns") is not None else None,
        "output_tokens": tokens,
        "output_tokens_source": "usage" if isinstance(ct, int) else "chunks",
        "output_chunks": len(out_idx),
        "finish_reason": rec.get("finish_reason"),
        "prompt_tokens": usage.get("prompt_tokens"),
        "itl_ms": [(ev_t[b] - ev_t[a]) / NS_PER_MS for a, b in zip(out_idx, out_idx[1:])],
        "tpot_ms": None,
        # vllm bench serve 0.11.0 (chat) definitions, for like-for-like comparison only
        "vb_itl_ms": [(ev_t[b] - ev_t[a]) / NS_PER_MS for a, b in zip(choice_idx, choice_idx[1:])],
        "vb_latency_ms": None,
        "vb_tpot_ms": None,
    }
    if i_content is not None and out_idx and tokens > 1:
        m["tpot_ms"] = (ev_t[out_idx[-1]] - ev_t[i_content]) / NS_PER_MS / (tokens - 1)
    if choice_idx:
        last_msg = max(i for i, c in enumerate(ev_k) if c in "rceu")
        m["vb_latency_ms"] = ev_t[last_msg] / NS_PER_MS
        if tokens > 1:
            m["vb_tpot_ms"] = (m["vb_latency_ms"] - m["ttft_role_ms"]) / (tokens - 1)
    return m


def goodput(per: list[dict], criteria: dict | None) -> tuple[int, list]:
    """Count successful requests meeting every given per-request criterion (ttft_ms, tpot_ms, e2e_ms).
    A request with a single output token has no TPOT and passes that criterion (as in vllm bench)."""
    if not criteria:
        return sum(1 for m in per if m["ok"]), []
    good, bad = 0, []
    for m in per:
        if not m["ok"]:
            continue
        fails = []
        for key in ("ttft_ms", "tpot_ms", "e2e_ms"):
            lim = criteria.get(key)
            if lim is None:
                continue
            v = m[key]
            if key == "tpot_ms" and v is None:
                continue
            if v is None or v > lim:
                fails.append(key)
        if fails:
            bad.append((m["id"], fails))
        else:
            good += 1
    return good, bad


def aggregate(requests: list[dict], measured_start_ns: int, end_ns: int | None, criteria: dict | None = None) -> dict:
    """Aggregate the measured (non-warm-up) requests. Duration = first measured send .. last measured end."""
    reqs = [r for r in requests if not r.get("warmup")]
    per = [request_metrics(r) for r in reqs]
    ok = [m for m in per if m["ok"]]
    outcomes: dict[str, int] = {}
    for m in per:
        outcomes[m["outcome"]] = outcomes.get(m["outcome"], 0) + 1
    if reqs:
        t_start = min(r["sent_ns"] for r in reqs)
        t_end = max(r["end_ns"] for r in reqs if r.get("end_ns") is not None)
        dur_s = max((t_end - t_start) / 1e9, 1e-9)
    else:
        dur_s = 0.0
    out_tok = sum(m["output_tokens"] for m in ok)
    in_tok = sum(m["prompt_tokens"] or 0 for m in ok)
    chunks = sum(len(r.get("ev_k") or "") for r in reqs)
    good, bad = goodput(per, criteria)
    finished = len(per) - outcomes.get("cancelled", 0)
    failed = finished - len(ok)
    finish_reasons: dict[str, int] = {}  # of the ok requests: "stop" ended by the model, "length" cut at max_tokens
    for m in ok:
        reason = str(m["finish_reason"]) if m["finish_reason"] is not None else "none"
        finish_reasons[reason] = finish_reasons.get(reason, 0) + 1
    return {
        "requests": {
            "total": len(per),
            "ok": len(ok),
            "failed": failed,
            "outcomes": outcomes,
            "error_rate": (failed / finished) if finished else None,
        },
        "duration_s": dur_s,
        "ttft_ms": distribution(m["ttft_ms"] for m in ok),
        "ttft_role_ms": distribution(m["ttft_role_ms"] for m in ok),
        "ttfb_ms": distribution(m["ttfb_ms"] for m in ok),
        "itl_ms": distribution(x for m in ok for x in m["itl_ms"]),
        "tpot_ms": distribution(m["tpot_ms"] for m in ok),
        "e2e_ms": distribution(m["e2e_ms"] for m in ok),
        "send_lag_ms": distribution(m["send_lag_ms"] for m in per),
        "vllm_bench_compat": {
            "ttft_ms": distribution(m["ttft_role_ms"] for m in ok),
            "itl_ms": distribution(x for m in ok for x in m["vb_itl_ms"]),
            "tpot_ms": distribution(m["vb_tpot_ms"] for m in ok),
            "e2el_ms": distribution(m["vb_latency_ms"] for m in ok),
        },
        "throughput": {
            "requests_per_s": len(ok) / dur_s if dur_s else None,
            "output_tokens_per_s": out_tok / dur_s if dur_s else None,
            "total_tokens_per_s": (in_tok + out_tok) / dur_s if dur_s else None,
            "events_per_s": chunks / dur_s if dur_s else None,
        },
        "tokens": {
            "output": out_tok,
            "prompt": in_tok,
            "output_source": sorted({m["output_tokens_source"] for m in ok}) or None,
            "output_per_request": distribution(m["output_tokens"] for m in ok),  # the model's lengths, not max_tokens
            "finish_reasons": dict(sorted(finish_reasons.items())),
        },
        "goodput": {
            "criteria": criteria or None,
            "good": good,
            "fraction": good / len(per) if per else None,
            "requests_per_s": good / dur_s if dur_s else None,
            "failing_examples": bad[:10],
        },
        "_per_request": per,
    }
