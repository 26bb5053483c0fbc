"""A server on 127.0.0.1 that says back what it was sent: the request's Authorization header (a key echoed into error
bodies and stream text), after a text of the test's choosing (terminal escape sequences), in a background thread.

    with EchoKeyServer(text="\x1b[2K\r") as s:
        main(["conform", "--url", s.url, ...])

GET /v1/models lists one model; GET /health, /version and /metrics answer 200. A POST with `"stream": true` is an SSE
chat stream whose content is `text` and then the header value; any other POST is a 400 text/plain body of `text`,
then the header value placed so that its first EXCERPT_CUT characters end inside the key (an excerpt of 200 characters,
the length a failing status's note quotes, cuts through it). Only ever binds 127.0.0.1.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["EchoKeyServer", "EXCERPT_CUT"]

EXCERPT_CUT = 200  # harness.conformance.model.status_problem quotes this many bytes of a body
KEY_OFFSET = EXCERPT_CUT - 10  # the key starts here in a 400 body: the excerpt keeps 10 of its characters


def _chunk(content: str, finish: str | None = None) -> bytes:
    delta = {"role": "assistant", "content": content} if content else {}
    obj = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "tiny",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *a) -> None:  # quiet
        pass

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.send_header("connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path.startswith("/v1/models"):
            self._send(200, json.dumps({"object": "list", "data": [{"id": "tiny", "object": "model"}]}).encode(),
                       "application/json")  # fmt: skip
        elif self.path.startswith("/metrics"):
            self._send(200, b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n", "text/plain")
        else:
            self._send(200, b'{"version": "0.11.0"}', "application/json")

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        try:
            request = json.loads(raw) if raw else {}
        except ValueError:
            request = {}
        auth = self.headers.get("authorization") or "(none)"
        text = self.server.text
        if isinstance(request, dict) and request.get("stream") is True:
            body = _chunk(text) + _chunk(auth) + _chunk("", "stop") + b"data: [DONE]\n\n"
            self._send(200, body, "text/event-stream")
            return
        head = f"{text} bad request; you sent: "
        padding = "." * max(0, KEY_OFFSET - len("Bearer ") - len(head.encode()))
        self._send(400, f"{head}{padding}{auth} (that is all)".encode(), "text/plain")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    text = ""


class EchoKeyServer:
    def __init__(self, text: str = "") -> None:
        self.httpd = _Server(("127.0.0.1", 0), _Handler)
        self.httpd.text = text
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> EchoKeyServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"
