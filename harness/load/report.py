"""Reports from saved raw events: summary.json, summary.md and a self-contained report.html (inline SVG, no network).

`build_summary(out_dir)` reads events.jsonl only, so `harness report DIR` re-renders everything from the raw events.

The verdict (`ok`): every SLO met, no abort, an end record, at least one ok request, and no failed request beyond what the
scenario tolerates (`slo.max_failed_requests`, or `slo.max_error_rate`; with neither, none). The target URL is shown
without userinfo, also for files written before it was redacted at the source.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

from harness.engines import DEFAULT_KIND, profile_for
from harness.load.crosscheck import client_selfcheck, server_crosscheck, timeline
from harness.load.events import read_events
from harness.load.metrics import aggregate
from harness.net import redact_url
from harness.outputs import atomic_write_text

__all__ = [
    "read_events",
    "build_summary",
    "evaluate_slos",
    "evaluate_run",
    "write_reports",
    "render_markdown",
    "render_html",
    "stopped_by",
]

METRIC_LABELS = {
    "ttft_ms": "TTFT (first content)",
    "ttft_role_ms": "TTFT (role chunk)",
    "ttfb_ms": "time to first byte",
    "itl_ms": "ITL",
    "tpot_ms": "TPOT",
    "e2e_ms": "E2E latency",
    "send_lag_ms": "send lag",
}


def evaluate_slos(slo: dict, agg: dict) -> list[dict]:
    checks = []
    for metric in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
        for p, lim in (slo.get(metric) or {}).items():
            if lim is None:
                continue
            v = agg[metric].get(p)
            checks.append({"name": f"{metric}.{p}", "limit": lim, "value": v, "ok": v is not None and v <= lim})
    if slo.get("min_goodput_fraction") is not None:
        v = agg["goodput"]["fraction"]
        checks.append(
            {
                "name": "goodput_fraction",
                "limit": slo["min_goodput_fraction"],
                "value": v,
                "ok": v is not None and v >= slo["min_goodput_fraction"],
                "direction": ">=",
            }
        )
    if slo.get("max_error_rate") is not None:
        v = agg["requests"]["error_rate"]
        checks.append(
            {
                "name": "error_rate",
                "limit": slo["max_error_rate"],
                "value": v,
                "ok": v is not None and v <= slo["max_error_rate"],
            }
        )
    return checks


def evaluate_run(slo: dict, agg: dict, end: dict, measured: int) -> list[dict]:
    """Checks every run must pass, SLOs or not: something succeeded, failures within what the scenario tolerates,
    and (when the run ended by max_requests) every planned request was sent and recorded once."""
    req = agg["requests"]
    checks = [
        {"name": "ok_requests", "limit": 1, "value": req["ok"], "ok": req["ok"] >= 1, "direction": ">=", "kind": "run"}
    ]
    tolerated = slo.get("max_failed_requests")
    if tolerated is None and slo.get("max_error_rate") is None:
        tolerated = 0  # the scenario did not say it tolerates failures
    if tolerated is not None:
        checks.append(
            {
                "name": "failed_requests",
                "limit": tolerated,
                "value": req["failed"],
                "ok": req["failed"] <= tolerated,
                "kind": "run",
            }
        )
    sent = end.get("sent")
    if sent is not None:
        checks.append(
            {
                "name": "requests_recorded",
                "limit": sent,
                "value": measured,
                "ok": measured == sent,
                "direction": "==",
                "kind": "run",
            }
        )
        if end.get("stop_reason") == "max_requests" and end.get("planned") is not None:
            checks.append(
                {
                    "name": "planned_requests_sent",
                    "limit": end["planned"],
                    "value": sent,
                    "ok": sent == end["planned"],
                    "direction": "==",
                    "kind": "run",
                }
            )
    return checks


def stopped_by(s: dict) -> str:
    step = s.get("bound_step")
    return f"{s['stop_reason']} (during {step})" if step else str(s["stop_reason"])


def engine_of(run: dict, override: str | None = None) -> tuple[str, str]:
    """(engine kind, where that choice came from) for a run header: `override` (`harness report --engine`), the
    kind the run recorded (from its manifest or `load --engine`), else the default profile, said as such."""
    if override:
        return override, "--engine (report)"
    if run.get("engine"):
        return run["engine"], run.get("engine_source") or "recorded"
    if "engine" in run:
        return DEFAULT_KIND, "default: the run named no engine (give --engine)"
    return DEFAULT_KIND, "default: the run recorded no engine (written before engine profiles)"


# Bin widths of the throughput timeline, 1-2-5 steps up to the 1 s a long run is read in.
TIMELINE_BINS_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
TIMELINE_MIN_BINS = 20


def timeline_bin_s(wall_s: float | None) -> float:
    """The throughput timeline's bin width: 1 s for a run of 20 s or more; a shorter run gets the widest step that
    still gives it about TIMELINE_MIN_BINS bins (the default `harness run` load, ~0.2 s: 10 ms), so its chart shows
    the run's shape instead of one bin wider than the run."""
    if not wall_s or wall_s <= 0:
        return TIMELINE_BINS_S[-1]
    fitting = [b for b in TIMELINE_BINS_S if b <= wall_s / TIMELINE_MIN_BINS]
    return fitting[-1] if fitting else TIMELINE_BINS_S[0]


def build_summary(out_dir: str | Path, engine: str | None = None) -> dict:
    """The summary of a load run's events; `engine` (a kind) re-judges the server cross-check with that profile."""
    out_dir = Path(out_dir)
    ev = read_events(out_dir / "events.jsonl")
    run, end, reqs, scrapes = ev["run"], ev["end"] or {}, ev["requests"], ev["scrapes"]
    kind, source = engine_of(run, engine)
    profile = profile_for(kind)
    sc = run["scenario"]
    slo = sc.get("slo") or {}
    agg = aggregate(reqs, end.get("measured_start_ns") or 0, end.get("end_ns"), slo.get("goodput"))
    per = agg.pop("_per_request")
    measured = [r for r in reqs if not r.get("warmup")]
    t_start = end.get("measured_start_ns") or (min(r["sent_ns"] for r in measured) if measured else 0)
    t_end = end.get("end_ns") or max([r.get("end_ns") or 0 for r in reqs] + [t_start])
    wall_s = (t_end - t_start) / 1e9 if t_end and t_start is not None else None
    checks = evaluate_slos(slo, agg) + evaluate_run(slo, agg, end, len(measured))
    stop_reason = end.get("stop_reason", "unknown (no end record: the run was killed)")
    abort = end.get("abort")
    verdict_ok = all(c["ok"] for c in checks) and stop_reason != "abort" and end != {}
    summary = {
        "scenario": sc["name"],
        "scenario_source": run.get("scenario_source"),
        "target": redact_url(run["target"]),
        "model": run["model"],
        "endpoint": run["endpoint"],
        "started": run.get("started"),
        "stop_reason": stop_reason,
        "bound_step": end.get("bound_step"),
        "abort": abort,
        "bounds": sc["bounds"],
        "arrival": sc["arrival"],
        "requests_recorded": len(reqs),
        "warmup_requests": len(reqs) - len(measured),
        "planned": end.get("planned"),
        "sent": end.get("sent"),
        "not_sent": end.get("not_sent"),
        "wall_s": wall_s,
        "metrics": agg,
        "slo_checks": checks,
        "ok": verdict_ok,
        "engine": {"kind": profile.kind, "title": profile.title, "source": source},
        "server": server_crosscheck(reqs, scrapes, profile, source=source),
        "client": client_selfcheck(
            per, end.get("client_cpu_s"), wall_s, client_cpu_wait_s=end.get("client_cpu_wait_s")
        ),
        "timeline": timeline(reqs, scrapes, t_start, t_end, bin_s=timeline_bin_s(wall_s), engine=profile),
        "definitions": "harness/load/DEFINITIONS.md",
    }
    return summary


def _fmt(v, unit=""):
    if v is None:
        return "–"
    if isinstance(v, float):
        if math.isinf(v):
            return "+Inf"
        return f"{v:,.2f}{unit}" if abs(v) < 1e5 else f"{v:,.0f}{unit}"
    return f"{v}{unit}"


def render_markdown(s: dict) -> str:
    m = s["metrics"]
    lines = [f"# Load test `{s['scenario']}` against {s['target']} ({s['model']}, {s['endpoint']})", ""]
    verdict = "PASS" if s["ok"] else "FAIL"
    lines.append(
        f"**{verdict}** · stopped by: `{stopped_by(s)}` · {m['requests']['total']} measured requests "
        f"({m['requests']['ok']} ok, {m['requests']['failed']} failed) + {s['warmup_requests']} warm-up · "
        f"duration {_fmt(m['duration_s'])} s"
    )
    if s.get("abort"):
        lines += [
            "",
            f"> **Aborted** by `{s['abort']['rule']}`: {s['abort']['detail']}. Everything sent so far is recorded in events.jsonl.",
        ]
    if s.get("sent") is not None:
        lines += ["", f"Planned {s['planned']} measured requests: {s['sent']} sent, {s['not_sent']} not sent "
                      f"(the run stopped first)."]  # fmt: skip
    lines += [
        "",
        f"Outcomes: {', '.join(f'{k} {v}' for k, v in sorted(m['requests']['outcomes'].items())) or 'none'}",
        "",
        "| metric (ms) | count | mean | p50 | p90 | p95 | p99 | max |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, label in METRIC_LABELS.items():
        d = m[key]
        lines.append(
            f"| {label} | {d['count']} | {_fmt(d['mean'])} | {_fmt(d['p50'])} | {_fmt(d['p90'])} | {_fmt(d['p95'])} | "
            f"{_fmt(d['p99'])} | {_fmt(d['max'])} |"
        )
    t = m["throughput"]
    lines += [
        "",
        f"Throughput: {_fmt(t['requests_per_s'])} req/s, {_fmt(t['output_tokens_per_s'])} output tok/s, "
        f"{_fmt(t['total_tokens_per_s'])} total tok/s (tokens from {m['tokens']['output_source']}).",
    ]
    lens = m["tokens"].get("output_per_request")  # absent from summaries of older runs
    if lens and lens["count"]:
        reasons = ", ".join(f"{k} {v}" for k, v in m["tokens"].get("finish_reasons", {}).items()) or "none"
        lines.append(
            f"Output tokens per request: min {_fmt(lens['min'])}, p50 {_fmt(lens['p50'])}, p90 {_fmt(lens['p90'])}, "
            f"max {_fmt(lens['max'])}; finish reasons: {reasons}."
        )
    g = m["goodput"]
    if g["criteria"]:
        lines.append(
            f"Goodput under {g['criteria']}: {g['good']} good requests ({_fmt(g['fraction'])}), {_fmt(g['requests_per_s'])} req/s."
        )
    if s["slo_checks"]:
        lines += ["", "| check | limit | value | |", "|---|---|---|---|"]
        for c in s["slo_checks"]:
            lines.append(
                f"| {c['name']} | {c.get('direction', '<=')} {_fmt(c['limit'])} | {_fmt(c['value'])} | {'ok' if c['ok'] else '**FAIL**'} |"
            )
    sv = s["server"]
    eng = sv.get("engine") or s.get("engine")
    lines += ["", "## Server cross-check"]
    if eng:
        lines.append(f"Series read with the {eng['title']} profile ({eng['source']}).")
        lines.append("")
    if sv.get("tokens"):
        to = sv["tokens"]["output"]
        lines.append(
            f"- output tokens: client chunks {to['client_chunks']}, client usage {to['client_usage']}, server {_fmt(to['server'])}"
        )
        tp = sv["tokens"]["prompt"]
        lines.append(f"- prompt tokens: client usage {tp['client_usage']}, server {_fmt(tp['server'])}")
    if sv.get("requests"):
        lines.append(
            f"- requests: client ok {sv['requests']['client_ok']}, server success {_fmt(sv['requests']['server_success'])}"
        )
    th = sv.get("ttft_histogram")
    if th:
        lines.append(
            f"- TTFT histogram: server count {_fmt(th['server_count'])} mean {_fmt(th['server_mean_s'] * 1e3)} ms; client "
            f"count {th['client_count']} mean {_fmt((th['client_mean_s'] or 0) * 1e3)} ms; max CDF gap at bucket edges {th['max_cdf_gap']}"
        )
        for q, v in th["quantiles"].items():
            b = v["server_bucket_s"]
            lines.append(
                f"  - {q}: server bucket ({_fmt(b[0] * 1e3 if b else None)}, {_fmt(b[1] * 1e3 if b else None)}] ms, "
                f"client {_fmt((v['client_s'] or 0) * 1e3)} ms → {v['client_vs_bucket']}"
            )
    sch = sv.get("scheduler")
    if sch:
        lines.append(
            f"- preemptions {_fmt(sch['preemptions'])}, mean queue time {_fmt((sch['queue_time_mean_s'] or 0) * 1e3)} ms, "
            f"max waiting seen {_fmt(sch['max_waiting_seen'])}"
        )
    for line in (sv.get("not_available") or {}).values():
        lines.append(f"- {line}")
    for f in sv.get("flags", []):
        lines.append(f"- ⚠ {f}")
    for n in sv.get("notes", []):
        lines.append(f"- note: {n}")
    c = s["client"]
    lines += [
        "",
        "## Client self-check",
        f"- send lag p50 {_fmt(c['send_lag_ms']['p50'])} ms, p99 {_fmt(c['send_lag_ms']['p99'])} ms, max {_fmt(c['send_lag_ms']['max'])} ms; "
        f"client CPU {_fmt(c['client_cpu_s'])} s ({_fmt((c['client_cpu_fraction'] or 0) * 100)}% of one core); "
        f"waited for a CPU {_fmt(c.get('client_cpu_wait_s'))} s",
    ]
    for w in c["warnings"]:
        lines.append(f"- ⚠ {w}")
    lines += [
        "",
        "Definitions: `harness/load/DEFINITIONS.md`. Raw data: `events.jsonl` (re-render with `harness report DIR`).",
    ]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- SVG charts

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"]


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((s * mag for s in (1, 2, 5, 10) if s * mag >= raw), default=raw)
    start = math.floor(lo / step) * step
    return [start + i * step for i in range(int((hi - start) / step) + 2) if start + i * step <= hi + 1e-9]


def _no_chart(title: str, why: str) -> str:
    """What stands in a chart's place when it cannot show anything: its title and why."""
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="560" height="80" role="img" class="no-chart" '
        f'aria-label="{html.escape(title)}: {html.escape(why)}"><text x="10" y="30" font-size="13" font-weight="bold">'
        f'{html.escape(title)}</text><text x="10" y="52" font-size="12">{html.escape(why)}</text></svg>'
    )


def _binned(values: list[float], width: float) -> list[tuple[float, float]]:
    """Per-bin values as step points: each bin drawn from its start to its end (the last bin's end point included,
    so a run of one bin is still a line, not a lone point)."""
    if not values:
        return []
    return [(i * width, v) for i, v in enumerate(values)] + [(len(values) * width, values[-1])]


def _request_scale(toks: list[float], reqs: list[float]) -> int:
    """The power of ten that puts finished requests/s on the token axis without topping it (1 when they already do,
    e.g. short bins, where a bin's few finished requests are hundreds per second)."""
    top_t, top_r = max(toks, default=0), max(reqs, default=0)
    if top_r <= 0 or top_t <= top_r:
        return 1
    return int(10 ** math.floor(math.log10(top_t / top_r)))


def _throughput_chart(tl: dict) -> str:
    title = "Throughput over time"
    toks, reqs, b = tl["output_tokens_per_s"], tl["requests_per_s"], tl["bin_s"]
    if not any(toks) and not any(reqs):
        return _no_chart(title, "nothing to draw: no output token and no finished request in the measured window")
    scale = _request_scale(toks, reqs)
    return _chart(
        f"{title} ({b * 1000:g} ms bins)" if b < 1 else title,
        [("output tok/s", _binned(toks, b)), (f"requests/s ×{scale}", _binned([v * scale for v in reqs], b))],
        "s since measured start",
        "per second",
        step=True,
    )


def _chart(
    title: str,
    series: list[tuple[str, list[tuple[float, float]]]],
    xlabel: str,
    ylabel: str,
    step: bool = False,
    ymax: float | None = None,
) -> str:
    W, H, L, R, T, B = 560, 300, 60, 15, 30, 45
    pts = [p for _, s in series for p in s if p[1] is not None]
    if not pts:
        return _no_chart(title, "no data")
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = 0.0, ymax if ymax is not None else max(p[1] for p in pts) * 1.05 or 1.0
    if x1 <= x0:
        x1 = x0 + 1

    def sx(x: float) -> float:
        return L + (x - x0) / (x1 - x0) * (W - L - R)

    def sy(y: float) -> float:
        return H - B - (y - y0) / (y1 - y0) * (H - T - B)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img" '
        f'aria-label="{html.escape(title)}" class="chart">',
        f'<text x="{W / 2}" y="18" text-anchor="middle" font-size="14" font-weight="bold">{html.escape(title)}</text>',
        f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="#333"/>',
        f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="#333"/>',
    ]
    for tx in _nice_ticks(x0, x1):
        if x0 <= tx <= x1:
            out.append(
                f'<line x1="{sx(tx):.1f}" y1="{H - B}" x2="{sx(tx):.1f}" y2="{H - B + 4}" stroke="#333"/>'
                f'<text x="{sx(tx):.1f}" y="{H - B + 16}" text-anchor="middle" font-size="11">{tx:g}</text>'
            )
    for ty in _nice_ticks(y0, y1):
        if y0 <= ty <= y1:
            out.append(
                f'<line x1="{L}" y1="{sy(ty):.1f}" x2="{W - R}" y2="{sy(ty):.1f}" stroke="#eee"/>'
                f'<text x="{L - 5}" y="{sy(ty) + 4:.1f}" text-anchor="end" font-size="11">{ty:g}</text>'
            )
    out.append(
        f'<text x="{(L + W - R) / 2}" y="{H - 8}" text-anchor="middle" font-size="12">{html.escape(xlabel)}</text>'
    )
    out.append(
        f'<text x="14" y="{(T + H - B) / 2}" text-anchor="middle" font-size="12" '
        f'transform="rotate(-90 14 {(T + H - B) / 2})">{html.escape(ylabel)}</text>'
    )
    for i, (name, s) in enumerate(series):
        s = [p for p in s if p[1] is not None]
        if not s:
            continue
        d, prev = [], None
        for x, y in s:
            if step and prev is not None:
                d.append(f"L{sx(x):.1f},{sy(prev):.1f}")
            d.append(f"{'M' if not d else 'L'}{sx(x):.1f},{sy(y):.1f}")
            prev = y
        color = COLORS[i % len(COLORS)]
        out.append(f'<path class="series" d="{" ".join(d)}" fill="none" stroke="{color}" stroke-width="1.8"/>')
        out.append(
            f'<rect x="{W - R - 170}" y="{T + 4 + 16 * i}" width="10" height="10" fill="{color}"/>'
            f'<text x="{W - R - 155}" y="{T + 13 + 16 * i}" font-size="11">{html.escape(name)}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def _cdf(values: list[float]) -> list[tuple[float, float]]:
    xs = sorted(v for v in values if v is not None)
    n = len(xs)
    if n > 400:  # thin for size, keep the ends
        idx = sorted({round(i * (n - 1) / 399) for i in range(400)})
        return [(xs[i], (i + 1) / n) for i in idx]
    return [(x, (i + 1) / n) for i, x in enumerate(xs)]


def charts(s: dict, per: list[dict]) -> list[str]:
    ok = [m for m in per if m["ok"]]
    out = [
        _chart(
            "Latency CDF: TTFT and E2E",
            [
                ("TTFT content", _cdf([m["ttft_ms"] for m in ok])),
                ("TTFT role chunk", _cdf([m["ttft_role_ms"] for m in ok])),
                ("E2E", _cdf([m["e2e_ms"] for m in ok])),
            ],
            "ms",
            "fraction of requests",
            ymax=1.0,
        ),
        _chart(
            "Latency CDF: ITL and TPOT",
            [
                ("ITL (pooled)", _cdf([x for m in ok for x in m["itl_ms"]])),
                ("TPOT (per request)", _cdf([m["tpot_ms"] for m in ok])),
            ],
            "ms",
            "fraction",
            ymax=1.0,
        ),
    ]
    tl = s["timeline"]
    out.append(_throughput_chart(tl))
    out.append(
        _chart(
            "Client concurrency (requests in flight)", [("in flight", tl["concurrency"])], "s", "requests", step=True
        )
    )
    g = tl["gauges"]
    if any(v is not None for v in g["kv_usage"]):
        out.append(
            _chart(
                "Server KV cache usage (scraped)",
                [
                    (
                        "KV cache usage ×100",
                        [(t, v * 100 if v is not None else None) for t, v in zip(g["t"], g["kv_usage"])],
                    )
                ],
                "s",
                "% used",
                step=True,
            )
        )
    if any(v is not None for v in g["running"] + g["waiting"]):
        out.append(
            _chart(
                "Server queue (scraped)",
                [("running", list(zip(g["t"], g["running"]))), ("waiting", list(zip(g["t"], g["waiting"])))],
                "s",
                "requests",
                step=True,
            )
        )
    return out


def render_html(s: dict, md: str, per: list[dict]) -> str:
    svgs = "\n".join(f"<figure>{c}</figure>" for c in charts(s, per))
    data = json.dumps({k: v for k, v in s.items() if k != "timeline"}, indent=1, default=str)
    status = "PASS" if s["ok"] else "FAIL"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>harness load: {html.escape(s["scenario"])} — {status}</title>
<style>body{{font-family:system-ui,sans-serif;margin:20px;max-width:1180px}} figure{{display:inline-block;margin:6px;border:1px solid #ddd;padding:4px}}
pre{{background:#f6f6f6;padding:8px;overflow:auto;font-size:12px;white-space:pre-wrap}} .PASS{{color:#1a7f37}} .FAIL{{color:#c00}}</style></head>
<body><h1>Load test <code>{html.escape(s["scenario"])}</code> <span class="{status}" id="verdict">{status}</span></h1>
<p>{html.escape(s["target"])} · model <code>{html.escape(str(s["model"]))}</code> · stopped by <b>{html.escape(stopped_by(s))}</b></p>
<section id="charts">{svgs}</section>
<h2>Summary</h2><pre id="summary-md">{html.escape(md)}</pre>
<details><summary>summary.json</summary><pre>{html.escape(data)}</pre></details>
</body></html>
"""


def write_reports(out_dir: str | Path, engine: str | None = None) -> dict:
    out_dir = Path(out_dir)
    s = build_summary(out_dir, engine)
    ev = read_events(out_dir / "events.jsonl")
    per = aggregate(ev["requests"], 0, None)["_per_request"]
    md = render_markdown(s)
    atomic_write_text(
        out_dir / "summary.json",
        json.dumps(s, indent=1, default=str, allow_nan=False) + "\n"
        if _finite(s)
        else json.dumps(_clean(s), indent=1, default=str) + "\n",
    )
    atomic_write_text(out_dir / "summary.md", md)
    atomic_write_text(out_dir / "report.html", render_html(s, md, per))
    return s


def _finite(obj) -> bool:
    try:
        json.dumps(obj, allow_nan=False, default=str)
        return True
    except ValueError:
        return False


def _clean(obj):
    if isinstance(obj, float) and (math.isinf(obj) or math.isnan(obj)):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj
