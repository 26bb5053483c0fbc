"""The only place HTTP clients are built, and the one boundary where httpx's exceptions become the harness's.

    with make_sync_client(base_url, api_key=key, timeout=Timeouts(read=10)) as http, wire_errors(base_url):
        r = http.get("/version")                      # a transport failure raises a WireError subclass, one line
    async with make_client(base_url, transport=FastTransport()) as client:   # transports are injected, never chosen here
        ...
    kind = failure_kind(exc)                          # "connect" | "timeout" | "protocol" | "other", for traces

Every client ignores proxy settings from the environment (loopback traffic never goes through a proxy).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import httpx

from harness.errors import WireConnectError, WireError, WireProtocolError, WireTimeout
from harness.net import redact_url

__all__ = [
    "Timeouts",
    "DEFAULT_TIMEOUTS",
    "make_client",
    "make_sync_client",
    "bearer",
    "wire_errors",
    "as_httpx_timeout",
    "failure_kind",
]


@dataclass(frozen=True)
class Timeouts:
    """Per-phase timeouts in seconds (httpx applies `read` per read, not to the whole exchange: bound that apart)."""

    connect: float = 5.0
    read: float = 60.0
    write: float | None = None
    pool: float | None = None

    def to_httpx(self) -> httpx.Timeout:
        return httpx.Timeout(self.read, connect=self.connect, write=self.write if self.write is not None else self.read,
                             pool=self.pool if self.pool is not None else self.read)  # fmt: skip

    @classmethod
    def total(cls, seconds: float) -> Timeouts:
        return cls(connect=min(5.0, seconds), read=seconds)


DEFAULT_TIMEOUTS = Timeouts()


def as_httpx_timeout(t: Timeouts | httpx.Timeout | float | None) -> httpx.Timeout:
    if t is None:
        return DEFAULT_TIMEOUTS.to_httpx()
    if isinstance(t, Timeouts):
        return t.to_httpx()
    if isinstance(t, httpx.Timeout):
        return t
    return httpx.Timeout(float(t))


def bearer(api_key: str | None) -> dict[str, str]:
    """The Authorization header for an API key (none without a key). The one place it is built."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def make_client(
    base_url: str = "",
    *,
    api_key: str | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    timeout: Timeouts | httpx.Timeout | float | None = None,
    max_connections: int = 100,
    headers: dict[str, str] | None = None,
) -> httpx.AsyncClient:
    """The one AsyncClient factory. Tests inject `httpx.MockTransport`; the load runner injects its fast transport."""
    return httpx.AsyncClient(
        base_url=base_url,
        headers={**bearer(api_key), **(headers or {})},
        timeout=as_httpx_timeout(timeout),
        transport=transport,
        limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
        trust_env=False,
    )


def make_sync_client(
    base_url: str = "",
    *,
    api_key: str | None = None,
    transport: httpx.BaseTransport | None = None,
    timeout: Timeouts | httpx.Timeout | float | None = None,
    headers: dict[str, str] | None = None,
) -> httpx.Client:
    """The one Client factory (launch readiness, golden recording, live block checks, registry probes)."""
    return httpx.Client(
        base_url=base_url,
        headers={**bearer(api_key), **(headers or {})},
        timeout=as_httpx_timeout(timeout),
        transport=transport,
        trust_env=False,
    )


def failure_kind(exc: BaseException) -> str:
    """What kind of transport failure an httpx exception is:
    unsent    the client gave up before any connection (connect or pool timeout): this process, not the server
    connect   the connection was refused
    timeout   a read or write timed out
    protocol  not HTTP, bad framing, or the connection broke (reset) mid-exchange
    other     anything else httpx raises"""
    if isinstance(exc, (httpx.ConnectTimeout, httpx.PoolTimeout)):
        return "unsent"
    if isinstance(exc, httpx.ConnectError):
        return "connect"
    if isinstance(exc, httpx.TimeoutException):
        return "timeout"
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.LocalProtocolError, httpx.ReadError, httpx.WriteError,
                        httpx.DecodingError)):  # fmt: skip
        return "protocol"
    return "other"


_ERRORS = {
    "unsent": WireConnectError,
    "connect": WireConnectError,
    "timeout": WireTimeout,
    "protocol": WireProtocolError,
    "other": WireError,
}


@contextlib.contextmanager
def wire_errors(where: str = "") -> Iterator[None]:
    """Map httpx exceptions raised inside to the harness's WireError tree (one line, URL redacted)."""
    try:
        yield
    except httpx.HTTPError as exc:
        kind = failure_kind(exc)
        at = f" ({redact_url(where)})" if where else ""
        raise _ERRORS[kind](f"{kind} failure{at}: {type(exc).__name__}: {exc}") from None
