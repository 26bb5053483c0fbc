"""Conformance test fixtures. `live` is the real engine: the session `vllm_engine`, or HARNESS_CONFORM_URL when set
(a vLLM you started by hand on 127.0.0.1 while developing)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tgi-3.3.5"
STREAMED = sorted(p for p in FIXTURES.glob("*.json") if p.name != "test_flash_llama_simple.json")


@dataclass
class Live:
    base_url: str
    model: str
    api_key: str | None = None
    engine: object = None


@pytest.fixture(scope="session")
def live(request) -> Live:
    url = os.environ.get("HARNESS_CONFORM_URL")
    if url:
        return Live(url.rstrip("/"), os.environ.get("HARNESS_CONFORM_MODEL", "tiny"))
    eng = request.getfixturevalue("vllm_engine")
    return Live(eng.base_url, eng.served_name, eng.api_key, eng)
