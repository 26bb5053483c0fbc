"""Write the JSON Schemas the `responses.*` and `messages.*` cases validate against, from the official SDKs' own types.

    python scripts/vendor_api_schemas.py        # with openai==3.57.0 and anthropic==2.15.0 installed

Why the SDKs' types: no package on the registries this project reaches carries the Open Responses project's OpenAPI
document (PyPI's `open-responses` is a CLI for a self-hosted server, not the spec), and a client that speaks
`/v1/responses` or `/v1/messages` parses what it receives with exactly these types (pydantic models), so a body they
reject is one a real client cannot read. The files name their source and version; their sha256 is pinned in
harness/conformance/apischema.py (a regenerated file with another hash is refused until the pin is changed on purpose).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import anthropic
import openai
from anthropic.types import Message, RawMessageStreamEvent
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

OUT = Path(__file__).resolve().parent.parent / "harness" / "conformance" / "schemas"


def write(name: str, source: str, version: str, schemas: dict[str, dict]) -> None:
    doc = {"source": source, "version": version, "generated_by": "scripts/vendor_api_schemas.py", "schemas": schemas}
    path = OUT / name
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(path.name, hashlib.sha256(path.read_bytes()).hexdigest())


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    write(f"openai-{openai.__version__}-responses.json", "PyPI openai (openai.types.responses)", openai.__version__,
          {"response": Response.model_json_schema(),
           "stream_event": TypeAdapter(ResponseStreamEvent).json_schema()})  # fmt: skip
    write(f"anthropic-{anthropic.__version__}-messages.json", "PyPI anthropic (anthropic.types)", anthropic.__version__,
          {"message": Message.model_json_schema(),
           "stream_event": TypeAdapter(RawMessageStreamEvent).json_schema()})  # fmt: skip


if __name__ == "__main__":
    main()
