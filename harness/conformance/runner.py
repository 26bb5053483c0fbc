"""Run cases against a live engine. A case never takes the run down: exceptions become `error`, a per-case timeout
bounds a hang, the whole suite has a wall-time bound (`max_wall_s`), and when the server stops answering the report
says so (an engine that died, a server that stopped answering, or one that never gave an HTTP response at all), names
the case that was running, and marks the rest `error`. Whether the server is still there is asked after a failed
case, the way its profile says (`EngineProfile.liveness`), or with GET /v1/models for a server no profile describes;
the report names the check (`liveness`)."""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.client import Trace
from harness.conformance.case import SCRIPTED_MODEL, Case
from harness.conformance.context import MAX_MODELS_BYTES, Ctx
from harness.conformance.evidence import current_case, end_case, end_liveness, liveness_scope
from harness.conformance.expectations import Expectations, resolve
from harness.conformance.model import FAILING, REPEAT_FORMAT, CaseResult, Check, Verdict, errored, skipped
from harness.conformance.registry import FAULTS, select
from harness.conformance.report import scrub_report
from harness.conformance.suite import all_cases, fault_cases
from harness.engines.profile import NO_HTTP_ANSWER
from harness.net import redact_url

__all__ = ["SuiteReport", "run_suite", "run_suite_sync", "discover_model", "MAX_SUITE_S"]

MAX_SUITE_S = 600.0  # the full suite takes a few minutes on a slow CPU; a broken server must not take an hour


@dataclass
class SuiteReport:
    engine: dict[str, Any]
    expectations: str
    results: list[CaseResult] = field(default_factory=list)
    started_at: float = 0.0
    duration_s: float = 0.0
    aborted: str | None = None  # why the rest was not run: "engine died during <case id>", a bound, no server
    liveness: str = ""  # the check asked after a failed case, as reports name it: "GET /health == 200 (vLLM profile)"
    repeat: dict[str, Any] | None = None  # a repeated run's summary (harness.conformance.repeat); None: one sample

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {v.value: 0 for v in Verdict}
        for r in self.results:
            out[r.verdict] = out.get(r.verdict, 0) + 1
        return out

    @property
    def ok(self) -> bool:
        """No fail and no error; quirk-absent is counted, not a failure (see harness.conformance.model)."""
        c = self.counts()
        return not any(c.get(v) for v in FAILING)

    def to_dict(self) -> dict[str, Any]:
        repeated = {"format": REPEAT_FORMAT, "repeat": self.repeat} if self.repeat is not None else {}
        return {
            **repeated,
            "engine": self.engine,
            "expectations": self.expectations,
            "started_at": self.started_at,
            "duration_s": round(self.duration_s, 3),
            "aborted": self.aborted,
            "liveness": self.liveness,
            "counts": self.counts(),
            "unexpected_passes": [r.id for r in self.results if r.unexpected_pass],
            "cases": [r.to_dict() for r in self.results],
        }


async def discover_model(ctx: Ctx) -> str:
    return (await _discover(ctx))[0]


async def _discover(ctx: Ctx) -> tuple[str, str]:
    """(the first model GET /v1/models lists, ""), or ("", why none was found) when the list went past its bound."""
    t = await ctx.get("/v1/models", sse=False, max_duration_s=min(10.0, ctx.max_stream_s), max_bytes=MAX_MODELS_BYTES)
    if t.ended == "limit":
        return "", (f"GET /v1/models went past the harness's bound of {MAX_MODELS_BYTES >> 20} MiB: no model "
                    f"discovered (name one with --model)")  # fmt: skip
    return _first_model(t), ""


def _first_model(t: Trace) -> str:
    doc, _ = t.body_json()
    data = doc.get("data") if isinstance(doc, dict) else None
    first = data[0] if isinstance(data, list) and data else None
    return str(first["id"]) if isinstance(first, dict) and isinstance(first.get("id"), str) else ""


async def _not_alive(ctx: Ctx) -> str:
    """Why the server is not alive after a failed case ("" when it is)."""
    token = liveness_scope()  # a re-judge answers it from the evidence (harness.conformance.evidence)
    try:
        return await _liveness_problem(ctx)
    finally:
        end_liveness(token)


async def _liveness_problem(ctx: Ctx) -> str:
    if ctx.engine_dead():
        return "the engine process exited"
    check, _ = ctx.liveness()
    # bounded in wall time: a server that drips a byte a second never trips a per-read timeout
    t = await ctx.get(check.path, sse=False, max_duration_s=min(5.0, ctx.max_stream_s), max_bytes=MAX_MODELS_BYTES)
    if t.ended == "limit" and t.status == check.status:
        return ""  # the answer asked for, and more of it than the bound reads (a gateway's models): a server is there
    return check.problem(t.status, t.body)


def _why_gone(ctx: Ctx, case_id: str, problem: str) -> str:
    """What to tell the user when the liveness check fails after a case: an answer that is not the one the check
    asks for (a 503, a 404 from a server the profile does not describe) is not a server that stopped answering."""
    if ctx.engine_dead():
        return f"engine died during {case_id}"  # notes read "not run: the engine died during ..."
    if not ctx.answered:
        err = f" ({ctx.first_error})" if ctx.first_error else ""
        return (f"no HTTP server answered at {redact_url(ctx.base_url)}{err}: nothing listens there, or it does not "
                f"speak HTTP; no case was judged")  # fmt: skip
    who = "engine" if ctx.engine is not None else "gateway" if ctx.behind_gateway else "server"
    if problem == NO_HTTP_ANSWER:
        return f"the {who} stopped answering during {case_id}"
    return f"the {who} failed its liveness check during {case_id} ({ctx.liveness()[1]}: {problem})"


async def _run_one(case: Case, ctx: Ctx, timeout_s: float, bound: str) -> Check:
    try:
        return await asyncio.wait_for(case.run(ctx), timeout=timeout_s)
    except TimeoutError:
        return errored(f"case did not finish within {timeout_s:.3g}s{bound}")
    except Exception as exc:  # a harness bug or an unforeseen answer: the case could not be judged
        tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
        return errored(f"harness error: {tb}")


async def run_suite(
    ctx: Ctx,
    *,
    patterns: list[str] | None = None,
    engine_info: dict[str, Any] | None = None,
    on_result: Callable[[CaseResult], None] | None = None,
    max_wall_s: float = MAX_SUITE_S,
    ids: list[str] | None = None,
) -> SuiteReport:
    """Run the selected cases in order. `max_wall_s` bounds the whole suite: a case gets at most the time left,
    and once it is spent the remaining cases are `error` ("not run") and `aborted` names the case that hit it.
    `ids` runs exactly those cases, in the suite's order (a re-judged run: the saved run's cases). Every request a
    case makes (the liveness check after it included) is attributed to it, for the evidence (`ctx.evidence`)."""
    # the plain_model entries off the scripted model; a family's own entries on its scripted model
    ctx.exp = ctx.exp.for_model(ctx.scripted, ctx.family.name if ctx.family else None)
    report = SuiteReport(engine=dict(engine_info or {}), expectations=ctx.exp.name, started_at=time.time(),
                         liveness=ctx.liveness()[1])  # fmt: skip
    t0 = time.monotonic()
    deadline = t0 + max_wall_s
    for name in ("url", "engine_url"):
        if name in report.engine:
            report.engine[name] = redact_url(report.engine[name])
    report.engine.setdefault("url", redact_url(ctx.base_url))
    if ctx.behind_gateway:  # the report says both: the wire was judged at url, the engine's state at engine_url
        report.engine.setdefault("engine_url", redact_url(ctx.engine_url))
    provides = ctx.provides | ({SCRIPTED_MODEL} if ctx.scripted else frozenset())  # --scripted, a saved run's
    cases = select(all_cases(), patterns, provides) + fault_cases(
        patterns
    )  # a fault case (opt-in) breaks the engine: last
    if ids is not None:
        wanted = set(ids)
        cases = [c for c in cases if c.id in wanted]
    stopped: str | None = None  # why the remaining cases are not run
    try:
        if not ctx.model:
            ctx.model, why = await _discover(ctx)
            if why:  # a list too long to read is not a server without models: the report says which it was
                report.engine["model_note"] = why
        report.engine.setdefault("model", ctx.model)
        if ctx.scripted:  # a re-judge of this run knows the tools.* and reasoning.* cases had their model
            report.engine.setdefault("scripted_model", True)
            report.engine.setdefault("scripted_family", ctx.family.name if ctx.family else None)
        if ctx.provides:  # and what else the server provided (a model that ends its answers: the stop.* cases)
            report.engine.setdefault("provides", sorted(ctx.provides))
        for case in cases:
            token = current_case(case.id)
            try:
                res, stopped = await _one_case(case, ctx, report, stopped, deadline, max_wall_s)
            finally:
                end_case(token)
            report.results.append(res)
            if on_result:
                on_result(res)
    finally:
        await ctx.aclose()
    report.duration_s = time.monotonic() - t0
    # every caller (conform, harness run's stage, the pytest plugin, the upgrade) gets a report that holds no key a
    # server echoed back (the engine's own key behind a gateway too), so no output made from it can forget to scrub it
    scrub_report(report, [ctx.api_key, ctx.engine_api_key])
    return report


async def _one_case(case: Case, ctx: Ctx, report: SuiteReport, stopped: str | None, deadline: float,
                    max_wall_s: float) -> tuple[CaseResult, str | None]:  # fmt: skip
    """One case's result, and why the rest will not run (if they will not)."""
    left = deadline - time.monotonic()
    if stopped is None and left <= 0:
        stopped = report.aborted = f"the suite's wall-time bound ({max_wall_s:g}s) was reached before {case.id}"
    if stopped is not None:
        why = f"the {stopped}" if stopped.startswith("engine died") else stopped
        res = resolve(case, errored(f"not run: {why}"), ctx.exp)
    elif (reason := ctx.exp.skip_reason(case.id)) is not None:
        res = resolve(case, skipped(reason), ctx.exp)
    else:
        c0 = time.monotonic()
        by_suite = left < case.timeout_s
        bound = f" (the suite's wall-time bound of {max_wall_s:g}s)" if by_suite else ""
        chk = await _run_one(case, ctx, min(case.timeout_s, left), bound)
        res = resolve(case, chk, ctx.exp, time.monotonic() - c0)
        if by_suite and time.monotonic() >= deadline:
            stopped = report.aborted = f"the suite's wall-time bound ({max_wall_s:g}s) was reached during {case.id}"
        elif case in FAULTS:
            pass  # a fault case ends with the engine down on purpose: its verdict is its own
        elif chk.status in (Verdict.ERROR, Verdict.FAIL) and (problem := await _not_alive(ctx)):
            stopped = report.aborted = _why_gone(ctx, case.id, problem)
            res.verdict = Verdict.ERROR.value
            res.note = f"{stopped}; {res.note}".strip("; ")
            tail = _log_tail(ctx)
            if tail:
                res.extra["engine_log_tail"] = tail
    return res, stopped


def _log_tail(ctx: Ctx) -> str:
    try:
        return str(ctx.engine.log_tail())[-4000:] if ctx.engine is not None else ""
    except Exception:
        return ""


def run_suite_sync(ctx: Ctx, **kw: Any) -> SuiteReport:
    return asyncio.run(run_suite(ctx, **kw))


def new_ctx(base_url: str, exp: Expectations, **kw: Any) -> Ctx:
    return Ctx(base_url=base_url.rstrip("/"), exp=exp, **kw)
