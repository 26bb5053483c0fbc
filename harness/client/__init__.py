"""The one HTTP client seam: clients are built only in `http.py` (proxies ignored, transports injected, httpx errors mapped
once); `trace.py` records every exchange as raw, timestamped events."""

from harness.client.http import (
    DEFAULT_TIMEOUTS,
    Timeouts,
    bearer,
    failure_kind,
    make_client,
    make_sync_client,
    wire_errors,
)
from harness.client.trace import DEFAULT_TIMEOUT, MAX_BODY, Trace, TraceEvent, record

__all__ = [
    "DEFAULT_TIMEOUT",
    "DEFAULT_TIMEOUTS",
    "MAX_BODY",
    "Timeouts",
    "Trace",
    "TraceEvent",
    "bearer",
    "failure_kind",
    "make_client",
    "make_sync_client",
    "record",
    "wire_errors",
]
