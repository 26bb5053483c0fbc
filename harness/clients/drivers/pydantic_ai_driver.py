"""pydantic-ai with the engine as an OpenAI-compatible provider (`OpenAIProvider(base_url=...)` under
`OpenAIChatModel`), as its users run an Agent: `run_sync`, `run_stream`, plain tools the agent calls itself, and
`output_type` for structured output (pydantic-ai's default: an output tool)."""

from __future__ import annotations

from typing import Any

import _driver
from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.usage import UsageLimits

LIMITS = UsageLimits(request_limit=3)  # call, result, answer


class Item(BaseModel):
    name: str
    count: int


def _agent(args: Any, **kw: Any) -> Agent:
    provider = OpenAIProvider(base_url=args.base_url + "/v1", api_key=_driver.API_KEY)
    model = OpenAIChatModel(args.model, provider=provider)
    tokens = _driver.MAX_TOKENS_STRUCTURED if "output_type" in kw else _driver.MAX_TOKENS
    return Agent(model, model_settings={"temperature": 0, "max_tokens": tokens}, **kw)


def chat(args: Any) -> dict[str, Any]:
    return {"text": _agent(args).run_sync(_driver.GREETING, usage_limits=LIMITS).output}


async def stream(args: Any) -> dict[str, Any]:
    async with _agent(args).run_stream(_driver.GREETING, usage_limits=LIMITS) as s:
        text = await s.get_output()
    return {"text": text}


def tools(args: Any, both: bool = False) -> dict[str, Any]:
    calls = _driver.Calls()
    agent = _agent(args)

    @agent.tool_plain
    def get_weather(city: str, unit: str = "celsius") -> str:
        """Get the current weather in a city."""
        return calls.weather(city, unit)

    if both:

        @agent.tool_plain
        def get_time(timezone: str) -> str:
            """Get the current time in a timezone."""
            return calls.time(timezone)

    r = agent.run_sync(_driver.QUESTION_BOTH if both else _driver.QUESTION, usage_limits=LIMITS)
    return {"text": r.output, "calls": calls.seen}


def structured(args: Any) -> dict[str, Any]:
    r = _agent(args, output_type=Item).run_sync(_driver.DESCRIBE, usage_limits=LIMITS)
    return {"parsed": r.output.model_dump()}


if __name__ == "__main__":
    raise SystemExit(_driver.main("pydantic-ai-slim", {
        "chat": chat, "stream": stream, "tools": tools, "parallel": lambda a: tools(a, both=True),
        "structured": structured,
    }))  # fmt: skip
