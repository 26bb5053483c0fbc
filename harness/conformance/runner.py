"""Run cases against a live engine. A case never takes the run down: exceptions become `error`, a per-case timeout
bounds a hang, and when the engine dies the report names the case that was running and marks the rest `error`."""

from __future__ import annotations

import asyncio
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

import httpx

from harness.conformance.context import Ctx
from harness.conformance.expectations import Expectations, resolve
from harness.conformance.model import Case, CaseResult, Check, Verdict, errored, skipped
from harness.conformance.registry import all_cases, select

__all__ = ["SuiteReport", "run_suite", "run_suite_sync", "discover_model"]


@dataclass
class SuiteReport:
    engine: dict[str, Any]
    expectations: str
    results: list[CaseResult] = field(default_factory=list)
    started_at: float = 0.0
    duration_s: float = 0.0
    aborted: str | None = None  # "engine died during <case id>"

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {v.value: 0 for v in Verdict}
        for r in self.results:
            out[r.verdict] = out.get(r.verdict, 0) + 1
        return out

    @property
    def ok(self) -> bool:
        c = self.counts()
        return c["fail"] == 0 and c["error"] == 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "expectations": self.expectations,
            "started_at": self.started_at,
            "duration_s": round(self.duration_s, 3),
            "aborted": self.aborted,
            "counts": self.counts(),
            "unexpected_passes": [r.id for r in self.results if r.unexpected_pass],
            "cases": [r.to_dict() for r in self.results],
        }


async def discover_model(ctx: Ctx) -> str:
    try:
        r = await ctx.client.get("/v1/models")
        data = r.json().get("data") or []
        return str(data[0]["id"]) if data else ""
    except Exception:
        return ""


async def _engine_alive(ctx: Ctx) -> bool:
    if ctx.engine_dead():
        return False
    try:
        r = await ctx.client.get("/health", timeout=5.0)
        return r.status_code == 200
    except httpx.HTTPError:
        return False


async def _run_one(case: Case, ctx: Ctx) -> Check:
    try:
        return await asyncio.wait_for(case.run(ctx), timeout=case.timeout_s)
    except asyncio.TimeoutError:
        return errored(f"case did not finish within {case.timeout_s:.0f}s")
    except Exception as exc:  # a harness bug or an unforeseen answer: the case could not be judged
        tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
        return errored(f"harness error: {tb}")


async def run_suite(
    ctx: Ctx,
    *,
    patterns: list[str] | None = None,
    engine_info: dict[str, Any] | None = None,
    on_result: Callable[[CaseResult], None] | None = None,
) -> SuiteReport:
    report = SuiteReport(engine=dict(engine_info or {}), expectations=ctx.exp.name, started_at=time.time())
    t0 = time.monotonic()
    if not ctx.model:
        ctx.model = await discover_model(ctx)
    report.engine.setdefault("url", ctx.base_url)
    report.engine.setdefault("model", ctx.model)
    cases = select(all_cases(), patterns)
    dead_during: str | None = None
    try:
        for case in cases:
            if dead_during is not None:
                chk = errored(f"not run: the engine died during {dead_during}")
                res = resolve(case, chk, ctx.exp)
            elif (reason := ctx.exp.skip_reason(case.id)) is not None:
                res = resolve(case, skipped(reason), ctx.exp)
            else:
                c0 = time.monotonic()
                chk = await _run_one(case, ctx)
                res = resolve(case, chk, ctx.exp, time.monotonic() - c0)
                if chk.status in (Verdict.ERROR, Verdict.FAIL) and not await _engine_alive(ctx):
                    dead_during = case.id
                    report.aborted = f"engine died during {case.id}"
                    res.verdict = Verdict.ERROR.value
                    res.note = f"the engine died during this case; {res.note}".strip("; ")
                    tail = _log_tail(ctx)
                    if tail:
                        res.extra["engine_log_tail"] = tail
            report.results.append(res)
            if on_result:
                on_result(res)
    finally:
        await ctx.aclose()
    report.duration_s = time.monotonic() - t0
    return report


def _log_tail(ctx: Ctx) -> str:
    try:
        return str(ctx.engine.log_tail())[-4000:] if ctx.engine is not None else ""
    except Exception:
        return ""


def run_suite_sync(ctx: Ctx, **kw: Any) -> SuiteReport:
    return asyncio.run(run_suite(ctx, **kw))


def new_ctx(base_url: str, exp: Expectations, **kw: Any) -> Ctx:
    return Ctx(base_url=base_url.rstrip("/"), exp=exp, **kw)
