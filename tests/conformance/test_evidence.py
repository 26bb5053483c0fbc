"""Evidence: every case of a `conform --out` run has its exchanges saved (request, status, headers, raw body), shared
probes once and referenced, bounded per case (truncated said), and no secret in any file."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from harness.cli import main
from harness.conformance.evidence import CASE_CAP_BYTES, EvidenceRecorder, current_case, end_case, load_store
from harness.errors import DataError
from tests.support.standin_server import serve

KEY = "evidence-test-key-9c1d"


@pytest.fixture(scope="module")
def keyed_run(tmp_path_factory):
    srv = serve(0, api_key=KEY)
    out = tmp_path_factory.mktemp("ev") / "run"
    mp = pytest.MonkeyPatch()
    mp.setenv("HARNESS_EVIDENCE_TEST_KEY", KEY)
    try:
        main(["conform", "--url", srv.base_url, "--expect", "tgi-3.3.5", "--api-key-env", "HARNESS_EVIDENCE_TEST_KEY",
              "--out", str(out)])  # fmt: skip
    finally:
        mp.undo()
        srv.shutdown()
    return out


def test_index_lists_every_case_with_its_file_and_verdict(keyed_run):
    doc = json.loads((keyed_run / "conformance.json").read_text())
    index = json.loads((keyed_run / "evidence" / "index.json").read_text())
    assert [c["id"] for c in index["cases"]] == [c["id"] for c in doc["cases"]]
    assert {c["id"]: c["verdict"] for c in index["cases"]} == {c["id"]: c["verdict"] for c in doc["cases"]}
    assert index["api_key"] is True and index["cap_bytes"] == CASE_CAP_BYTES
    for c in index["cases"]:
        if c["verdict"] != "skip" and c["file"]:
            saved = json.loads((keyed_run / "evidence" / c["file"]).read_text())
            assert saved["key"] == c["id"] and len(saved["exchanges"]) == c["exchanges"]
    # a shared probe is saved once and named by each case that read it
    readers = [c["id"] for c in index["cases"] if "chat.stream" in c["probes"]]
    assert len(readers) >= 5 and (keyed_run / "evidence" / "probe--chat.stream.json").is_file()
    probe = json.loads((keyed_run / "evidence" / "probe--chat.stream.json").read_text())
    (ex,) = probe["exchanges"]
    assert ex["method"] == "POST" and ex["path"] == "/v1/chat/completions" and ex["status"] == 200
    assert ex["body"]["text"].rstrip().endswith("data: [DONE]") and sum(ex["chunks"]) == ex["stored_bytes"]
    assert json.loads(ex["request_body"]["text"])["stream"] is True and ex["ended"] == "eof"


def test_no_secret_in_any_file(keyed_run):
    files = [p for p in keyed_run.rglob("*") if p.is_file()]
    assert len(files) > 30
    for p in files:
        assert KEY not in p.read_text(), p
    ev = json.loads((keyed_run / "evidence" / "chat.length.json").read_text())
    assert ev["exchanges"][0]["request_headers"]["authorization"] == "*** (redacted: the run's API key)"
    wrong = json.loads((keyed_run / "evidence" / "auth.wrong-key.json").read_text())
    assert wrong["exchanges"][0]["request_headers"]["authorization"] == "*** (redacted)"  # not the run's key
    missing = json.loads((keyed_run / "evidence" / "auth.missing-key.json").read_text())
    assert "authorization" not in missing["exchanges"][0]["request_headers"]


def _mock(body: bytes, echo_key: bool = False):
    def handler(request: httpx.Request) -> httpx.Response:
        extra = request.headers.get("authorization", "").encode() if echo_key else b""
        return httpx.Response(200, headers={"set-cookie": "s=1"}, content=body + extra)

    return httpx.MockTransport(handler)


async def _exchange(rec: EvidenceRecorder, transport, case: str = "a.case", key: str | None = None):
    token = current_case(case)
    try:
        async with httpx.AsyncClient(transport=rec.transport(transport), base_url="http://127.0.0.1:1",
                                     headers={"Authorization": f"Bearer {key}"} if key else {}) as c:  # fmt: skip
            r = await c.get("/x")
            return r.content
    finally:
        end_case(token)


def test_cap_per_case_cuts_and_says_truncated():
    rec = EvidenceRecorder(cap_bytes=100)
    got = asyncio.run(_exchange(rec, _mock(b"y" * 300)))
    assert got == b"y" * 300  # the client reads everything; only what is kept is bounded
    (ex,) = rec.exchanges["a.case"]
    assert ex.truncated and len(ex.body) == 100 and ex.seen_bytes == 300
    asyncio.run(_exchange(rec, _mock(b"z" * 10)))  # the case's budget is spent: the next exchange keeps nothing
    assert rec.exchanges["a.case"][1].truncated and rec.exchanges["a.case"][1].body == b""
    d = rec.exchanges["a.case"][0].to_dict()
    assert d["truncated"] is True and d["stored_bytes"] == 100 and d["seen_bytes"] == 300


def test_key_echoed_by_the_server_is_cut_out_and_cookies_redacted():
    rec = EvidenceRecorder(api_key="k-secret-1")
    asyncio.run(_exchange(rec, _mock(b"you sent ", echo_key=True), key="k-secret-1"))
    (ex,) = rec.exchanges["a.case"]
    assert b"k-secret-1" not in bytes(ex.body) and bytes(ex.body) == b"you sent Bearer ***"
    assert dict(ex.headers)["set-cookie"] == "*** (redacted)"
    assert ex.request_headers["authorization"] == "*** (redacted: the run's API key)"


@pytest.mark.parametrize(
    "index, needle",
    [
        ("[]", "format"),
        ('{"format": 1, "cases": [{"id": "x", "verdict": "pass", "file": "../../etc/passwd"}]}', "file"),
        ('{"format": 1, "cases": [{"id": "x"}]}', "verdict"),
        ('{"format": 1, "cases": "no"}', "cases"),
    ],
)
def test_hostile_index_is_one_data_error(tmp_path, index, needle):
    (tmp_path / "evidence").mkdir()
    (tmp_path / "evidence" / "index.json").write_text(index)
    with pytest.raises(DataError, match=needle):
        load_store(tmp_path)


def test_hostile_evidence_file_is_one_line_exit_2(tmp_path, capsys):
    (tmp_path / "evidence").mkdir()
    (tmp_path / "evidence" / "index.json").write_text(
        '{"format": 1, "cases": [{"id": "health.health", "verdict": "pass", "file": "h.json"}]}'
    )
    (tmp_path / "evidence" / "h.json").write_text('{"exchanges": [{"method": "GET", "path": "/", "ended": "eof", '
                                                  '"status": "x"}]}')  # fmt: skip
    code = main(["conform", "--rejudge", str(tmp_path), "--expect", "openai"])
    err = capsys.readouterr().err
    assert code == 2 and "status" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
