"""Small HTTP servers on 127.0.0.1 for the liveness tests (issue 22), each in a background thread.

    with ModelsOnlyServer() as s:        # GET /v1/models answers a JSON list; every other request is HTTP 404
        run(["conform", "--url", s.url, "--expect", "openai"])
    with StoppingServer(after=40) as s:  # a vLLM-shaped server (badserver's "ok") for 40 requests, then gone

A `StoppingServer` stops the way a crashed process does: the listening socket closes (a new connection is refused)
and a request already on its way gets its connection closed without a byte. Only ever binds 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter

from tests.support.badserver import _ok_body

MODELS = json.dumps({"object": "list", "data": [{"id": "tiny", "object": "model", "owned_by": "me"}]}).encode()


def _reply(status: int, body: bytes, reason: str) -> bytes:
    head = (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            f"connection: close\r\n\r\n")  # fmt: skip
    return head.encode() + body


class _ThreadServer:
    """An asyncio server in a thread: one request per connection, answered by `answer` (None: close, no bytes)."""

    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self.port: int | None = None
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._server: asyncio.Server | None = None

    def __enter__(self):
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("test server did not start")
        return self

    def __exit__(self, *exc) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, backlog=128)
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        await self._stop.wait()
        self._server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path = (lines[0].split(" ") + ["", ""])[:2]
            length = next((int(x.split(":", 1)[1]) for x in lines[1:] if x.lower().startswith("content-length:")), 0)
            raw = await reader.readexactly(length) if length else b""
            self.hits[path] += 1
            reply = self.answer(method, path, raw)
            if reply is not None:
                writer.write(reply)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    def answer(self, method: str, path: str, body: bytes) -> bytes | None:
        raise NotImplementedError


class ModelsOnlyServer(_ThreadServer):
    """Answers `GET /v1/models` and nothing else (HTTP 404 with an OpenAI-shaped error body)."""

    def answer(self, method: str, path: str, body: bytes) -> bytes | None:
        if method == "GET" and path.split("?")[0] == "/v1/models":
            return _reply(200, MODELS, "OK")
        err = {"error": {"message": f"no route {path}", "type": "not_found_error", "param": None, "code": 404}}
        return _reply(404, json.dumps(err).encode(), "Not Found")


class StoppingServer(_ThreadServer):
    """badserver's vLLM-shaped "ok" answers for the first `after` requests; then the server is gone."""

    def __init__(self, after: int) -> None:
        super().__init__()
        self.after = after
        self.answered = 0

    def answer(self, method: str, path: str, body: bytes) -> bytes | None:
        if self.answered >= self.after:
            if self._server is not None:
                self._server.close()  # no new connection is accepted: connect() is refused from now on
            return None
        self.answered += 1
        try:
            request = json.loads(body) if body else {}
        except ValueError:
            request = {}
        return _ok_body(path, request if isinstance(request, dict) else {})
