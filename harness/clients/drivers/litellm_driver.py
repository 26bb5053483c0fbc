"""LiteLLM's SDK as its users call it: `litellm.completion(model="openai/<model>", api_base=...)`, the engine as an
OpenAI-compatible provider; the tool loop is the user's own (LiteLLM returns the calls, the user answers them)."""

from __future__ import annotations

import json
import os
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # the bundled cost map: nothing fetched at import
os.environ.setdefault("LITELLM_TELEMETRY", "False")

import _driver  # noqa: E402
import litellm  # noqa: E402
from pydantic import BaseModel  # noqa: E402

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Get the weather.",
                                      "parameters": _driver.WEATHER_SCHEMA}},
    {"type": "function", "function": {"name": "get_time", "description": "Get the time.",
                                      "parameters": _driver.TIME_SCHEMA}},
]  # fmt: skip


class Item(BaseModel):
    name: str
    count: int


def _kw(args: Any) -> dict[str, Any]:
    return {"model": f"openai/{args.model}", "api_base": args.base_url + "/v1", "api_key": _driver.API_KEY,
            "temperature": 0, "max_tokens": _driver.MAX_TOKENS, "num_retries": 0, "timeout": 60}  # fmt: skip


def chat(args: Any) -> dict[str, Any]:
    r = litellm.completion(messages=[{"role": "user", "content": _driver.GREETING}], **_kw(args))
    return {"text": r.choices[0].message.content}


def stream(args: Any) -> dict[str, Any]:
    parts = litellm.completion(messages=[{"role": "user", "content": _driver.GREETING}], stream=True, **_kw(args))
    return {"text": "".join(c.choices[0].delta.content or "" for c in parts if c.choices)}


def _loop(args: Any, tools: list[dict[str, Any]], question: str) -> dict[str, Any]:
    messages: list[Any] = [{"role": "user", "content": question}]
    calls: list[list[Any]] = []
    impl = {"get_weather": _driver.get_weather, "get_time": _driver.get_time}
    for _ in range(3):  # call, result, answer: a client that keeps calling is cut here
        msg = litellm.completion(messages=messages, tools=tools, **_kw(args)).choices[0].message
        if not msg.tool_calls:
            return {"text": msg.content, "calls": calls}
        messages.append(msg.model_dump(exclude_none=True))
        for tc in msg.tool_calls:
            arguments = json.loads(tc.function.arguments or "{}")
            calls.append([tc.function.name, arguments])
            messages.append({"role": "tool", "tool_call_id": tc.id, "content": impl[tc.function.name](**arguments)})
    return {"text": None, "calls": calls, "note": "still calling tools after 3 turns"}


def tools(args: Any) -> dict[str, Any]:
    return _loop(args, TOOLS[:1], _driver.QUESTION)


def parallel(args: Any) -> dict[str, Any]:
    return _loop(args, TOOLS, _driver.QUESTION_BOTH)


def structured(args: Any) -> dict[str, Any]:
    r = litellm.completion(messages=[{"role": "user", "content": _driver.DESCRIBE}], response_format=Item,
                           extra_body=_driver.NO_THINKING, **{**_kw(args), "max_tokens": _driver.MAX_TOKENS_STRUCTURED})  # fmt: skip
    return {"parsed": Item.model_validate_json(r.choices[0].message.content or "").model_dump()}


if __name__ == "__main__":
    raise SystemExit(_driver.main("litellm", {"chat": chat, "stream": stream, "tools": tools, "parallel": parallel,
                                   "structured": structured}))  # fmt: skip
