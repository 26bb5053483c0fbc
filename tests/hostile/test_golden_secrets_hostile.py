"""Hostile servers for `harness golden record --url` (issue 21, the golden side of #4 and #8): a server that echoes the
API key back (whole, or cut to a prefix or suffix) never gets it into a recording or onto the terminal, and a server's
text with terminal escapes (`ESC[2K\\r`, an OSC title) reaches stdout escaped. The fake engine listens on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from harness.manifest import DEFAULT_MANIFEST

KEY = "sk-golden-0123456789abcdefXYZ"
KEY_ENV = "HARNESS_TEST_GOLDEN_SECRET_KEY"
# what a hostile server puts in its version: a line clear and a carriage return (a `fail` line overwritten with a fake
# `pass`), and an OSC sequence that retitles the terminal
ESCAPES = "\x1b[2K\rpass \x1b]0;owned\x07"
TINY_SET = """name: tiny
description: one chat and one completion prompt a fake server answers
prompts:
  - id: a
    messages: [{role: user, content: hi}]
  - id: b
    prompt: hello
"""


class EchoServer:
    """An OpenAI-shaped server that echoes the Authorization header it gets. mode "echo": completions echo it in their
    text, cut copies of the key in other fields, and the completion prompt is refused (400) with the key in the
    message; mode "http500": every completion is an HTTP 500 whose body quotes the key."""

    def __init__(self, mode: str = "echo") -> None:
        self.mode, self.auth_seen = mode, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def _send(self, status: int, doc: object) -> None:
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                outer.auth_seen.append(self.headers.get("Authorization"))
                self._send(200, {"version": f"0.11.0 ({self.headers.get('Authorization')}){ESCAPES}"})

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                auth = self.headers.get("Authorization") or ""
                outer.auth_seen.append(auth)
                outer.answer(self, auth)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def answer(self, h, auth: str) -> None:
        key = auth.removeprefix("Bearer ")
        if self.mode == "http500":
            return h._send(500, {"error": {"message": f"upstream rejected {auth}{ESCAPES}"}})
        if h.path.endswith("/completions") and not h.path.endswith("/chat/completions"):
            return h._send(400, {"error": {"type": "BadRequest", "message": f"no completions for key {key[:11]}"}})
        msg = {"role": "assistant", "content": f"you sent {auth}; again: {key[:9]}... and ...{key[-8:]}"}
        h._send(200, {"id": "c", "created": 1, "model": "tiny", "system_fingerprint": f"fp-{key[:14]}",
                      "choices": [{"index": 0, "message": msg, "finish_reason": "length", "logprobs": None,
                                   "token_ids": [1, 2, 3]}],
                      "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}})  # fmt: skip

    def __enter__(self) -> EchoServer:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _key_parts(text: str) -> list[str]:
    """Every 6+ character prefix or suffix of the key (the key itself included) that occurs in `text`."""
    parts = {KEY[:n] for n in range(6, len(KEY) + 1)} | {KEY[-n:] for n in range(6, len(KEY) + 1)}
    return sorted(p for p in parts if p in text)


@pytest.fixture
def keyed(tmp_path, monkeypatch) -> tuple[str, str]:
    """(a manifest whose server.api_key_env names a set variable, a prompt set path)."""
    data = yaml.safe_load(DEFAULT_MANIFEST.read_text())
    data["runtime"]["python"]["lock"] = str((DEFAULT_MANIFEST.parent / data["runtime"]["python"]["lock"]).resolve())
    data["server"]["api_key_env"] = KEY_ENV
    manifest = tmp_path / "keyed.yaml"
    manifest.write_text(yaml.safe_dump(data))
    prompts = tmp_path / "tiny.yaml"
    prompts.write_text(TINY_SET)
    monkeypatch.setenv(KEY_ENV, KEY)
    return str(manifest), str(prompts)


def _record(keyed, url: str, out: Path) -> int:
    manifest, prompts = keyed
    return main(["golden", "record", manifest, "--url", url, "--prompts", prompts, "--out", str(out)])


# --- #4: the key a server echoes never reaches a recording, whole or cut ---------------------------------------------


def test_4_echoed_api_key_is_not_in_the_recording(tmp_path, capsys, keyed):
    out = tmp_path / "rec"
    with EchoServer() as srv:
        rc = _record(keyed, srv.url, out)
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert f"Bearer {KEY}" in srv.auth_seen  # the key was sent, and so echoed: the test is not vacuous
    stored = {p.name: p.read_text() for p in sorted(out.iterdir())}
    assert set(stored) == {"meta.json", "tiny.jsonl"}
    for name, text in stored.items():
        assert _key_parts(text) == [], f"{name} holds the key: {_key_parts(text)}"
    assert _key_parts(cap.out + cap.err) == []
    a, b = (json.loads(line) for line in stored["tiny.jsonl"].splitlines())
    # what the server said around the key is kept: the key's place is marked, the rest of the answer is there
    assert a["choices"][0]["text"] == "you sent Bearer ***; again: ***... and ...***"
    assert a["system_fingerprint"] == "fp-***" and a["choices"][0]["token_ids"] == [1, 2, 3]
    assert b["error"]["status"] == 400 and b["error"]["message"] == "no completions for key ***"
    assert a["request_sha256"] and a["request"]["messages"] == [{"role": "user", "content": "hi"}]


def test_4_echoed_api_key_is_not_in_the_error_line(tmp_path, capsys, keyed):
    out = tmp_path / "rec"
    with EchoServer("http500") as srv:
        rc = _record(keyed, srv.url, out)
    cap = capsys.readouterr()
    assert rc == 1 and "HTTP 500" in cap.err and "upstream rejected Bearer ***" in cap.err, cap.err
    assert _key_parts(cap.out + cap.err) == [] and not out.exists()


# --- #8: a server's text reaches the terminal with its controls escaped -------------------------------------------------


def test_8_server_escapes_are_shown_escaped_on_stdout(tmp_path, capsys, keyed):
    with EchoServer() as srv:
        rc = _record(keyed, srv.url, tmp_path / "rec")
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    for raw in ("\x1b", "\r", "\x07"):
        assert raw not in cap.out + cap.err, repr(cap.out)
    line = next(x for x in cap.out.splitlines() if x.startswith("recorded "))
    assert "(engine 0.11.0 (Bearer ***)\\x1b[2K\\rpass \\x1b]0;owned\\x07, model" in line, line
    # the recording keeps the version as the server said it (escaped only where it is shown)
    meta = json.loads((tmp_path / "rec" / "meta.json").read_text())
    assert meta["engine"]["reported_version"] == f"0.11.0 (Bearer ***){ESCAPES}"


def test_8_golden_diff_shows_a_recordings_escapes_escaped(tmp_path, capsys):
    from tests.golden.helpers import choice, record, write

    hostile_id = f"p1{ESCAPES}"
    for side in ("a", "b"):
        write(tmp_path / side, {"chat": [record(hostile_id, [choice([72, 101, 108])])]})
    rc = main(["golden", "diff", str(tmp_path / "a"), str(tmp_path / "b"), "-v"])
    out = capsys.readouterr().out
    assert rc == 0 and "p1\\x1b[2K\\rpass \\x1b]0;owned\\x07" in out, out
    assert not {"\x1b", "\r", "\x07"} & set(out)
