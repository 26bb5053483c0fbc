"""The load parse and the events.jsonl lines it writes are byte-identical to the frozen reference (the parse before
the typed decode, framed by SSEParser read by read): for engine-shaped streams split any way, for the fast SSE
server's bodies, and for chunks of arbitrary JSON over the fields the classifier reads (odd types, non-ASCII,
escapes, DEL, big and float numbers, duplicate and escaped keys, NaN, lone surrogates, invalid UTF-8, deep nesting)."""

import copy
import io
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.load import runner
from harness.load.stream import parse_stream

from . import reference_parse as ref

T0, SENT = 1_000, 50


def _reads(body: bytes, cuts: list[int], t: int = T0 + SENT + 7) -> list[tuple[int, bytes]]:
    pts = sorted({c % (len(body) + 1) for c in cuts} | {0, len(body)})
    return [(t + 3 * i, body[a:b]) for i, (a, b) in enumerate(zip(pts, pts[1:])) if b > a]


def _record(i: int) -> dict:
    return {"type": "request", "id": i if i % 2 else f"w{i}", "warmup": False, "prompt_units": 32, "max_tokens": 8,
            "prefixed": False, "scheduled_ns": 10, "ready_ns": 20, "sent_ns": SENT, "headers_ns": 60, "end_ns": 900,
            "status": 200, "outcome": "ok", "error": None, "bytes": 0}  # fmt: skip


def _flushed(batch: list[tuple[dict, list]]) -> str:
    run = runner._Run.__new__(runner._Run)  # only the flush path: no clients, no files
    run.t0, run.n_written, run.finished, run.fh = T0, 0, batch, io.StringIO()
    run.flush()
    return run.fh.getvalue()


def assert_identical(bodies: list[bytes], cuts: list[int] = ()) -> None:
    batch = [(_record(i), _reads(b, list(cuts))) for i, b in enumerate(bodies)]
    for _, reads in batch:
        new, old = parse_stream(reads), ref.parse_stream(reads)
        assert (new.t, new.nbytes, new.kinds, new.chars, new.usage, new.finish_reason, new.error, new.done) == (
            old.t, old.nbytes, old.kinds, old.chars, old.usage, old.finish_reason, old.error, old.done), reads  # fmt: skip
    expected = ref.flush_lines(T0, copy.deepcopy(batch))
    assert _flushed(batch) == expected


def sse(*payloads: bytes) -> bytes:
    return b"".join(b"data: " + p + b"\n\n" for p in payloads)


def chunk(**fields) -> bytes:
    return json.dumps({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m", **fields},
                      separators=(",", ":")).encode()  # fmt: skip


def delta(d: dict, finish=None) -> bytes:
    return chunk(choices=[{"index": 0, "delta": d, "logprobs": None, "finish_reason": finish}])


VLLM = sse(
    delta({"role": "assistant", "content": ""}),
    delta({"content": ""}),
    delta({"content": "H\u00e9"}),
    delta({"content": 'llo "x"\n\u007f'}),
    delta({"reasoning_content": "hm"}),
    delta({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": '{"a":'}}]}),
    delta({"content": "!"}, finish="length"),
    chunk(choices=[], usage={"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}),
    b"[DONE]",
)


def fast_server_body(n: int, chat: bool) -> bytes:
    """The SSE body shared/tools/fast_sse_server.py sends (without its HTTP chunking)."""
    head = {
        "id": "cmpl-1",
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": 1,
        "model": "tiny",
    }
    tok = {"delta": {"content": "tok"}} if chat else {"text": "tok"}
    first = [{**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                                   "finish_reason": None}]}] if chat else []  # fmt: skip
    objs = (
        first
        + [{**head, "choices": [{"index": 0, **tok, "logprobs": None, "finish_reason": None}]}] * (n - 1)
        + [
            {**head, "choices": [{"index": 0, **tok, "logprobs": None, "finish_reason": "length"}]},
            {**head, "choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": 8 + n}},
        ]
    )
    return sse(*(json.dumps(o, separators=(",", ":")).encode() for o in objs), b"[DONE]")


def test_fast_server_bodies_in_few_and_many_reads():
    for chat in (True, False):
        body = fast_server_body(512, chat)
        for cuts in ([], [len(body) // 2], list(range(1, len(body), 997)), list(range(1, len(body), 61))):
            assert_identical([body, body[:-9], body.replace(b"\n", b"\r\n")], cuts)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=2000), max_size=12), st.booleans())
def test_engine_stream_any_split(cuts, crlf):
    body = VLLM.replace(b"\n", b"\r\n") if crlf else VLLM
    assert_identical([body, b": keep-alive\n\n" + body, body + b'data: {"choices":[]'], cuts)


def test_table_of_odd_chunks():
    odd = [b'{"error":{"message":"boom"}}', b'{"error":"x","choices":null}', b'{"error":null}', b'{"choices":null}',
           b'{"choices":{}}', b'{"choices":[1]}', b'{"choices":"x"}', b'{"choices":[{"delta":5}]}', b'[1,2]', b'"s"',
           b'null', b'{"choices":[],"usage":{"a":1.5,"b":-1,"c":true,"d":9007199254740993}}', b'{"usage":"x"}',
           b'{"choices":1,"choices":[{"delta":{"content":"a","content":"bb"}}]}', b'{"\\u0063hoices":[{"text":"z"}]}',
           b'{"choices":[{"text":"\\ud800"}]}', b'{"choices":[{"text":NaN}]}', b'{"choices":[{"text":1e999}]}',
           b'{"choices":[{"delta":{"content":"a"}}],"x":' + b"[" * 70 + b"]" * 70 + b"}",
           b'{"choices":[{"delta":{"content":"a"}, "x":' + b"[" * 40 + b"]" * 40 + b"}]}", b"\xff\xfe",
           b'{"choices":[{"finish_reason":7,"delta":{"role":"assistant"}}]}', b'{"choices":[{"delta":{"role":1}}]}',
           b'{"choices":[{"delta":{"tool_calls":[1,{"function":{"name":"n","arguments":3}},{"function":[]}]}}]}',
           b'{"choices":[{"delta":{"tool_calls":{"a":1}}}]}', b'{"choices":[{"delta":{"reasoning":"r","content":5}}]}',
           b'{"choices":[{"delta":{"content":"\\u00e9\\u007f\\n"},"finish_reason":"\\u00e9"}]}', b"{}", b"",
           b'{"choices":[{"delta":{}},{"text":"t"}]}', b'{"choices":[{"delta":{"content":"a"}}],"usage":{"\\u00e9":2}}',
           b'{"choices":[{"delta":{"content":"' + b"x" * 5000 + b'"}}]}', b" [DONE] ", b"[DONE]x",
           b'{"choices":[{"delta":{"content":"a"},"finish_reason":"\\u007f\\u0001\\"\\\\/"}]}',
           b'{"error":"\\u007f\\u0001\\n\\"\\\\\\u2028"}']  # fmt: skip
    for p in odd:
        assert_identical([sse(delta({"content": "a"}), p, b"[DONE]"), sse(p)])
    assert_identical([sse(*odd, b"[DONE]")], [3, 100, 400])


_keys = st.sampled_from(["choices", "usage", "error", "delta", "text", "finish_reason", "content", "role",
                         "reasoning_content", "reasoning", "tool_calls", "function", "name", "arguments", "index",
                         "prompt_tokens", "\u00e9"])  # fmt: skip
_leaf = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
         | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=6))  # fmt: skip
_json = st.recursive(_leaf, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=5),
                     max_leaves=25)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(_json, min_size=1, max_size=6), st.booleans())
def test_arbitrary_json_chunks(values, ascii_only):
    payloads = [json.dumps(v, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass") for v in values]
    assert_identical([sse(*payloads, b"[DONE]"), sse(*payloads)])


_delta = st.fixed_dictionaries({}, optional={"content": _json | st.text(max_size=4), "role": _json, "reasoning": _json,
                                             "reasoning_content": _json, "tool_calls": _json})  # fmt: skip
_choice = st.fixed_dictionaries({}, optional={"delta": _delta | _json, "text": _json | st.text(max_size=4),
                                              "finish_reason": _json})  # fmt: skip
_chunk = st.fixed_dictionaries({}, optional={"choices": st.lists(_choice | _json, max_size=3) | _json, "usage": _json,
                                             "error": _json, "id": _json})  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(_chunk, min_size=1, max_size=6))
def test_arbitrary_chunk_shaped_json(values):
    payloads = [json.dumps(v).encode() for v in values]
    assert_identical([sse(*payloads, b"[DONE]")])
