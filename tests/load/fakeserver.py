"""A tiny vLLM-shaped SSE server for runner tests (127.0.0.1 only), run in a background thread.

mode "ok": role chunk, `max_tokens` content chunks (`delay` s apart), finish, usage chunk, [DONE].
With `answer_len(body) -> int`, a request whose answer is shorter than max_tokens ends on its own, as vLLM ends an answer
at the model's end token: that many content chunks, then a chunk with empty content and finish_reason "stop" (the end
token's step: usage counts it). After `fail_after` requests every request gets HTTP 500 (a server that starts failing). /metrics serves counters:
a vLLM generation counter, or with `metrics="llamacpp"` what llama-server's `--metrics` exports (`llamacpp_metrics`).
"""

import asyncio
import json
import threading


def llamacpp_metrics(prompt=0, cached=0, predicted=0, processing=0, deferred=0, decode=0):
    """/metrics as llama-server (llama.cpp 0c1e570, tools/server/server-task.cpp `to_metrics`) writes it: HELP, TYPE
    and one unlabelled sample per series, counters first, values printed as C++ streams print doubles."""
    counters = [
        ("prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens", prompt),
        ("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache", cached),
        ("prompt_seconds_total", "Total time spent processing prompts", 0.0123 if prompt else 0),
        ("tokens_predicted_total", "Number of generation tokens processed", predicted),
        ("tokens_predicted_seconds_total", "Total time spent generating tokens", 0.0456 if predicted else 0),
        (
            "n_decode_total",
            "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding",
            decode,
        ),  # fmt: skip
        ("n_tokens_max", "Largest observed sequence length (prompt + generation)", 8 if predicted else 0),
    ]
    gauges = [
        ("prompt_tokens_seconds", "Average prompt throughput in tokens/s", 1950.5 if prompt else 0),
        ("predicted_tokens_seconds", "Average generation throughput in tokens/s", 412.25 if predicted else 0),
        ("requests_processing", "Number of requests processing", processing),
        ("requests_deferred", "Number of requests deferred", deferred),
        ("n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call", 1 if decode else 0),
    ]
    out = []
    for typ, items in (("counter", counters), ("gauge", gauges)):
        for name, help_, value in items:
            out.append(f"# HELP llamacpp:{name} {help_}\n# TYPE llamacpp:{name} {typ}\nllamacpp:{name} {value:g}\n")
    return "".join(out)


class FakeServer:
    def __init__(self, delay=0.0, fail_after=None, hang=False, metrics="vllm", answer_len=None):
        self.delay, self.fail_after, self.hang, self.metrics = delay, fail_after, hang, metrics
        self.answer_len = answer_len
        self.requests = 0
        self.generated = 0
        self.prompt_evaluated = self.prompt_cached = 0  # llama.cpp counts reused prompt tokens apart
        self.inflight = 0
        self.connections = 0
        self.port = None
        self._ready = threading.Event()
        self._loop = None

    def __enter__(self):
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc):
        self._loop.call_soon_threadsafe(self._stop.set)
        self._t.join(10)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def _run(self):
        asyncio.run(self._main())

    async def _main(self):
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        srv = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = srv.sockets[0].getsockname()[1]
        self._ready.set()
        async with srv:
            await self._stop.wait()

    async def _handle(self, reader, writer):
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                n = 0
                for ln in lines[1:]:
                    if ln.lower().startswith("content-length:"):
                        n = int(ln.split(":", 1)[1])
                body = json.loads(await reader.readexactly(n)) if n else {}
                if path == "/metrics":
                    if self.metrics == "llamacpp":
                        text = llamacpp_metrics(
                            self.prompt_evaluated, self.prompt_cached, self.generated, self.inflight, 0, self.generated
                        ).encode()
                    else:
                        text = f'vllm:generation_tokens_total{{engine="0"}} {self.generated}.0\n'.encode()
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(text), text))
                    await writer.drain()
                    continue
                if method == "GET":
                    p = json.dumps({"data": [{"id": "fake"}]}).encode()
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                        % (len(p), p)
                    )
                    await writer.drain()
                    continue
                self.requests += 1
                if self.fail_after is not None and self.requests > self.fail_after:
                    p = b'{"error":"Internal Server Error"}'
                    writer.write(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: %d\r\n\r\n%s" % (len(p), p))
                    await writer.drain()
                    continue
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                )
                k = int(body.get("max_tokens", 4))
                ends = self.answer_len(body) if self.answer_len else k  # content tokens before the end token
                steps = min(k, ends + 1) if ends < k else k  # the end token's step is a step too
                self.inflight += 1
                # 3 prompt tokens per request; after the first, 2 of them are reused from the cache
                reused = 2 if self.requests > 1 else 0
                self.prompt_cached += reused
                self.prompt_evaluated += 3 - reused

                def ev(obj):
                    d = b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"
                    return b"%x\r\n%s\r\n" % (len(d), d)

                base = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": "fake"}
                writer.write(
                    ev(
                        {
                            **base,
                            "choices": [
                                {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
                            ],
                        }
                    )
                )
                for i in range(steps):
                    if self.delay:
                        await asyncio.sleep(self.delay)
                    if self.hang:
                        await asyncio.sleep(3600)
                    fin = ("stop" if ends < k else "length") if i == steps - 1 else None
                    text = "" if i >= ends else "t"  # the end token adds no text
                    writer.write(
                        ev({**base, "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": fin}]})
                    )
                    self.generated += 1
                    await writer.drain()
                writer.write(
                    ev(
                        {
                            **base,
                            "choices": [],
                            "usage": {"prompt_tokens": 3, "completion_tokens": steps, "total_tokens": 3 + steps},
                        }
                    )
                )
                d = b"data: [DONE]\n\n"
                writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(d), d))
                self.inflight -= 1
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
