"""A lean HTTP/1.1 transport for httpx, used by the load runner's hot path.

httpx's default transport (httpcore + h11) decodes a chunked body one HTTP chunk at a time in Python; vLLM writes one
HTTP chunk per SSE event, so that costs ~40 µs per token chunk and capped the client at ~21,000 chunks/s on two shared
cores. This transport keeps httpx's API (`make_client(url, transport=FastTransport())`, requests, responses, timeouts as
exceptions) but reads the socket in 64 KiB blocks and de-chunks a whole block at once, so the runner sees one body
piece per socket read (which is also the finest arrival time a client can honestly claim).

Plain `http://` only, keep-alive pool per host:port, no proxies, no compression (it sends `accept-encoding: identity`).
Whatever the server sends, a malformed reply (not HTTP, a bad status line, header or chunk-size line, headers past
`MAX_HEAD_BYTES`) is an `httpx.RemoteProtocolError`, and a socket failure an `httpx.ConnectError`/`ReadError`/timeout,
never another exception: it is injected through `harness.client.make_client`, and the runner names what failed with
`harness.client.failure_kind`.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

import httpx

__all__ = ["FastTransport"]

_READ = 1 << 16
MAX_HEAD_BYTES = 64 << 10  # status line + headers; a real server sends well under 8 KiB
MAX_CHUNK_LINE = 1024  # a chunk-size line (hex size, optional extensions)


def _protocol_error(message: str) -> httpx.RemoteProtocolError:
    return httpx.RemoteProtocolError(f"malformed HTTP reply: {message}")


def _chunk_size(line: bytes) -> int:
    text = line.split(b";", 1)[0].strip()
    if not text or len(text) > 16 or any(c not in b"0123456789abcdefABCDEF" for c in text):
        raise _protocol_error(f"bad chunk-size line {line[:40]!r}")
    return int(text, 16)


class _Conn:
    __slots__ = ("reader", "writer", "key")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, key):
        self.reader, self.writer, self.key = reader, writer, key

    def close(self) -> None:
        try:
            self.writer.close()
        except Exception:
            pass


class _Body(httpx.AsyncByteStream):
    """Yields de-chunked body bytes, one piece per socket read; returns the connection to the pool when complete."""

    def __init__(
        self,
        transport: FastTransport,
        conn: _Conn,
        rest: bytes,
        chunked: bool,
        length: int | None,
        keep: bool,
        read_timeout: float | None,
    ):
        self.t, self.conn, self.rest, self.chunked, self.length = transport, conn, rest, chunked, length
        self.keep, self.timeout, self.done = keep, read_timeout, False

    async def _read(self) -> bytes:
        try:
            if self.timeout is None:
                return await self.conn.reader.read(_READ)
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancel that arrives as the read completes
            async with asyncio.timeout(self.timeout):
                return await self.conn.reader.read(_READ)
        except TimeoutError:
            raise httpx.ReadTimeout("read timed out") from None
        except OSError as exc:  # a reset mid-body: httpx's name for it, as its own transport says
            raise httpx.ReadError(str(exc)) from exc

    async def __aiter__(self):
        buf, reader_read = self.rest, self._read
        self.rest = b""
        if not self.chunked:
            remaining = self.length
            while True:
                if buf:
                    if remaining is not None:
                        buf = buf[:remaining]
                        remaining -= len(buf)
                    yield buf
                if remaining == 0:
                    self.done = True
                    return
                buf = await reader_read()
                if not buf:
                    if remaining is None:  # close-delimited body
                        self.done, self.keep = True, False
                        return
                    raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")
        # chunked: `need` = bytes left in the current chunk's data; `pending` = an incomplete chunk header/trailer
        need, pending, trailer = 0, b"", False
        while True:
            if buf:
                out = []
                data = pending + buf if pending else buf
                pending = b""
                i, n = 0, len(data)
                while i < n:
                    if need > 0:
                        take = min(need, n - i)
                        out.append(data[i : i + take])
                        i += take
                        need -= take
                        if need == 0:
                            need = -2  # expect CRLF after the data
                        continue
                    if need < 0:  # skip the CRLF after data
                        skip = min(-need, n - i)
                        i += skip
                        need += skip
                        continue
                    j = data.find(b"\r\n", i)
                    if j < 0:
                        pending = data[i:]
                        if len(pending) > MAX_CHUNK_LINE:
                            raise _protocol_error("chunk-size line too long")
                        break
                    if trailer:
                        if j == i:  # blank line: end of message
                            self.done = True
                            if out:
                                yield b"".join(out)
                            return
                        i = j + 2
                        continue
                    if j - i > MAX_CHUNK_LINE:
                        raise _protocol_error("chunk-size line too long")
                    size = _chunk_size(data[i:j])
                    i = j + 2
                    if size == 0:
                        trailer = True
                    else:
                        need = size
                if out:
                    yield out[0] if len(out) == 1 else b"".join(out)
            buf = await reader_read()
            if not buf:
                raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")

    async def aclose(self) -> None:
        if self.done and self.keep:
            self.t._release(self.conn)
        else:
            self.conn.close()


def _parse_head(raw_head: bytes) -> tuple[int, list, bool, int | None, bool]:
    """(status, headers, chunked, content-length, keep-alive) from the status line and headers, or RemoteProtocolError."""
    hl = raw_head.decode("latin-1").split("\r\n")
    parts = hl[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or len(parts[1]) != 3 or not parts[1].isdigit():
        raise _protocol_error(f"not an HTTP/1.x status line: {hl[0][:60]!r}")
    status = int(parts[1])
    if status < 100:
        raise _protocol_error(f"status {status}")
    headers = []
    chunked, length, keep = False, None, True
    for line in hl[1:]:
        k, sep, v = line.partition(":")
        if not sep or not k.strip():
            raise _protocol_error(f"bad header line {line[:60]!r}")
        k, v = k.strip(), v.strip()
        headers.append((k, v))
        lk = k.lower()
        if lk == "transfer-encoding" and "chunked" in v.lower():
            chunked = True
        elif lk == "content-length":
            if not v.isdigit() or len(v) > 18:
                raise _protocol_error(f"bad content-length {v[:40]!r}")
            length = int(v)
        elif lk == "connection" and v.lower() == "close":
            keep = False
    return status, headers, chunked, length, keep


class FastTransport(httpx.AsyncBaseTransport):
    def __init__(self, max_idle: int = 4096):
        self._idle: dict[tuple, list[_Conn]] = defaultdict(list)
        self._max_idle = max_idle

    def _release(self, conn: _Conn) -> None:
        pool = self._idle[conn.key]
        if len(pool) < self._max_idle:
            pool.append(conn)
        else:
            conn.close()

    async def _connect(self, key, timeout: float | None) -> tuple[_Conn, bool]:
        pool = self._idle.get(key)
        while pool:
            c = pool.pop()
            if not c.reader.at_eof() and not c.writer.is_closing():
                return c, True
            c.close()
        try:
            async with asyncio.timeout(timeout):
                r, w = await asyncio.open_connection(key[0], key[1], limit=_READ * 4)
        except TimeoutError:
            raise httpx.ConnectTimeout("connect timed out") from None
        except OSError as exc:
            raise httpx.ConnectError(str(exc)) from exc
        return _Conn(r, w, key), False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme != "http":
            raise httpx.UnsupportedProtocol(f"FastTransport speaks plain http only, not {url.scheme!r}")
        host = url.host
        key = (host, url.port or 80)
        t = request.extensions.get("timeout") or {}
        body = await request.aread()
        lines = [f"{request.method} {url.raw_path.decode('ascii')} HTTP/1.1"]
        for k, v in request.headers.multi_items():
            if k.lower() == "accept-encoding":
                continue
            lines.append(f"{k}: {v}")
        lines.append("accept-encoding: identity")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        for attempt in (0, 1):
            conn, reused = await self._connect(key, t.get("connect"))
            data = b""
            try:
                conn.writer.write(head + body)
                await conn.writer.drain()
                while b"\r\n\r\n" not in data:
                    async with asyncio.timeout(t.get("read")):
                        more = await conn.reader.read(_READ)
                    if not more:
                        raise httpx.RemoteProtocolError("server disconnected without sending a response")
                    data += more
                    if len(data) > MAX_HEAD_BYTES and b"\r\n\r\n" not in data[: MAX_HEAD_BYTES + 4]:
                        raise _protocol_error(f"no end of headers within {MAX_HEAD_BYTES} bytes")
                break
            except httpx.RemoteProtocolError:
                conn.close()
                if reused and not data and attempt == 0:
                    continue  # a stale keep-alive connection: retry once on a fresh one
                raise
            except TimeoutError:
                conn.close()
                raise httpx.ReadTimeout("timed out waiting for response headers") from None
            except OSError as exc:
                conn.close()
                raise httpx.ReadError(str(exc)) from exc
        raw_head, rest = data.split(b"\r\n\r\n", 1)
        try:
            status, headers, chunked, length, keep = _parse_head(raw_head)
        except httpx.RemoteProtocolError:
            conn.close()
            raise
        if request.method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            length = 0
        stream = _Body(self, conn, rest, chunked, length, keep, t.get("read"))
        return httpx.Response(
            status, headers=headers, stream=stream, request=request, extensions={"http_version": b"HTTP/1.1"}
        )

    async def aclose(self) -> None:
        for pool in self._idle.values():
            for c in pool:
                c.close()
        self._idle.clear()
