"""Issue 34 items 1 and 2: repeated judgement (`conform --repeat N`) and known-intermittent expectations.

A fake server on 127.0.0.1 flips one outcome (a chat stream whose `created` steps: `created-changes`) with a SEEDED
probability: each streamed request draws the next number of `random.Random(SEED)`, so the sequence of outcomes is
known before the run, never a race. The tests check the classifier (stable / intermittent k/N), the expectation lists
(typical, expected intermittent, unexpected), update-expectations' proposals, and the JSON / JUnit / HTML outputs."""

from __future__ import annotations

import json
import random
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
import yaml

from harness.cli import main
from harness.conformance.expectations import load_expectations, resolve
from harness.conformance.model import CaseResult, Level, SuiteDocument, failed, passed
from harness.conformance.repeat import merge_case
from harness.conformance.update import propose
from harness.errors import DataError, ManifestError

SEED, P = 34, 0.3
CASE = "chat.stream.consistent-created"
MODEL = "flip-model"


def draws(n: int, p: float = P, seed: int = SEED) -> list[bool]:
    """The flips the server makes for its first n streamed requests (the same generator, the same order)."""
    rng = random.Random(seed)
    return [rng.random() < p for _ in range(n)]


class FlipServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, p: float = P, seed: int = SEED) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.p, self.rng, self.lock, self.flips = p, random.Random(seed), threading.Lock(), []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def flip(self) -> bool:
        with self.lock:
            f = self.rng.random() < self.p
            self.flips.append(f)
            return f


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):  # quiet
        pass

    def _json(self, status: int, obj: object) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path.startswith("/v1/models"):
            return self._json(200, {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "t"}]})
        return self._json(404, {"error": {"message": "not found"}})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self.path != "/v1/chat/completions":
            return self._json(404, {"error": {"message": "not found"}})
        text = ["Hello", ",", " world", "."]
        if not body.get("stream"):
            return self._json(200, {"id": "c1", "object": "chat.completion", "created": 1700000000, "model": MODEL,
                                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "".join(text)},
                                                 "finish_reason": "stop"}],
                                    "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}})  # fmt: skip
        step = 1 if self.server.flip() else 0  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()

        def chunk(i: int, delta: dict, fr: str | None) -> None:
            doc = {"id": "c1", "object": "chat.completion.chunk", "created": 1700000000 + step * i, "model": MODEL,
                   "choices": [{"index": 0, "delta": delta, "finish_reason": fr, "logprobs": None}]}  # fmt: skip
            self.wfile.write(b"data: " + json.dumps(doc).encode() + b"\n\n")

        chunk(0, {"role": "assistant", "content": ""}, None)
        for i, t in enumerate(text, 1):
            chunk(i, {"content": t}, None)
        chunk(len(text) + 1, {}, "stop")
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
            doc = {"id": "c1", "object": "chat.completion.chunk", "created": 1700000000 + step * (len(text) + 2),
                   "model": MODEL, "choices": [], "usage": usage}  # fmt: skip
            self.wfile.write(b"data: " + json.dumps(doc).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")
        self.close_connection = True


@pytest.fixture
def flip_server():
    servers: list[FlipServer] = []

    def start(p: float = P, seed: int = SEED) -> FlipServer:
        srv = FlipServer(p, seed)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def write_exp(path: Path, entry: dict | None) -> Path:
    doc = {"name": "flip", "engine": {"kind": "none", "name": "flip", "version": "1"},
           "cases": {CASE: entry} if entry else {}}  # fmt: skip
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def conform(srv: FlipServer, exp: str | Path, out: Path, *extra: str) -> int:
    return main(["conform", "--url", srv.base_url, "--expect", str(exp), "-k", CASE, "--out", str(out), *extra])


def case_of(out: Path) -> dict:
    doc = json.loads((out / "conformance.json").read_text())
    return next(c for c in doc["cases"] if c["id"] == CASE)


# -- the classifier ----------------------------------------------------------------------------------------------------


def _sample(verdict: str, tags: tuple[str, ...] = (), note: str = "") -> CaseResult:
    return CaseResult(id="a.b", level="MUST", requirement="r", verdict=verdict, behaviours=list(tags), note=note,
                      duration_s=0.5)  # fmt: skip


def test_the_classifier_says_stable_or_intermittent_k_of_n():
    stable = merge_case([_sample("quirk", ("x",)) for _ in range(5)], 5)
    assert stable.repeat["class"] == "stable" and stable.repeat["k"] == 0 and stable.verdict == "quirk"
    assert stable.duration_s == 2.5 and [o["count"] for o in stable.repeat["outcomes"]] == [5]

    seq = ["pass", "fail", "pass", "pass", "fail", "pass"]
    mixed = merge_case([_sample(v, ("t",) if v == "fail" else (), note=f"s{i}") for i, v in enumerate(seq)], 6)
    rep = mixed.repeat
    assert rep["class"] == "intermittent" and rep["k"] == 2 and rep["rate"] == "2/6"
    assert rep["typical"] == {"verdict": "pass", "behaviours": []}
    assert [(o["verdict"], o["behaviours"], o["count"], o["sample"]) for o in rep["outcomes"]] == [
        ("pass", [], 4, 1), ("fail", ["t"], 2, 2)]  # fmt: skip
    # the case's verdict is its most severe sample's (an unexpected fail in 2 of 6 is a fail), with that sample's note
    assert mixed.verdict == "fail" and mixed.note == "s1"
    # an outcome is the verdict AND the sorted tags: the same verdict with other tags is another outcome
    two = merge_case([_sample("quirk", ("b", "a")), _sample("quirk", ("a", "b")), _sample("quirk", ("a",))], 3)
    assert [(o["behaviours"], o["count"]) for o in two.repeat["outcomes"]] == [(["a", "b"], 2), (["a"], 1)]


# -- the expectation lists ---------------------------------------------------------------------------------------------


class _Head:
    id, level, requirement = CASE, Level.SHOULD, "one created"


def test_an_outcome_in_the_list_is_expected_and_counted_apart(tmp_path):
    exp = load_expectations(write_exp(tmp_path / "e.yaml", {
        "quirk": "created-changes", "reason": "per-chunk stamp",
        "intermittent": [{"outcome": "pass", "rate": "2/10", "evidence": "e"},
                         {"outcome": ["created-changes", "created-backwards"], "rate": "1/10", "evidence": "e"}]}))  # fmt: skip
    typical = resolve(_Head(), failed("created-changes", 1, 2), exp)
    assert typical.verdict == "quirk"
    known_pass = resolve(_Head(), passed(), exp)
    assert known_pass.verdict == "expected-intermittent" and not known_pass.unexpected_pass  # never folded into pass
    assert "rate 2/10" in known_pass.note
    both = resolve(_Head(), failed(["created-backwards", "created-changes"], 1, 2), exp)
    assert both.verdict == "expected-intermittent" and both.behaviours == ["created-backwards", "created-changes"]
    # outside the list: unexpected, and said so
    other = resolve(_Head(), failed("created-backwards", 1, 2), exp)  # a part of a listed outcome is not it
    assert other.verdict == "fail" and other.behaviours == ["created-backwards"]
    stranger = resolve(_Head(), failed("no-created", 1, 2), exp)
    assert stranger.verdict == "fail" and stranger.behaviour == "no-created" and "not the declared" in stranger.note


def test_a_typical_pass_with_a_known_intermittent_quirk(tmp_path):
    exp = load_expectations(write_exp(tmp_path / "e.yaml", {
        "reason": "a stream that crosses a second",
        "intermittent": [{"outcome": "created-changes", "rate": "rate not measured yet", "evidence": "e"}]}))  # fmt: skip
    assert resolve(_Head(), passed(), exp).verdict == "pass"
    assert resolve(_Head(), failed("created-changes", 1, 2), exp).verdict == "expected-intermittent"
    r = resolve(_Head(), failed("created-backwards", 1, 2), exp)
    assert r.verdict == "fail" and "not a declared outcome" in r.note


@pytest.mark.parametrize("entry, field", [
    ({"quirk": "x", "reason": "r", "conditional": True}, "conditional"),
    ({"reason": "r", "intermittent": []}, "intermittent"),
    ({"reason": "r", "intermittent": [{"outcome": "x", "rate": "1/2"}]}, "evidence"),
    ({"reason": "r", "intermittent": [{"outcome": "x", "rate": "", "evidence": "e"}]}, "rate"),
    ({"quirk": "x", "reason": "r", "intermittent": [{"outcome": "x", "rate": "1/2", "evidence": "e"}]}, "outcome"),
    ({"reason": "r", "intermittent": [{"outcome": ["pass", "x"], "rate": "1/2", "evidence": "e"}]}, "outcome"),
    ({"intermittent": [{"outcome": "x", "rate": "1/2", "evidence": "e"}]}, "reason"),
])  # fmt: skip
def test_a_malformed_entry_is_one_line_naming_file_case_and_field(tmp_path, entry, field):
    p = write_exp(tmp_path / "e.yaml", entry)
    with pytest.raises(ManifestError) as e:
        load_expectations(p)
    msg = str(e.value)
    assert "\n" not in msg and str(p) in msg and f"cases.{CASE}" in msg and field in msg


def test_an_old_conditional_file_names_the_new_spelling(tmp_path, capsys):
    p = write_exp(tmp_path / "old.yaml", {"quirk": "created-changes", "reason": "r", "conditional": True})
    assert main(["conform", "--url", "http://127.0.0.1:9", "--expect", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"cases.{CASE}.conditional" in err and "intermittent:" in err


def test_no_committed_expectation_file_says_conditional():
    from harness.conformance.expectations import EXPECTATIONS_DIR, available

    for name in available():
        exp = load_expectations(name)  # every file loads under the new rules
        assert all("conditional" not in e for e in exp.cases.values()), name
        assert "conditional:" not in (EXPECTATIONS_DIR / f"{name}.yaml").read_text()


# -- repeated runs against the flipping server ------------------------------------------------------------------------


def test_a_flipping_server_is_judged_at_its_seeded_rate(flip_server, tmp_path):
    n = 10
    flips = draws(n)
    f = sum(flips)
    assert 0 < f < n  # the seed gives both outcomes (else this test would judge nothing)
    srv = flip_server()
    out = tmp_path / "run"
    assert conform(srv, "openai", out, "--repeat", str(n)) == 1  # an undeclared intermittent fail is unexpected
    assert srv.flips == flips  # one fresh stream per pass, in order
    doc = json.loads((out / "conformance.json").read_text())
    assert doc["format"] == 2 and doc["repeat"]["n"] == n and doc["repeat"]["intermittent"] == 1
    assert doc["repeat"]["unexpected_samples"] == f
    c = case_of(out)
    counts = {(o["verdict"], tuple(o["behaviours"])): o["count"] for o in c["repeat"]["outcomes"]}
    assert counts == {("pass", ()): n - f, ("fail", ("created-changes",)): f}
    assert c["verdict"] == "fail" and c["repeat"]["k"] == min(f, n - f)
    assert c["repeat"]["class"] == "intermittent"
    SuiteDocument.from_dict(doc)  # the model reads what it wrote
    # one evidence trace per distinct outcome: the first pass's probe, and the pass where the other outcome first came
    first_other = flips.index(not flips[0]) + 1
    ev = sorted(p.name for p in (out / "evidence").glob("probe--chat.stream*.json"))
    assert ev == sorted(["probe--chat.stream.json", f"probe--chat.stream_{first_other}.json"])
    # JUnit: the rate as properties and in the failure message, not one sample
    tc = ET.parse(out / "junit.xml").getroot().find(".//testcase")
    props = {p.get("name"): p.get("value") for p in tc.find("properties")}
    assert props["repeat.class"] == f"intermittent {min(f, n - f)}/{n}"
    assert props["outcome.fail.created-changes"] == f"{f}/{n}" and props["outcome.pass"] == f"{n - f}/{n}"
    assert f"created-changes {f}/{n}" in tc.find("failure").get("message")
    html = (out / "conformance.html").read_text()
    assert f"intermittent {min(f, n - f)}/{n}" in html and f"probe-chat_stream_{first_other}" in html


def test_a_declared_intermittent_outcome_keeps_the_suite_ok(flip_server, tmp_path):
    n = 10
    f = sum(draws(n))
    exp = write_exp(tmp_path / "e.yaml", {"reason": "created per chunk", "intermittent": [
        {"outcome": "created-changes", "rate": "3/10", "evidence": "the flip server"}]})  # fmt: skip
    out = tmp_path / "run"
    assert conform(flip_server(), exp, out, "--repeat", str(n)) == 0
    doc = json.loads((out / "conformance.json").read_text())
    assert doc["counts"]["expected-intermittent"] == 1 and doc["counts"]["pass"] == 0  # counted apart
    assert doc["repeat"]["unexpected_samples"] == 0
    c = case_of(out)
    assert c["verdict"] == "expected-intermittent"
    assert {(o["verdict"], o["count"]) for o in c["repeat"]["outcomes"]} == {
        ("pass", n - f),
        ("expected-intermittent", f),
    }


def test_repeat_1_writes_the_document_it_always_wrote(flip_server, tmp_path):
    srv = flip_server(p=0.0)
    a, b = tmp_path / "a", tmp_path / "b"
    assert conform(srv, "openai", a) == 0 and conform(srv, "openai", b, "--repeat", "1") == 0
    da, db = (json.loads((d / "conformance.json").read_text()) for d in (a, b))
    assert da["format"] == db["format"] == 1 and "repeat" not in da and "repeat" not in db
    assert list(da) == list(db) and all("repeat" not in c for c in da["cases"] + db["cases"])
    assert "properties" not in (a / "junit.xml").read_text()
    old = {k: v for k, v in da.items() if k != "format"}  # a report written before `format` existed still loads
    assert SuiteDocument.from_dict(old).format == 1


def test_a_repeated_format_needs_its_repeat():
    base = {"engine": {}, "expectations": "openai", "started_at": 0, "duration_s": 0, "aborted": None, "counts": {},
            "unexpected_passes": [], "cases": []}  # fmt: skip
    with pytest.raises(DataError, match="format"):
        SuiteDocument.from_dict({**base, "format": 2})
    with pytest.raises(DataError, match="format"):
        SuiteDocument.from_dict({**base, "format": 1, "repeat": {"n": 2}})
    assert SuiteDocument.from_dict({**base, "format": 2, "repeat": {"n": 2}}).to_dict()["format"] == 2


@pytest.mark.parametrize("args, said", [
    (["--repeat", "0"], "--repeat"),
    (["--repeat", "101"], "--repeat"),
    (["--repeat", "3", "--restart"], "--restart"),
])  # fmt: skip
def test_bad_repeat_options_are_refused_before_any_request(flip_server, tmp_path, capsys, args, said):
    srv = flip_server()
    assert main(["conform", "--url", srv.base_url, "--expect", "openai", *args]) == 2
    assert said in capsys.readouterr().err and srv.flips == []


# -- update-expectations from a repeated run -------------------------------------------------------------------------


def test_update_expectations_proposes_the_intermittent_outcome_with_its_rate(flip_server, tmp_path, capsys):
    n = 10
    f = sum(draws(n))
    out = tmp_path / "run"
    conform(flip_server(), "openai", out, "--repeat", str(n))
    proposed = tmp_path / "proposed.yaml"
    assert main(["update-expectations", str(out / "conformance.json"), "--expect", "openai", "--out",
                 str(proposed)]) == 0  # fmt: skip
    entry = yaml.safe_load(proposed.read_text())["cases"][CASE]
    typical_is_pass = n - f >= f
    listed = entry["intermittent"]
    assert len(listed) == 1 and listed[0]["rate"].startswith(f"{min(f, n - f)}/{n} ")
    if typical_is_pass:
        assert "quirk" not in entry and listed[0]["outcome"] == "created-changes"
    else:
        assert entry["quirk"] == "created-changes" and listed[0]["outcome"] == "pass"
    assert "REVIEW" in entry["reason"] and "REVIEW" in listed[0]["evidence"]
    load_expectations(write_exp(tmp_path / "again.yaml", entry))  # the proposal is a valid entry
    assert "intermittent" in capsys.readouterr().out


def test_update_expectations_drops_an_intermittent_outcome_not_seen_in_n_repeats(flip_server, tmp_path):
    exp = write_exp(tmp_path / "e.yaml", {"quirk": "created-changes", "reason": "r", "intermittent": [
        {"outcome": "pass", "rate": "1/5", "evidence": "e"},
        {"outcome": "created-backwards", "rate": "1/5", "evidence": "e"}]})  # fmt: skip
    out = tmp_path / "run"
    conform(flip_server(p=1.0), exp, out, "--repeat", "5")  # created-changes every time: the typical outcome only
    results = json.loads((out / "conformance.json").read_text())
    new, changes = propose(results, yaml.safe_load(exp.read_text()), note="t")
    entry = new["cases"][CASE]
    assert entry["quirk"] == "created-changes" and "intermittent" not in entry
    assert f"- {CASE}: intermittent pass not seen in 5 repeats" in changes
    assert f"- {CASE}: intermittent created-backwards not seen in 5 repeats" in changes


def test_update_expectations_leaves_exactly_the_declared_outcomes_alone(tmp_path):
    declared = {"reason": "r", "intermittent": [{"outcome": "created-changes", "rate": "3/10", "evidence": "e"}]}
    results = {"cases": [{"id": CASE, "verdict": "expected-intermittent", "behaviours": ["created-changes"],
                          "repeat": {"n": 10, "outcomes": [
                              {"verdict": "pass", "behaviours": [], "count": 7, "sample": 1},
                              {"verdict": "expected-intermittent", "behaviours": ["created-changes"], "count": 3,
                               "sample": 2}]}}]}  # fmt: skip
    new, changes = propose(results, {"cases": {CASE: declared}}, note="t")
    assert new["cases"][CASE] == declared and changes == []
