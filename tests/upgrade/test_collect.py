"""The upgrade's own GETs (/metrics, /v1/models): through the one client factory; no answer is None, never a raise."""

from __future__ import annotations

import http.server
import threading

import pytest

from harness.upgrade.collect import _get


@pytest.fixture
def server():
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = f'{{"path": "{self.path}", "auth": "{self.headers.get("Authorization", "")}"}}'.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_port}"
    srv.shutdown()
    srv.server_close()


def test_get_reads_the_whole_answer_with_the_key(server):
    r = _get(server, "/v1/models", "sk-test")
    assert r is not None and r.status_code == 200 and r.json() == {"path": "/v1/models", "auth": "Bearer sk-test"}
    assert _get(server, "/metrics", None).json()["auth"] == ""


def test_no_answer_is_none():
    assert _get("http://127.0.0.1:1", "/metrics", None) is None
