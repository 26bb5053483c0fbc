"""The real llama-server: built (or verified) from the pinned sdist, launched on 127.0.0.1 with the GGUF, one stream.

Not wired into manifests or the launcher yet; a plain subprocess + httpx (trust_env=False), stopped in a finally.
The first run builds llama-server (about 5.5 min on 2 cores) into $HARNESS_HOME/builds/<key>; later runs verify it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time

import httpx
import pytest

from harness.engines.gguf import GGUF_FILENAME, build_reference_gguf
from harness.engines.llamacpp_build import LLAMA_CPP_SOURCE, ensure_llama_server

API_KEY = "test-llamacpp-key"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.engine
@pytest.mark.slow
def test_llama_server_streams_a_chat_completion(tmp_path):
    binary = ensure_llama_server(LLAMA_CPP_SOURCE.sha256)
    model_dir = tmp_path / "gguf"
    build_reference_gguf(model_dir)
    port = _free_port()
    argv = [
        str(binary),
        "-m",
        str(model_dir / GGUF_FILENAME),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--metrics",
        "--alias",
        "tiny-llama",
        "--threads",
        "2",
        "--ctx-size",
        "2048",
        "--parallel",
        "1",
    ]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LLAMA_API_KEY": API_KEY}
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(trust_env=False, timeout=30.0) as c:
            deadline = time.monotonic() + 120
            while True:
                assert proc.poll() is None, (
                    f"llama-server exited {proc.returncode}: {(tmp_path / 'server.log').read_text()[-2000:]}"
                )
                try:
                    if c.get(f"{base}/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "llama-server not ready in 120 s"
                time.sleep(0.2)
            props = c.get(f"{base}/props", headers={"Authorization": f"Bearer {API_KEY}"}).json()
            assert LLAMA_CPP_SOURCE.commit in props.get("build_info", ""), props.get("build_info")
            body = {
                "model": "tiny-llama",
                "messages": [{"role": "user", "content": "Hello!"}],
                "max_tokens": 16,
                "temperature": 0,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            # without the key: refused
            assert c.post(f"{base}/v1/chat/completions", json=body).status_code == 401
            chunks, done = [], False
            with c.stream(
                "POST", f"{base}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {API_KEY}"}
            ) as r:
                assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
                for line in r.iter_lines():
                    if not line.startswith("data: "):
                        continue
                    if line == "data: [DONE]":
                        done = True
                        continue
                    chunks.append(json.loads(line[6:]))
            assert done
            assert all(ch["object"] == "chat.completion.chunk" for ch in chunks)
            content = "".join((ch["choices"][0]["delta"].get("content") or "") for ch in chunks if ch["choices"])
            finishes = [
                ch["choices"][0]["finish_reason"]
                for ch in chunks
                if ch["choices"] and ch["choices"][0]["finish_reason"]
            ]
            usage = [ch["usage"] for ch in chunks if ch.get("usage")]
            assert content and finishes[-1:] in (["length"], ["stop"])
            assert usage and usage[-1]["completion_tokens"] <= 16 and usage[-1]["prompt_tokens"] > 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
