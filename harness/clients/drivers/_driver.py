"""What every client driver shares. A driver is run with its client's own interpreter (never the harness's):

    python -E -s DRIVER --base-url URL --model NAME --feature FEATURE

and prints exactly one JSON line on stdout, the client's own result or its exception:

    {"ok": true, "client": "litellm 1.110.2", "text": "...", "calls": [["get_weather", {...}]], "parsed": {...}}
    {"ok": false, "client": "...", "error": {"type": "BadRequestError", "message": "...", "status": 400}}

It imports nothing of the harness (the client's environment does not have it). The tools are the scripted model's:
get_weather and get_time, answered with fixed text.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import inspect
import json
import sys
from collections.abc import Callable
from typing import Any

MESSAGE_CHARS = 2000  # of an exception's text: the harness bounds the whole line again
API_KEY = "harness-client-key"  # never a real key: the harness's loopback proxy puts the run's own on the wire
QUESTION = "What is the weather in Paris?"
QUESTION_BOTH = "What is the weather and the time in Paris?"
GREETING = "Say hello."
DESCRIBE = "Describe an item as JSON."
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city"],
}
TIME_SCHEMA = {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]}
NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}
# the longest script is 24 tokens; the scripted manifests serve 2048 tokens of context, and a client's own tool
# schemas plus the template's tool preamble and both results of a parallel call take up to ~1260 of them
MAX_TOKENS = 64
MAX_TOKENS_STRUCTURED = 128  # a constrained document is written by the weights outside the scripts


def get_weather(city: str, unit: str = "celsius") -> str:
    """Get the current weather in a city."""
    return f"18 degrees {unit.capitalize()} in {city}"


def get_time(timezone: str) -> str:
    """Get the current time in a timezone."""
    return f"12:00 in {timezone}"


class Calls:
    """The tool calls a client made, in order, as [name, arguments]."""

    def __init__(self) -> None:
        self.seen: list[list[Any]] = []

    def weather(self, city: str, unit: str = "celsius") -> str:
        self.seen.append(["get_weather", {"city": city, "unit": unit}])
        return get_weather(city, unit)

    def time(self, timezone: str) -> str:
        self.seen.append(["get_time", {"timezone": timezone}])
        return get_time(timezone)


def _status(exc: BaseException) -> int | None:
    for name in ("status_code", "status"):
        value = getattr(exc, name, None)
        if isinstance(value, int) and 100 <= value <= 599:
            return value
    return None


def _error(exc: BaseException) -> dict[str, Any]:
    """The exception as the client raised it: its type, text, HTTP status; the cause when the client wraps one."""
    err: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)[:MESSAGE_CHARS]}
    status = _status(exc)
    cause = exc.__cause__ or exc.__context__
    if status is None and cause is not None:
        status = _status(cause)
    if status is not None:
        err["status"] = status
    if cause is not None and cause is not exc:
        err["cause"] = {"type": type(cause).__name__, "message": str(cause)[:MESSAGE_CHARS]}
    return err


def main(distribution: str, features: dict[str, Callable[[argparse.Namespace], Any]]) -> int:
    """Run the feature named on the command line; print its result (or the exception it raised) as one JSON line."""
    client = f"{distribution} {importlib.metadata.version(distribution)}"
    p = argparse.ArgumentParser()
    p.add_argument("--base-url", required=True)  # the engine's root (the harness's loopback proxy), no /v1
    p.add_argument("--model", required=True)
    p.add_argument("--feature", required=True, choices=sorted(features))
    args = p.parse_args()
    try:
        result = features[args.feature](args)
        if inspect.isawaitable(result):
            result = asyncio.run(result)  # type: ignore[arg-type]
        out: dict[str, Any] = {"ok": True, "client": client, **result}
    except BaseException as exc:  # noqa: BLE001 - the client's own exception is the result
        out = {"ok": False, "client": client, "error": _error(exc)}
    sys.stdout.write(json.dumps(out, default=repr) + "\n")
    sys.stdout.flush()
    return 0
