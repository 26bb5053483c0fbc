"""Hostile input for `harness conform`, `check-stream`, `update-expectations`, the pytest plugin and the expectation
loader (issue 12: findings 1, 2, 8, 15, 16, 21, 23-27 and 29, conformance part).

Every network case runs against tests/support/badserver.py on 127.0.0.1 with tight bounds; refusals are shown on the
parsed address (the session's netguard records any connect() outside loopback in ATTEMPTS).
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import socket
import stat
import time
import tracemalloc
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.cli import main
from harness.conformance.expectations import EXPECTATIONS_DIR, load_expectations
from harness.conformance.runner import new_ctx, run_suite
from harness.errors import HarnessError
from tests.support import netguard
from tests.support.badserver import CHUNK, BadServer

pytest_plugins = ["pytester"]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tgi-3.3.5"
STREAM_FIXTURE = FIXTURES / "test_flash_llama_completion_stream_usage.json"
DEEP = "[" * 20000
TIGHT = {"max_stream_s": 0.5}  # what a test passes to a context: every exchange bounded to half a second


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(err: str) -> str:
    """The whole stderr is one `harness: error:` line: no traceback."""
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("harness: error: "), err
    assert "Traceback" not in err
    return lines[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def suite(url: str, patterns=None, exp="vllm-0.11", wall=20.0, **ctx_kw):
    """(report, context, seconds): run_suite against `url`, itself bounded so a regression cannot hang the test."""
    ctx = new_ctx(url, load_expectations(exp), **{**TIGHT, **ctx_kw})
    t0 = time.monotonic()
    rep = asyncio.run(asyncio.wait_for(run_suite(ctx, patterns=patterns, max_wall_s=wall), wall + 30))
    return rep, ctx, time.monotonic() - t0


@contextmanager
def unreadable(monkeypatch, path: Path):
    """Opening `path` fails with EACCES, whichever way it is opened (tests run as root, where chmod 000 reads fine)."""
    target = os.path.abspath(path)

    def guard(p):
        if os.path.abspath(os.fspath(p)) == target:
            raise PermissionError(13, "Permission denied", str(p))

    real_os_open, real_io_open = os.open, io.open

    def os_open(p, *a, **kw):
        if not isinstance(p, int):
            guard(p)
        return real_os_open(p, *a, **kw)

    def io_open(p, *a, **kw):
        if not isinstance(p, int):
            guard(p)
        return real_io_open(p, *a, **kw)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(io, "open", io_open)
    yield


# -- 1, 25, 29: one loopback rule for `conform --url` and the pytest plugin ---------------------------------------

BAD_URLS = {
    "remote": ("http://8.8.8.8:80", "loopback only"),
    "resolves-but-is-a-name": ("http://127.0.0.1.nip.io:80", "loopback only"),
    "port-out-of-range": ("http://127.0.0.1:99999", "out of range"),
    "newline": ("http://127.0.0.1:8000\nHost: evil", "control character"),
    "trailing-newline": ("http://127.0.0.1:8000\n", "control character"),
    "ftp": ("ftp://127.0.0.1:21", "http(s)"),
    "no-scheme": ("127.0.0.1:8000", "http(s)"),
}


@pytest.mark.parametrize("name", sorted(BAD_URLS))
def test_conform_url_goes_through_the_one_loopback_rule(name, capsys):
    url, why = BAD_URLS[name]
    before = list(netguard.ATTEMPTS)
    code, out, err = run_cli(capsys, "conform", "--url", url, "--expect", "vllm-0.11", "-k", "health")
    assert code == 2
    assert why in one_line_error(err)
    assert netguard.ATTEMPTS == before  # refused on the parsed address: no socket was opened


PLUGIN_URLS = {"remote": "http://8.8.8.8:80", "port": "http://127.0.0.1:99999", "ftp": "ftp://127.0.0.1:21"}


@pytest.mark.parametrize("via", ["option", "env"])
@pytest.mark.parametrize("name", sorted(PLUGIN_URLS))
def test_pytest_plugin_refuses_a_non_loopback_url_before_any_socket(pytester, monkeypatch, via, name):
    url = PLUGIN_URLS[name]
    pytester.makepyfile("def test_nothing():\n    pass\n")
    before = list(netguard.ATTEMPTS)
    if via == "env":
        monkeypatch.setenv("HARNESS_URL", url)
        r = pytester.runpytest("-p", "no:cacheprovider")
    else:
        monkeypatch.delenv("HARNESS_URL", raising=False)
        r = pytester.runpytest("--harness-url", url, "-p", "no:cacheprovider")
    assert r.ret == pytest.ExitCode.USAGE_ERROR, r.stdout.str() + r.stderr.str()
    text = r.stderr.str()
    assert "harness:" in text and ("HARNESS_URL" if via == "env" else "--harness-url") in text
    assert netguard.ATTEMPTS == before  # in-process run: the session's guard would have seen a connect()


# -- 2: no URL password in conformance.json, junit.xml or the table ----------------------------------------------


def test_url_password_never_stored_or_shown(tmp_path, capsys):
    with BadServer("ok") as s:
        url = s.url.replace("http://", "http://alice:s3cret-pw@")
        code, out, err = run_cli(capsys, "conform", "--url", url, "--expect", "vllm-0.11", "-k", "health",
                                 "--out", tmp_path / "out")  # fmt: skip
    assert code in (0, 1), err
    doc = json.loads((tmp_path / "out" / "conformance.json").read_text())
    assert doc["engine"]["url"].startswith("http://***@127.0.0.1:")
    for text in (out, err, *(p.read_text() for p in (tmp_path / "out").rglob("*") if p.is_file())):  # evidence/ too
        assert "s3cret-pw" not in text


def test_url_password_not_in_the_no_server_message(capsys):
    url = f"http://bob:hunter2-pw@127.0.0.1:{free_port()}"
    code, out, err = run_cli(capsys, "conform", "--url", url, "--expect", "vllm-0.11", "-k", "health",
                             "--stream-seconds", "2")  # fmt: skip
    assert code == 1 and "hunter2-pw" not in out + err


# -- 8, 27: --out is checked before any work, written atomically, and replaced only with --force -----------------


def test_conform_out_refuses_existing_results_without_force(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "conformance.json").write_text('{"old": true}')
    with BadServer("ok") as s:
        code, _, err = run_cli(capsys, "conform", "--url", s.url, "--expect", "vllm-0.11", "-k", "health", "--out", out)
        assert sum(s.hits.values()) == 0  # refused before the first request
    assert code == 2 and "--force" in one_line_error(err)
    assert (out / "conformance.json").read_text() == '{"old": true}'


def test_conform_out_with_force_replaces_atomically(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    old = out / "conformance.json"
    old.write_text('{"old": true}')
    (out / "junit.xml").write_text("<old/>")
    inode = old.stat().st_ino
    with open(old) as held:  # a reader that opened the old file keeps reading the old, whole file
        with BadServer("ok") as s:
            code, _, err = run_cli(capsys, "conform", "--url", s.url, "--expect", "vllm-0.11", "-k", "health",
                                   "--out", out, "--force")  # fmt: skip
        assert held.read() == '{"old": true}'
    assert code == 0, err
    assert old.stat().st_ino != inode  # a new file renamed into place, not the old one rewritten in place
    assert json.loads(old.read_text())["counts"]["pass"] == 3
    assert "<testsuite" in (out / "junit.xml").read_text()
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_conform_launch_checks_out_before_launching(tmp_path, capsys, monkeypatch):
    import harness.launch.session as session

    def no_launch(*a, **kw):
        raise AssertionError("launched an engine although --out was refused")

    monkeypatch.setattr(session, "launch", no_launch)
    out = tmp_path / "out"
    out.mkdir()
    (out / "junit.xml").write_text("<old/>")
    code, _, err = run_cli(capsys, "conform", "manifests/vllm-0.11.0-cpu.yaml", "--out", out)
    assert code == 2 and "junit.xml" in one_line_error(err)


def _out_is_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    return f


def _junit_is_a_dir(tmp_path):
    (tmp_path / "o" / "junit.xml").mkdir(parents=True)
    return tmp_path / "o"


def _parent_is_a_file(tmp_path):
    return _out_is_a_file(tmp_path) / "sub"


BAD_OUT = {
    "existing-file": _out_is_a_file,
    "junit-is-a-directory": _junit_is_a_dir,
    "parent-is-a-file": _parent_is_a_file,
}


@pytest.mark.parametrize("name", sorted(BAD_OUT))
@pytest.mark.parametrize("force", [False, True])
def test_conform_bad_out_paths_are_one_line(name, force, tmp_path, capsys):
    out = BAD_OUT[name](tmp_path)
    with BadServer("ok") as s:
        code, _, err = run_cli(capsys, "conform", "--url", s.url, "--expect", "vllm-0.11", "-k", "health", "--out", out,
                               *(["--force"] if force else []))  # fmt: skip
        assert sum(s.hits.values()) == 0
    assert code == 2
    one_line_error(err)


@pytest.mark.parametrize("mask", [0o022, 0o077])
def test_conform_outputs_follow_the_umask(mask, tmp_path, capsys):
    old = os.umask(mask)
    try:
        with BadServer("ok") as s:
            code, _, err = run_cli(capsys, "conform", "--url", s.url, "--expect", "vllm-0.11", "-k", "health",
                                   "--out", tmp_path / "out")  # fmt: skip
    finally:
        os.umask(old)
    assert code == 0, err
    for name in ("conformance.json", "junit.xml"):
        assert stat.S_IMODE((tmp_path / "out" / name).stat().st_mode) == 0o666 & ~mask


# -- 15, 23, 24: check-stream reads through the bounded readers; nothing to check is not "ok" ----------------------

NOT_STREAMS = {
    "error-body": b'{"error": {"message": "model not found", "type": "NotFoundError", "code": 404}}',
    "plain-error": b'{"error": "Unauthorized"}',
    "corrupt-trace": b'{"method": "POST", "events": [{"bogus": 1}]}',
    "trace-wrong-types": b'{"method": "POST", "url": "/x", "events": "nope"}',
    "some-object": b'{"hello": "world"}',
    "deep-nesting": DEEP.encode(),
    "deep-object": b'{"a":' * 20000,
    "nan": b'[{"id": NaN}]',
    "bad-json": b'[{"id": "x",',
    "not-utf8-json": b'[{"id": "\xff"}]',
}


@pytest.mark.parametrize("name", sorted(NOT_STREAMS))
def test_check_stream_refuses_what_is_not_a_stream(name, tmp_path, capsys):
    f = tmp_path / f"{name}.json"
    f.write_bytes(NOT_STREAMS[name])
    code, out, err = run_cli(capsys, "check-stream", f)
    assert code == 2, out
    assert str(f) in one_line_error(err)
    assert "ok" not in out.split()


def test_check_stream_unreadable_file_is_one_line(tmp_path, capsys, monkeypatch):
    f = tmp_path / "s.sse"
    f.write_bytes(b"data: {}\n\n")
    with unreadable(monkeypatch, f):
        code, _, err = run_cli(capsys, "check-stream", f)
    assert code == 2 and "Permission denied" in one_line_error(err)


def test_check_stream_fifo_does_not_block(tmp_path, capsys):
    f = tmp_path / "fifo"
    os.mkfifo(f)
    code, _, err = run_cli(capsys, "check-stream", f)
    assert code == 2 and "FIFO" in one_line_error(err)


def _sse_capture() -> bytes:
    chunks = json.loads(STREAM_FIXTURE.read_text())
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


@pytest.mark.parametrize("form", ["sse", "json"])
def test_check_stream_bom_loses_nothing(form, tmp_path, capsys):
    body = _sse_capture() if form == "sse" else STREAM_FIXTURE.read_bytes()
    plain, bom = tmp_path / "plain", tmp_path / "bom"
    plain.write_bytes(body)
    bom.write_bytes(b"\xef\xbb\xbf" + body)
    results = {}
    for f in (plain, bom):
        code, out, err = run_cli(capsys, "check-stream", f, "--expect", "tgi-3.3.5", "--json")
        assert code == 0, out + err
        results[f.name] = json.loads(out)[str(f)]
    assert results["bom"]["note"] == results["plain"]["note"]
    assert [c["verdict"] for c in results["bom"]["cases"]] == [c["verdict"] for c in results["plain"]["cases"]]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    blob=st.one_of(
        st.binary(max_size=400),
        st.builds(
            lambda v: json.dumps(v).encode(),
            st.recursive(
                st.none() | st.booleans() | st.integers() | st.text(max_size=4),
                lambda inner: (
                    st.lists(inner, max_size=3)
                    | st.dictionaries(
                        st.sampled_from(["error", "events", "method", "choices", "object", "message", "id"]),
                        inner,
                        max_size=4,
                    )
                ),
                max_leaves=20,
            ),
        ),
    )
)
def test_fuzz_check_stream_answers_or_refuses_in_one_line(blob, tmp_path_factory):
    f = tmp_path_factory.mktemp("fuzz") / "s"
    f.write_bytes(blob)
    import contextlib

    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(["check-stream", str(f)])
    assert code in (0, 1, 2)
    if code == 2:
        assert err.getvalue().startswith("harness: error: ") and len(err.getvalue().strip().splitlines()) == 1


# -- 16: an HTTP 500 or an empty stream gives no pass on zero chunks ---------------------------------------------


@pytest.mark.parametrize("mode", ["http500", "empty"])
def test_no_pass_on_zero_chunks(mode):
    with BadServer({"/v1/chat/completions": mode, "/v1/completions": mode, "*": "ok"}) as s:
        rep, _, _ = suite(s.url, ["chat.stream", "completions.stream"])
    passed = sorted(r.id for r in rep.results if r.verdict == "pass" or r.unexpected_pass)
    # the only thing an empty 200 stream shows is its header
    allowed = {"empty": ["chat.stream.content-type", "completions.stream.content-type"], "http500": []}[mode]
    assert passed == allowed, passed
    assert not rep.ok


def test_zero_chunks_do_not_mark_a_declared_quirk_as_fixed():
    # tgi-3.3.5 declares role-on-every-chunk for chat.stream.role-once: an empty stream must not "fix" it
    with BadServer({"/v1/chat/completions": "http500", "*": "ok"}) as s:
        rep, _, _ = suite(s.url, ["chat.stream.role-once"], exp="tgi-3.3.5")
    (r,) = rep.results
    assert r.verdict == "skip" and not r.unexpected_pass, r


# -- 21: the suite's wall time and every stream's bytes and duration are bounded ---------------------------------

SHAPE_IDS = [
    "chat.stream.json-chunks",
    "chat.stream.role-first",
    "chat.stream.role-once",
    "chat.stream.object",
    "chat.stream.done-present",
]


@pytest.mark.parametrize("mode", ["stall", "drip"])
def test_a_stalled_stream_costs_one_bound_and_is_sent_once(mode):
    with BadServer({"/v1/chat/completions": mode, "*": "ok"}) as s:
        rep, _, dt = suite(s.url, SHAPE_IDS)
        sent = s.hits["/v1/chat/completions"]
    assert sent == 1  # the shared probe is sent once, not once per case
    assert dt < 5, dt
    res = {r.id: r for r in rep.results}
    assert res["chat.stream.done-present"].verdict == "fail"
    assert all("BoundExceeded" in r.note and "chat.stream stream" in r.note for r in rep.results), [
        r.note for r in rep.results
    ]
    assert not any(r.verdict == "pass" for r in rep.results if mode == "stall")


def test_an_endless_stream_is_cut_at_the_byte_bound():
    cap = 256 << 10
    tracemalloc.start()
    try:
        with BadServer({"/v1/chat/completions": "endless", "*": "ok"}) as s:
            rep, ctx, dt = suite(s.url, SHAPE_IDS, max_stream_s=10, max_stream_bytes=cap)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    t = ctx._probes["chat.stream"]
    assert t.ended == "limit" and len(t.body) <= cap and sum(len(e.raw) for e in t.events) <= cap
    assert peak < 40 << 20, peak  # memory follows the bound, not the server
    assert dt < 10
    assert "went past 262144 bytes" in rep.results[0].note
    assert {r.id: r.verdict for r in rep.results}["chat.stream.done-present"] == "fail"


def test_the_suite_wall_time_is_bounded_and_names_the_case():
    # every generation request stalls while /health answers: without a suite bound each case costs a stream bound
    with BadServer({"/v1/chat": "stall", "/v1/completions": "stall", "*": "ok"}) as s:
        rep, _, dt = suite(s.url, None, wall=2.0, max_stream_s=0.4)
    assert dt < 2.0 + 0.4 + 3, dt
    assert rep.aborted and "wall-time bound (2s)" in rep.aborted
    stopped_at = rep.aborted.rsplit(" ", 1)[-1]
    assert stopped_at in {r.id for r in rep.results}
    rest = [r for r in rep.results if r.note.startswith("not run:")]
    assert rest and all(r.verdict == "error" for r in rest)


@pytest.mark.parametrize("mode", ["stall", "drip", "endless"])
def test_cli_bounds_a_misbehaving_server(mode, capsys):
    with BadServer({"/v1/": mode, "*": "ok"}) as s:
        t0 = time.monotonic()
        code, out, err = run_cli(capsys, "conform", "--url", s.url, "--expect", "vllm-0.11", "--max-seconds", "3",
                                 "--stream-seconds", "0.5")  # fmt: skip
        dt = time.monotonic() - t0
    assert code == 1, err
    assert dt < 3 + 0.5 + 6, dt
    assert "wall-time bound (3s)" in out


@pytest.mark.parametrize(
    "flag,value",
    [("--max-seconds", "nan"), ("--max-seconds", "0"), ("--stream-seconds", "-1"), ("--stream-seconds", "inf")],
)
def test_cli_bounds_must_be_positive_finite(flag, value, capsys):
    code, _, err = run_cli(capsys, "conform", "--url", "http://127.0.0.1:9", "--expect", "vllm-0.11", flag, value)
    assert code == 2 and flag in one_line_error(err)


# -- 25: server text is data, never rich markup ------------------------------------------------------------------


def test_markup_in_a_server_error_message_is_shown_not_parsed(capsys):
    with BadServer({"/v1/": "markup", "*": "ok"}) as s:
        code, out, err = run_cli(capsys, "conform", "--url", s.url, "--expect", "vllm-0.11", "-k", "errors",
                                 "-k", "chat.nonstream")  # fmt: skip
    assert code == 1, err
    assert "Traceback" not in err
    assert "[/oops]" in out.replace("\n", "")  # folded columns may wrap it


def test_control_characters_from_the_server_leave_junit_valid(tmp_path):
    from xml.etree import ElementTree as ET

    from harness.conformance.report import junit_xml, to_json

    doc = {
        "expectations": "x",
        "counts": {},
        "duration_s": 0,
        "engine": {"url": "http://u:p@127.0.0.1:1"},
        "cases": [
            {
                "id": "a.b",
                "requirement": "r",
                "verdict": "fail",
                "behaviour": "x\x00y",
                "expected": None,
                "actual": "bell\x07 [/oops]",
                "chunk": None,
                "note": "\x1b[31m",
                "duration_s": float("nan"),
            }
        ],
    }
    ET.fromstring(junit_xml({**doc, "duration_s": 0.0, "cases": [{**doc["cases"][0], "duration_s": 0.0}]}))
    text = to_json(doc)
    assert json.loads(text)["cases"][0]["duration_s"] == "nan" and "u:p@" not in text


# -- 26, 23, 24, 29: malformed expectation files are one line naming the file, the field and the line -------------

BAD_EXPECTATIONS = {
    "metrics-a-list": ("metrics: [1, 2]\n", "metrics"),
    "cancellation-a-string": ("cancellation: many\n", "cancellation"),
    "quirk-a-number": ("cases:\n  chat.stream.role-once: {quirk: 5, reason: r}\n", "cases.chat.stream.role-once.quirk"),
    "quirk-without-reason": ("cases:\n  chat.stream.role-once: {quirk: x}\n", "reason"),
    "conditional-gone": ("cases:\n  a.b: {quirk: x, reason: r, conditional: true}\n", "conditional"),
    "intermittent-a-string": ("cases:\n  a.b: {quirk: x, reason: r, intermittent: pass}\n", "intermittent"),
    "case-a-list": ("cases:\n  a.b: [quirk]\n", "cases.a.b"),
    "unknown-case-key": ("cases:\n  a.b: {skip: later, reasn: typo}\n", "reasn"),
    "settle-nan": ("cancellation: {settle_s: .nan}\n", "settle_s"),
    "settle-a-string": ("cancellation: {settle_s: soon}\n", "cancellation.settle_s"),
    "bound-tokens-float": ("cancellation: {bound_tokens: 2.5}\n", "bound_tokens"),
    "idle-a-string": ("metrics: {idle: {vllm:num_requests_running: zero}}\n", "metrics.idle"),
    "required-labels-a-string": ("metrics: {required: {m: {labels: engine}}}\n", "labels"),
    "probes-a-list": ("probes: {token_ids: [1]}\n", "probes.token_ids"),
    "name-a-list": ("name: [a]\n", "name"),
    "unknown-section": ("casses: {}\n", "casses"),
    "top-level-a-list": ("- a\n", "top level"),
    "duplicate-key": ("name: a\nname: b\n", "duplicate"),
    "deep-nesting": (DEEP, "nest"),
    "syntax-error": ("name: x\ncases:\n  a.b: {quirk: [x, reason: r\n", "line "),
}


@pytest.mark.parametrize("name", sorted(BAD_EXPECTATIONS))
def test_malformed_expectations_are_one_line(name, tmp_path, capsys):
    text, where = BAD_EXPECTATIONS[name]
    f = tmp_path / "exp.yaml"
    f.write_text(text)
    with pytest.raises(HarnessError) as ei:
        load_expectations(f)
    assert str(f) in str(ei.value) and where in str(ei.value), str(ei.value)
    stream = tmp_path / "s.json"
    stream.write_bytes(STREAM_FIXTURE.read_bytes())
    code, _, err = run_cli(capsys, "check-stream", stream, "--expect", f)
    assert code == 2 and where in one_line_error(err)


def test_expectation_syntax_error_keeps_its_line_number(tmp_path):
    f = tmp_path / "exp.yaml"
    f.write_text("name: x\n  bad: indent\ncases: {}\n")
    with pytest.raises(HarnessError) as ei:
        load_expectations(f)
    assert ei.value.one_line().startswith(f"{f}: line 2: not valid YAML"), ei.value.one_line()


def test_unreadable_expectation_file_is_one_line(tmp_path, capsys, monkeypatch):
    f = tmp_path / "exp.yaml"
    f.write_text("name: x\n")
    stream = tmp_path / "s.json"
    stream.write_bytes(STREAM_FIXTURE.read_bytes())
    with unreadable(monkeypatch, f):
        code, _, err = run_cli(capsys, "check-stream", stream, "--expect", f)
    assert code == 2 and "Permission denied" in one_line_error(err)


def test_committed_expectation_files_still_load():
    for p in sorted(EXPECTATIONS_DIR.glob("*.yaml")):
        assert load_expectations(p).cases


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "name",
                        "engine",
                        "cases",
                        "metrics",
                        "cancellation",
                        "probes",
                        "quirk",
                        "reason",
                        "skip",
                        "intermittent",
                        "outcome",
                        "rate",
                        "evidence",
                        "required",
                        "idle",
                        "labels",
                        "type",
                        "settle_s",
                        "bound_tokens",
                        "a.b",
                    ]
                ),
                inner,
                max_size=4,
            )
        ),
        max_leaves=25,
    )
)
def test_fuzz_expectations_load_or_refuse(raw):
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "e.yaml"
        f.write_text(yaml.safe_dump(raw))
        try:
            exp = load_expectations(f)
        except HarnessError:
            return
        for cid in exp.cases:  # what the runner reads from a loaded file never raises
            exp.quirks(cid), exp.skip_reason(cid), exp.intermittent(cid)


# -- 26, 27, 23, 24: update-expectations over malformed results and bad output paths -----------------------------

GOOD_CASE = {
    "id": "chat.stream.role-once",
    "verdict": "fail",
    "level": "MUST",
    "behaviour": "role-on-every-chunk",
    "expected": "x",
    "actual": "y",
    "unexpected_pass": False,
}
BAD_RESULTS = {
    "not-an-object": "[]",
    "cases-missing": "{}",
    "cases-an-object": '{"cases": {}}',
    "case-a-string": '{"cases": ["chat.stream.role-once"]}',
    "id-missing": json.dumps({"cases": [{**GOOD_CASE, "id": None}, GOOD_CASE]}),
    "id-a-number": json.dumps({"cases": [{**GOOD_CASE, "id": 5}]}),
    "verdict-unknown": json.dumps({"cases": [{**GOOD_CASE, "verdict": "great"}]}),
    "note-a-number": json.dumps({"cases": [{**GOOD_CASE, "verdict": "error", "note": 5}]}),
    "behaviour-a-list": json.dumps({"cases": [{**GOOD_CASE, "behaviour": ["a"]}]}),
    "unexpected-pass-a-string": json.dumps({"cases": [{**GOOD_CASE, "unexpected_pass": "no"}]}),
    "nan-time": '{"cases": [{"id": "a.b", "verdict": "pass", "duration_s": NaN}]}',
    "deep-nesting": DEEP,
    "not-json": "{cases",
}


@pytest.mark.parametrize("name", sorted(BAD_RESULTS))
def test_update_expectations_refuses_malformed_results(name, tmp_path, capsys):
    res = tmp_path / "conformance.json"
    res.write_text(BAD_RESULTS[name])
    out = tmp_path / "proposed.yaml"
    code, _, err = run_cli(capsys, "update-expectations", res, "--expect", "vllm-0.11", "--out", out)
    assert code == 2 and str(res) in one_line_error(err)
    assert not out.exists()


def test_update_expectations_unreadable_results(tmp_path, capsys, monkeypatch):
    res = tmp_path / "conformance.json"
    res.write_text(json.dumps({"cases": [GOOD_CASE]}))
    with unreadable(monkeypatch, res):
        code, _, err = run_cli(
            capsys, "update-expectations", res, "--expect", "vllm-0.11", "--out", tmp_path / "o.yaml"
        )
    assert code == 2 and "Permission denied" in one_line_error(err)


def _results(tmp_path) -> Path:
    res = tmp_path / "conformance.json"
    res.write_text(json.dumps({"cases": [GOOD_CASE]}))
    return res


def test_update_expectations_out_is_a_directory(tmp_path, capsys):
    res = _results(tmp_path)
    d = tmp_path / "d"
    d.mkdir()
    for extra in ([], ["--force"]):
        code, _, err = run_cli(capsys, "update-expectations", res, "--expect", "vllm-0.11", "--out", d, *extra)
        assert code == 2 and "directory" in one_line_error(err)


def test_update_expectations_out_under_a_file(tmp_path, capsys):
    res = _results(tmp_path)
    code, _, err = run_cli(
        capsys, "update-expectations", res, "--expect", "vllm-0.11", "--out", res / "x.yaml", "--force"
    )
    assert code == 2
    one_line_error(err)


def test_update_expectations_never_writes_over_its_results(tmp_path, capsys):
    res = _results(tmp_path)
    before = res.read_bytes()
    code, _, err = run_cli(capsys, "update-expectations", res, "--expect", "vllm-0.11", "--out", res, "--force")
    assert code == 2 and "input" in one_line_error(err)
    assert res.read_bytes() == before


def test_update_expectations_over_its_expectation_file_only_with_force(tmp_path, capsys):
    res = _results(tmp_path)
    exp = tmp_path / "exp.yaml"
    exp.write_text((EXPECTATIONS_DIR / "vllm-0.11.yaml").read_text())
    before = exp.read_text()
    code, _, err = run_cli(capsys, "update-expectations", res, "--expect", exp, "--out", exp)
    assert code == 2 and exp.read_text() == before
    one_line_error(err)
    code, _, err = run_cli(capsys, "update-expectations", res, "--expect", exp, "--out", exp, "--force")
    assert code == 0, err
    assert load_expectations(exp).quirks("chat.stream.role-once") == ["role-on-every-chunk"]


def test_update_expectations_output_follows_the_umask(tmp_path, capsys):
    res = _results(tmp_path)
    old = os.umask(0o022)
    try:
        code, _, err = run_cli(
            capsys, "update-expectations", res, "--expect", "vllm-0.11", "--out", tmp_path / "p.yaml"
        )
    finally:
        os.umask(old)
    assert code == 0, err
    assert stat.S_IMODE((tmp_path / "p.yaml").stat().st_mode) == 0o644


# -- 29: say what happened: no server, not HTTP, an API-key variable that is not there ----------------------------


def test_closed_port_is_no_server_not_a_dead_engine(capsys):
    url = f"http://127.0.0.1:{free_port()}"
    code, out, err = run_cli(capsys, "conform", "--url", url, "--expect", "vllm-0.11", "-k", "health", "-k", "errors",
                             "--stream-seconds", "2")  # fmt: skip
    assert code == 1
    flat = " ".join(out.split())
    assert "engine died" not in flat and "no HTTP server answered at" in flat


@pytest.mark.parametrize("mode", ["garbage", "close"])
def test_a_non_http_server_is_not_a_dead_engine(mode):
    with BadServer(mode) as s:
        rep, _, dt = suite(s.url, ["health", "errors"])
    assert rep.aborted and "no HTTP server answered" in rep.aborted and "does not speak HTTP" in rep.aborted
    assert all(r.verdict == "error" for r in rep.results)
    assert dt < 5


def test_a_server_that_stops_answering_is_named_as_such():
    # /version answers, then everything (the liveness check on /health too) stalls: no engine was launched, so this
    # is a server that stopped answering, not an engine that died, and not a port where nothing ever answered
    with BadServer({"/version": "ok", "*": "stall"}) as s:
        rep, _, _ = suite(s.url, ["health.version", "health.models", "errors.unknown-model"], max_stream_s=0.3)
    assert rep.aborted == "the server stopped answering during health.models", rep.aborted


def test_api_key_env_unset_is_refused(capsys, monkeypatch):
    monkeypatch.delenv("HARNESS_TEST_NO_SUCH_KEY", raising=False)
    with BadServer("ok") as s:
        code, _, err = run_cli(capsys, "conform", "--url", s.url, "--expect", "vllm-0.11", "--api-key-env",
                               "HARNESS_TEST_NO_SUCH_KEY")  # fmt: skip
        assert sum(s.hits.values()) == 0
    assert code == 2 and "HARNESS_TEST_NO_SUCH_KEY" in one_line_error(err) and "not set" in err


def test_api_key_env_given_the_key_itself_is_refused_without_echoing_it(capsys):
    key = "sk-live-0123456789abcdef"
    with BadServer("ok") as s:
        code, _, err = run_cli(capsys, "conform", "--url", s.url, "--expect", "vllm-0.11", "--api-key-env", key)
        assert sum(s.hits.values()) == 0
    assert code == 2 and "NAME" in one_line_error(err) and key not in err


def test_api_key_env_set_is_used(capsys, monkeypatch):
    monkeypatch.setenv("HARNESS_TEST_SET_KEY", "k-123")
    with BadServer("ok") as s:
        code, out, err = run_cli(capsys, "conform", "--url", s.url, "--expect", "vllm-0.11", "--api-key-env",
                                 "HARNESS_TEST_SET_KEY", "-k", "auth")  # fmt: skip
    assert code == 1, err  # badserver accepts any key: the auth cases ran (and failed) instead of skipping
    assert "no API key configured" not in out


def test_stream_chunks_with_nan_or_deep_nesting_are_invalid_json():
    deep = b"data: " + b"[" * 40 + b"]" * 40 + b"\n\n"
    nan = b"data: " + json.dumps({**CHUNK, "created": 1}).replace('"created": 1', '"created": NaN').encode() + b"\n\n"
    from harness.conformance.view import _from_sse_bytes

    for blob in (deep, nan):
        (c,) = _from_sse_bytes(blob, "x").chunks
        assert c.obj is None and "invalid JSON" in c.error
