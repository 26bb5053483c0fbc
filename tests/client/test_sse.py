"""The one SSE framer: the incremental parser and its post-hoc scan, through one table of streams."""

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.client.sse import EVENT_KINDS, SSEEvent, SSEParser, data_kind, parse_sse_bytes, scan_reads


def test_kinds_and_raw_bytes_roundtrip():
    blob = b': keep-alive\n\ndata: {"a":1}\n\ndata: x\r\ndata: y\r\n\r\ndata: [DONE]\n\ndata: late\n\ndata: cut'
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
    assert blob.startswith(joined) and not blob[len(joined) :].strip(b"\r\n")


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [b"data: ", b"data:", b"{", b"}", b"[DONE]", b"\n", b"\r", b":", b"event: x", b"\xff\xfe", b"id: 1"]
        ),
        max_size=60,
    )
)
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


# -- the post-hoc scan is the same framer: one table of streams through both ------------------------------------------

STREAMS = [
    b"",
    b'data: {"a":1}\n\ndata: [DONE]\n\n',  # what engines send (LF)
    b"data: x\r\n\r\ndata: y\r\n\r\n",  # CRLF
    b"data: x\r\rdata: y\r\r",  # lone CR
    b"data: x\n\r\ndata: y\r\n\n",  # mixed
    b"\xef\xbb\xbfdata: 1\n\n",  # a leading BOM is not content
    b"data: 1\n\n\xef\xbb\xbfdata: 2\n\n",  # a later one is
    b": keep-alive\n\ndata: a\n:c\n\n\n\ndata: b\n\n",  # comments, also inside an event; blank lines between events
    b"event: e\nid: 7\nretry: 300\ndata: a\ndata: b\n\n",
    b"id: a\0b\n\nretry: soon\n\nevent: only\n\n",  # ignored id and retry still make an "other" block
    b"data\n\ndata:x\n\ndata:  [DONE] \n\n",  # no colon, no space, [DONE] with spaces
    b"data: a\n\ndata: cut",  # a truncated tail
    b"data: a\n\n: tail comment",
    b"data: \xff\xfe\n\n",  # not UTF-8: replaced in data, kept in data_bytes
    b"\n\n\n",
]


def _reads(blob: bytes, cuts: list[int]) -> list[tuple[int, bytes]]:
    pts = sorted({c % (len(blob) + 1) for c in cuts} | {0, len(blob)})
    return [(i, blob[a:b]) for i, (a, b) in enumerate(zip(pts, pts[1:])) if b > a]


def _fed(reads: list[tuple[int, bytes]]) -> list[tuple[int, str, bytes | None, int]]:
    """What SSEParser emits fed the reads one by one: (index of the read, kind, data bytes, raw length)."""
    p, out = SSEParser(), []
    for i, (_, d) in enumerate(reads):
        out += [(i, e.kind, e.data_bytes, len(e.raw)) for e in p.feed(d)]
    return out + [(len(reads) - 1, e.kind, e.data_bytes, len(e.raw)) for e in p.close()]


def test_scan_and_parser_agree_on_every_stream_of_the_table():
    for blob in STREAMS:
        for cuts in ([], [1], [3, 7], list(range(1, len(blob)))):
            reads = _reads(blob, cuts)
            assert scan_reads(reads) == _fed(reads), (blob, cuts)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from([b"data: ", b"data:", b"data", b"{}", b"[DONE]", b"\n", b"\n\n", b"\r", b"\r\n", b":",
                                 b": c", b"event: x", b"id: 1", b"id: \0", b"retry: 5", b"retry: x", b"x", b" ",
                                 b"\xef\xbb\xbf", b"\xff"]), max_size=30),
       st.lists(st.integers(min_value=1, max_value=200), max_size=6))  # fmt: skip
def test_scan_and_parser_agree_on_any_stream_and_any_split(parts, cuts):
    blob = b"".join(parts)
    reads = _reads(blob, cuts)
    events = scan_reads(reads)
    assert events == _fed(reads)
    assert all(k in EVENT_KINDS for _, k, _, _ in events)
    # every byte is in an event, except trailing blank lines that dispatch nothing
    assert not blob[sum(n for *_, n in events) :].strip(b"\r\n")


def test_whatwg_fields():
    (ev,) = parse_sse_bytes(b"event: e\nid: 7\nretry: 300\ndata: a\ndata:b\n\n")
    assert (ev.kind, ev.data, ev.event, ev.id, ev.retry, ev.data_bytes) == ("data", "a\nb", "e", "7", 300, b"a\nb")
    evs = parse_sse_bytes(b"id: a\0b\nretry: 3s\n\n")
    assert [(e.kind, e.id, e.retry) for e in evs] == [("other", None, None)]  # ignored, but the block stays visible
    assert [(e.kind, e.data) for e in parse_sse_bytes(b"data\n\ndata:x\n\ndata:  x\n\n")] == [
        ("data", ""),
        ("data", "x"),
        ("data", " x"),
    ]  # one leading space is dropped, no more
    assert [(e.kind, e.data) for e in parse_sse_bytes(b"data: a\rdata: b\r\r")] == [("data", "a\nb")]
    (ev,) = parse_sse_bytes(b"data: \xff\n\n")
    assert ev.data == "\ufffd" and ev.data_bytes == b"\xff"


def test_done_is_one_rule():
    assert [data_kind(d) for d in (b"[DONE]", b" [DONE] ", b"[DONE]x", b"x", b"")] == [
        "done",
        "done",
        "data",
        "data",
        "data",
    ]
    assert isinstance(parse_sse_bytes(b"data: [DONE]\n\n")[0], SSEEvent)
