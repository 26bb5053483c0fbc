from hypothesis import given, settings
from hypothesis import strategies as st

from harness.sse import SSEParser, parse_sse_bytes


def test_kinds_and_raw_bytes_roundtrip():
    blob = b": keep-alive\n\ndata: {\"a\":1}\n\ndata: x\r\ndata: y\r\n\r\ndata: [DONE]\n\ndata: late\n\ndata: cut"
    evs = parse_sse_bytes(blob)
    assert [e.kind for e in evs] == ["comment", "data", "data", "done", "data", "truncated"]
    assert evs[2].data == "x\ny"
    assert b"".join(e.raw for e in evs) == blob


def test_split_crlf_across_feeds():
    p = SSEParser()
    out = p.feed(b"data: a\r") + p.feed(b"\n\r\n") + p.close()
    assert [(e.kind, e.data) for e in out] == [("data", "a")]


def test_oversized_line_kept():
    big = b"data: " + b"x" * (10 << 20) + b"\n\n"
    evs = parse_sse_bytes(big, max_line=1 << 20)
    assert evs[0].oversized and len(evs[0].data) == 10 << 20


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2000), st.lists(st.integers(min_value=1, max_value=64), max_size=50))
def test_fuzz_never_raises_and_keeps_bytes(blob, cuts):
    p = SSEParser(max_line=64)
    out, i = [], 0
    for c in cuts:
        out += p.feed(blob[i : i + c])
        i += c
    out += p.feed(blob[i:]) + p.close()
    joined = b"".join(e.raw for e in out)
    # Every byte is accounted for, except trailing blank lines that dispatch nothing.
    assert blob.startswith(joined) and not blob[len(joined):].strip(b"\r\n")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([b"data: ", b"data:", b"{", b"}", b"[DONE]", b"\n", b"\r", b":", b"event: x", b"\xff\xfe", b"id: 1"]), max_size=60))
def test_fuzz_sse_tokens(parts):
    evs = parse_sse_bytes(b"".join(parts))
    assert all(e.kind in {"data", "done", "comment", "other", "truncated"} for e in evs)


def test_raw_bytes_join_to_the_stream_around_comments_and_a_bom():
    # examples hypothesis found (or could): a blank line before a comment, a comment inside an event, a leading BOM
    for blob in (b"\n:", b"data: a\n:c\n\n", b"data: a\n:c\n", b"\xef\xbb\xbfdata: 1\n\n", b"\xef\xbb\xbf"):
        evs = parse_sse_bytes(blob)
        assert b"".join(e.raw for e in evs) == blob, (blob, evs)
    assert [(e.kind, e.data) for e in parse_sse_bytes(b"data: a\n:c\n\n")] == [("comment", "c"), ("data", "a")]


def test_a_leading_bom_is_not_content_even_split_across_feeds():
    p = SSEParser()
    out = p.feed(b"\xef") + p.feed(b"\xbb") + p.feed(b"\xbfdata: 1\n\n") + p.close()
    assert [(e.kind, e.data) for e in out] == [("data", "1")]
    assert [(e.kind, e.data) for e in parse_sse_bytes(b"\xef\xbb\xbfdata: 1\n\n")] == [("data", "1")]
