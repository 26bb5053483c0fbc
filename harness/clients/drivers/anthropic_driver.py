"""The Anthropic SDK against the engine's Messages endpoint (/v1/messages), as its users call it: `messages.create`,
`messages.stream`, and the beta tool runner with `@beta_tool` functions (the SDK runs the tools and sends the
results back until the model answers)."""

from __future__ import annotations

from typing import Any

import _driver
import anthropic
from anthropic import beta_tool

MAX_TOKENS = _driver.MAX_TOKENS


def _client(args: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=args.base_url, api_key=_driver.API_KEY, max_retries=0, timeout=60)


def _text(blocks: Any) -> str:
    return "".join(b.text for b in blocks if getattr(b, "type", "") == "text")


def messages(args: Any) -> dict[str, Any]:
    m = _client(args).messages.create(model=args.model, max_tokens=MAX_TOKENS,
                                      messages=[{"role": "user", "content": _driver.GREETING}])  # fmt: skip
    return {"text": _text(m.content), "stop_reason": m.stop_reason}


def messages_stream(args: Any) -> dict[str, Any]:
    with _client(args).messages.stream(model=args.model, max_tokens=MAX_TOKENS,
                                       messages=[{"role": "user", "content": _driver.GREETING}]) as s:  # fmt: skip
        text = "".join(s.text_stream)
        final = s.get_final_message()
    return {"text": text, "stop_reason": final.stop_reason}


def _run(args: Any, both: bool) -> dict[str, Any]:
    calls = _driver.Calls()

    @beta_tool
    def get_weather(city: str, unit: str = "celsius") -> str:
        """Get the current weather in a city.

        Args:
            city: The city.
            unit: celsius or fahrenheit.
        """
        return calls.weather(city, unit)

    @beta_tool
    def get_time(timezone: str) -> str:
        """Get the current time in a timezone.

        Args:
            timezone: An IANA timezone.
        """
        return calls.time(timezone)

    runner = _client(args).beta.messages.tool_runner(
        model=args.model, max_tokens=MAX_TOKENS, max_iterations=3,
        tools=[get_weather, get_time] if both else [get_weather],
        messages=[{"role": "user", "content": _driver.QUESTION_BOTH if both else _driver.QUESTION}],
    )  # fmt: skip
    final = runner.until_done()
    return {"text": _text(final.content), "calls": calls.seen, "stop_reason": final.stop_reason}


if __name__ == "__main__":
    raise SystemExit(_driver.main("anthropic", {
        "messages": messages, "messages-stream": messages_stream,
        "messages-tools": lambda a: _run(a, False), "messages-parallel": lambda a: _run(a, True),
    }))  # fmt: skip
