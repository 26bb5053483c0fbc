"""instructor as its users get structured output: `instructor.from_openai(OpenAI(base_url=...))` and
`create(response_model=Item)`, in its default mode (a forced tool call) and in JSON-schema mode (response_format)."""

from __future__ import annotations

from typing import Any

import _driver
import instructor
from openai import OpenAI
from pydantic import BaseModel


class Item(BaseModel):
    name: str
    count: int


def _create(args: Any, mode: Any) -> dict[str, Any]:
    client = instructor.from_openai(
        OpenAI(base_url=args.base_url + "/v1", api_key=_driver.API_KEY, max_retries=0, timeout=60), mode=mode
    )
    item = client.chat.completions.create(model=args.model, response_model=Item, max_retries=0, temperature=0,
                                          max_tokens=_driver.MAX_TOKENS_STRUCTURED, extra_body=_driver.NO_THINKING,
                                          messages=[{"role": "user", "content": _driver.DESCRIBE}])  # fmt: skip
    return {"parsed": item.model_dump()}


if __name__ == "__main__":
    raise SystemExit(_driver.main("instructor", {
        "structured": lambda a: _create(a, instructor.Mode.TOOLS),
        "structured-json": lambda a: _create(a, instructor.Mode.JSON_SCHEMA),
    }))  # fmt: skip
