"""A fake OpenAI chat server on 127.0.0.1 whose "model" ends its answers on its own, for the stop.* cases' tests.

    with StoppingServer(faults={"min-tokens-ignored"}) as s:
        ctx = new_ctx(s.url, exp, model="stopper", provides=frozenset({ENDS_ANSWERS}))

Tokens are words (with their leading space). Greedy answers are fixed per prompt and end with the end token (EOS),
which is billed, counted by max_tokens and given a logprobs entry (vLLM's accounting); with n > 1 and a temperature
each choice is a sampled answer of its own length. It honours max_tokens, stop (stripped, kept with
include_stop_str_in_output), min_tokens, ignore_eos, logprobs, n, stream and stream_options.include_usage, and
serves POST /tokenize {prompt} -> {tokens}. Each fault in `faults` breaks exactly one of these (FAULTS).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["StoppingServer", "ANSWERS", "SAMPLED", "FAULTS", "words"]

ANSWERS = {
    "What is 2+2?": "The answer to this classic math problem is 4.",
    "How many legs does a dog have?": "A dog has four legs, one at each corner of its body, and a tail.",
}
SAMPLED = [  # choice i of a sampled request (temperature > 0): answers of different lengths, the last longer than 64
    "Four.",
    "Two and two make four, as every child learns.",
    "It is four, the sum of two and two.",
    " ".join(["Counting"] + ["on"] * 80),
]
FILLER = " more"  # what the model says after its end when it is kept from ending (min_tokens, ignore_eos)
END_MARKER = "<|im_end|>"
FAULTS = frozenset(
    {
        "eos-as-length",  # an answer ended by the model is reported with finish_reason length
        "end-marker",  # the end token's text is shown at the end of the answer
        "eos-not-billed",  # completion_tokens leaves the end token out
        "stop-kept",  # a stop string is kept in the output even without include_stop_str_in_output
        "stop-ignored",  # stop strings are not applied
        "include-ignored",  # include_stop_str_in_output is accepted and not applied
        "refuse-include",  # include_stop_str_in_output is refused with 400
        "min-tokens-ignored",
        "refuse-min-tokens",
        "ignore-eos-ignored",
        "refuse-ignore-eos",
        "length-at-budget",  # the end token sampled on the budget's last step is reported as length
        "usage-not-summed",  # with n > 1 usage counts the first choice only
        "stream-usage-off",  # the streamed usage bills one token more than the non-stream one
        "n-ignored",  # one choice whatever n asks
        "stream-drops-stop",  # the stream applies no stop strings (the non-stream does)
    }
)


def words(text: str) -> list[str]:
    """The fake tokenizer: each word with its leading space (and punctuation) is one token."""
    out: list[str] = []
    for i, w in enumerate(text.split(" ")):
        out.append(w if i == 0 else " " + w)
    return [w for w in out if w]


def _generate(answer: str, req: dict, faults: frozenset[str], stream: bool) -> tuple[str, str, int, int]:
    """(text, finish_reason, billed tokens, logprobs entries) of one choice."""
    toks = words(answer)
    budget = req.get("max_tokens") or 1024
    min_tokens = 0 if "min-tokens-ignored" in faults else int(req.get("min_tokens") or 0)
    ignore_eos = bool(req.get("ignore_eos")) and "ignore-eos-ignored" not in faults
    out: list[str] = []
    finish, eos = "length", False
    while len(out) < budget:
        step = len(out)
        if step < len(toks):
            out.append(toks[step])
        elif ignore_eos or step < min_tokens:
            out.append(FILLER)
        else:
            eos, finish = True, "stop"
            break
    text = "".join(out)
    stops = [] if "stop-ignored" in faults or (stream and "stream-drops-stop" in faults) else req.get("stop") or []
    for s in stops:
        at = text.find(s)
        if at >= 0:
            keep = (req.get("include_stop_str_in_output") and "include-ignored" not in faults) or "stop-kept" in faults
            end = at + len(s)
            used = next(k for k in range(1, len(out) + 1) if len("".join(out[:k])) >= end)
            return (text[:end] if keep else text[:at]), "stop", used, used
    billed = len(out) + (1 if eos and "eos-not-billed" not in faults else 0)
    steps = len(out) + (1 if eos else 0)
    if eos and ("eos-as-length" in faults or (steps == budget and "length-at-budget" in faults)):
        finish = "length"
    return text + (END_MARKER if eos and "end-marker" in faults else ""), finish, billed, steps


class StoppingServer:
    def __init__(self, faults: set[str] | frozenset[str] = frozenset()) -> None:
        unknown = set(faults) - FAULTS
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}")
        self.faults = frozenset(faults)
        self.requests: list[dict] = []
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> StoppingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: object) -> None:
                pass

            def _json(self, status: int, doc: dict) -> None:
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    self._json(200, {"object": "list", "data": [{"id": "stopper", "object": "model"}]})
                else:
                    self._json(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                req = json.loads(self.rfile.read(min(n, 1 << 20)) or b"{}")
                server.requests.append(req)
                if self.path == "/tokenize":
                    self._json(200, {"tokens": list(range(len(words(req.get("prompt") or ""))))})
                elif self.path == "/v1/chat/completions":
                    self._chat(req)
                else:
                    self._json(404, {"error": {"message": "not found"}})

            def _chat(self, req: dict) -> None:
                f = server.faults
                for field, fault in (("include_stop_str_in_output", "refuse-include"),
                                     ("min_tokens", "refuse-min-tokens"), ("ignore_eos", "refuse-ignore-eos")):  # fmt: skip
                    if req.get(field) and fault in f:
                        self._json(400, {"error": {"message": f"{field} is not supported", "type": "invalid_request"}})
                        return
                prompt = req["messages"][-1]["content"]
                n = 1 if "n-ignored" in f else int(req.get("n") or 1)
                sampled = (req.get("temperature") or 0) > 0
                answers = [SAMPLED[i % len(SAMPLED)] if sampled else ANSWERS.get(prompt, "I do not know.")
                           for i in range(n)]  # fmt: skip
                stream = bool(req.get("stream"))
                gen = [_generate(a, req, f, stream) for a in answers]
                billed = gen[0][2] if "usage-not-summed" in f else sum(g[2] for g in gen)
                usage = {"prompt_tokens": 9, "completion_tokens": billed, "total_tokens": 9 + billed}
                if not stream:
                    chs = []
                    for i, (text, fr, _, entries) in enumerate(gen):
                        c: dict = {"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": fr}
                        if req.get("logprobs"):
                            c["logprobs"] = {"content": [{"token": "t", "logprob": -0.1}] * entries}
                        chs.append(c)
                    self._json(200, {"id": "chatcmpl-1", "object": "chat.completion", "created": int(time.time()),
                                     "model": "stopper", "choices": chs, "usage": usage})  # fmt: skip
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()

                def send(choices: list, **kw: object) -> None:
                    doc = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "stopper",
                           "choices": choices, **kw}  # fmt: skip
                    self.wfile.write(b"data: " + json.dumps(doc).encode() + b"\n\n")

                for i, (text, fr, _, entries) in enumerate(gen):
                    send([{"index": i, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
                    c = {"index": i, "delta": {"content": text}, "finish_reason": fr}
                    if req.get("logprobs"):
                        c["logprobs"] = {"content": [{"token": "t", "logprob": -0.1}] * entries}
                    send([c])
                if (req.get("stream_options") or {}).get("include_usage"):
                    extra = 1 if "stream-usage-off" in f else 0
                    usage = {**usage, "completion_tokens": billed + extra, "total_tokens": 9 + billed + extra}
                    send([], usage=usage)
                self.wfile.write(b"data: [DONE]\n\n")
                self.close_connection = True

        return Handler
