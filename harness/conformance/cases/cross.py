"""Across endpoints: at temperature 0 one prompt gives one text through chat completions, Responses and Messages.

Each endpoint renders the prompt with the model's chat template and decodes greedily, so the texts match unless
something differs on the way. The input token counts tell which: a different count means the endpoint built another
prompt (`<endpoint>-template-differs`: a system prompt added, another template), the same count with another text means
the tokens were sampled or returned differently (`<endpoint>-text-differs`: sampling defaults, detokenisation, a wire
difference). An endpoint the server does not serve is left out (and named in the note); without chat completions, or
with neither of the others, there is nothing to compare (`absent`).
"""

from __future__ import annotations

from typing import Any

from harness.conformance.cases import messages, responses
from harness.conformance.model import Check, Deviations, Level, Verdict, absent_problem, failed, passed
from harness.conformance.registry import case

PROMPT = "Say hello."
TOKENS = 8


def _chat(doc: Any) -> tuple[str | None, int | None]:
    try:
        return doc["choices"][0]["message"]["content"], doc["usage"]["prompt_tokens"]
    except (KeyError, IndexError, TypeError):
        return None, None


@case("cross.same-text", "at temperature 0 chat completions, Responses and Messages give the same text for one prompt",
      level=Level.SHOULD)  # fmt: skip
async def same_text(ctx) -> Check:
    chat_t = await ctx.post("/v1/chat/completions", ctx.chat(max_tokens=TOKENS, messages=[
        {"role": "user", "content": PROMPT}]), sse=False)  # fmt: skip
    if (absent := absent_problem(chat_t, "POST /v1/chat/completions")) is not None:
        return absent
    chat_doc, _ = chat_t.body_json()
    want, want_tokens = _chat(chat_doc)
    if chat_t.status != 200 or want is None:
        return failed("chat-unreadable", "a chat completion", chat_t.body[:200].decode("utf-8", "replace"))
    others: dict[str, tuple[str | None, int | None]] = {}
    left_out = []
    r = await ctx.post(responses.RESPONSES, responses.request(ctx, max_output_tokens=TOKENS, input=PROMPT), sse=False)
    if absent_problem(r, "") is not None:
        left_out.append("responses")
    else:
        doc, _ = r.body_json()
        u = doc.get("usage") if isinstance(doc, dict) else None
        others["responses"] = (responses.response_text(doc), u.get("input_tokens") if isinstance(u, dict) else None)
    m = await messages.post(ctx, messages.request(ctx, max_tokens=TOKENS), sse=False)
    if absent_problem(m, "") is not None:
        left_out.append("messages")
    else:
        doc, _ = m.body_json()
        u = doc.get("usage") if isinstance(doc, dict) else None
        others["messages"] = (messages.message_text(doc), u.get("input_tokens") if isinstance(u, dict) else None)
    if not others:
        return Check(Verdict.ABSENT, "no-other-endpoint", note="neither /v1/responses nor /v1/messages is served")
    return judge_same_text(want, want_tokens, others, left_out)


def judge_same_text(want: str, want_tokens: int | None, others: dict[str, tuple[str | None, int | None]],
                    left_out: tuple[str, ...] | list[str] = ()) -> Check:  # fmt: skip
    """chat's text and prompt tokens against each other endpoint's (text, input tokens)."""
    dev = Deviations()
    seen = {"chat": {"text": want, "input_tokens": want_tokens}}
    for name, (text, tokens) in others.items():
        seen[name] = {"text": text, "input_tokens": tokens}
        if text == want:
            continue
        if tokens != want_tokens:
            dev.add(f"{name}-template-differs", f"{want_tokens} input tokens (chat)", tokens,
                    note=f"{name}: another prompt ({tokens} input tokens, chat {want_tokens}): {text!r} vs {want!r}")  # fmt: skip
        else:
            dev.add(f"{name}-text-differs", want, text, note=f"{name}: the same {tokens} input tokens, another text")
    note = f"not served: {', '.join(left_out)}" if left_out else ""
    return dev.check(passed(note, texts=seen), note=note)
