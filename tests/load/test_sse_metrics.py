import json

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.load.crosscheck import _bucket_of, histogram, server_crosscheck
from harness.load.metrics import aggregate, goodput, percentile, request_metrics
from harness.load.stream import parse_stream
from harness.metrics import parse_exposition as parse_prom


def chunk(delta=None, finish=None, choices=True, **extra):
    obj = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    if choices:
        obj["choices"] = [{"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}]
    else:
        obj["choices"] = []
    obj.update(extra)
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


VLLM_STREAM = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"content": ""}),  # held-back incomplete UTF-8
    chunk({"content": "H\u00e9"}),
    chunk({"content": 'llo \\"x\\"'}),
    chunk({"content": "!"}, finish="length"),
    chunk(choices=False, usage={"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}),
    b"data: [DONE]\n\n",
]


def test_vllm_stream_kinds():
    body = b"".join(VLLM_STREAM)
    ps = parse_stream([(100, body)])
    assert ps.kinds == "reccc" + "ud"
    assert ps.usage["completion_tokens"] == 4 and ps.finish_reason == "length" and ps.done
    assert ps.chars[2] == 2 and ps.chars[3] == len('llo \\"x\\"')


def test_spaced_json_error_and_tgi_role_everywhere():
    tgi = chunk({"role": "assistant", "content": "a"}) + chunk({"role": "assistant", "content": ""}, finish="stop")
    err = b'data: {"error": {"message": "boom", "type": "BadRequestError", "param": null, "code": 400}}\n\n'
    ps = parse_stream([(1, tgi + err + b"data: [DONE]\n\n")])
    assert ps.kinds == "cexd" and "boom" in ps.error


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=400), min_size=0, max_size=20), st.booleans())
def test_any_split_gives_same_events_and_read_times(cuts, crlf):
    body = b"".join(VLLM_STREAM)
    if crlf:
        body = body.replace(b"\n", b"\r\n")
    pts = sorted({c % len(body) for c in cuts} | {0, len(body)})
    reads = [(i, body[a:b]) for i, (a, b) in enumerate(zip(pts, pts[1:])) if b > a]
    ps = parse_stream(reads)
    assert ps.kinds == "recccud"
    assert ps.t == sorted(ps.t)
    # the stamp is the read in which the event's terminating blank line completed (its first byte: a CR ends a line)
    offs, acc = [], 0
    for ev in VLLM_STREAM:
        acc += len(ev) + 2 if crlf else len(ev)  # its two LFs became CRLFs
        offs.append(acc - 1 if crlf else acc)
    ends, acc = [], 0
    for _, d in reads:
        acc += len(d)
        ends.append(acc)
    assert ps.t == [reads[next(i for i, e in enumerate(ends) if e >= o)][0] for o in offs]


def rec(i, ev_t, kinds, usage_tokens=None, outcome="ok", sent=1_000_000, end=None, warmup=False):
    return {
        "id": i,
        "warmup": warmup,
        "sent_ns": sent,
        "scheduled_ns": sent - 2_000_000,
        "ready_ns": sent - 1_000_000,
        "first_byte_ns": sent + ev_t[0] if ev_t else None,
        "end_ns": end or sent + (ev_t[-1] if ev_t else 0) + 1_000_000,
        "ev_t": ev_t,
        "ev_k": kinds,
        "outcome": outcome,
        "usage": {"completion_tokens": usage_tokens, "prompt_tokens": 3} if usage_tokens is not None else None,
    }


def test_request_metrics_definitions():
    ms = 1_000_000
    r = rec(0, [50 * ms, 50 * ms, 60 * ms, 70 * ms, 90 * ms, 91 * ms, 91 * ms], "reccc" + "ud", usage_tokens=4)
    m = request_metrics(r)
    assert m["ttft_role_ms"] == 50 and m["ttfb_ms"] == 50
    assert m["ttft_ms"] == 60  # the empty (held-back) chunk is not content
    assert m["itl_ms"] == [10, 10, 20]  # output events only: e@50 c@60 c@70 c@90
    assert m["tpot_ms"] == (90 - 60) / 3
    assert m["vb_itl_ms"] == [0, 10, 10, 20]  # role chunk counts for vllm bench
    assert m["vb_latency_ms"] == 91 and m["vb_tpot_ms"] == (91 - 50) / 3
    assert m["send_lag_ms"] == 1 and m["output_tokens"] == 4 and m["output_tokens_source"] == "usage"
    m2 = request_metrics(rec(1, [5 * ms, 6 * ms], "cd"))
    assert m2["output_tokens"] == 1 and m2["output_tokens_source"] == "chunks" and m2["tpot_ms"] is None


def test_percentile_matches_numpy():
    import numpy as np

    xs = [3.0, 1.0, 7.5, 2.25, 9.0, 4.0]
    for p in (0, 50, 90, 95, 99, 100):
        assert abs(percentile(xs, p) - float(np.percentile(xs, p))) < 1e-12
    assert percentile([], 50) is None


def test_aggregate_goodput_and_outcomes():
    ms = 1_000_000
    reqs = [
        rec(0, [10 * ms, 20 * ms, 30 * ms, 40 * ms], "rccu", usage_tokens=2),
        rec(1, [500 * ms, 510 * ms, 520 * ms, 521 * ms], "rccu", usage_tokens=2),
        rec(2, [], "", outcome="http_error"),
        rec(3, [], "", outcome="cancelled"),
        rec(4, [1 * ms, 2 * ms], "rc", warmup=True, usage_tokens=1),
    ]
    a = aggregate(reqs, 0, None, {"ttft_ms": 100})
    assert a["requests"]["total"] == 4 and a["requests"]["ok"] == 2 and a["requests"]["failed"] == 1
    assert a["requests"]["error_rate"] == 1 / 3  # cancelled requests are not finished
    assert a["goodput"]["good"] == 1 and a["goodput"]["fraction"] == 0.25
    assert a["tokens"]["output"] == 4
    good, bad = goodput([request_metrics(r) for r in reqs[:2]], {"tpot_ms": 5})
    assert good == 0 and bad[0][1] == ["tpot_ms"]


PROM_BEFORE = """# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="tiny"} 10.0
vllm:prompt_tokens_total{engine="0",model_name="tiny"} 5.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"} 1.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.05",model_name="tiny"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="tiny"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="tiny"} 1.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="tiny"} 1.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="tiny"} 0.01
vllm:num_preemptions_total{engine="0",model_name="tiny"} 0.0
"""


def after(gen, prompt, succ, b05, b1, binf, s):
    return (
        PROM_BEFORE.replace("} 10.0", f"}} {gen}")
        .replace('tiny"} 5.0', f'tiny"}} {prompt}')
        .replace(
            'finished_reason="length",model_name="tiny"} 1.0', f'finished_reason="length",model_name="tiny"}} {succ}'
        )
        .replace('le="0.05",model_name="tiny"} 1.0', f'le="0.05",model_name="tiny"}} {b05}')
        .replace('le="0.1",model_name="tiny"} 1.0', f'le="0.1",model_name="tiny"}} {b1}')
        .replace('le="+Inf",model_name="tiny"} 1.0', f'le="+Inf",model_name="tiny"}} {binf}')
        .replace('_count{engine="0",model_name="tiny"} 1.0', f'_count{{engine="0",model_name="tiny"}} {binf}')
        .replace('_sum{engine="0",model_name="tiny"} 0.01', f'_sum{{engine="0",model_name="tiny"}} {s}')
    )


def test_prom_parse_and_buckets():
    smp = parse_prom(PROM_BEFORE)
    h = histogram(smp, "vllm:time_to_first_token_seconds")
    assert h["le"][-1] == float("inf") and h["cum"] == [1.0, 1.0, 1.0]
    assert _bucket_of({"le": [0.05, 0.1, float("inf")], "cum": [1, 3, 4]}, 0.5) == (0.05, 0.1)


def test_crosscheck_agreement_and_flags():
    ms = 1_000_000
    reqs = [
        rec(0, [30 * ms, 31 * ms, 40 * ms, 41 * ms], "rccu", usage_tokens=2),
        rec(1, [70 * ms, 71 * ms, 80 * ms, 81 * ms], "rccu", usage_tokens=2),
    ]
    scr = [
        {"phase": "before", "text": PROM_BEFORE},
        {"phase": "after", "text": after(14.0, 11.0, 3.0, 2.0, 3.0, 3.0, 0.1)},
    ]
    res = server_crosscheck(reqs, scr)
    assert res["tokens"]["output"] == {"client_chunks": 4, "client_usage": 4, "server": 4.0}
    assert res["flags"] == []
    th = res["ttft_histogram"]
    assert th["server_count"] == 2 and th["quantiles"]["p50"]["client_vs_bucket"] == "inside"
    # the server generated more than the client saw, and one request had no usage: explained
    reqs.append(rec(2, [20 * ms], "r", outcome="transport_error"))
    res = server_crosscheck(reqs, [scr[0], {"phase": "after", "text": after(17.0, 14.0, 3.0, 3.0, 4.0, 4.0, 0.1)}])
    assert any("1 request(s) ended without a usage chunk" in f for f in res["flags"])
    # a client TTFT below the server's bucket is impossible for the same requests: flagged
    fast = [rec(0, [1 * ms, 2 * ms, 3 * ms], "rcu", usage_tokens=1)]
    res = server_crosscheck(fast, [scr[0], {"phase": "after", "text": after(11.0, 8.0, 2.0, 1.0, 2.0, 2.0, 0.1)}])
    assert any("below the server's bucket" in f for f in res["flags"])
