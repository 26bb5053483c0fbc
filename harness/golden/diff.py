"""Classify each prompt of a candidate recording B against a baseline A.

Classes (worst over a prompt's choices wins, in this order of severity):

    identical     same token ids, same text, same finish reason, every stored logprob bit-equal
    equivalent    same token ids, text and finish reason; every logprob (chosen token and top-5 ids present in both)
                  differs by at most `tolerance` (absolute, in nats; default DEFAULT_TOLERANCE)
    near-tie      the first diverging position is one where the baseline's top-1 and top-2 logprobs are within `margin`
                  (default DEFAULT_MARGIN) and B's token there is one of those near-tied baseline tokens, and every
                  logprob before it is within `tolerance`: either token is a fair greedy choice
    regression    anything else (different tokens elsewhere, drift beyond tolerance, text/finish change for the same
                  tokens, a different number of choices, an HTTP refusal on one side only or of another status/type);
                  and, whatever the tokens say, a client-visible change of a constrained prompt: its constraint
                  (response_format, a forced tool_choice) held on one side and not on the other (a refusal counts as
                  not holding), or its tool calls (name, arguments text) differ. `PromptDiff.constraint` / `.tool_calls`
                  carry both sides of these for every constrained prompt.
    resampled     only for seeded-sampling prompts (temperature > 0): the draw differs from the first divergence on, but
                  every logprob up to and at that position (ids in both top lists, which must hold the baseline's top 3) agrees
                  within `tolerance`: the model's distribution is unchanged, the engine's seed -> tokens mapping is not
                  (not a failure; the upgrade gate asks for review)
    missing       in A but not in B                         (fails the diff, like a regression)
    incomparable  same id but a different request (prompt edited) (fails the diff)
    added         in B only                                 (informational)

Recordings of different models (meta model.sha256) are refused with a RefusedError: such a diff means nothing. One
model in two formats (an engine migration: safetensors for one engine, GGUF for another) is the same model: see
same_weights.
Recordings from different hardware or torch builds (meta `hardware`, harness.hardware) are compared as always, and the
diff says so: last-bit float drift is then expected (`equivalent` within tolerance), token changes are judged as always.
`within_tolerance` is the cross-machine rule: every prompt identical or equivalent (bit-identity is only expected of two
recordings made on one machine in one run).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.errors import RefusedError, UsageError
from harness.golden.store import Recording
from harness.hardware import compare as compare_hardware
from harness.shown import shown

__all__ = [
    "DEFAULT_TOLERANCE",
    "DEFAULT_MARGIN",
    "PromptDiff",
    "GoldenDiff",
    "diff_recordings",
    "classify_choice",
    "render_text",
    "FAILING",
    "check_thresholds",
    "client_view",
]

DEFAULT_TOLERANCE = 0.02
DEFAULT_MARGIN = 0.1
SEVERITY = ["identical", "equivalent", "added", "near-tie", "resampled", "regression", "incomparable", "missing"]
FAILING = {"regression", "missing", "incomparable"}


def check_thresholds(tolerance: float, margin: float) -> None:
    """--tolerance and --margin are finite numbers >= 0: with NaN every comparison is False and a 3-nat drift passes."""
    for name, v in (("--tolerance", tolerance), ("--margin", margin)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise UsageError(f"{name} must be a finite number >= 0 (nats), got {v!r}")


@dataclass
class PromptDiff:
    set: str
    id: str
    status: str
    reason: str = ""
    choice: int | None = None  # which choice decided the status
    position: int | None = None  # first divergence (token index)
    a_token: Any = None  # [id, logprob] or "<end:reason>"
    b_token: Any = None
    a_top: list = field(default_factory=list)  # baseline top-5 at the divergence
    b_top: list = field(default_factory=list)
    context_ids: list[int] = field(default_factory=list)  # up to 8 shared tokens before the divergence
    context_text: str = ""
    max_logprob_drift: float = 0.0
    # what a client checks of a constrained prompt (empty for the others): {kind, a, b, a_detail, b_detail, changed}
    # with a/b = held (true/false) or null when that side refused it (or predates the field); {a, b, changed} for the
    # tool calls; `changed`: the client-visible change that made the prompt a regression
    constraint: dict[str, Any] = field(default_factory=dict)
    tool_calls: dict[str, Any] = field(default_factory=dict)


@dataclass
class GoldenDiff:
    a: str
    b: str
    tolerance: float
    margin: float
    prompts: list[PromptDiff]
    sets_only_in_a: list[str] = field(default_factory=list)
    sets_only_in_b: list[str] = field(default_factory=list)
    hardware: dict[str, Any] = field(default_factory=dict)  # harness.hardware.compare of the two recordings

    def counts(self) -> dict[str, int]:
        c: dict[str, int] = {}
        for p in self.prompts:
            c[p.status] = c.get(p.status, 0) + 1
        return dict(sorted(c.items(), key=lambda kv: SEVERITY.index(kv[0])))

    @property
    def ok(self) -> bool:
        return not any(p.status in FAILING for p in self.prompts)

    @property
    def within_tolerance(self) -> bool:
        """The cross-machine rule: ok, and every prompt identical or equivalent (no token changed anywhere)."""
        return self.ok and bool(self.prompts) and all(p.status in ("identical", "equivalent") for p in self.prompts)

    def to_json(self) -> dict:
        return {
            "a": self.a,
            "b": self.b,
            "tolerance": self.tolerance,
            "margin": self.margin,
            "ok": self.ok,
            "within_tolerance": self.within_tolerance,
            "hardware": self.hardware,
            "counts": self.counts(),
            "sets_only_in_a": self.sets_only_in_a,
            "sets_only_in_b": self.sets_only_in_b,
            "prompts": [asdict(p) for p in self.prompts],
        }


def _bytes_text(ids: list[int]) -> str:
    """Readable text of byte-level token ids (0..255 = bytes; others shown as <id>)."""
    out, buf = [], bytearray()
    for t in ids:
        if 0 <= t < 256:
            buf.append(t)
        else:
            out.append(buf.decode("utf-8", "replace"))
            buf = bytearray()
            out.append(f"<{t}>")
    out.append(buf.decode("utf-8", "replace"))
    return "".join(out)


def _drift(ra: list, rb: list) -> float:
    """Largest |Δ logprob| between two logprob rows for the same token: chosen token + top ids present in both."""
    d = abs(ra[1] - rb[1]) if ra[1] != rb[1] else 0.0
    tb = dict((i, lp) for i, lp in rb[2])
    for i, lp in ra[2]:
        if i in tb and tb[i] != lp:
            d = max(d, abs(lp - tb[i]))
    return d


def classify_choice(a: dict, b: dict, tolerance: float, margin: float, sampled: bool = False) -> dict:
    """Status + details for one choice pair (see module doc)."""
    ta, tb = a["token_ids"], b["token_ids"]
    la, lb = a["logprobs"], b["logprobs"]
    n_common = 0
    while n_common < min(len(ta), len(tb)) and ta[n_common] == tb[n_common]:
        n_common += 1
    drift, exact = 0.0, True
    for j in range(min(n_common, len(la), len(lb))):
        if la[j] != lb[j]:
            exact = False
        drift = max(drift, _drift(la[j], lb[j]))
    if len(la) != len(lb) and n_common == len(ta) == len(tb):
        exact = False
    res: dict[str, Any] = {"max_logprob_drift": drift}
    if ta == tb:
        if a["text"] != b["text"]:
            return res | {
                "status": "regression",
                "reason": f"same tokens, different text: {a['text']!r} vs {b['text']!r}",
            }
        if a.get("finish_reason") != b.get("finish_reason"):
            return res | {
                "status": "regression",
                "reason": f"same tokens, finish_reason {a.get('finish_reason')} -> {b.get('finish_reason')}",
            }
        if exact and len(la) == len(lb):
            return res | {"status": "identical", "reason": ""}
        if len(la) != len(lb):
            return res | {"status": "regression", "reason": f"logprob rows {len(la)} vs {len(lb)}"}
        if drift <= tolerance:
            return res | {
                "status": "equivalent",
                "reason": f"same tokens, max logprob drift {drift:.3g} <= {tolerance}",
            }
        return res | {
            "status": "regression",
            "reason": f"same tokens but logprob drift {drift:.3g} > tolerance {tolerance}",
        }
    pos = n_common
    res |= {
        "position": pos,
        "context_ids": ta[max(0, pos - 8) : pos],
        "context_text": _bytes_text(ta[max(0, pos - 8) : pos]),
    }
    a_row = la[pos] if pos < len(la) else None
    b_row = lb[pos] if pos < len(lb) else None
    res["a_token"] = [ta[pos], a_row[1] if a_row else None] if pos < len(ta) else f"<end:{a.get('finish_reason')}>"
    res["b_token"] = [tb[pos], b_row[1] if b_row else None] if pos < len(tb) else f"<end:{b.get('finish_reason')}>"
    res["a_top"] = a_row[2] if a_row else []
    res["b_top"] = b_row[2] if b_row else []
    if pos >= len(ta) or pos >= len(tb):
        return res | {"status": "regression", "reason": f"one output ends at token {pos}, the other continues"}
    if drift > tolerance:
        return res | {
            "status": "regression",
            "reason": f"logprob drift {drift:.3g} > tolerance {tolerance} before the divergence at token {pos}",
        }
    top = a_row[2] if a_row else []
    if sampled:
        b_ids = {i for i, _ in (b_row[2] if b_row else [])}
        at = _drift([None, 0.0, top], [None, 0.0, b_row[2]]) if b_row else float("inf")
        # the top lists may each carry their own sampled token (outside the top-k); the baseline's best three must be there
        if b_row and {i for i, _ in top[:3]} <= b_ids and at <= tolerance:
            res["max_logprob_drift"] = max(drift, at)
            return res | {
                "status": "resampled",
                "reason": f"seeded sampling drew {tb[pos]} instead of {ta[pos]} at token "
                f"{pos}; distributions agree within {tolerance} (max drift {max(drift, at):.3g})",
            }
        return res | {
            "status": "regression",
            "reason": f"sampled token {pos}: {ta[pos]} -> {tb[pos]} and the distributions differ (drift {at:.3g})",
        }
    if len(top) >= 2 and top[0][1] - top[1][1] <= margin:
        tied = {i for i, lp in top if top[0][1] - lp <= margin}
        if tb[pos] in tied:
            gap = top[0][1] - top[1][1]
            return res | {
                "status": "near-tie",
                "reason": f"token {pos}: baseline top-1/top-2 gap {gap:.3g} <= margin {margin}; B chose {tb[pos]} (baseline {ta[pos]})",
            }
        return res | {
            "status": "regression",
            "reason": f"token {pos}: baseline near-tie but B chose {tb[pos]}, not one of the tied {sorted(tied)}",
        }
    gap = (top[0][1] - top[1][1]) if len(top) >= 2 else float("inf")
    return res | {
        "status": "regression",
        "reason": f"token {pos}: {ta[pos]} -> {tb[pos]}; baseline top-1/top-2 gap {gap:.3g} > margin {margin}",
    }


def _request_constraint_kind(req: Any) -> str | None:
    """The constraint kind a recorded request asked for (as Prompt.constraint() names it), or None."""
    req = req if isinstance(req, dict) else {}
    rf = req.get("response_format")
    if isinstance(rf, dict) and rf.get("type") in ("json_schema", "json_object"):
        return str(rf["type"])
    tc = req.get("tool_choice")
    if req.get("tools") and (isinstance(tc, dict) or tc == "required"):
        return "tool_choice"
    return None


def _calls_key(calls: list[dict]) -> list[tuple]:
    return [(c.get("type"), c.get("name"), c.get("arguments"), c.get("arguments_type")) for c in calls]


def client_view(ra: dict, rb: dict) -> tuple[dict[str, Any], dict[str, Any], str]:
    """(constraint, tool_calls, change) for two records of one prompt: what a client checks of its output.
    `change` is "" or the first client-visible change (a constraint that held on one side only, tool calls that
    differ); a refusal counts as not holding. Records without these fields (unconstrained prompts) give ({}, {}, "")."""
    ca_list, cb_list = ra.get("choices") or [], rb.get("choices") or []
    kind = _request_constraint_kind(ra.get("request")) or _request_constraint_kind(rb.get("request"))
    for ch in ca_list + cb_list:
        kind = kind or (ch.get("constraint") or {}).get("kind")
    constraint: dict[str, Any] = {}
    tool_calls: dict[str, Any] = {}
    change = ""
    if kind:

        def state(rec: dict, chs: list[dict]) -> tuple[bool | None, str]:
            if rec.get("error"):
                e = rec["error"]
                return None, f"refused: HTTP {e['status']} {e.get('type')}: {str(e.get('message', ''))[:120]}"
            cons: list[dict] = [c["constraint"] for c in chs if isinstance(c.get("constraint"), dict)]
            if not cons or len(cons) != len(chs):
                return None, "not recorded"
            bad = [c for c in cons if not c["held"]]
            return (not bad), (bad[0].get("detail", "") if bad else "")

        (ha, da), (hb, db) = state(ra, ca_list), state(rb, cb_list)
        recorded = "not recorded" not in (da, db)
        changed = recorded and ha is not hb and bool(ha or hb)
        constraint = {"kind": kind, "a": ha, "b": hb, "a_detail": da, "b_detail": db, "changed": changed}
        if changed:

            def said(h: bool | None) -> str:
                return "held" if h else ("refused" if h is None else "did not hold")

            failing = db if ha else da  # a refusal is said by the refusal's own reason
            change = f"constraint {kind} {said(ha)} on A, {said(hb)} on B" + (
                "" if failing.startswith("refused:") else f": {failing}"
            )
    has_calls = any("tool_calls" in c for c in ca_list + cb_list)
    if has_calls and not (ra.get("error") or rb.get("error")):
        from harness.golden.constraints import show_calls

        a_calls = [c.get("tool_calls") or [] for c in ca_list]
        b_calls = [c.get("tool_calls") or [] for c in cb_list]
        changed = [_calls_key(x) for x in a_calls] != [_calls_key(x) for x in b_calls]
        tool_calls = {"a": a_calls, "b": b_calls, "changed": changed}
        if changed and not change:
            i = next(
                (j for j, (x, y) in enumerate(zip(a_calls, b_calls)) if _calls_key(x) != _calls_key(y)),
                0,
            )
            sa = show_calls(a_calls[i] if i < len(a_calls) else None)
            sb = show_calls(b_calls[i] if i < len(b_calls) else None)
            change = f"tool_calls changed: A {sa}; B {sb}"
    if any("reasoning" in c for c in ca_list + cb_list) and not (ra.get("error") or rb.get("error")) and not change:
        a_r = [c.get("reasoning") for c in ca_list]
        b_r = [c.get("reasoning") for c in cb_list]
        if a_r != b_r:  # where the reasoning text went (its field, or content) is what a client reads
            i = next((j for j, (x, y) in enumerate(zip(a_r, b_r)) if x != y), 0)
            change = (f"reasoning changed: A {_said_reasoning(a_r[i] if i < len(a_r) else None)}; "
                      f"B {_said_reasoning(b_r[i] if i < len(b_r) else None)}")  # fmt: skip
    return constraint, tool_calls, change


def _said_reasoning(r: Any) -> str:
    if not isinstance(r, dict) or not r.get("text"):
        return "no reasoning"
    return f"{r.get('field')}={shown(str(r['text'])[:80])}"


def _classify_errors(s: str, pid: str, ea: dict | None, eb: dict | None) -> PromptDiff:
    def show(e: dict | None) -> str:
        return "an answer" if not e else f"HTTP {e['status']} {e.get('type')}: {e.get('message', '')[:160]}"

    if ea and eb and (ea["status"], ea.get("type")) == (eb["status"], eb.get("type")):
        if ea.get("message") == eb.get("message"):
            return PromptDiff(s, pid, "identical", "")
        return PromptDiff(s, pid, "equivalent", f"same refusal, new message: {show(eb)}")
    return PromptDiff(s, pid, "regression", f"A gave {show(ea)}; B gave {show(eb)}")


def same_weights(meta_a: dict, meta_b: dict) -> bool:
    """One model's weights on both sides: the same content hash, or the same checkpoint in two formats (an engine
    migration): one of the harness's embedded models on both sides (each format written from the same weights: the
    tiny models from code, smollm2-135m's safetensors dequantized from its pinned GGUF), or one side's
    `model.converted_from` naming the other's hash."""
    from harness.models.catalog import EMBEDDED_MODELS

    ma, mb = meta_a.get("model") or {}, meta_b.get("model") or {}
    ha, hb = ma.get("sha256"), mb.get("sha256")
    if ha == hb:
        return True
    if ma.get("source") == mb.get("source") and ma.get("source") in EMBEDDED_MODELS:
        return True
    return bool(ha and hb and (ma.get("converted_from") == hb or mb.get("converted_from") == ha))


def diff_recordings(
    a: Recording,
    b: Recording,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    margin: float = DEFAULT_MARGIN,
    allow_other_model: bool = False,
) -> GoldenDiff:
    check_thresholds(tolerance, margin)
    if not same_weights(a.meta, b.meta) and not allow_other_model:
        raise RefusedError(
            f"refusing to compare recordings of different models: {a.path} has model {a.model_sha256[:12]}, "
            f"{b.path} has model {b.model_sha256[:12]} (outputs of two models are not a regression signal)"
        )
    out = GoldenDiff(
        a=str(a.path),
        b=str(b.path),
        tolerance=tolerance,
        margin=margin,
        prompts=[],
        sets_only_in_a=sorted(set(a.sets) - set(b.sets)),
        sets_only_in_b=sorted(set(b.sets) - set(a.sets)),
        hardware=compare_hardware(a.meta.get("hardware"), b.meta.get("hardware")),
    )
    pa, pb = a.prompts(), b.prompts()
    for key in list(pa) + [k for k in pb if k not in pa]:
        s, pid = key
        if key not in pb:
            where = "set missing in B" if s in out.sets_only_in_a else "prompt missing in B"
            out.prompts.append(PromptDiff(s, pid, "missing", where))
            continue
        if key not in pa:
            out.prompts.append(PromptDiff(s, pid, "added", "only in B (no baseline)"))
            continue
        ra, rb = pa[key], pb[key]
        if ra["request_sha256"] != rb["request_sha256"]:
            out.prompts.append(PromptDiff(s, pid, "incomparable", "same id, different request (prompt edited?)"))
            continue
        constraint, tool_calls, change = client_view(ra, rb)
        ea, eb = ra.get("error"), rb.get("error")
        if ea or eb:
            pd = _classify_errors(s, pid, ea, eb)
            pd.constraint, pd.tool_calls = constraint, tool_calls
            if change and pd.status == "regression":
                pd.reason = f"{change} ({pd.reason})"
            out.prompts.append(pd)
            continue
        if len(ra["choices"]) != len(rb["choices"]):
            out.prompts.append(
                PromptDiff(s, pid, "regression", f"{len(ra['choices'])} choices vs {len(rb['choices'])}")
            )
            continue
        worst: PromptDiff | None = None
        sampled = float((ra.get("request") or {}).get("temperature") or 0) > 0
        for ci, (ca, cb) in enumerate(zip(ra["choices"], rb["choices"])):
            r = classify_choice(ca, cb, tolerance, margin, sampled)
            pd = PromptDiff(s, pid, r.pop("status"), r.pop("reason"), choice=ci, **r)
            if worst is None or SEVERITY.index(pd.status) > SEVERITY.index(worst.status):
                worst = pd
            elif worst.status == pd.status:
                worst.max_logprob_drift = max(worst.max_logprob_drift, pd.max_logprob_drift)
        assert worst is not None
        worst.constraint, worst.tool_calls = constraint, tool_calls
        if change:
            # a client-visible change is a regression whatever the tokens say (same tokens, another parser; or a
            # near-tie that turned a valid answer into an invalid one)
            tokens = f"tokens {worst.status}" + (f": {worst.reason}" if worst.reason else "")
            worst.status, worst.reason = "regression", f"{change} ({tokens})"
        out.prompts.append(worst)
    return out


def _held(h: bool | None, detail: str) -> str:
    return (
        "held"
        if h
        else ("refused or not recorded" if h is None else "did not hold") + (f" ({detail})" if detail else "")
    )


def render_text(d: GoldenDiff, verbose: bool = False) -> str:
    lines = [
        f"golden diff  A={d.a}",
        f"             B={d.b}",
        f"tolerance {d.tolerance} nats, near-tie margin {d.margin} nats",
    ]
    if d.hardware:
        lines.append(f"hardware: {d.hardware['line']}")
    if d.sets_only_in_a:
        lines.append(f"sets only in A: {', '.join(d.sets_only_in_a)}")
    if d.sets_only_in_b:
        lines.append(f"sets only in B: {', '.join(d.sets_only_in_b)}")
    for p in d.prompts:
        if p.status in ("identical",) and not verbose:
            continue
        lines.append(f"  {p.status:<12} {p.set}/{p.id}" + (f"  {p.reason}" if p.reason else ""))
        c = p.constraint
        if c and c.get("a") is not c.get("b") and not p.reason.startswith("constraint"):  # else the reason says it
            lines.append(
                f"               constraint {c['kind']}: A {_held(c['a'], c['a_detail'])}; B {_held(c['b'], c['b_detail'])}"
            )
        if p.tool_calls.get("changed"):
            from harness.golden.constraints import show_calls

            for side in ("a", "b"):
                shown = "; ".join(show_calls(x) for x in p.tool_calls[side])
                lines.append(f"               tool_calls {side.upper()}: {shown}")
        if p.position is not None:
            lines.append(f"               at token {p.position} after {p.context_text!r} (ids {p.context_ids})")
            lines.append(f"               A: {p.a_token}  top {p.a_top}")
            lines.append(f"               B: {p.b_token}  top {p.b_top}")
    counts = ", ".join(f"{k} {v}" for k, v in d.counts().items())
    lines.append(f"{len(d.prompts)} prompts: {counts}  ->  {'OK' if d.ok else 'FAIL'}")
    return "\n".join(lines)
