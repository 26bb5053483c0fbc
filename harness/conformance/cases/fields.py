"""Honoured or refused: each request field the suite relies on either has its documented effect, or the request is
refused with a 4xx and an error object. Accepted and ignored (HTTP 200, no effect) is `ignored-field`, the note naming
the field: that is the failure a client never sees.

Where an existing case already proves a field's effect it is not asked twice:

    stop                  chat.stop.string-finish-reason, chat.stop.string-cut (stop-string-ignored)
    stop_token_ids        chat.stop.token-ids (stopped-elsewhere)
    logprobs/top_logprobs chat.logprobs.shape (no-logprobs, top-logprobs-count)
    n                     chat.stream.n2-role-first (n-ignored)
    max_tokens            chat.length (finish-reason-*, completion-tokens)
    tools/tool_choice     chat.tools.present (no-tool-calls), chat.tools.arguments-schema (schema-mismatch)
    stream_options        chat.stream.no-usage-without-option, *.stream.usage-last, chat.stream.continuous-usage
    response_format       structured.json-object.*, structured.json-schema*.* (constraint-ignored)
    constraint.* probes   structured.engine.* (constraint-ignored)
    long_request probe    chat.length (sent with it: generation runs to max_tokens)

This module adds the rest: temperature, top_p, seed, max_completion_tokens, best_of, the token_ids probe's extras,
and one INFO case recording whether an unknown field is rejected or ignored (so an upgrade shows when that changes).
Every judge is a pure function of recorded traces.
"""

from __future__ import annotations

from typing import Any

from harness.client import Trace
from harness.conformance.cases.structured import output_of
from harness.conformance.context import probe
from harness.conformance.model import Check, Level, failed, info, passed, skipped, status_problem
from harness.conformance.registry import case

__all__ = [
    "refusal",
    "judge_temperature",
    "judge_top_p",
    "judge_seed",
    "judge_max_completion_tokens",
    "judge_best_of",
    "judge_token_ids",
    "judge_unknown_field",
    "SAMPLING",
    "SEEDS",
    "UNKNOWN_FIELD",
]

CHAT = "/v1/chat/completions"
MAX_TOKENS = 12
SAMPLING = 1.5  # hot enough that the tiny model's sampled text leaves the greedy path within a few tokens
SEEDS = (1, 2, 3)
TINY_TOP_P = 1e-6  # keeps only the most likely token: sampling at any temperature is then greedy
LIMIT = 5
BEST_OF = 2
UNKNOWN_FIELD = "x_harness_unknown_field"


def refusal(t: Trace, field: str) -> Check | None:
    """None for a 200 (the caller judges the effect); a pass for a 4xx with an error object (the field is refused,
    loudly); a fail for any other answer: a 4xx without an error object, a 5xx, no answer."""
    if t.status == 200:
        return None
    if t.status is not None and 400 <= t.status < 500:
        doc, _ = t.body_json()
        err = doc.get("error") if isinstance(doc, dict) else None
        body = t.body[:200].decode("utf-8", "replace")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return passed(f"{field} refused: HTTP {t.status}: {err['message'][:160]}", field=field, outcome="refused")
        tag = "plain-error-string" if isinstance(err, str) else "no-error-object"
        return failed(tag, "a 4xx with an error object", body, note=f"{field} refused without an error object",
                      field=field)  # fmt: skip
    p = status_problem(t) or failed("no-answer", 200, t.status)
    p.note = f"{field}: {p.note}"
    p.extra["field"] = field
    return p


def _text(t: Trace, what: str) -> tuple[str, Check | None]:
    """The text of choice 0 of a 200 answer, or the fail that says why there is none."""
    if (p := status_problem(t)) is not None:
        p.note = f"{what}: {p.note}"
        return "", p
    text, _, p = output_of(t)
    return text, p


def judge_temperature(greedy: Trace, sampled: list[Trace]) -> Check:
    """Sampling at temperature SAMPLING (one request per seed) leaves the greedy text at least once."""
    base, p = _text(greedy, "the greedy reference (temperature 0)")
    if p is not None:
        return p
    texts = []
    for t in sampled:
        if (r := refusal(t, "temperature")) is not None:
            return r
        text, p = _text(t, "temperature")
        if p is not None:
            return p
        texts.append(text)
    if all(x == base for x in texts):
        return failed("ignored-field", "a sampled text that differs from the greedy one", texts, field="temperature",
                      note=f"temperature: {len(texts)} requests at temperature {SAMPLING} (seeds {list(SEEDS)}) all "
                           f"gave the greedy text {base!r}")  # fmt: skip
    return passed(f"{sum(x != base for x in texts)} of {len(texts)} sampled texts differ from the greedy one")


def judge_top_p(greedy: Trace, sampled: Trace, narrowed: Trace) -> Check:
    """The same seed at temperature SAMPLING, with top_p TINY_TOP_P, gives the greedy text (only the top token is left)."""
    base, p = _text(greedy, "the greedy reference (temperature 0)")
    if p is not None:
        return p
    hot, p = _text(sampled, "the sampled reference")
    if p is not None:
        return p
    if hot == base:
        return skipped(f"sampling at temperature {SAMPLING} gave the greedy text: top_p has nothing to narrow")
    if (r := refusal(narrowed, "top_p")) is not None:
        return r
    got, p = _text(narrowed, "top_p")
    if p is not None:
        return p
    if got != base:
        return failed("ignored-field", base, got, field="top_p",
                      note=f"top_p: top_p {TINY_TOP_P} at temperature {SAMPLING} should leave only the most likely "
                           f"token (the greedy text); it gave another")  # fmt: skip
    return passed(f"top_p {TINY_TOP_P} gave the greedy text")


def judge_seed(greedy: Trace, first: Trace, again: Trace) -> Check:
    """Two requests with one seed at temperature SAMPLING give the same text."""
    base, p = _text(greedy, "the greedy reference (temperature 0)")
    if p is not None:
        return p
    a, p = _text(first, "seed")
    if p is not None:
        return p
    if a == base:
        return skipped(f"sampling at temperature {SAMPLING} gave the greedy text: a seed has nothing to fix")
    if (r := refusal(again, "seed")) is not None:
        return r
    b, p = _text(again, "seed")
    if p is not None:
        return p
    if a != b:
        return failed("ignored-field", a, b, field="seed",
                      note=f"seed: the same seed at temperature {SAMPLING} gave two different texts")  # fmt: skip
    return passed(f"the same seed gave the same text ({len(a)} chars)")


def _usage_tokens(t: Trace) -> tuple[int | None, str | None]:
    doc, _ = t.body_json()
    usage = doc.get("usage") if isinstance(doc, dict) else None
    ct = usage.get("completion_tokens") if isinstance(usage, dict) else None
    ch = doc.get("choices") if isinstance(doc, dict) else None
    fr = ch[0].get("finish_reason") if isinstance(ch, list) and ch and isinstance(ch[0], dict) else None
    return (ct if type(ct) is int else None), fr


def judge_max_completion_tokens(t: Trace, limit: int = LIMIT) -> Check:
    """max_completion_tokens (OpenAI's newer name for max_tokens) ends generation at `limit` tokens, finish length."""
    field = "max_completion_tokens"
    if (r := refusal(t, field)) is not None:
        return r
    ct, fr = _usage_tokens(t)
    if ct is None:
        return failed("usage-shape", "usage.completion_tokens", ct, note=f"{field}: cannot count the tokens")
    if ct > limit:
        return failed("ignored-field", f"<= {limit} completion tokens", ct, field=field,
                      note=f"{field}: {limit} asked, {ct} generated (finish_reason {fr})")  # fmt: skip
    if ct < limit and fr == "stop":
        return skipped(f"generation ended by itself after {ct} tokens, before the limit of {limit} could show")
    if ct != limit or fr != "length":
        return failed("completion-tokens", f"{limit} tokens, finish_reason length", f"{ct} tokens, {fr}",
                      note=field)  # fmt: skip
    return passed(f"{ct} tokens, finish_reason length")


def judge_best_of(t: Trace, best_of: int = BEST_OF, max_tokens: int = MAX_TOKENS) -> Check:
    """best_of generates `best_of` candidates server-side and returns the best: its usage counts every candidate's
    tokens (more than one candidate's worth), or the field is refused."""
    field = "best_of"
    if (r := refusal(t, field)) is not None:
        return r
    ct, _ = _usage_tokens(t)
    if ct is None:
        return failed("usage-shape", "usage.completion_tokens", ct, note=f"{field}: cannot count the tokens")
    if ct <= max_tokens:
        return failed("ignored-field", f"> {max_tokens} completion tokens ({best_of} candidates)", ct, field=field,
                      note=f"{field}: best_of {best_of} with max_tokens {max_tokens} accepted, but usage counts "
                           f"{ct} tokens: one candidate's worth")  # fmt: skip
    return passed(f"usage counts {ct} tokens for best_of {best_of} x max_tokens {max_tokens}")


def judge_token_ids(t: Trace, fields: list[str]) -> Check:
    """The token_ids probe's extras (vLLM: return_token_ids) put the generated ids on the choice, one per token."""
    field = ", ".join(fields) or "token_ids probe"
    if (r := refusal(t, field)) is not None:
        return r
    doc, _ = t.body_json()
    ch = doc.get("choices") if isinstance(doc, dict) else None
    c0 = ch[0] if isinstance(ch, list) and ch and isinstance(ch[0], dict) else {}
    ids = c0.get("token_ids")
    ct, _ = _usage_tokens(t)
    if not isinstance(ids, list) or not all(type(i) is int for i in ids):
        return failed("ignored-field", "choices[0].token_ids: a list of token ids", ids, field=field,
                      note=f"{field}: accepted, but the choice carries no token_ids")  # fmt: skip
    if ct is not None and len(ids) != ct:
        return failed("token-ids-count", ct, len(ids), note=f"{field}: one id per generated token")
    return passed(f"{len(ids)} token ids")


def judge_unknown_field(t: Trace) -> Check:
    """INFO: what the server does with a field no API defines. Either is allowed; an upgrade shows when it changes."""
    if t.status == 200:
        return info("unknown-field-ignored", 200, note=f"{UNKNOWN_FIELD} accepted (HTTP 200)")
    if t.status is not None and 400 <= t.status < 500:
        return info("unknown-field-rejected", t.status, note=t.body[:160].decode("utf-8", "replace"))
    return status_problem(t) or failed("no-answer", 200, t.status)


# -- the live cases ----------------------------------------------------------------------------------------------


@probe("fields.greedy")
async def _greedy(ctx: Any) -> Trace:
    return await ctx.post(CHAT, ctx.chat(max_tokens=MAX_TOKENS))


def _sampled_probe(seed: int) -> None:
    @probe(f"fields.sampled.{seed}")
    async def run(ctx: Any) -> Trace:
        return await ctx.post(CHAT, ctx.chat(max_tokens=MAX_TOKENS, temperature=SAMPLING, seed=seed))


for _seed in SEEDS:
    _sampled_probe(_seed)


@case("fields.temperature", f"temperature {SAMPLING} samples: some text differs from temperature 0's (or refused)")
async def temperature(ctx: Any) -> Check:
    if getattr(ctx, "scripted", False):  # its logits lead by ~30 nats: any temperature samples the greedy text
        return skipped("the scripted model leaves sampling no choice (every next token leads by ~30 nats)")
    greedy = await ctx.probe("fields.greedy")
    return judge_temperature(greedy, [await ctx.probe(f"fields.sampled.{s}") for s in SEEDS])


@case("fields.top-p", f"top_p {TINY_TOP_P} leaves only the most likely token: the greedy text (or refused)")
async def top_p(ctx: Any) -> Check:
    greedy, sampled = await ctx.probe("fields.greedy"), await ctx.probe(f"fields.sampled.{SEEDS[1]}")
    narrowed = await ctx.post(CHAT, ctx.chat(max_tokens=MAX_TOKENS, temperature=SAMPLING, seed=SEEDS[1],
                                             top_p=TINY_TOP_P))  # fmt: skip
    return judge_top_p(greedy, sampled, narrowed)


@case("fields.seed", "the same seed gives the same sampled text (or refused)")
async def seed(ctx: Any) -> Check:
    greedy, first = await ctx.probe("fields.greedy"), await ctx.probe(f"fields.sampled.{SEEDS[0]}")
    again = await ctx.post(CHAT, ctx.chat(max_tokens=MAX_TOKENS, temperature=SAMPLING, seed=SEEDS[0]))
    return judge_seed(greedy, first, again)


@case("fields.max-completion-tokens", f"max_completion_tokens {LIMIT} ends generation at {LIMIT} tokens (or refused)")
async def max_completion_tokens(ctx: Any) -> Check:
    t = await ctx.post(CHAT, ctx.chat(max_completion_tokens=LIMIT, **ctx.extra("long_request")))
    return judge_max_completion_tokens(t, LIMIT)


@case("fields.best-of", f"completions best_of {BEST_OF}: usage counts every candidate (or refused)", Level.SHOULD)
async def best_of(ctx: Any) -> Check:
    body = ctx.completion(max_tokens=MAX_TOKENS, best_of=BEST_OF, n=1, temperature=1.0, seed=SEEDS[0],
                          **ctx.extra("long_request"))  # fmt: skip
    return judge_best_of(await ctx.post("/v1/completions", body), BEST_OF, MAX_TOKENS)


@case("fields.extras.token-ids", "the token_ids probe's extras put the generated token ids on the choice (or refused)")
async def token_ids(ctx: Any) -> Check:
    extras = ctx.extra("token_ids")
    if not extras:
        return skipped(f"{ctx.exp.name} declares no probes.token_ids")
    t = await ctx.post(CHAT, ctx.chat(max_tokens=LIMIT, **extras))
    return judge_token_ids(t, sorted(extras))


@case("fields.unknown-field", "records whether a field no API defines is rejected or ignored", Level.INFO)
async def unknown_field(ctx: Any) -> Check:
    return judge_unknown_field(await ctx.post(CHAT, ctx.chat(max_tokens=2, **{UNKNOWN_FIELD: True})))
