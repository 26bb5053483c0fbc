"""llama-cpp-python's own server (`python -m llama_cpp.server`, FastAPI), a real OpenAI-compatible server the harness
has no engine profile for (issue 22): installed from hashed locks, started on 127.0.0.1, always stopped.

    python = install()                                   # $HARNESS_HOME/tools/llama-cpp-python-server-<key>/bin/python
    with start(python, run_dir) as srv:                  # the reference GGUF, served as tiny-llama
        main(["conform", "--url", srv.base_url, "--expect", "openai"])
    start(python, run_dir, api_key="k")                  # every request needs Authorization: Bearer k

The env is built once from manifests/locks/llama-cpp-python-server-0.3.36.txt (the sdist compiled from source: 330 s
measured on 2 shared cores), with its build backend, cmake and ninja from llama-cpp-python-build-0.3.36.txt, every
package hashed; later sessions verify its marker (tests.support.toolenv). The model is the reference GGUF the
llama.cpp manifest pins, resolved (and hash-verified) by the product's own code, not a copy. The server gets a minimal
environment: no proxy variables, no stray settings variables (its pydantic settings read MODEL, API_KEY, ... from the
environment, and HOST, PORT and CONFIG_FILE there win over its argv), and HF_HUB_OFFLINE=1; an API key is given as
API_KEY, so it is never in argv. It runs in its own process group, asked to die with its parent, and stop() kills
the whole group.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from harness.launch.ports import choose_port
from harness.manifest import load_manifest
from harness.models import resolve_model
from harness.procs import die_with_parent, terminate_group
from harness.settings import REPO_ROOT

__all__ = ["LOCK", "BUILD_LOCK", "SERVED_NAME", "VERSION", "LlamaCppPythonServer", "install", "reference_gguf", "start"]

VERSION = "0.3.36"
LOCKS = REPO_ROOT / "manifests" / "locks"
LOCK = LOCKS / f"llama-cpp-python-server-{VERSION}.txt"
BUILD_LOCK = LOCKS / f"llama-cpp-python-build-{VERSION}.txt"
# GGML_NATIVE off: the same CPU flags on every machine of this kind; LLAMA_CURL off: no libcurl, no downloads
BUILD_ENV = {"CMAKE_ARGS": "-DGGML_NATIVE=OFF -DLLAMA_CURL=OFF", "CMAKE_BUILD_PARALLEL_LEVEL": "2"}
LLAMACPP_MANIFEST = REPO_ROOT / "manifests" / "llamacpp-0c1e570-cpu.yaml"
SERVED_NAME = "tiny-llama"
HOST = "127.0.0.1"
# llama-server's manifest gives 4 slots of 1024 tokens; this server has one context (requests are serialised)
SERVER_ARGS = ("--n_ctx", "1024", "--seed", "0", "--n_threads", "2", "--n_threads_batch", "2")
READY_TIMEOUT_S = 120.0


def install() -> Path:
    """The python of the server's environment (built on first use, then verified by its marker)."""
    from tests.support.toolenv import tool_env

    return tool_env("llama-cpp-python-server", LOCK, build_locks=[BUILD_LOCK], build_env=BUILD_ENV)


def reference_gguf() -> Path:
    """The reference GGUF file the llama.cpp manifest pins (built into $HARNESS_HOME/models and hash-checked)."""
    m = load_manifest(LLAMACPP_MANIFEST)
    return m.profile.model_path(resolve_model(m))


@dataclass
class LlamaCppPythonServer:
    proc: subprocess.Popen
    port: int
    log_path: Path
    api_key: str | None = None

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def model(self) -> str:
        return SERVED_NAME

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM the server's process group, SIGKILL what is left after `grace`, and reap it."""
        if self.proc.poll() is None:
            terminate_group(self.proc.pid, grace)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def __enter__(self) -> LlamaCppPythonServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def server_environment(run_dir: Path, api_key: str | None = None) -> dict[str, str]:
    """Only what the server needs: nothing of the caller's that its settings or httpx would read."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(run_dir),
        "LC_ALL": "C.UTF-8",
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(run_dir / "hf-home"),
        "OMP_NUM_THREADS": "2",
    }
    if api_key:
        env["API_KEY"] = api_key  # ServerSettings.api_key, read from the environment
    return env


def command(python: Path, model: Path, port: int) -> list[str]:
    # no --chat_format: the server takes the GGUF's own tokenizer.chat_template (as llama-server does)
    return [str(python), "-m", "llama_cpp.server", "--model", str(model), "--model_alias", SERVED_NAME,
            "--host", HOST, "--port", str(port), *SERVER_ARGS]  # fmt: skip


def start(
    python: Path, run_dir: Path, *, api_key: str | None = None, timeout_s: float = READY_TIMEOUT_S
) -> LlamaCppPythonServer:
    """Start the server on a free loopback port and wait until GET /v1/models answers 200; its log is
    run_dir/llama-cpp-python-server.log. With `api_key`, every route needs it (Bearer). Raises RuntimeError (with the
    log's tail) when it does not come up; the process is stopped then."""
    run_dir.mkdir(parents=True, exist_ok=True)
    port = choose_port(HOST, 0)
    log_path = run_dir / "llama-cpp-python-server.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            command(python, reference_gguf(), port), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env=server_environment(run_dir, api_key), cwd=run_dir, start_new_session=True, preexec_fn=die_with_parent,
        )  # fmt: skip
    srv = LlamaCppPythonServer(proc=proc, port=port, log_path=log_path, api_key=api_key)
    try:
        _wait_ready(srv, timeout_s)
    except BaseException:
        srv.stop()
        raise
    return srv


def _wait_ready(srv: LlamaCppPythonServer, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    headers = {"Authorization": f"Bearer {srv.api_key}"} if srv.api_key else {}
    with httpx.Client(trust_env=False, timeout=5.0, headers=headers) as client:
        while time.monotonic() < deadline:
            if srv.proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited with {srv.proc.returncode}: {srv.log_tail(1500)}")
            try:
                if client.get(f"{srv.base_url}/v1/models").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
    raise RuntimeError(f"llama_cpp.server did not answer GET /v1/models within {timeout_s:.0f} s: {srv.log_tail(1500)}")
