"""A misbehaving HTTP server on 127.0.0.1 for hostile-input tests, in a background thread.

    with BadServer({"/v1/models": "drip", "*": "ok"}) as s:   # a mode per path ("*" is the default)
        run(["load", "--url", s.url, ...])

Modes (each writes exactly these bytes, so a client sees the fault it would see from a broken server):
  ok          a small vLLM-shaped reply: /v1/models lists "tiny", /version, /metrics, and SSE chat/completions streams
  garbage     non-HTTP bytes, then close
  http500     HTTP 500 with a JSON error body
  http400     HTTP 400 with an OpenAI-shaped error body
  empty       HTTP 200 text/event-stream that closes at once (no events, no [DONE])
  stall       reads the request and never answers (until the server stops)
  drip        HTTP 200 headers, then one byte a second, forever
  endless     an SSE stream of valid chunks that never ends
  badchunk    HTTP 200 chunked with an invalid chunk-size line
  hugeheaders HTTP 200 with 1 MiB of headers
  close       closes the connection without a byte
  markup      HTTP 400 whose error message holds rich markup ("[/oops]") and HTML (a <script>, an <img onerror>)
  html        HTTP 200 with an HTML page;  jsonlist  HTTP 200 with a JSON list (where an object belongs)
  doneonly    HTTP 200 SSE that sends only `data: [DONE]` (a complete stream without a single token)
Only ever binds 127.0.0.1; counts requests per path in `hits`.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter

CHUNK = {
    "id": "cmpl-1",
    "object": "chat.completion.chunk",
    "created": 1,
    "model": "tiny",
    "choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": None}],
}


def _sse(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _reply(status: int, body: bytes, ctype: str = "application/json") -> bytes:
    reason = {200: "OK", 400: "Bad Request", 500: "Internal Server Error"}.get(status, "X")
    head = f"HTTP/1.1 {status} {reason}\r\ncontent-type: {ctype}\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n"
    return head.encode() + body


def _ok_body(path: str, request: dict) -> bytes:
    if path.startswith("/v1/models"):
        return _reply(200, json.dumps({"object": "list", "data": [{"id": "tiny", "object": "model"}]}).encode())
    if path.startswith("/version"):
        return _reply(200, b'{"version": "0.11.0"}')
    if path.startswith("/metrics"):
        return _reply(200, b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n", "text/plain")
    if path.startswith("/health"):
        return _reply(200, b"")
    n = int(request.get("max_tokens") or 3)
    if request.get("stream"):
        body = _sse(
            {**CHUNK, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
        )
        for _ in range(n):
            body += _sse(CHUNK)
        body += _sse({**CHUNK, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
        body += _sse(
            {**CHUNK, "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": n + 3}}
        )
        body += b"data: [DONE]\n\n"
        return _reply(200, body, "text/event-stream")
    msg = {"role": "assistant", "content": "x" * n}
    return _reply(200, json.dumps({"id": "c", "object": "chat.completion", "created": 1, "model": "tiny",
                                   "choices": [{"index": 0, "message": msg, "finish_reason": "length",
                                                "logprobs": None}],
                                   "usage": {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": n + 3}}).encode())  # fmt: skip


class BadServer:
    def __init__(self, modes: dict[str, str] | str = "ok"):
        self.modes = {"*": modes} if isinstance(modes, str) else dict(modes)
        self.hits: Counter[str] = Counter()
        self.port: int | None = None
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._tasks: set[asyncio.Task] = set()

    def __enter__(self) -> BadServer:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("bad server did not start")
        return self

    def __exit__(self, *exc) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def mode_for(self, path: str) -> str:
        for prefix, mode in self.modes.items():
            if prefix != "*" and path.startswith(prefix):
                return mode
        return self.modes.get("*", "ok")

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0, backlog=128)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stop.wait()
            for t in list(self._tasks):
                t.cancel()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._serve(reader, writer)
        except (asyncio.CancelledError, ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._tasks.discard(task)
            try:
                writer.close()
            except Exception:  # noqa: BLE001
                pass

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = (lines[0].split(" ") + ["", "", ""])[:3]
        length = 0
        for line in lines[1:]:
            if line.lower().startswith("content-length:"):
                length = int(line.split(":", 1)[1])
        raw = await reader.readexactly(length) if length else b""
        try:
            request = json.loads(raw) if raw else {}
        except ValueError:
            request = {}
        self.hits[path] += 1
        mode = self.mode_for(path)
        w = writer.write
        if mode == "ok":
            w(_ok_body(path, request if isinstance(request, dict) else {}))
        elif mode == "html":
            w(_reply(200, b"<html><body>not an engine</body></html>", "text/html"))
        elif mode == "jsonlist":
            w(_reply(200, b"[1, 2, 3]"))
        elif mode == "garbage":
            w(b"\x00\x01SSH-2.0-not-http\r\n\xff\xfe garbage\r\n\r\n")
        elif mode == "http500":
            w(_reply(500, b'{"error": {"message": "boom", "type": "InternalServerError", "code": 500}}'))
        elif mode in ("http400", "markup"):
            msg = (
                'bad [/oops] [bold]request</pre></td><script id="injected">document.title="pwned"</script>'
                '<img id="injected-img" src=x onerror="document.title=1">'
                if mode == "markup"
                else "bad request"
            )
            w(_reply(400, json.dumps({"error": {"message": msg, "type": "BadRequestError", "param": None,
                                                "code": 400}}).encode()))  # fmt: skip
        elif mode == "empty":
            w(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
        elif mode == "stall":
            await asyncio.sleep(3600)
        elif mode == "drip":
            w(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
            await writer.drain()
            while True:
                await asyncio.sleep(1.0)
                w(b":")
                await writer.drain()
        elif mode == "endless":
            w(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
            payload = _sse(CHUNK) * 64
            while True:
                w(payload)
                await writer.drain()
                await asyncio.sleep(0)
        elif mode == "badchunk":
            w(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\nZZZ\r\nhello\r\n"
            )
        elif mode == "hugeheaders":
            w(b"HTTP/1.1 200 OK\r\n" + b"x-junk: " + b"a" * (1 << 20) + b"\r\ncontent-length: 0\r\n\r\n")
        elif mode == "close":
            pass
        elif mode == "doneonly":
            w(_reply(200, b"data: [DONE]\n\n", "text/event-stream"))
        else:
            raise ValueError(f"unknown mode {mode!r}")
        await writer.drain()


def wall(fn, *args, **kwargs) -> tuple[object, float]:
    """(result, seconds) of one call: for tests that assert a bound on wall time."""
    t0 = time.monotonic()
    result = fn(*args, **kwargs)
    return result, time.monotonic() - t0
