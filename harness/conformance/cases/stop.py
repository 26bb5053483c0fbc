"""Stopping, judged on a model that ends its answers on its own (issue 36): the end token (EOS), a stop string met
mid-answer, include_stop_str_in_output, min_tokens, ignore_eos, max_tokens met on the end token's step, n > 1 with
answers of different lengths, and stream_options.include_usage on them.

The tiny models (random or scripted weights) never end an answer by choice: every answer runs to max_tokens, so none
of this can be seen with them. Whether the server's model ends its answers is what it provides (`ENDS_ANSWERS`, from
the manifest's model.source, `harness.conformance.case.provided_by`); without it every case here skips, saying why.

Every case starts from the natural answer: the greedy answer to PROMPT within BUDGET tokens (SmolLM2-135M-Instruct
ends it after 11 text tokens and its end token on vLLM 0.11.0 and llama.cpp 0c1e570 alike, measured). Engine
differences are data: how to count a text's tokens is the expectation file's `probes.tokenize` ({path, body} with
`$value` where the text goes); without it the stream's logprobs entries count the answer. Each case hands what came
back to a pure `judge_*` function, so recorded answers are judged exactly as live ones."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from harness.client import Trace
from harness.conformance.case import ENDS_ANSWERS
from harness.conformance.context import Ctx, probe
from harness.conformance.model import (
    Check,
    Deviations,
    Level,
    failed,
    finish_reason_tag,
    passed,
    skipped,
    status_problem,
)
from harness.conformance.registry import case
from harness.conformance.shape import per_index, streamed_text, usage_chunk
from harness.conformance.view import choices, from_trace

__all__ = ["Answer", "PROMPT", "SECOND_PROMPT", "BUDGET", "END_MARKERS", "NEVER_ENDS", "pick_stop_word"]

CHAT = "/v1/chat/completions"
PROMPT = (
    "What is 2+2?"  # greedy: "The answer to this classic math problem is 4." (12 tokens with the end, both engines)
)
SECOND_PROMPT = "How many legs does a dog have?"  # greedy: 17 tokens on both: an answer of another length
BUDGET = 64  # max_tokens of the natural answers: the model ends them well before it
EXTRA = 8  # tokens asked for beyond the natural answer (min_tokens, ignore_eos)
N_CHOICES, N_TEMPERATURE, N_SEED = 4, 0.8, 7  # sampled choices of different lengths (some end, some may hit BUDGET)
# the end-of-turn and end-of-text markers of the common chat templates: a client must never see one as text
END_MARKERS = ("<|im_end|>", "<|im_start|>", "<|endoftext|>", "</s>", "<|eot_id|>", "<|end_of_text|>", "<|end|>",
               "<end_of_turn>", "<|return|>")  # fmt: skip
NEVER_ENDS = "the model never ends its answer on its own (random/scripted weights)"
UNKNOWN_MODEL = ("the server is not known to serve a model that ends its answers on its own (a manifest whose "
                 "model.source is a trained model says so)")  # fmt: skip
VALUE = "$value"  # where a probes.tokenize body takes the text


@dataclass
class Answer:
    """One choice as the client got it: the text, its finish_reason, its usage (the response's), and the logprobs
    entries it carried (one per sampled token; None without logprobs)."""

    text: str
    finish_reason: Any
    usage: dict[str, Any] | None
    entries: int | None = None

    @property
    def completion_tokens(self) -> int | None:
        c = (self.usage or {}).get("completion_tokens")
        return c if type(c) is int else None


def _gate(ctx: Ctx) -> Check | None:
    """None when the server's model ends its answers; else the skip that says why these cases cannot apply."""
    if ENDS_ANSWERS in ctx.provides:
        return None
    manifest = getattr(getattr(ctx.engine, "spec", None), "manifest", None)
    known = getattr(getattr(manifest, "model", None), "source", None) is not None or ctx.scripted
    return skipped(NEVER_ENDS if known else UNKNOWN_MODEL)


def _chat(ctx: Ctx, prompt: str = PROMPT, /, **kw: Any) -> dict[str, Any]:
    return ctx.chat(**{"messages": [{"role": "user", "content": prompt}], "max_tokens": BUDGET, **kw})


def _stream(ctx: Ctx, prompt: str = PROMPT, /, **kw: Any) -> dict[str, Any]:
    return _chat(ctx, prompt, stream=True, stream_options={"include_usage": True}, **kw)


def _entries(c: dict) -> int | None:
    lp = c.get("logprobs")
    return len(lp["content"]) if isinstance(lp, dict) and isinstance(lp.get("content"), list) else None


def answers(t: Trace) -> tuple[list[Answer], Check | None]:
    """Every choice of a non-stream or streamed answer, by index; or the fail that says why there is none."""
    if (p := status_problem(t)) is not None:
        return [], p
    if t.sse:
        view = from_trace(t)
        uc = usage_chunk(view)
        usage = uc[1]["usage"] if uc else None
        out = []
        for i, seq in sorted(per_index(view).items()):
            frs = [c.get("finish_reason") for _, _, c in seq if c.get("finish_reason")]
            counts = [e for _, _, c in seq if (e := _entries(c)) is not None]
            out.append(Answer(streamed_text(view, i), frs[-1] if frs else None, usage, sum(counts) if counts else None))
        return out, None if out else failed("no-choices", "a streamed choice", len(view.chunks))
    doc, err = t.body_json()
    chs = choices(doc) if isinstance(doc, dict) else []
    if err or not chs:
        return [], failed("non-stream-shape", "JSON with choices", err or doc)
    usage = doc.get("usage") if isinstance(doc, dict) and isinstance(doc.get("usage"), dict) else None
    out = []
    for c in chs:
        msg = c.get("message")
        content = msg.get("content") if isinstance(msg, dict) else None
        text = content if isinstance(content, str) else ""
        out.append(Answer(text, c.get("finish_reason"), usage, _entries(c)))
    return out, None


async def _both(ctx: Ctx, name: str) -> tuple[list[Answer], list[Answer], Check | None]:
    """The answers to probe `name` and to its streamed twin `name.stream`, or the first one's problem."""
    plain, p = answers(await ctx.probe(name))
    streamed, q = answers(await ctx.probe(f"{name}.stream"))
    return plain, streamed, p or q


async def _natural(ctx: Ctx, name: str = "stop.natural") -> tuple[Answer | None, Check | None]:
    """The natural answer (first choice), or why the cases built on it cannot judge: the engine's fail, or a skip
    when it did not end within BUDGET (stop.eos.finish-reason judges that)."""
    got, p = answers(await ctx.probe(name))
    if p is not None:
        return None, p
    a = got[0]
    if a.finish_reason != "stop" or a.completion_tokens is None:
        return None, skipped(f"the natural answer did not end on its own (finish_reason {a.finish_reason!r}, "
                             f"completion_tokens {a.completion_tokens!r}): stop.eos.finish-reason judges that")  # fmt: skip
    return a, None


@probe("stop.natural")
async def _natural_probe(ctx: Ctx) -> Trace:
    return await ctx.post(CHAT, _chat(ctx))


@probe("stop.natural.stream")
async def _natural_stream_probe(ctx: Ctx) -> Trace:
    # logprobs: one entry per sampled token, so the stream counts what it carried
    return await ctx.post(CHAT, _stream(ctx, logprobs=True))


@probe("stop.second")
async def _second_probe(ctx: Ctx) -> Trace:
    return await ctx.post(CHAT, _chat(ctx, SECOND_PROMPT))


@probe("stop.second.stream")
async def _second_stream_probe(ctx: Ctx) -> Trace:
    return await ctx.post(CHAT, _stream(ctx, SECOND_PROMPT))


# -- the end token ---------------------------------------------------------------------------------------------


def judge_eos_finish(plain: Answer, streamed: Answer) -> Check:
    """Both answers end with finish_reason stop: the model's own end, well within max_tokens."""
    dev = Deviations()
    for how, a in (("non-stream", plain), ("stream", streamed)):
        if a.finish_reason != "stop":
            dev.add(finish_reason_tag(a.finish_reason), f"{how}: stop", a.finish_reason,
                    note=f"{how}: {a.completion_tokens} tokens, text {a.text[:80]!r}")  # fmt: skip
    return dev.check(passed(f"{plain.completion_tokens} tokens, ended by the model: {plain.text[:80]!r}"))


@case(
    "stop.eos.finish-reason", "an answer the model ends by its end token has finish_reason stop (stream and non-stream)"
)
async def eos_finish(ctx: Ctx) -> Check:
    if (g := _gate(ctx)) is not None:
        return g
    plain, streamed, problem = await _both(ctx, "stop.natural")
    if problem is not None:
        return problem
    return judge_eos_finish(plain[0], streamed[0])


def judge_no_end_marker(plain: Answer, streamed: Answer) -> Check:
    """No end-of-turn marker (`<|im_end|>`, `</s>`, ...) in the text a client is shown: `end-marker-in-text`."""
    dev = Deviations()
    for how, a in (("non-stream", plain), ("stream", streamed)):
        for m in END_MARKERS:
            if m in a.text:
                dev.add("end-marker-in-text", f"{how}: text without {m}", a.text[-80:])
    return dev.check(passed(f"no end marker in {plain.text[-40:]!r}"))


@case("stop.eos.no-end-marker", "the end token is not shown: no end-of-turn marker in the text (stream and non-stream)")
async def eos_marker(ctx: Ctx) -> Check:
    if (g := _gate(ctx)) is not None:
        return g
    plain, streamed, problem = await _both(ctx, "stop.natural")
    if problem is not None:
        return problem
    return judge_no_end_marker(plain[0], streamed[0])


async def count_tokens(ctx: Ctx, text: str) -> tuple[int | None, str]:
    """The engine's own token count of `text` (probes.tokenize), and how it was had; None when not declared or not
    answered (the note says which)."""
    spec = ctx.extra("tokenize")
    path, body = spec.get("path"), spec.get("body")
    if not spec:
        return None, "no probes.tokenize"
    if not (isinstance(path, str) and path.startswith("/") and isinstance(body, dict)):
        return None, "probes.tokenize: needs path (/...) and body (with $value)"
    req = {k: (text if v == VALUE else v) for k, v in body.items()}
    t = await ctx.post(path, {"model": ctx.model, **req})
    doc, err = t.body_json()
    tokens = doc.get("tokens") if isinstance(doc, dict) else None
    if t.status != 200 or err or not isinstance(tokens, list):
        return None, f"POST {path}: HTTP {t.status}, {err or 'no tokens list'}"
    return len(tokens), f"POST {path}"


def judge_eos_usage(a: Answer, counted: int, how: str, end_is_entry: bool = False) -> Check:
    """completion_tokens = the answer's text tokens + 1, its end token (sampled like any other: max_tokens counts it
    too). `counted` tokens by `how`: the tokenizer (the text alone), or the stream's logprobs entries, which may or
    may not hold one for the end token (`end_is_entry`: both are accepted). The end token left out is
    `end-token-not-billed`; any other count `completion-tokens-miscounted`."""
    c = a.completion_tokens
    ok = {counted, counted + 1} if end_is_entry else {counted + 1}
    if c in ok:
        return passed(f"completion_tokens {c}: {counted} by {how}" + ("" if end_is_entry else " + the end token"))
    if not end_is_entry and c == counted:
        return failed("end-token-not-billed", counted + 1, c, note=f"{counted} text tokens by {how}")
    return failed("completion-tokens-miscounted", sorted(ok), c, note=f"{counted} tokens by {how}")


@case(
    "stop.eos.usage", "usage.completion_tokens of an answer ended by the model counts its text tokens and the end token"
)
async def eos_usage(ctx: Ctx) -> Check:
    if (g := _gate(ctx)) is not None:
        return g
    a, p = await _natural(ctx)
    if p or a is None:
        return p  # type: ignore[return-value]
    n, how = await count_tokens(ctx, a.text)
    if n is not None:
        return judge_eos_usage(a, n, f"{how} of the text")
    streamed, q = answers(await ctx.probe("stop.natural.stream"))
    if q or streamed[0].entries is None:
        return q or skipped(f"no way to count the answer's tokens ({how}; the stream carried no logprobs)")
    return judge_eos_usage(a, streamed[0].entries, f"the stream's logprobs entries ({how})", end_is_entry=True)


def judge_max_tokens_at_eos(natural: Answer, got: Answer) -> Check:
    """max_tokens = the natural answer's completion_tokens, so the budget runs out on the step the model samples its
    end token. The model's own end came: finish_reason `stop` (OpenAI: "stop if the model hit a natural stop point";
    `length` is for an answer cut short, and this one is whole). `length` is that finish reason's tag; a text other
    than the natural one `text-differs`."""
    dev = Deviations()
    if got.finish_reason != "stop":
        dev.add(finish_reason_tag(got.finish_reason), "stop", got.finish_reason,
                note=f"max_tokens {natural.completion_tokens}: the end token came on the budget's last step")  # fmt: skip
    if got.text != natural.text:
        dev.add("text-differs", natural.text, got.text)
    return dev.check(passed(f"max_tokens {natural.completion_tokens}: finish_reason stop, the whole answer"))


@case("stop.max-tokens-at-eos", "max_tokens equal to the natural answer's length: the whole answer, finish_reason stop",
      Level.SHOULD)  # fmt: skip
async def max_tokens_at_eos(ctx: Ctx) -> Check:
    if (g := _gate(ctx)) is not None:
        return g
    a, p = await _natural(ctx)
    if p or a is None:
        return p  # type: ignore[return-value]
    got, q = answers(await ctx.post(CHAT, _chat(ctx, max_tokens=a.completion_tokens)))
    return q or judge_max_tokens_at_eos(a, got[0])


# -- stop strings ----------------------------------------------------------------------------------------------


def pick_stop_word(text: str) -> tuple[str, int] | None:
    """A word of 4+ letters met mid-answer: its first occurrence starts past a third of the text and ends before the
    last character (so the stop cuts the answer, neither at its start nor at its end)."""
    for m in re.finditer(r"[A-Za-z]{4,}", text):
        if m.start() >= len(text) // 3 and m.end() < len(text) - 1 and text.index(m.group()) == m.start():
            return m.group(), m.start()
    return None


def judge_stop_string(natural: str, word: str, at: int, plain: Answer, streamed: Answer, include: bool) -> Check:
    """Both answers are the natural text up to the stop string (`include`: through it), with finish_reason stop, and
    equal. The stop string kept when it should not be is `stop-string-kept`; left out when include asks for it
    `include-stop-str-ignored`; the whole natural answer `stop-string-ignored`; other text `stop-text-differs`; the
    stream's text not the non-stream's `stream-differs`."""
    want = natural[: at + len(word)] if include else natural[:at]
    dev = Deviations()
    for how, a in (("non-stream", plain), ("stream", streamed)):
        if a.text == want:
            pass
        elif a.text == natural:
            dev.add("stop-string-ignored", f"{how}: {want!r}", a.text)
        elif include and a.text == natural[:at]:
            dev.add("include-stop-str-ignored", f"{how}: {want!r}", a.text)
        elif not include and a.text == natural[: at + len(word)]:
            dev.add("stop-string-kept", f"{how}: {want!r}", a.text)
        else:
            dev.add("stop-text-differs", f"{how}: {want!r}", a.text)
        if a.finish_reason != "stop":
            dev.add(finish_reason_tag(a.finish_reason), f"{how}: stop", a.finish_reason)
    if plain.text != streamed.text:
        dev.add("stream-differs", plain.text, streamed.text)
    return dev.check(passed(f"stop {word!r} at char {at}: {want!r}, stream and non-stream alike"))


async def _stop_string_case(ctx: Ctx, include: bool) -> Check:
    if (g := _gate(ctx)) is not None:
        return g
    a, p = await _natural(ctx)
    if p or a is None:
        return p  # type: ignore[return-value]
    pick = pick_stop_word(a.text)
    if pick is None:
        return skipped(f"no word met mid-answer in the natural answer {a.text[:80]!r}")
    word, at = pick
    extra: dict[str, Any] = {"include_stop_str_in_output": True} if include else {}
    plain_t = await ctx.post(CHAT, _chat(ctx, stop=[word], **extra))
    if include and plain_t.status is not None and 400 <= plain_t.status < 500:
        return passed(f"include_stop_str_in_output refused with HTTP {plain_t.status} (not silently ignored)")
    plain, p = answers(plain_t)
    if p:
        return p
    streamed, q = answers(await ctx.post(CHAT, _stream(ctx, stop=[word], **extra)))
    return q or judge_stop_string(a.text, word, at, plain[0], streamed[0], include)


@case(
    "stop.string.mid-answer",
    "a stop string met mid-answer ends it there, stripped, with finish_reason stop; stream = non-stream",
)
async def stop_mid_answer(ctx: Ctx) -> Check:
    return await _stop_string_case(ctx, include=False)


@case("stop.string.include", "include_stop_str_in_output keeps the stop string (stream = non-stream), or is refused with a 4xx",
      Level.SHOULD)  # fmt: skip
async def stop_include(ctx: Ctx) -> Check:
    return await _stop_string_case(ctx, include=True)


# -- min_tokens, ignore_eos --------------------------------------------------------------------------------------


def judge_min_tokens(natural: Answer, t: Trace, min_tokens: int) -> Check:
    """min_tokens honoured (completion_tokens >= min_tokens: the end token held back) or refused with a 4xx. The
    natural answer again is `min-tokens-ignored`; a longer one that still stops short `min-tokens-short`."""
    if t.status is not None and 400 <= t.status < 500:
        return passed(f"min_tokens refused with HTTP {t.status} (not silently ignored)")
    got, p = answers(t)
    if p:
        return p
    a = got[0]
    c = a.completion_tokens
    if type(c) is int and c >= min_tokens and a.text != natural.text:
        return passed(f"min_tokens {min_tokens}: {c} tokens (natural answer: {natural.completion_tokens})")
    tag = "min-tokens-ignored" if a.text == natural.text else "min-tokens-short"
    return failed(tag, f"completion_tokens >= {min_tokens}, or a 4xx", c, note=f"text {a.text[:80]!r}")


@case(
    "stop.min-tokens",
    "min_tokens beyond the natural answer is honoured (a longer answer) or refused with a 4xx",
    Level.SHOULD,
)
async def min_tokens(ctx: Ctx) -> Check:
    if (g := _gate(ctx)) is not None:
        return g
    a, p = await _natural(ctx)
    if p or a is None:
        return p  # type: ignore[return-value]
    want = (a.completion_tokens or 0) + EXTRA
    return judge_min_tokens(a, await ctx.post(CHAT, _chat(ctx, min_tokens=want)), want)


def judge_ignore_eos(natural: Answer, t: Trace, max_tokens: int) -> Check:
    """ignore_eos honoured (exactly max_tokens tokens, finish_reason length) or refused with a 4xx. The natural
    answer again is `ignore-eos-ignored`; another length `ignore-eos-short`; a finish_reason but length its tag."""
    if t.status is not None and 400 <= t.status < 500:
        return passed(f"ignore_eos refused with HTTP {t.status} (not silently ignored)")
    got, p = answers(t)
    if p:
        return p
    a = got[0]
    dev = Deviations()
    if a.text == natural.text:
        dev.add("ignore-eos-ignored", f"{max_tokens} tokens, or a 4xx", a.completion_tokens)
    elif a.completion_tokens != max_tokens:
        dev.add("ignore-eos-short", max_tokens, a.completion_tokens)
    if a.finish_reason != "length" and a.text != natural.text:
        dev.add(finish_reason_tag(a.finish_reason), "length", a.finish_reason)
    return dev.check(
        passed(
            f"ignore_eos: {a.completion_tokens} tokens, finish_reason {a.finish_reason} (the natural "
            f"answer ends after {natural.completion_tokens})"
        )
    )


@case("stop.ignore-eos", "ignore_eos runs past the model's end to max_tokens (finish_reason length) or is refused with a 4xx",
      Level.SHOULD)  # fmt: skip
async def ignore_eos(ctx: Ctx) -> Check:
    if (g := _gate(ctx)) is not None:
        return g
    a, p = await _natural(ctx)
    if p or a is None:
        return p  # type: ignore[return-value]
    cap = (a.completion_tokens or 0) + EXTRA
    return judge_ignore_eos(a, await ctx.post(CHAT, _chat(ctx, ignore_eos=True, max_tokens=cap)), cap)


# -- several answers of different lengths ----------------------------------------------------------------------


def judge_n_lengths(got: list[Answer], n: int, max_tokens: int) -> Check:
    """n choices, each with the finish_reason its length says (fewer tokens than max_tokens: stop; max_tokens:
    length), and usage.completion_tokens their sum. Each choice's tokens are its logprobs entries, plus its end
    token when the engine gives that no entry: the sum is accepted either way, one way for all choices. Choices all
    of one length judge nothing of that (skip). Tags: `n-ignored` (one choice), `wrong-choice-count`,
    `finish-reason-disagrees-with-length`, `usage-not-the-sum`."""
    if len(got) != n:
        return failed("n-ignored" if len(got) == 1 else "wrong-choice-count", n, len(got))
    counts = [a.entries for a in got]
    if any(c is None for c in counts):
        return skipped("the choices carried no logprobs entries: their lengths are unknown")
    lengths = [int(c or 0) for c in counts]
    if len(set(lengths)) == 1:
        return skipped(f"all {n} sampled choices had one length ({lengths[0]} tokens): nothing to tell apart")
    dev = Deviations()
    stopped = 0
    for i, (a, k) in enumerate(zip(got, lengths, strict=True)):
        if a.finish_reason == "stop":
            stopped += 1
            if k > max_tokens:
                dev.add("finish-reason-disagrees-with-length", f"choice {i}: at most {max_tokens} tokens", k)
        elif a.finish_reason == "length":
            if k != max_tokens:  # a choice cut by the budget has no end token: an entry for each of its tokens
                dev.add("finish-reason-disagrees-with-length", f"choice {i}: stop ({k} tokens)", "length")
        else:
            dev.add(finish_reason_tag(a.finish_reason), f"choice {i}: stop or length", a.finish_reason)
    total, usage = sum(lengths), got[0].completion_tokens
    if usage not in (total, total + stopped):
        dev.add("usage-not-the-sum", sorted({total, total + stopped}), usage, note=f"choice lengths {lengths}")
    frs = [a.finish_reason for a in got]
    return dev.check(passed(f"choice lengths {lengths}, finish_reasons {frs}, completion_tokens {usage}"))


@case(
    "stop.n-lengths",
    "n > 1 sampled choices of different lengths: each finish_reason fits its length, usage is their sum",
)
async def n_lengths(ctx: Ctx) -> Check:
    if (g := _gate(ctx)) is not None:
        return g
    body = _chat(ctx, n=N_CHOICES, temperature=N_TEMPERATURE, seed=N_SEED, logprobs=True)
    got, p = answers(await ctx.post(CHAT, body))
    return p or judge_n_lengths(got, N_CHOICES, BUDGET)


def judge_stream_usage(pairs: list[tuple[Answer, Answer]]) -> Check:
    """Per answer (natural answers of different lengths), the streamed usage (stream_options.include_usage) equals
    the non-stream usage: `no-usage-chunk`, `usage-differs`. Answers of one length judge nothing of that (skip)."""
    keys = ("prompt_tokens", "completion_tokens", "total_tokens")
    lengths = [plain.completion_tokens for plain, _ in pairs]
    if len(set(lengths)) < len(lengths):
        return skipped(f"the natural answers are not of different lengths ({lengths})")
    dev = Deviations()
    for i, (plain, streamed) in enumerate(pairs):
        if streamed.usage is None:
            dev.add("no-usage-chunk", f"answer {i}: a usage chunk", None)
            continue
        want = {k: (plain.usage or {}).get(k) for k in keys}
        got = {k: streamed.usage.get(k) for k in keys}
        if got != want:
            dev.add("usage-differs", f"answer {i}: {want}", got)
    return dev.check(passed(f"streamed usage = non-stream usage for answers of {lengths} tokens"))


@case(
    "stop.stream-usage", "stream_options.include_usage on answers of different lengths: usage equals the non-stream one"
)
async def stream_usage(ctx: Ctx) -> Check:
    if (g := _gate(ctx)) is not None:
        return g
    pairs = []
    for name in ("stop.natural", "stop.second"):
        plain, streamed, problem = await _both(ctx, name)
        if problem is not None:
            return problem
        pairs.append((plain[0], streamed[0]))
    return judge_stream_usage(pairs)
