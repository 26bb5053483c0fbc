"""Hostile server text in the conformance reports (issue 21: findings 4 and 8, conformance part).

4: an API key the server echoes back (in an error body, in stream text, cut by an excerpt) reaches no output:
   conformance.json, junit.xml, conformance.html, evidence/, the terminal; neither whole nor any 6+ character prefix or
   suffix of it.
8: what a server says reaches the terminal with its control characters escaped: no ESC[2K, carriage return or OSC
   title sequence gets to stdout raw, so a server cannot redraw a `fail` line as a `pass`.

The server is tests/support/echo_key_server.py on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from harness.cli import main
from tests.support.echo_key_server import EchoKeyServer

KEY = "Zq7xKeyEcho-93fa1c-Lm2w"  # nothing else in a report looks like any 6 characters of it
KEY_ENV = "HARNESS_H21_ECHO_KEY"
HOSTILE = "\x1b[2K\r\x1b]0;pwned\x07PASS \x9b2K"  # erase the line, back to its start, retitle, a C1 CSI
RAW_CONTROLS = ("\x1b", "\x9b", "\x07", "\r")
CASES = ("-k", "chat.nonstream", "-k", "chat.length", "-k", "chat.stream.equals-nonstream", "-k", "errors")


def key_parts(text: str) -> list[str]:
    """The runs of 6+ characters that begin or end KEY found in `text` (the whole key included)."""
    n = len(KEY)
    return [p for p in {KEY[:i] for i in range(6, n + 1)} | {KEY[-i:] for i in range(6, n + 1)} if p in text]


def conform(capsys, out, *extra) -> tuple[int, str, str]:
    with EchoKeyServer(text=HOSTILE) as s:
        code = main(["conform", "--url", s.url, "--expect", "vllm-0.11", "--stream-seconds", "5", *CASES, *extra,
                     *(["--out", str(out)] if out else [])])  # fmt: skip
    got = capsys.readouterr()
    return code, got.out, got.err


# -- 4: the run's API key, echoed back, is in no report, no recording and not on the terminal ----------------------

KEY_SOURCES = {
    "api-key-env": lambda mp: (mp.setenv(KEY_ENV, KEY), ["--api-key-env", KEY_ENV])[1],
    "HARNESS_API_KEY": lambda mp: (mp.setenv("HARNESS_API_KEY", KEY), [])[1],
}


@pytest.mark.parametrize("source", sorted(KEY_SOURCES))
def test_an_echoed_key_reaches_no_output(source, tmp_path, capsys, monkeypatch):
    """#4: the server quotes the Authorization header in its 400 bodies (placed so that the 200-character excerpt a
    failing status's note keeps cuts through the key) and in its stream text."""
    monkeypatch.delenv("HARNESS_API_KEY", raising=False)
    extra = KEY_SOURCES[source](monkeypatch)
    out = tmp_path / "out"
    code, stdout, stderr = conform(capsys, out, *extra)
    assert code == 1, stderr  # the server fails cases: the run was judged, not refused
    files = sorted(p for p in out.rglob("*") if p.is_file())
    names = {p.name for p in files}
    assert {"conformance.json", "junit.xml", "conformance.html", "index.json"} <= names
    for p in files:
        assert key_parts(p.read_text()) == [], p
    assert key_parts(stdout) == [] and key_parts(stderr) == []
    doc = json.loads((out / "conformance.json").read_text())
    assert any("Bearer ***" in json.dumps(c) for c in doc["cases"])  # the server did echo it: it was scrubbed


def test_a_key_cut_by_the_evidence_cap_leaves_no_prefix():
    """#4: the evidence's cap cuts a body through the echoed key: the part kept is scrubbed too."""
    from harness.conformance.evidence import EvidenceRecorder, current_case, end_case

    head = b"x" * 90 + b"Bearer "

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, content=head + request.headers["authorization"][7:].encode() + b" tail")

    rec = EvidenceRecorder(api_key=KEY, cap_bytes=len(head) + 12)  # keeps 12 characters of the key

    async def one() -> None:
        token = current_case("a.case")
        try:
            async with httpx.AsyncClient(transport=rec.transport(httpx.MockTransport(handler)),
                                         base_url="http://127.0.0.1:1", headers={"Authorization": f"Bearer {KEY}"}) as c:  # fmt: skip
                await c.get("/x")
        finally:
            end_case(token)

    asyncio.run(one())
    (ex,) = rec.exchanges["a.case"]
    assert ex.truncated and key_parts(bytes(ex.body).decode()) == [] and bytes(ex.body).startswith(head)
    assert sum(ex.chunks) == len(ex.body)


# -- 8: server text on the terminal: control characters shown escaped ----------------------------------------------


def test_server_escape_sequences_are_shown_escaped_on_the_terminal(capsys):
    """#8: `conform --url` printed the server's ESC[2K, CR and OSC title sequences raw in the table's detail column."""
    code, stdout, stderr = conform(capsys, None)
    assert code == 1, stderr
    for c in RAW_CONTROLS:
        assert c not in stdout, repr(c)
    assert "\\x1b[2K" in stdout.replace("\n", "").replace("│", "")  # shown, not dropped (a person sees it was there)


TABLE_FIELDS = {
    "id": lambda case, doc: case.update(id=f"a.{HOSTILE}"),
    "level": lambda case, doc: case.update(level=HOSTILE),
    "behaviour": lambda case, doc: case.update(behaviour=HOSTILE, behaviours=[HOSTILE, f"b{HOSTILE}"]),
    "expected": lambda case, doc: case.update(expected=HOSTILE),
    "actual": lambda case, doc: case.update(actual=HOSTILE),
    "note": lambda case, doc: case.update(note=HOSTILE),
    "quirk_reason": lambda case, doc: case.update(verdict="quirk", quirk_reason=HOSTILE),
    "info-actual": lambda case, doc: case.update(verdict="info", note="", actual=HOSTILE),
    "aborted": lambda case, doc: doc.update(aborted=HOSTILE),
    "unexpected_passes": lambda case, doc: doc.update(unexpected_passes=[HOSTILE]),
    "engine-name": lambda case, doc: doc.update(engine={"name": HOSTILE}),
    "expectations": lambda case, doc: doc.update(expectations=HOSTILE),
}


@pytest.mark.parametrize("field", sorted(TABLE_FIELDS))
def test_every_string_of_the_table_is_shown_escaped(field, capsys):
    """#8: every field of a report the terminal table prints (read back from a server's answers, or a saved run)."""
    from harness.conformance.report import print_table

    case = {"id": "a.b", "level": "MUST", "requirement": "r", "verdict": "fail", "behaviour": "t", "behaviours": ["t"],
            "expected": 1, "actual": 2, "chunk": None, "note": "n", "quirk_reason": "", "unexpected_pass": False}  # fmt: skip
    doc = {"engine": {"url": "http://127.0.0.1:1"}, "expectations": "x", "duration_s": 0.0, "counts": {},
           "aborted": None, "unexpected_passes": [], "cases": [case]}  # fmt: skip
    TABLE_FIELDS[field](case, doc)
    print_table(doc)
    stdout = capsys.readouterr().out
    for c in RAW_CONTROLS:
        assert c not in stdout, repr(c)
    assert "\\x1b" in stdout


def test_update_expectations_shows_a_hostile_note_escaped(tmp_path, capsys):
    """#8: the change lines of update-expectations quote ids and notes of a results file."""
    results = tmp_path / "conformance.json"
    results.write_text(json.dumps({"cases": [{"id": "chat.length", "verdict": "error", "note": HOSTILE}]}))
    expect = tmp_path / "e.yaml"
    expect.write_text("name: e\ncases: {}\n")
    code = main(["update-expectations", str(results), "--expect", str(expect), "--out", str(tmp_path / "new.yaml")])
    stdout = capsys.readouterr().out
    assert code == 0 and "chat.length" in stdout
    for c in RAW_CONTROLS:
        assert c not in stdout, repr(c)


def test_a_key_sharing_six_characters_with_the_harness_own_names_renames_nothing():
    """#4's scrub cuts 6+ character runs at either end of the key: it must cut them from what a server sent, never
    from what the harness wrote itself (a case id, the manifest's name, the expectation file's name). Seen in CI: the
    key llamacpp-test-... turned the report's expectations llamacpp-0c1e570 into ***0c1e570."""
    from harness.conformance.model import CaseResult
    from harness.conformance.report import scrub_report
    from harness.conformance.runner import SuiteReport

    key = "llamacpp-chat.stream-9f3e"
    r = CaseResult(id="chat.stream.done", level="MUST", requirement="llamacpp-style", verdict="fail",
                   note=f"server said Bearer {key} and {key[:8]}…")  # fmt: skip
    report = SuiteReport(engine={"name": "llamacpp-0c1e570-cpu", "kind": "llamacpp", "version": "0c1e570",
                                 "identity": {"echo": key}}, expectations="llamacpp-0c1e570", results=[r])  # fmt: skip
    scrub_report(report, [key])
    out = report.results[0]
    assert (out.id, out.requirement) == ("chat.stream.done", "llamacpp-style")
    assert report.expectations == "llamacpp-0c1e570" and report.engine["name"] == "llamacpp-0c1e570-cpu"
    assert key not in out.note and key[:8] not in out.note and key not in json.dumps(report.engine)
