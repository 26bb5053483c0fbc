"""The loopback recording proxy a client driver talks to: a small HTTP/1.1 server on 127.0.0.1 (h11, the parser
under httpx) that forwards every request to the server checked through a client of the case's context
(`Ctx.new_client`), so each exchange passes the harness's one evidence seam (harness.conformance.evidence) and is
saved as the case's own, and a re-judge answers it from the saved evidence the same way.

    async with LoopbackProxy(ctx.new_client(ctx.api_key), case_id) as proxy:
        ...driver --base-url proxy.base_url...

The driver never holds the run's key: its own Authorization / x-api-key is dropped here and the context's client
sends the run's. Accept-Encoding is dropped too (the evidence keeps plain bytes). Bounded: a request head of 64 KiB,
a request body of 8 MiB, at most MAX_EXCHANGES requests per proxy; the response streams through as it arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import h11
import httpx

from harness.conformance.evidence import current_case, end_case

__all__ = ["LoopbackProxy", "MAX_REQUEST_BYTES", "MAX_EXCHANGES"]

MAX_REQUEST_BYTES = 8 << 20
MAX_HEAD_BYTES = 64 << 10
MAX_EXCHANGES = 64  # a driver's tool loop makes a handful; a client that loops is cut off
HOST = "127.0.0.1"
_DROP_REQUEST = frozenset({"host", "content-length", "transfer-encoding", "connection", "keep-alive", "authorization",
                           "x-api-key", "api-key", "accept-encoding", "proxy-authorization", "upgrade", "te"})  # fmt: skip
_DROP_RESPONSE = frozenset({"content-length", "transfer-encoding", "connection", "keep-alive"})


class LoopbackProxy:
    def __init__(self, client: httpx.AsyncClient, case_id: str) -> None:
        self.client = client
        self.case_id = case_id
        self.exchanges = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    async def __aenter__(self) -> LoopbackProxy:
        self._server = await asyncio.start_server(self._connection, HOST, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        await self.client.aclose()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        token = current_case(self.case_id)  # every exchange this connection forwards is the case's evidence
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        try:
            while await self._one(conn, reader, writer):
                conn.start_next_cycle()
        except (h11.ProtocolError, ConnectionError, asyncio.IncompleteReadError):
            pass  # a client that broke the connection or spoke no HTTP: nothing more to forward
        except Exception:  # noqa: BLE001 - anything else breaking a forward: the driver sees the connection end
            pass
        finally:
            end_case(token)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            if task is not None:
                self._tasks.discard(task)

    async def _next(self, conn: h11.Connection, reader: asyncio.StreamReader) -> Any:
        while True:
            event = conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            conn.receive_data(await reader.read(65536))

    async def _one(self, conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Forward one request; False when the connection is done."""
        request = await self._next(conn, reader)
        if not isinstance(request, h11.Request):
            return False
        body = bytearray()
        while True:
            event = await self._next(conn, reader)
            if isinstance(event, h11.Data):
                body += event.data
                if len(body) > MAX_REQUEST_BYTES:
                    await self._refuse(conn, writer, 413, f"request body over {MAX_REQUEST_BYTES} bytes")
                    return False
            elif isinstance(event, h11.EndOfMessage):
                break
            else:
                return False
        self.exchanges += 1
        if self.exchanges > MAX_EXCHANGES:
            await self._refuse(conn, writer, 429, f"the harness forwards at most {MAX_EXCHANGES} requests per case")
            return False
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers
                   if k.decode("latin-1").lower() not in _DROP_REQUEST]  # fmt: skip
        req = self.client.build_request(request.method.decode("ascii"), request.target.decode("latin-1"),
                                        headers=headers, content=bytes(body))  # fmt: skip
        try:
            resp = await self.client.send(req, stream=True)
        except httpx.HTTPError as exc:
            await self._refuse(conn, writer, 502, f"the harness could not reach the server: {type(exc).__name__}")
            return False
        try:
            out = [(k, v) for k, v in resp.headers.multi_items() if k.lower() not in _DROP_RESPONSE]
            writer.write(conn.send(h11.Response(status_code=resp.status_code, headers=out)) or b"")
            await writer.drain()
            async for chunk in resp.aiter_raw():
                writer.write(conn.send(h11.Data(data=chunk)) or b"")
                await writer.drain()
            writer.write(conn.send(h11.EndOfMessage()) or b"")
            await writer.drain()
        except httpx.HTTPError:
            return False  # the server broke off mid-body: so does the proxy (the client sees a cut stream)
        finally:
            await resp.aclose()
        return conn.our_state is h11.DONE and conn.their_state is h11.DONE

    async def _refuse(self, conn: h11.Connection, writer: asyncio.StreamWriter, status: int, why: str) -> None:
        data = why.encode()
        with contextlib.suppress(h11.LocalProtocolError, ConnectionError):
            writer.write(conn.send(h11.Response(status_code=status, headers=[("content-length", str(len(data))),
                                                                              ("connection", "close")])) or b"")  # fmt: skip
            writer.write(conn.send(h11.Data(data=data)) or b"")
            writer.write(conn.send(h11.EndOfMessage()) or b"")
            await writer.drain()
