"""A TGI 3.3.5 stand-in for tests: serves TGI-shaped streams and endpoints (shared/reference/tgi-3.3.5.md) on 127.0.0.1.

    python -m tests.support.standin_server --port 18090 [--api-key KEY] [--token-delay 0.004]

Shapes replayed from TGI's source and recordings: role on every chat chunk, `id: ""`, `created` per chunk,
stop strings kept and reported as `stop_sequence`, tool-call streams without a finish_reason, completion streams
with `finish_reason: ""` and a final chunk carrying usage, stream errors as 200 + {"error":{"message","http_status_code":422}}
+ [DONE], validation errors as 422 {"error","error_type"}, axum text/plain rejections, 401 with an empty body.
Text is deterministic (a fixed token cycle), so stream == non-stream. A client disconnect stops the stream and
decrements `tgi_batch_current_size`. Endpoints: /health, /info, /metrics, /v1/models, /v1/chat/completions, /v1/completions.
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["StandinServer", "serve", "main"]

VERSION = "3.3.5"
MODEL_ID = "standin/tiny-tgi"
TOKENS = [
    "Hello",
    ",",
    " I",
    " am",
    " a",
    " stand",
    "-in",
    " for",
    " TGI",
    ".",
    " Ask",
    " me",
    " 42",
    " things",
    "!",
    "\n",
]
MAX_INPUT = 1000
FINGERPRINT = f"{VERSION}-native"


class _State:
    def __init__(self):
        self.lock = threading.Lock()
        self.count = self.success = 0
        self.failure: dict[str, int] = {}
        self.running = 0
        self.generated = 0


def _tokens(n: int, start: int = 0) -> list[str]:
    return [TOKENS[(start + i) % len(TOKENS)] for i in range(n)]


def _forced_call(body: dict) -> dict | None:
    """A non-streamed answer to tool_choice required or a named tool: TGI's grammar makes the call (the first tool,
    or the named one), each required parameter filled by its type; its message shape (shared/reference/tgi-3.3.5.md):
    {id "0", type, function {description null, name, arguments a JSON string}}. None when no call is forced."""
    choice, tools = body.get("tool_choice"), [t.get("function") or {} for t in body.get("tools") or []]
    if not tools or not (choice == "required" or isinstance(choice, dict)):
        return None
    name = (choice.get("function") or {}).get("name") if isinstance(choice, dict) else tools[0].get("name")
    params = next((t.get("parameters") or {} for t in tools if t.get("name") == name), {})
    props = params.get("properties") or {}
    fill = {"string": "x", "integer": 1, "number": 1, "boolean": True}
    args = {k: (props.get(k) or {}).get("enum", [fill.get((props.get(k) or {}).get("type"), "x")])[0]
            for k in params.get("required") or []}  # fmt: skip
    return {
        "id": "0",
        "type": "function",
        "function": {"description": None, "name": name, "arguments": json.dumps(args)},
    }


def _start(body: dict) -> int:
    """Where the token cycle starts: 0 (greedy) unless the request samples (temperature > 0, top_p not narrowed to the
    top token), then a place the seed picks (TGI: a random seed unless `seed` is set)."""
    t, top_p = body.get("temperature"), body.get("top_p")
    if not isinstance(t, (int, float)) or t <= 0 or (isinstance(top_p, (int, float)) and top_p < 0.01):
        return 0
    seed = body.get("seed")
    return random.Random(seed if isinstance(seed, int) else None).randrange(1, len(TOKENS))


def _gen(max_tokens: int, stop: list[str], start: int = 0) -> tuple[list[str], str]:
    out, text = [], ""
    for tok in _tokens(max_tokens, start):
        out.append(tok)
        text += tok
        if any(s and s in text for s in stop):
            return out, "stop_sequence"
    return out, "length"


class Handler(BaseHTTPRequestHandler):
    server_version = "standin-tgi"
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):  # quiet
        pass

    @property
    def st(self) -> _State:
        return self.server.state  # type: ignore[attr-defined]

    # -- plumbing --------------------------------------------------------------------------------------------
    def _send(self, status: int, body: bytes = b"", ctype: str = "application/json"):
        self.send_response(status)
        if body or ctype:
            self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, obj):
        self._send(status, json.dumps(obj).encode())

    def _start_sse(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def _event(self, obj) -> None:
        data = obj if isinstance(obj, str) else json.dumps(obj)
        self.wfile.write(f"data: {data}\n\n".encode())
        self.wfile.flush()

    def _authorized(self) -> bool:
        key = self.server.api_key  # type: ignore[attr-defined]
        if not key:
            return True
        if self.headers.get("Authorization", "").lower() == f"bearer {key}".lower():
            return True
        self._send(401, b"", "")
        return False

    # -- GET -------------------------------------------------------------------------------------------------
    def do_GET(self):
        p = self.path.split("?")[0]
        if p in ("/health", "/"):
            return self._send(200, b"", "")
        if p == "/info":
            return self._json(
                200,
                {
                    "model_id": MODEL_ID,
                    "model_sha": None,
                    "model_pipeline_tag": "text-generation",
                    "max_concurrent_requests": 128,
                    "max_best_of": 2,
                    "max_stop_sequences": 4,
                    "max_input_tokens": MAX_INPUT,
                    "max_total_tokens": 2048,
                    "validation_workers": 2,
                    "max_client_batch_size": 4,
                    "router": "text-generation-router",
                    "version": VERSION,
                    "sha": None,
                    "docker_label": None,
                },
            )
        if p == "/v1/models":
            return self._json(
                200,
                {"object": "list", "data": [{"id": MODEL_ID, "object": "model", "created": 0, "owned_by": MODEL_ID}]},
            )
        if p == "/metrics":
            return self._send(200, self._metrics().encode(), "text/plain; version=0.0.4")
        self._send(404, b"", "")

    def _metrics(self) -> str:
        s = self.st
        with s.lock:
            lines = [
                "# TYPE tgi_request_count counter",
                f"tgi_request_count {s.count}",
                "# TYPE tgi_request_success counter",
                f"tgi_request_success {s.success}",
                "# TYPE tgi_request_failure counter",
            ]
            lines += [f'tgi_request_failure{{err="{k}"}} {v}' for k, v in sorted(s.failure.items())]
            for h in ("tgi_request_duration", "tgi_request_generated_tokens", "tgi_request_input_length"):
                lines += [
                    f"# TYPE {h} histogram",
                    f'{h}_bucket{{le="1"}} 0',
                    f'{h}_bucket{{le="+Inf"}} {s.success}',
                    f"{h}_sum 0",
                    f"{h}_count {s.success}",
                ]
            lines += [
                "# TYPE tgi_queue_size gauge",
                "tgi_queue_size 0",
                "# TYPE tgi_batch_current_size gauge",
                f"tgi_batch_current_size {s.running}",
                "# TYPE tgi_batch_current_max_tokens gauge",
                f"tgi_batch_current_max_tokens {s.running * 16}",
            ]
        return "\n".join(lines) + "\n"

    # -- POST ------------------------------------------------------------------------------------------------
    def do_POST(self):
        p = self.path.split("?")[0]
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        if p not in ("/v1/chat/completions", "/v1/completions"):
            return self._send(404, b"", "")
        if not self._authorized():
            return
        if "application/json" not in (self.headers.get("Content-Type") or ""):
            return self._send(
                415, b"Expected request with `Content-Type: application/json`", "text/plain; charset=utf-8"
            )
        try:
            body = json.loads(raw)
        except ValueError as exc:
            return self._send(
                400, f"Failed to parse the request body as JSON: {exc}".encode(), "text/plain; charset=utf-8"
            )
        if not isinstance(body, dict):
            return self._send(422, b"Failed to deserialize the JSON body", "text/plain; charset=utf-8")
        with self.st.lock:
            self.st.count += 2 if p.endswith("chat/completions") else 2
        try:
            if p == "/v1/chat/completions":
                self._chat(body)
            else:
                self._completions(body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _validate(self, body, prompt_len: int) -> str | None:
        t = body.get("temperature")
        if isinstance(t, (int, float)) and t < 0:
            return "Input validation error: `temperature` must be strictly positive"
        if prompt_len > MAX_INPUT:
            return f"Input validation error: `inputs` must have less than {MAX_INPUT} tokens. Given: {prompt_len}"
        return None

    def _fail(self, stream: bool, msg: str):
        with self.st.lock:
            self.st.failure["validation"] = self.st.failure.get("validation", 0) + 1
        if stream:
            self._start_sse()
            self._event({"error": {"message": msg, "http_status_code": 422}})
            self._event("[DONE]")
        else:
            self._json(422, {"error": msg, "error_type": "validation"})

    def _chat(self, body):
        msgs = body.get("messages") or []
        prompt_len = sum(len(str(m.get("content", "")).split()) for m in msgs if isinstance(m, dict)) + 8
        stream = body.get("stream") is True
        if (err := self._validate(body, prompt_len)) is not None:
            return self._fail(stream, err)
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 20)  # TGI: an alias
        stop = body.get("stop") or []
        stop = [stop] if isinstance(stop, str) else list(stop)
        model = body.get("model") or MODEL_ID
        toks, fr = _gen(max_tokens, stop, _start(body))
        if fr == "length" and body.get("stream") is not True:
            pass
        usage = {"prompt_tokens": prompt_len, "completion_tokens": len(toks), "total_tokens": prompt_len + len(toks)}
        tool = body.get("tools") and body.get("tool_choice") not in (None, "none")
        if not stream:
            msg = {"role": "assistant", "content": "".join(toks)}
            if (forced := _forced_call(body)) is not None:  # TGI's grammar forces the call: no content key, stop
                msg, fr = {"role": "assistant", "tool_calls": [forced]}, "stop"
            self._done_ok(len(toks))
            return self._json(
                200,
                {
                    "object": "chat.completion",
                    "id": "",
                    "created": int(time.time()),
                    "model": model,
                    "system_fingerprint": FINGERPRINT,
                    "choices": [{"index": 0, "message": msg, "logprobs": None, "finish_reason": fr}],
                    "usage": usage,
                },
            )
        want_lp = body.get("logprobs") is True
        top = int(body.get("top_logprobs") or 0)
        self._start_sse()
        self._running(+1)
        try:
            if tool:
                frags = ['"', "c", "el", "sius", '"']
                for i, a in enumerate(frags):
                    fn = {"name": "pick_unit" if i == 0 else None, "arguments": a}
                    tc = {"index": 0, "id": "0", "type": "function", "function": fn}
                    self._event(self._chunk(model, {"role": "assistant", "tool_calls": [tc]}, None))
                    self._tick()
            else:
                for i, tok in enumerate(toks):
                    last = i == len(toks) - 1
                    lp = None
                    if want_lp:
                        alts = [{"token": t, "logprob": -0.5 - j} for j, t in enumerate([tok, "x", "y"][:top])]
                        lp = {"content": [{"token": tok, "logprob": -0.5, "top_logprobs": alts}]}
                    self._event(self._chunk(model, {"role": "assistant", "content": tok}, fr if last else None, lp))
                    self._tick()
            so = body.get("stream_options") or {}
            if so.get("include_usage"):
                c = self._chunk(model, None, None)
                c["choices"], c["usage"] = [], usage
                self._event(c)
            self._event("[DONE]")
            self._done_ok(len(toks))
        finally:
            self._running(-1)

    def _chunk(self, model, delta, fr, lp=None):
        ch = [{"index": 0, "delta": delta, "logprobs": lp, "finish_reason": fr}] if delta is not None else []
        return {
            "object": "chat.completion.chunk",
            "id": "",
            "created": int(time.time()),
            "model": model,
            "system_fingerprint": FINGERPRINT,
            "choices": ch,
            "usage": None,
        }

    def _completions(self, body):
        prompt = body.get("prompt")
        stream = body.get("stream") is True
        if not isinstance(prompt, str):
            return self._fail(stream, "Input validation error: `prompt` must be a string")
        prompt_len = len(prompt.split()) + 1
        if (err := self._validate(body, prompt_len)) is not None:
            return self._fail(stream, err)
        max_tokens = int(body.get("max_tokens") or 16)
        stop = body.get("stop") or []
        toks, fr = _gen(max_tokens, [stop] if isinstance(stop, str) else list(stop))
        usage = {"prompt_tokens": prompt_len, "completion_tokens": len(toks), "total_tokens": prompt_len + len(toks)}
        base = {"object": "text_completion", "id": "", "model": MODEL_ID, "system_fingerprint": FINGERPRINT}
        if not stream:
            self._done_ok(len(toks))
            return self._json(
                200,
                {
                    **base,
                    "created": int(time.time()),
                    "choices": [{"index": 0, "text": "".join(toks), "logprobs": None, "finish_reason": fr}],
                    "usage": usage,
                },
            )
        self._start_sse()
        self._running(+1)
        try:
            for i, tok in enumerate(toks):
                last = i == len(toks) - 1
                c = {
                    **base,
                    "created": int(time.time()),
                    "choices": [{"index": 0, "text": tok, "logprobs": None, "finish_reason": fr if last else ""}],
                }
                if last:
                    c["usage"] = usage
                self._event(c)
                self._tick()
            self._event("[DONE]")
            self._done_ok(len(toks))
        finally:
            self._running(-1)

    def _tick(self):
        d = self.server.token_delay  # type: ignore[attr-defined]
        if d:
            time.sleep(d)

    def _running(self, d: int):
        with self.st.lock:
            self.st.running += d

    def _done_ok(self, n: int):
        with self.st.lock:
            self.st.success += 1
            self.st.generated += n


class StandinServer(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default listen backlog is 5: 32 concurrent connects (cancel.concurrent-32) overflowed it and the
    # kernel reset some before a response (ReadError). Real engines listen with 1024-2048.
    request_queue_size = 128

    def __init__(self, port: int = 0, api_key: str | None = None, token_delay: float = 0.004):
        super().__init__(("127.0.0.1", port), Handler)
        self.state = _State()
        self.api_key = api_key
        self.token_delay = token_delay

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


def serve(port: int = 0, **kw) -> StandinServer:
    """Start in a background thread; call .shutdown() to stop."""
    srv = StandinServer(port, **kw)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.support.standin_server", description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--token-delay", type=float, default=0.004)
    a = ap.parse_args(argv)
    srv = StandinServer(a.port, api_key=a.api_key, token_delay=a.token_delay)
    print(f"TGI {VERSION} stand-in on {srv.base_url}", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
