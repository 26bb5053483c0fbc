"""The metrics contract, read from a /metrics scrape through the one Prometheus model (harness.metrics).
Names/types/labels are data in the expectation file."""

from __future__ import annotations

import asyncio
import time

from harness.conformance.cases.endpoints import absent_without_profile
from harness.conformance.model import Check, Deviations, Level, failed, passed, skipped
from harness.conformance.registry import case

NO_CONTRACT = "the expectation file declares no metrics contract"


async def _scrape(ctx):
    if "metrics.scrape" not in ctx._probes:
        ctx._probes["metrics.scrape"] = await ctx.scrape()
    return ctx._probes["metrics.scrape"]


@case("metrics.scrape", "GET /metrics is Prometheus text that parses")
async def scrape(ctx) -> Check:
    s = await _scrape(ctx)
    if not s.ok:
        absent = absent_without_profile(ctx, "/metrics", s.status)
        return absent or failed("unparseable" if s.status == 200 else f"status-{s.status}", "Prometheus text", s.error)
    return passed(f"{len(s.families)} families{ctx.engine_side()}")


@case("metrics.required", "every required metric exists with its declared type")
async def required(ctx) -> Check:
    req = ctx.exp.metrics.get("required") or {}
    if not req:
        return skipped(NO_CONTRACT)
    s = await _scrape(ctx)
    if not s.ok:
        return failed("unparseable", "a parseable scrape", s.error)
    dev = Deviations()
    missing = [n for n in req if s.family(n) is None]
    if missing:
        dev.add("missing-metric", sorted(req), f"missing: {missing}", note=", ".join(missing[:5]))
    wrong = {
        n: s.family(n).type
        for n, spec in req.items()
        if (spec or {}).get("type") and s.family(n) is not None and s.family(n).type != spec["type"]
    }
    if wrong:
        dev.add("wrong-type", {n: req[n]["type"] for n in wrong}, wrong)
    return dev.check(passed(f"{len(req)} metrics"))


@case("metrics.labels", "every required metric carries its declared labels")
async def labels(ctx) -> Check:
    req = ctx.exp.metrics.get("required") or {}
    if not req:
        return skipped(NO_CONTRACT)
    s = await _scrape(ctx)
    bad = {}
    for n, spec in req.items():
        f = s.family(n)
        want = set((spec or {}).get("labels") or [])
        if f is not None and f.samples and not want <= f.label_names():
            bad[n] = sorted(want - f.label_names())
    return failed("missing-labels", "declared labels", bad) if bad else passed()


@case("metrics.hidden-absent", "deprecated metrics hidden in this version are not exposed by default", Level.SHOULD)
async def hidden(ctx) -> Check:
    names = ctx.exp.metrics.get("hidden") or []
    if not names:
        return skipped("no hidden metrics declared")
    s = await _scrape(ctx)
    shown = [n for n in names if s.family(n) is not None]
    return failed("hidden-metric-shown", "absent", shown) if shown else passed(f"{len(names)} hidden")


@case("metrics.info", "the config info metric is present with its labels and value 1")
async def info_metric(ctx) -> Check:
    spec = ctx.exp.metrics.get("info") or {}
    if not spec:
        return skipped("no info metric declared")
    s = await _scrape(ctx)
    f = s.family(spec["name"])
    if f is None or not f.samples:
        return failed("missing-metric", spec["name"], "absent")
    want = set(spec.get("labels") or [])
    dev = Deviations()
    if not want <= f.label_names():
        dev.add("missing-labels", sorted(want), sorted(f.label_names()))
    first = f.samples[0]
    if first.value != 1.0:
        dev.add("info-value", 1.0, first.value)
    lab = first.labels
    return dev.check(passed(", ".join(f"{k}={lab.get(k)}" for k in sorted(want)[:4])))


@case("metrics.counters-monotonic", "counters never decrease, and the declared ones grow across one request")
async def monotonic(ctx) -> Check:
    grow = ctx.exp.metrics.get("grow") or []
    if not grow:
        return skipped(NO_CONTRACT)
    before = await ctx.scrape()
    t = await ctx.post("/v1/completions", ctx.completion(max_tokens=4))
    if t.status != 200:
        return failed(f"status-{t.status}", 200, t.status)
    after = None
    for _ in range(20):  # the engine publishes stats on its next step
        await asyncio.sleep(0.1)
        after = await ctx.scrape()
        if all((after.value(n) or 0) > (before.value(n) or 0) for n in grow):
            break
    if not (before.ok and after and after.ok):
        return failed("unparseable", "parseable scrapes", before.error or (after and after.error))
    dev = Deviations()
    stuck = [n for n in grow if (after.value(n) or 0) <= (before.value(n) or 0)]
    if stuck:
        dev.add("counter-not-growing", grow, {n: (before.value(n), after.value(n)) for n in stuck})
    for fam in before.families.values():
        if fam.type != "counter":
            continue
        for s in fam.samples:
            if s.name.endswith("_created"):
                continue
            v2 = after.value(s.name, **s.labels)
            if v2 is not None and v2 < s.value:
                dev.add("counter-decreased", f"{s.name} >= {s.value}", v2)
    if dev:
        return dev.check()
    return passed(", ".join(f"{n}: {before.value(n):g}->{after.value(n):g}" for n in grow))


async def wait_idle(ctx, idle: dict, timeout_s: float) -> tuple[bool, dict, float]:
    t0 = time.monotonic()
    last: dict = {}
    while True:
        s = await ctx.scrape()
        last = {n: s.value(n) for n in idle}
        if s.ok and all(last[n] is not None and last[n] <= float(v) + 1e-9 for n, v in idle.items()):
            return True, last, time.monotonic() - t0
        if time.monotonic() - t0 > timeout_s:
            return False, last, time.monotonic() - t0
        await asyncio.sleep(0.1)


@case("metrics.gauges-idle", "after requests finish, load gauges return to their idle values within a few seconds")
async def gauges_idle(ctx) -> Check:
    idle = ctx.exp.metrics.get("idle") or {}
    if not idle:
        return skipped(NO_CONTRACT)
    await ctx.post("/v1/completions", ctx.completion(max_tokens=8))
    ok, vals, dt = await wait_idle(ctx, idle, 5.0)
    return passed(f"idle after {dt:.2f}s") if ok else failed("gauge-not-idle", idle, vals)
