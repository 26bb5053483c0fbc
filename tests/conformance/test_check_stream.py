"""Acceptance 3: check-stream over TGI's recordings, under both expectation files, and over hand-corrupted copies."""

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.cli import main
from harness.conformance.checkstream import check_view
from harness.conformance.expectations import load_expectations
from harness.conformance.view import from_chunks, load_recorded

from .conftest import FIXTURES, STREAMED


def verdicts(results):
    return {r.id: r.verdict for r in results}


def test_five_streamed_recordings():
    assert len(STREAMED) == 5


@pytest.mark.parametrize("path", STREAMED, ids=lambda p: p.stem)
def test_tgi_recordings_pass_under_tgi(path, capsys):
    assert main(["check-stream", str(path), "--expect", "tgi-3.3.5"]) == 0


@pytest.mark.parametrize("path", STREAMED, ids=lambda p: p.stem)
def test_tgi_recordings_fail_under_vllm_where_engines_differ(path):
    res = verdicts(check_view(load_recorded(path), load_expectations("vllm-0.11")))
    for cid in ("chat.stream.role-first", "chat.stream.role-once", "chat.stream.consistent-id"):
        assert res[cid] == "fail", cid
    assert main(["check-stream", str(path), "--expect", "vllm-0.11"]) == 1


def test_non_stream_recording_is_not_a_stream():
    assert load_recorded(FIXTURES / "test_flash_llama_simple.json") is None
    assert main(["check-stream", str(FIXTURES / "test_flash_llama_simple.json"), "--expect", "tgi-3.3.5"]) == 0


def _chunks(name="test_flash_llama_completion_stream_usage.json"):
    return json.loads((FIXTURES / name).read_text())


def _corrupt(fn):
    chunks = copy.deepcopy(_chunks())
    fn(chunks)
    return verdicts(check_view(from_chunks(chunks), load_expectations("tgi-3.3.5")))


CORRUPTIONS = {
    "chat.stream.usage-totals": lambda c: c[-1]["usage"].update(total_tokens=999),
    "chat.stream.usage-last": lambda c: c[-1]["choices"].append(copy.deepcopy(c[0]["choices"][0])),
    "chat.stream.one-finish-reason": lambda c: c[2]["choices"][0].update(finish_reason="stop"),
    "chat.stream.consistent-model": lambda c: c[4].update(model="other"),
    "chat.stream.object": lambda c: c[3].update(object="chat.completion"),
    "chat.stream.finish-reason-values": lambda c: c[-2]["choices"][0].update(finish_reason="weird"),
    "chat.stream.usage-completion-count": lambda c: c[-1]["usage"].update(completion_tokens=3, total_tokens=43),
    "chat.stream.json-chunks": lambda c: c.insert(2, "not an object"),
}


@pytest.mark.parametrize("case_id", sorted(CORRUPTIONS))
def test_hand_corrupted_copies_fail_with_the_right_id(case_id):
    res = _corrupt(CORRUPTIONS[case_id])
    assert res[case_id] == "fail", res


def test_corrupted_raw_sse_file(tmp_path):
    chunks = _chunks()
    lines = [f"data: {json.dumps(c)}\n\n" for c in chunks]
    good = tmp_path / "good.sse"
    good.write_text("".join(lines) + "data: [DONE]\n\n")
    assert main(["check-stream", str(good), "--expect", "tgi-3.3.5"]) == 0
    late = tmp_path / "late.sse"
    late.write_text("".join(lines) + "data: [DONE]\n\n" + lines[0])
    no_done = tmp_path / "nodone.sse"
    no_done.write_text("".join(lines))
    bad_json = tmp_path / "badjson.sse"
    bad_json.write_text(lines[0] + 'data: {"id": \n\n' + "".join(lines[1:]) + "data: [DONE]\n\n")
    exp = load_expectations("tgi-3.3.5")
    assert verdicts(check_view(load_recorded(late), exp))["chat.stream.nothing-after-done"] == "fail"
    assert verdicts(check_view(load_recorded(no_done), exp))["chat.stream.done-present"] == "fail"
    r = [x for x in check_view(load_recorded(bad_json), exp) if x.id == "chat.stream.json-chunks"][0]
    assert r.verdict == "fail" and r.chunk == 1


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5) | st.floats(allow_nan=False),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "id",
                    "object",
                    "created",
                    "model",
                    "choices",
                    "delta",
                    "role",
                    "content",
                    "finish_reason",
                    "index",
                    "usage",
                    "prompt_tokens",
                    "completion_tokens",
                    "total_tokens",
                    "tool_calls",
                    "function",
                    "logprobs",
                    "text",
                    "error",
                ]
            ),
            inner,
            max_size=5,
        )
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(json_values, max_size=8), st.sampled_from(["chat", "completions"]))
def test_fuzz_chunk_checks_never_raise(chunks, kind):
    for exp in ("openai", "tgi-3.3.5"):
        res = check_view(from_chunks(chunks), load_expectations(exp), kind)
        assert all(r.verdict != "error" for r in res), [r for r in res if r.verdict == "error"]
