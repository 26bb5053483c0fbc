"""What a live case gets: the client, the target, the expectations, and memoised probes (shared request traces)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import httpx

from harness.client import Trace, make_client, record
from harness.conformance.expectations import Expectations
from harness.promtext import Scrape, fetch_metrics

__all__ = ["Ctx", "PROBES", "probe"]

PROBES: dict[str, Callable[["Ctx"], Awaitable[Trace]]] = {}


def probe(name: str):
    """Register a named request whose trace several cases share (run once per suite)."""

    def deco(fn):
        PROBES[name] = fn
        return fn

    return deco


@dataclass
class Ctx:
    base_url: str
    exp: Expectations
    model: str = ""
    api_key: str | None = None
    engine: Any = None  # a launched Engine (exit_status/log_tail) or None when attached by URL
    transport: httpx.AsyncBaseTransport | None = None
    _client: httpx.AsyncClient | None = None
    _probes: dict[str, Trace] = field(default_factory=dict)
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict)

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = make_client(self.base_url, api_key=self.api_key, transport=self.transport)
        return self._client

    def new_client(self, api_key: str | None = None, timeout: float | httpx.Timeout | None = None) -> httpx.AsyncClient:
        kw: dict[str, Any] = {"api_key": api_key, "transport": self.transport}
        if timeout is not None:
            kw["timeout"] = timeout
        return make_client(self.base_url, **kw)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def extra(self, key: str) -> dict:
        """Engine-specific request extras declared in the expectation file (data, not code)."""
        v = self.exp.probes.get(key) or {}
        return dict(v) if isinstance(v, dict) else {}

    async def post(self, path: str, body: Any, **kw: Any) -> Trace:
        return await record(self.client, "POST", path, json=body, **kw)

    async def get(self, path: str, **kw: Any) -> Trace:
        return await record(self.client, "GET", path, **kw)

    async def probe(self, name: str) -> Trace:
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            if name not in self._probes:
                self._probes[name] = await PROBES[name](self)
            return self._probes[name]

    async def scrape(self) -> Scrape:
        return await fetch_metrics(self.client)

    def chat(self, **kw: Any) -> dict:
        body = {"model": self.model, "messages": [{"role": "user", "content": "Say hello."}], "temperature": 0}
        body.update(kw)
        return body

    def completion(self, **kw: Any) -> dict:
        body = {"model": self.model, "prompt": "Once upon a time", "temperature": 0}
        body.update(kw)
        return body

    def engine_dead(self) -> bool:
        if self.engine is None:
            return False
        try:
            return self.engine.exit_status() is not None
        except Exception:
            return False
