"""An `httpx2` client whose every request goes through one of this seam's `httpx` clients.

Newer SDKs (anthropic 2.x) accept only an `httpx2.AsyncClient`. Giving them one built on `Httpx2Bridge` keeps what the
seam guarantees: the harness's own client (`make_client`: proxies ignored, the injected transport, the evidence
recorder) sends the bytes, so a case that uses such an SDK is recorded, bounded and re-judgeable like any other.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import httpx2

__all__ = ["Httpx2Bridge", "httpx2_client"]


class _Body(httpx2.AsyncByteStream):
    def __init__(self, response: httpx.Response) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.aiter_raw():
                yield chunk
        except httpx.TimeoutException as exc:
            raise httpx2.ReadTimeout(str(exc)) from exc
        except httpx.HTTPError as exc:
            raise httpx2.ReadError(str(exc)) from exc

    async def aclose(self) -> None:
        await self._response.aclose()


class Httpx2Bridge(httpx2.AsyncBaseTransport):
    def __init__(self, client: httpx.AsyncClient) -> None:
        self._client = client

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()
        out = self._client.build_request(request.method, str(request.url), headers=list(request.headers.multi_items()),
                                         content=body)  # fmt: skip
        try:
            response = await self._client.send(out, stream=True)
        except httpx.ConnectError as exc:
            raise httpx2.ConnectError(str(exc)) from exc
        except httpx.TimeoutException as exc:
            raise httpx2.TimeoutException(str(exc)) from exc
        except httpx.HTTPError as exc:
            raise httpx2.NetworkError(str(exc)) from exc
        return httpx2.Response(response.status_code, headers=list(response.headers.multi_items()),
                               stream=_Body(response), request=request)  # fmt: skip

    async def aclose(self) -> None:
        await self._client.aclose()


def httpx2_client(client: httpx.AsyncClient, **kw: Any) -> httpx2.AsyncClient:
    """An httpx2 client for an SDK, sending through `client` (never the environment's proxies)."""
    return httpx2.AsyncClient(transport=Httpx2Bridge(client), trust_env=False, timeout=client.timeout.read, **kw)
