"""http.keepalive-after-stream against raw servers: one that closes the connection after each stream (as llama.cpp's
sometimes does) fails with closed-after-stream; one that keeps it open passes; the suite's own requests retry once on
such a closed pooled connection and say so in the trace."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading

from harness.conformance.cases.http import keepalive_after_stream
from harness.conformance.expectations import load_expectations
from harness.conformance.runner import new_ctx

STREAM = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    b'1d\r\ndata: {"choices": []}\n\ndata: \r\n0\r\n\r\n'
)
HEALTH = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def _serve(close_after_stream: bool, reset: bool = False) -> tuple[str, socket.socket]:
    """close_after_stream: the request after a stream on that connection is read and then the connection closed
    unanswered (what a client sees when the server's close races its next request); reset: closed with a TCP RST
    (SO_LINGER 0), as a client sees vLLM 0.18-0.22 drop a connection whose previous handler raised."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)

    def conn(c: socket.socket) -> None:
        buf, streamed = b"", False
        with c:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = c.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, rest = buf.partition(b"\r\n\r\n")
                length = next(
                    (int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")), 0
                )
                while len(rest) < length:
                    rest += c.recv(65536)
                buf = rest[length:]
                if streamed and close_after_stream:
                    if reset:
                        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return  # closes unanswered; the stream's response never said Connection: close
                streamed = head.startswith(b"POST")
                c.sendall(STREAM if streamed else HEALTH)

    def accept() -> None:
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=conn, args=(c,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return f"http://127.0.0.1:{srv.getsockname()[1]}", srv


def _run(url: str):
    async def go():
        ctx = new_ctx(url, load_expectations("openai"), model="m")
        try:
            return (
                await keepalive_after_stream(ctx),
                await ctx.post("/v1/chat/completions", ctx.chat(stream=True)),
                await ctx.get("/health"),
            )
        finally:
            await ctx.aclose()

    return asyncio.run(go())


def test_a_server_closing_after_each_stream_fails_and_the_suite_retries():
    url, srv = _serve(close_after_stream=True)
    try:
        check, _, health = _run(url)
    finally:
        srv.close()
    assert check.status.value == "fail" and check.behaviour == "closed-after-stream", check
    assert health.status == 200 and "without sending a response" in health.retried  # retried on a fresh connection


def test_a_server_keeping_the_connection_passes():
    url, srv = _serve(close_after_stream=False)
    try:
        check, _, health = _run(url)
    finally:
        srv.close()
    assert check.status.value == "pass", check
    assert health.status == 200 and health.retried == ""


def test_a_connection_reset_before_any_answer_is_retried_too():
    url, srv = _serve(close_after_stream=True, reset=True)
    try:
        _check, _, health = _run(url)
    finally:
        srv.close()
    assert health.status == 200 and health.retried.startswith("ReadError")  # retried on a fresh connection
