"""What a live case gets: the client, the target, the expectations, and memoised probes (shared request traces).

Every exchange a case makes through the context is bounded: at most `max_stream_bytes` of body and `max_stream_s` of
wall time (a server that stalls, drips or never ends its stream costs one bound, not an hour or the machine's memory).
A probe runs once per suite even when the case that started it times out: the others wait for the same request.

A gateway in front of an engine (`conform --url GATEWAY --engine-url ENGINE`): every request a case sends goes to
the gateway (`client`, `new_client`), what a case reads of the engine's own state (`/metrics` scrapes, the engine
death case's health polls) goes to the engine behind it (`engine_client`, `new_engine_client`). Without an engine URL
both are the one server checked.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from harness.client import DEFAULT_TIMEOUT, Trace, make_client, record
from harness.conformance.evidence import EvidenceRecorder, probe_scope
from harness.conformance.expectations import Expectations
from harness.engines.profile import OPENAI_LIVENESS, EngineProfile, LivenessCheck
from harness.metrics import Scrape, parse_metrics
from harness.models.families import FAMILIES, HERMES, Family, family_of_source
from harness.net import redact_url

__all__ = ["Ctx", "PROBES", "probe", "MAX_STREAM_BYTES", "MAX_STREAM_S", "MAX_MODELS_BYTES"]

MAX_STREAM_BYTES = 4 << 20  # a conformance response is a few KB; 4 MiB is generous and keeps traces small
MAX_STREAM_S = 45.0  # below the default case timeout (60 s), so a bounded probe is memoised, not re-sent
# GET /v1/models: a gateway lists thousands of models (~200 bytes each, 50 000 in 10 MiB); bounded all the same
MAX_MODELS_BYTES = 16 << 20

PROBES: dict[str, Callable[[Ctx], Awaitable[Trace]]] = {}


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
    max_stream_bytes: int = MAX_STREAM_BYTES
    max_stream_s: float = MAX_STREAM_S
    answered: bool = False  # some request got an HTTP response: a server is there
    first_error: str = ""  # the transport error of the first request that got none
    evidence: EvidenceRecorder | None = None  # when set, every exchange of every client built here is saved
    engine_url: str = ""  # the engine behind a gateway at base_url ("" when base_url is the engine itself)
    engine_api_key: str | None = None  # the key the engine behind the gateway wants (its own, not the gateway's)
    scripted_model: bool | None = None  # the server serves the scripted model (`--scripted`); None: the manifest says
    scripted_family: str | None = None  # its parser family (a saved run's); None: the manifest's, else hermes
    # what the server provides beyond an engine (`Case.needs`): "scripted-model" when the manifest's model is one
    provides: frozenset[str] = frozenset()
    _client: httpx.AsyncClient | None = None
    _engine_client: httpx.AsyncClient | None = None
    _probes: dict[str, Trace] = field(default_factory=dict)
    _tasks: dict[str, asyncio.Task] = field(default_factory=dict)

    @property
    def limits(self) -> dict[str, Any]:
        """Keyword arguments that bound one `record` call."""
        return {"max_bytes": self.max_stream_bytes, "max_duration_s": self.max_stream_s}

    def _timeout(self) -> httpx.Timeout:
        read = min(DEFAULT_TIMEOUT.read or self.max_stream_s, self.max_stream_s)
        return httpx.Timeout(read, connect=min(DEFAULT_TIMEOUT.connect or read, read))

    def _transport(self) -> httpx.AsyncBaseTransport | None:
        """The transport a new client gets: the injected one, wrapped by the evidence recorder when there is one
        (each client its own pool, as `make_client` would build it)."""
        if self.evidence is None:
            return self.transport
        pool = httpx.Limits(max_connections=100, max_keepalive_connections=100)
        return self.evidence.transport(self.transport, limits=pool, trust_env=False)

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = make_client(self.base_url, api_key=self.api_key, transport=self._transport(),
                                       timeout=self._timeout())  # fmt: skip
        return self._client

    def new_client(self, api_key: str | None = None, timeout: float | httpx.Timeout | None = None) -> httpx.AsyncClient:
        kw: dict[str, Any] = {"api_key": api_key, "transport": self._transport(), "timeout": self._timeout()}
        if timeout is not None:
            kw["timeout"] = timeout
        return make_client(self.base_url, **kw)

    @property
    def scripted(self) -> bool:
        """The server serves the embedded scripted model, so the tools.* and reasoning.* cases know what it says:
        told (`--scripted`, a saved run), else the launched manifest's model.source."""
        if self.scripted_model is not None:
            return self.scripted_model
        if "scripted-model" in self.provides:  # harness.conformance.case.SCRIPTED_MODEL (that module stands above)
            return True
        return family_of_source(self._model_source()) is not None

    def _model_source(self) -> object:
        manifest = getattr(getattr(self.engine, "spec", None), "manifest", None)
        return getattr(getattr(manifest, "model", None), "source", None)

    @property
    def family(self) -> Family | None:
        """The parser family of the scripted model served (harness.models.families), None on any other model: told
        (a saved run's), else the launched manifest's model.source, else the default scripted model's (hermes)."""
        if not self.scripted:
            return None
        if self.scripted_family in FAMILIES:
            return FAMILIES[self.scripted_family]
        return family_of_source(self._model_source()) or HERMES

    @property
    def scripted_reasoning(self) -> bool:
        """The scripted model served reasons in <think> blocks, so the reasoning.* cases know its reasoning text."""
        fam = self.family
        return fam is not None and fam.reasoning

    @property
    def behind_gateway(self) -> bool:
        """base_url is a gateway, and the engine's own state is read at `engine_url`."""
        return bool(self.engine_url)

    @property
    def engine_client(self) -> httpx.AsyncClient:
        """The client for what a case reads of the engine's own state (its /metrics): the engine behind a gateway,
        else the server checked (the same client as `client`)."""
        if not self.behind_gateway:
            return self.client
        if self._engine_client is None:
            self._engine_client = self.new_engine_client()
        return self._engine_client

    def new_engine_client(self, timeout: float | httpx.Timeout | None = None) -> httpx.AsyncClient:
        """A client of its own for the engine (behind the gateway, or the server checked)."""
        if not self.behind_gateway:
            return self.new_client(self.api_key, timeout=timeout)
        return make_client(self.engine_url, api_key=self.engine_api_key, transport=self._transport(),
                           timeout=timeout if timeout is not None else self._timeout())  # fmt: skip

    def engine_side(self) -> str:
        """How a note names where the engine's state was read: " (at the engine behind the gateway, URL)" or ""."""
        return f" (at the engine behind the gateway, {redact_url(self.engine_url)})" if self.behind_gateway else ""

    async def aclose(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        for task in self._tasks.values():
            try:
                await task
            except BaseException:  # noqa: BLE001 - a cancelled or failed probe has nothing left to report
                pass
        self._tasks.clear()
        for name in ("_client", "_engine_client"):
            c = getattr(self, name)
            if c is not None:
                await c.aclose()
                setattr(self, name, None)

    def saw(self, trace: Trace) -> Trace:
        """Note whether a server answered at all (so a dead port is not reported as an engine that died)."""
        if trace.status is not None:
            self.answered = True
        elif trace.error and not self.first_error:
            self.first_error = trace.error
        return trace

    async def record(self, client: httpx.AsyncClient, method: str, path: str, **kw: Any) -> Trace:
        """`harness.client.record` with this suite's bounds (a caller may tighten them).

        One retry, on a fresh connection, when the server closed (or reset) a pooled keep-alive connection before
        answering anything (RFC 9112 9.3.1: the request was never read). Some servers (llama.cpp's) close the connection after
        every streamed response without `Connection: close`; pooled clients then fail their next request. The case
        `http.keepalive-after-stream` judges that behaviour; every other case judges the answer to its own request."""
        trace = await record(client, method, path, **{**self.limits, **kw})
        for _ in range(2):  # each failure drops one stale connection from the pool
            # no status line and the connection broke: closed ("without sending a response") or reset (vLLM
            # 0.18.1-0.25.1 reset a connection whose previous handler raised after its 400 was sent)
            if not (trace.status is None and trace.failure == "protocol" and not trace.headers):
                break
            first_error = trace.retried or str(trace.error)
            trace = await record(client, method, path, **{**self.limits, **kw})
            trace.retried = first_error
        return self.saw(trace)

    def extra(self, key: str) -> dict:
        """Engine-specific request extras declared in the expectation file (data, not code)."""
        v = self.exp.probes.get(key) or {}
        return dict(v) if isinstance(v, dict) else {}

    async def post(self, path: str, body: Any, **kw: Any) -> Trace:
        return await self.record(self.client, "POST", path, json=body, **kw)

    async def get(self, path: str, **kw: Any) -> Trace:
        return await self.record(self.client, "GET", path, **kw)

    async def _run_probe(self, name: str) -> Trace:
        probe_scope(name)  # inside the probe's own task: its exchanges are the probe's evidence, saved once
        return await PROBES[name](self)

    async def probe(self, name: str) -> Trace:
        if self.evidence is not None:
            self.evidence.read_probe(name)
        if name in self._probes:
            return self._probes[name]
        task = self._tasks.get(name)
        if task is None:
            task = self._tasks[name] = asyncio.ensure_future(self._run_probe(name))
        # shield: a case that times out while waiting must not cancel the request the next case will share
        trace = await asyncio.shield(task)
        self._probes[name] = trace
        return trace

    async def scrape(self) -> Scrape:
        """The engine's /metrics (behind a gateway: at the engine, not through the gateway)."""
        t = await self.record(self.engine_client, "GET", "/metrics", sse=False)
        if t.status is None or t.ended != "eof":  # no answer, or cut off (timeout, limit, reset): not a whole scrape
            return Scrape(ok=False, error=t.error or "no response", t_ns=time.monotonic_ns())
        text = t.body.decode("utf-8", errors="replace")
        if t.status != 200:
            return Scrape(
                ok=False, error=f"HTTP {t.status}", text=text[:500], status=t.status, t_ns=time.monotonic_ns()
            )
        s = parse_metrics(text)
        s.status = t.status
        return s

    def chat(self, **kw: Any) -> dict:
        body = {"model": self.model, "messages": [{"role": "user", "content": "Say hello."}], "temperature": 0}
        body.update(kw)
        return body

    def completion(self, **kw: Any) -> dict:
        body = {"model": self.model, "prompt": "Once upon a time", "temperature": 0}
        body.update(kw)
        return body

    @property
    def profile(self) -> EngineProfile | None:
        """The profile of the server checked: the launched engine's, else that of the expectation file's engine kind;
        None for a server no profile describes (`--url` with `--expect openai`) and for a gateway (its wire is not
        the engine's: no profile says what its /health or identity endpoint is)."""
        from harness.engines import PROFILES

        if self.behind_gateway:
            return None
        launched = getattr(getattr(self.engine, "spec", None), "profile", None)
        if isinstance(launched, EngineProfile):
            return launched
        return PROFILES.get(str(self.exp.engine.get("kind") or ""))

    def liveness(self) -> tuple[LivenessCheck, str]:
        """The check that says whether the server is still there after a failed case, and how reports name it: the
        profile's, else the request every OpenAI-compatible server answers."""
        p = self.profile
        if p is None:
            who = "a gateway: no engine profile describes it" if self.behind_gateway else "no engine profile"
            return OPENAI_LIVENESS, f"{OPENAI_LIVENESS} ({who})"
        return p.liveness, f"{p.liveness} ({p.title} profile)"

    def engine_dead(self) -> bool:
        if self.engine is None:
            return False
        try:
            return self.engine.exit_status() is not None
        except Exception:
            return False
