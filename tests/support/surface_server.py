"""A stand-in for /v1/responses and /v1/messages on 127.0.0.1 that speaks both grammars as the references do, or
breaks one of them on purpose (`fault`), in a background thread.

    with SurfaceServer(fault="responses-seq-back") as s:
        run_suite(new_ctx(s.url, load_expectations("openai")), patterns=["responses.stream"])

Both endpoints answer every prompt with TEXT at "temperature 0"; /v1/chat/completions says the same, so the
cross-endpoint case passes. store / previous_response_id / background are refused clearly (400 with an error object),
as a server without a store should. `absent` names endpoints answered with 404 {"detail": "Not Found"}.
Faults (each breaks exactly one thing):
  responses-out-of-order   a text delta before its content part was added
  responses-seq-back       a sequence_number that goes back
  responses-after-completed an event after response.completed
  responses-deltas-short   the deltas miss a piece of the done text
  responses-never-ends     the stream stops sending after the first deltas and never closes
  messages-out-of-order    a content_block_delta before its content_block_start
  messages-after-stop      an event after message_stop
  messages-deltas-short    the streamed deltas miss a piece of the message's text
  messages-never-ends      the stream stops sending after the first delta and never closes
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

TEXT = "Hello there"
PIECES = ["Hel", "lo", " th", "ere"]  # four: a cut at 3 tokens (the cases' CUT) is a cut
INPUT_TOKENS = 9
MODEL = "tiny"


def _head(status: int, ctype: str, length: int | None = None) -> bytes:
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}.get(status, "X")
    size = f"content-length: {length}\r\n" if length is not None else ""
    return f"HTTP/1.1 {status} {reason}\r\ncontent-type: {ctype}\r\n{size}connection: close\r\n\r\n".encode()


def _json(status: int, doc: Any) -> bytes:
    body = json.dumps(doc).encode()
    return _head(status, "application/json", len(body)) + body


def _event(name: str, data: dict) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def _tokens(body: dict, key: str) -> int:
    extra = 0
    if body.get("instructions") or body.get("system"):
        extra += 6
    turns = body.get("input") if isinstance(body.get("input"), list) else body.get("messages")
    if isinstance(turns, list):
        extra += 4 * (len(turns) - 1)
    return INPUT_TOKENS + extra


def _pieces(text: str) -> list[str]:
    """`text` cut where PIECES cut it (a text stopped early ends with part of a piece)."""
    out, at = [], 0
    for p in PIECES:
        if at >= len(text):
            break
        out.append(text[at : at + len(p)])
        at += len(p)
    return out


def _cut(body: dict, key: str) -> tuple[str, int, bool]:
    """(text, output tokens, cut by the limit): one token per piece."""
    limit = body.get(key) or 100
    pieces = PIECES[: max(0, int(limit))]
    return "".join(pieces), len(pieces), len(pieces) < len(PIECES)


def response_resource(body: dict, status: str = "completed", text: str | None = None) -> dict:
    full, n, cut = _cut(body, "max_output_tokens")
    text = full if text is None else text
    st = "incomplete" if cut and status == "completed" else status
    return {
        "id": "resp_1", "object": "response", "created_at": 1, "model": MODEL, "status": st,
        "incomplete_details": {"reason": "max_output_tokens"} if st == "incomplete" else None,
        "instructions": body.get("instructions"), "error": None, "metadata": {}, "parallel_tool_calls": True,
        "tool_choice": "auto", "tools": [], "temperature": 0.0, "top_p": 1.0,
        "output": [{"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}]
        if st != "in_progress" else [],
        "usage": {"input_tokens": _tokens(body, "input"), "output_tokens": n, "total_tokens": _tokens(body, "input") + n,
                  "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                  "output_tokens_details": {"reasoning_tokens": 0}} if st != "in_progress" else None,
    }  # fmt: skip


def responses_events(body: dict, fault: str) -> list[bytes]:
    text, _, _ = _cut(body, "max_output_tokens")
    pieces = _pieces(text)
    item = {"id": "msg_1", "type": "message", "role": "assistant", "status": "in_progress", "content": []}
    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    ids = {"item_id": "msg_1", "output_index": 0, "content_index": 0}

    def ev(name: str, **data: Any) -> tuple[str, dict]:
        return name, {"type": name, "sequence_number": 0, **data}  # numbered in stream order below

    deltas = [ev("response.output_text.delta", delta=p, logprobs=[], **ids) for p in pieces]
    done_text = text
    if fault == "responses-deltas-short":
        deltas = deltas[:-1]  # the done text and the final response still say all of it
    out = [ev("response.created", response=response_resource(body, "in_progress")),
           ev("response.in_progress", response=response_resource(body, "in_progress")),
           ev("response.output_item.added", output_index=0, item=item),
           ev("response.content_part.added", part=part, **ids), *deltas,
           ev("response.output_text.done", text=done_text, logprobs=[], **ids),
           ev("response.content_part.done", part={**part, "text": done_text}, **ids),
           ev("response.output_item.done", output_index=0, item={**item, "status": "completed",
              "content": [{**part, "text": done_text}]}),
           ev("response.completed", response=response_resource(body))]  # fmt: skip
    if fault == "responses-out-of-order":
        out[3], out[4] = out[4], out[3]  # the first delta before its part was added
    for i, (_, data) in enumerate(out):
        data["sequence_number"] = i
    if fault == "responses-seq-back":
        out[5][1]["sequence_number"] = 1
    if fault == "responses-after-completed":
        out.append(ev("response.output_text.delta", delta="!", logprobs=[], **ids))
    return [_event(name, data) for name, data in out]


def message(body: dict) -> dict:
    text, n, cut = _cut(body, "max_tokens")
    stop, stop_reason = None, "max_tokens" if cut else "end_turn"
    for s in body.get("stop_sequences") or []:
        if s in text:
            text, stop, stop_reason = text[: text.index(s)], s, "stop_sequence"
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": MODEL,
            "content": [{"type": "text", "text": text}], "stop_reason": stop_reason, "stop_sequence": stop,
            "usage": {"input_tokens": _tokens(body, "messages"), "output_tokens": n}}  # fmt: skip


def messages_events(body: dict, fault: str) -> list[bytes]:
    msg = message(body)
    text = msg["content"][0]["text"]
    pieces = _pieces(text)
    if fault == "messages-deltas-short":
        pieces = pieces[:-1]
    start = {**msg, "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {"input_tokens": msg["usage"]["input_tokens"], "output_tokens": 0}}  # fmt: skip
    out = [("message_start", {"type": "message_start", "message": start}),
           ("content_block_start", {"type": "content_block_start", "index": 0,
                                    "content_block": {"type": "text", "text": ""}}),
           ("ping", {"type": "ping"}),
           *[("content_block_delta", {"type": "content_block_delta", "index": 0,
                                      "delta": {"type": "text_delta", "text": p}}) for p in pieces],
           ("content_block_stop", {"type": "content_block_stop", "index": 0}),
           ("message_delta", {"type": "message_delta", "delta": {"stop_reason": msg["stop_reason"],
                              "stop_sequence": msg["stop_sequence"]}, "usage": {"output_tokens": msg["usage"]["output_tokens"]}}),
           ("message_stop", {"type": "message_stop"})]  # fmt: skip
    if fault == "messages-out-of-order":
        out[1], out[3] = out[3], out[1]
    if fault == "messages-after-stop":
        out.append(("ping", {"type": "ping"}))
    return [_event(name, data) for name, data in out]


class SurfaceServer:
    def __init__(self, fault: str = "", absent: tuple[str, ...] = ()):
        self.fault = fault
        self.absent = absent
        self.port: int | None = None
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._tasks: set[asyncio.Task] = set()

    def __enter__(self) -> SurfaceServer:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("surface server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
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
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path = (lines[0].split(" ") + ["", ""])[:2]
        length = next((int(x.split(":", 1)[1]) for x in lines[1:] if x.lower().startswith("content-length:")), 0)
        raw = await reader.readexactly(length) if length else b""
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {}
        body = body if isinstance(body, dict) else {}
        path = path.split("?")[0]
        w = writer.write
        if any(path.startswith(a) for a in self.absent):
            w(_json(404, {"detail": "Not Found"}))
        elif path == "/v1/models":
            w(_json(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]}))
        elif path == "/health":
            w(_json(200, {}))
        elif path == "/v1/chat/completions":
            text, n, cut = _cut(body, "max_tokens")
            w(_json(200, {"id": "c", "object": "chat.completion", "created": 1, "model": MODEL,
                          "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                       "finish_reason": "length" if cut else "stop", "logprobs": None}],
                          "usage": {"prompt_tokens": INPUT_TOKENS, "completion_tokens": n,
                                    "total_tokens": INPUT_TOKENS + n}}))  # fmt: skip
        elif path == "/v1/responses":
            await self._responses(body, writer)
        elif path == "/v1/messages/count_tokens":
            w(_json(200, {"input_tokens": _tokens(body, "messages")}))
        elif path == "/v1/messages":
            await self._messages(body, writer)
        else:
            w(_json(404, {"detail": "Not Found"}))
        await writer.drain()

    async def _refuse(self, writer: asyncio.StreamWriter, message: str) -> None:
        writer.write(_json(400, {"error": {"message": message, "type": "invalid_request_error", "param": None,
                                           "code": None}}))  # fmt: skip

    async def _responses(self, body: dict, writer: asyncio.StreamWriter) -> None:
        if body.get("model") != MODEL:
            writer.write(_json(404, {"error": {"message": f"The model {body.get('model')} does not exist",
                                               "type": "not_found_error", "param": "model", "code": None}}))  # fmt: skip
            return
        for field in ("store", "previous_response_id", "background"):
            if body.get(field):
                await self._refuse(writer, f"{field} is not supported by this server")
                return
        if not body.get("stream"):
            writer.write(_json(200, response_resource(body)))
            return
        await self._stream(writer, responses_events(body, self.fault), self.fault == "responses-never-ends")

    async def _messages(self, body: dict, writer: asyncio.StreamWriter) -> None:
        if body.get("model") != MODEL:
            writer.write(_json(404, {"type": "error", "error": {"type": "not_found_error",
                                                                "message": f"model: {body.get('model')}"}}))  # fmt: skip
            return
        if not body.get("stream"):
            writer.write(_json(200, message(body)))
            return
        await self._stream(writer, messages_events(body, self.fault), self.fault == "messages-never-ends")

    async def _stream(self, writer: asyncio.StreamWriter, events: list[bytes], never_ends: bool) -> None:
        writer.write(_head(200, "text/event-stream"))
        for i, e in enumerate(events):
            if never_ends and i == 5:
                while True:  # the rest never comes, and the connection stays open
                    await asyncio.sleep(3600)
            writer.write(e)
            await writer.drain()
