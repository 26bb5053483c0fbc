"""The OpenAI Agents SDK as its users point it at their own server: tracing off, `set_default_openai_client` with
an AsyncOpenAI on the engine's base_url, an Agent run by `Runner.run` / `Runner.run_streamed`, on the Chat
Completions model (`OpenAIChatCompletionsModel`) or the Responses model (`OpenAIResponsesModel`, the SDK's default
API). Tools are `@function_tool` functions the runner calls itself; `output_type` is the SDK's structured output."""

from __future__ import annotations

from typing import Any

import _driver
from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_default_openai_client,
    set_tracing_disabled,
)
from openai import AsyncOpenAI
from pydantic import BaseModel

MAX_TURNS = 3  # call, result, answer


class Item(BaseModel):
    name: str
    count: int


def _model(args: Any, responses: bool) -> Any:
    client = AsyncOpenAI(base_url=args.base_url + "/v1", api_key=_driver.API_KEY, max_retries=0, timeout=60)
    set_tracing_disabled(True)
    set_default_openai_client(client, use_for_tracing=False)
    if responses:
        return OpenAIResponsesModel(model=args.model, openai_client=client)
    return OpenAIChatCompletionsModel(model=args.model, openai_client=client)


def _agent(args: Any, *, responses: bool = False, tools: list[Any] | None = None, output: Any = None,
           extra: dict[str, Any] | None = None) -> Agent:  # fmt: skip
    settings = ModelSettings(temperature=0, extra_body=extra,
                             max_tokens=_driver.MAX_TOKENS_STRUCTURED if output else _driver.MAX_TOKENS)  # fmt: skip
    return Agent(name="assistant", model=_model(args, responses), tools=tools or [], model_settings=settings,
                 output_type=output)  # fmt: skip


def _tools(calls: _driver.Calls, both: bool) -> list[Any]:
    @function_tool
    def get_weather(city: str, unit: str = "celsius") -> str:
        """Get the current weather in a city."""
        return calls.weather(city, unit)

    @function_tool
    def get_time(timezone: str) -> str:
        """Get the current time in a timezone."""
        return calls.time(timezone)

    return [get_weather, get_time] if both else [get_weather]


async def chat(args: Any, responses: bool = False) -> dict[str, Any]:
    r = await Runner.run(_agent(args, responses=responses), _driver.GREETING, max_turns=MAX_TURNS)
    return {"text": r.final_output}


async def stream(args: Any) -> dict[str, Any]:
    r = Runner.run_streamed(_agent(args), _driver.GREETING, max_turns=MAX_TURNS)
    async for _event in r.stream_events():
        pass
    return {"text": r.final_output}


async def tools(args: Any, both: bool = False, responses: bool = False) -> dict[str, Any]:
    calls = _driver.Calls()
    agent = _agent(args, responses=responses, tools=_tools(calls, both))
    r = await Runner.run(agent, _driver.QUESTION_BOTH if both else _driver.QUESTION, max_turns=MAX_TURNS)
    return {"text": r.final_output, "calls": calls.seen}


async def structured(args: Any) -> dict[str, Any]:
    r = await Runner.run(_agent(args, output=Item, extra=_driver.NO_THINKING), _driver.DESCRIBE, max_turns=MAX_TURNS)
    out = r.final_output
    return {
        "parsed": out.model_dump() if isinstance(out, Item) else None,
        "text": None if isinstance(out, Item) else out,
    }


if __name__ == "__main__":
    raise SystemExit(_driver.main("openai-agents", {
        "chat": chat, "stream": stream, "tools": tools, "parallel": lambda a: tools(a, both=True),
        "structured": structured, "responses": lambda a: chat(a, responses=True),
        "responses-tools": lambda a: tools(a, responses=True),
    }))  # fmt: skip
