#!/usr/bin/env python3
"""Build (or verify) llama-server, write the GGUF, launch on 127.0.0.1 and probe the API; raw answers go to OUTDIR.

    .venv/bin/python scripts/try-llamacpp.py [OUTDIR]        (default /tmp/llamacpp-probe)

Everything binds 127.0.0.1; the server is stopped at the end (also on error or Ctrl-C).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.engines.gguf import GGUF_FILENAME, build_reference_gguf  # noqa: E402
from harness.engines.llamacpp_build import LLAMA_CPP_SOURCE, ensure_llama_server  # noqa: E402

KEY = "probe-key"
OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/llamacpp-probe")


def save(name: str, text: str) -> None:
    (OUT / name).write_text(text)
    print(f"--- {name}\n{text[:1500]}{' ...' if len(text) > 1500 else ''}\n")


def raw(c: httpx.Client, method: str, url: str, **kw) -> str:
    t0 = time.monotonic()
    with c.stream(method, url, **kw) as r:
        body = b"".join(r.iter_raw()).decode("utf-8", "replace")
        head = f"HTTP {r.status_code} {dict(r.headers)}\n# {time.monotonic() - t0:.3f} s\n"
    return head + body


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    binary = ensure_llama_server(LLAMA_CPP_SOURCE.sha256)
    save("ensure.txt", f"{binary}\nensure_llama_server: {time.monotonic() - t0:.1f} s\n")
    gdir = OUT / "gguf"
    print("gguf tree hash", build_reference_gguf(gdir, force=True))
    v = subprocess.run([binary, "--version"], capture_output=True, text=True)
    save("version.txt", v.stdout + v.stderr)
    h = subprocess.run([binary, "--help"], capture_output=True, text=True)
    save("help.txt", h.stdout + h.stderr)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [
        str(binary),
        "-m",
        str(gdir / GGUF_FILENAME),
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
    env = {"PATH": os.environ["PATH"], "LLAMA_API_KEY": KEY}
    save("argv.txt", " ".join(argv) + "\nenv: LLAMA_API_KEY=<key>\n")
    log = open(OUT / "server.log", "wb")
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    auth = {"Authorization": f"Bearer {KEY}"}
    try:
        with httpx.Client(trust_env=False, timeout=60) as c:
            first_connect = None
            while True:
                if proc.poll() is not None:
                    print((OUT / "server.log").read_text()[-3000:])
                    return 1
                try:
                    r = c.get(f"{base}/health")
                    first_connect = first_connect or time.monotonic() - t0
                    if r.status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.05)
            save("ready.txt", f"first connect {first_connect:.2f} s, /health 200 after {time.monotonic() - t0:.2f} s\n")
            save("ss.txt", subprocess.run(["ss", "-ltnp"], capture_output=True, text=True).stdout)
            save("health.txt", raw(c, "GET", f"{base}/health"))
            save("props-noauth.txt", raw(c, "GET", f"{base}/props"))
            save("props.txt", raw(c, "GET", f"{base}/props", headers=auth))
            save("models-noauth.txt", raw(c, "GET", f"{base}/v1/models"))
            save("models.txt", raw(c, "GET", f"{base}/v1/models", headers=auth))
            chat = {
                "model": "tiny-llama",
                "messages": [{"role": "user", "content": "Hello!"}],
                "max_tokens": 24,
                "temperature": 0,
            }
            save("chat-noauth.txt", raw(c, "POST", f"{base}/v1/chat/completions", json=chat))
            save("chat.txt", raw(c, "POST", f"{base}/v1/chat/completions", json=chat, headers=auth))
            save("chat-2.txt", raw(c, "POST", f"{base}/v1/chat/completions", json=chat, headers=auth))
            save(
                "chat-logprobs.txt",
                raw(
                    c,
                    "POST",
                    f"{base}/v1/chat/completions",
                    headers=auth,
                    json={**chat, "logprobs": True, "top_logprobs": 5},
                ),
            )
            save(
                "chat-stream.txt",
                raw(
                    c,
                    "POST",
                    f"{base}/v1/chat/completions",
                    headers=auth,
                    json={**chat, "max_tokens": 6, "stream": True},
                ),
            )
            save(
                "chat-stream-usage.txt",
                raw(
                    c,
                    "POST",
                    f"{base}/v1/chat/completions",
                    headers=auth,
                    json={**chat, "max_tokens": 6, "stream": True, "stream_options": {"include_usage": True}},
                ),
            )
            save(
                "chat-stream-logprobs.txt",
                raw(
                    c,
                    "POST",
                    f"{base}/v1/chat/completions",
                    headers=auth,
                    json={**chat, "max_tokens": 3, "stream": True, "logprobs": True, "top_logprobs": 2},
                ),
            )
            cmpl = {"model": "tiny-llama", "prompt": "Once upon a time", "max_tokens": 24, "temperature": 0}
            save("cmpl.txt", raw(c, "POST", f"{base}/v1/completions", json=cmpl, headers=auth))
            save(
                "cmpl-logprobs.txt",
                raw(c, "POST", f"{base}/v1/completions", headers=auth, json={**cmpl, "logprobs": 5}),
            )
            save(
                "cmpl-stream.txt",
                raw(
                    c,
                    "POST",
                    f"{base}/v1/completions",
                    headers=auth,
                    json={**cmpl, "max_tokens": 6, "stream": True, "stream_options": {"include_usage": True}},
                ),
            )
            save(
                "tokenize.txt",
                raw(
                    c,
                    "POST",
                    f"{base}/tokenize",
                    headers=auth,
                    json={"content": "Once upon a time", "add_special": True},
                ),
            )
            save(
                "apply-template.txt",
                raw(c, "POST", f"{base}/apply-template", headers=auth, json={"messages": chat["messages"]}),
            )
            save(
                "err-badjson.txt",
                raw(
                    c,
                    "POST",
                    f"{base}/v1/chat/completions",
                    headers={**auth, "Content-Type": "application/json"},
                    content=b'{"model": "tiny-llama", "messages": [',
                ),
            )
            save(
                "err-unknown-model.txt",
                raw(c, "POST", f"{base}/v1/chat/completions", headers=auth, json={**chat, "model": "no-such-model"}),
            )
            save(
                "err-max-tokens.txt",
                raw(c, "POST", f"{base}/v1/chat/completions", headers=auth, json={**chat, "max_tokens": 100000}),
            )
            save(
                "err-negative-max-tokens.txt",
                raw(c, "POST", f"{base}/v1/chat/completions", headers=auth, json={**chat, "max_tokens": -5}),
            )
            save(
                "err-no-messages.txt",
                raw(c, "POST", f"{base}/v1/chat/completions", headers=auth, json={"model": "tiny-llama"}),
            )
            save(
                "err-long-prompt.txt",
                raw(
                    c,
                    "POST",
                    f"{base}/v1/completions",
                    headers=auth,
                    json={**cmpl, "prompt": "x" * 5000, "max_tokens": 4},
                ),
            )
            schema = {
                "type": "object",
                "properties": {"a": {"type": "integer"}},
                "required": ["a"],
                "additionalProperties": False,
            }
            save(
                "json-schema.txt",
                raw(
                    c,
                    "POST",
                    f"{base}/v1/chat/completions",
                    headers=auth,
                    json={
                        **chat,
                        "max_tokens": 40,
                        "response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": schema}},
                    },
                ),
            )
            save(
                "json-object.txt",
                raw(
                    c,
                    "POST",
                    f"{base}/v1/chat/completions",
                    headers=auth,
                    json={**chat, "max_tokens": 40, "response_format": {"type": "json_object"}},
                ),
            )
            save(
                "n2.txt", raw(c, "POST", f"{base}/v1/completions", headers=auth, json={**cmpl, "n": 2, "max_tokens": 4})
            )
            save(
                "seed-sampling.txt",
                raw(
                    c,
                    "POST",
                    f"{base}/v1/completions",
                    headers=auth,
                    json={**cmpl, "temperature": 1.0, "seed": 1234, "max_tokens": 8},
                ),
            )
            save(
                "seed-sampling-2.txt",
                raw(
                    c,
                    "POST",
                    f"{base}/v1/completions",
                    headers=auth,
                    json={**cmpl, "temperature": 1.0, "seed": 1234, "max_tokens": 8},
                ),
            )
            metrics = c.get(f"{base}/metrics", headers=auth)
            save("metrics-status.txt", f"HTTP {metrics.status_code} {dict(metrics.headers)}\n")
            Path("/tmp/llamacpp-metrics.txt").write_text(metrics.text)
            save("metrics.txt", metrics.text)
            save("metrics-noauth.txt", raw(c, "GET", f"{base}/metrics"))
            save("slots.txt", raw(c, "GET", f"{base}/slots", headers=auth))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
        print("server exit code", proc.returncode)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
