"""LiteLLM's proxy (1.108.7) as a gateway in front of an engine on the host's loopback (issue 22), started so that it
can never send traffic off this machine: it runs in a network namespace that has only `lo` (`unshare -n`, as root),
and reaches the engine, and is reached from the host, through Unix sockets the two namespaces share (tests.support
.relay):

    host 127.0.0.1:G  -> unix:gw.sock  -> [namespace] 127.0.0.1:4000 (LiteLLM)
    [namespace] 127.0.0.1:18000 -> unix:engine.sock -> host 127.0.0.1:ENGINE (vLLM)

    python = install()                                     # $HARNESS_HOME/tools/litellm-proxy-<key>/bin/python
    with start(python, run_dir, engine_url, model="tiny-llama") as gw:
        main(["conform", "--url", gw.base_url, "--engine-url", engine_url, ...])   # key in gw.key_env

The proxy needs a master key (it refuses to start without one): a fresh random one per start, given in the
environment, never argv; clients send it as Bearer. It gets a minimal environment (no proxy variables), the local
model-cost map and no telemetry (nothing it would fetch). Everything (the proxy, both relays) runs in process groups of
its own, asked to die with their parent, and stop() kills each group; the proxy's log is run_dir/litellm.log.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from harness.launch.ports import choose_port
from harness.procs import die_with_parent, terminate_group
from harness.settings import REPO_ROOT

__all__ = ["LOCK", "VERSION", "KEY_ENV", "LiteLLMGateway", "install", "start"]

VERSION = "1.108.7"
LOCK = REPO_ROOT / "manifests" / "locks" / f"litellm-proxy-{VERSION}.txt"
RELAY = Path(__file__).with_name("relay.py")
HOST = "127.0.0.1"
NS_PROXY_PORT = 4000  # inside the namespace: nothing else listens there
NS_ENGINE_PORT = 18000
KEY_ENV = "HARNESS_TEST_GATEWAY_KEY"  # where the tests put the master key for `conform --api-key-env`
READY_TIMEOUT_S = 180.0  # measured: 25-40 s on 2 shared cores


def install() -> Path:
    """The python of the proxy's environment (built from the hashed lock on first use, then verified)."""
    from tests.support.toolenv import tool_env

    return tool_env("litellm-proxy", LOCK)


@dataclass
class LiteLLMGateway:
    procs: list[subprocess.Popen]
    port: int
    key: str
    log_path: Path
    started_s: float = 0.0  # seconds from the start to the first 200 of /v1/models
    _stopped: bool = field(default=False, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM each process group (the proxy and its in-namespace relay; the host relay), SIGKILL what is left
        after `grace`, and reap them."""
        for p in self.procs:
            if p.poll() is None:
                terminate_group(p.pid, grace)
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self._stopped = True

    def __enter__(self) -> LiteLLMGateway:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def config_text(model: str) -> str:
    """The proxy's config: `model` routed to the engine (an OpenAI-compatible vLLM) through the namespace's relay."""
    entry = {"model_name": model,
             "litellm_params": {"model": f"hosted_vllm/{model}", "api_base": f"http://{HOST}:{NS_ENGINE_PORT}/v1"}}  # fmt: skip
    doc = {"model_list": [entry], "general_settings": {"master_key": "os.environ/LITELLM_MASTER_KEY"}}
    return json.dumps(doc, indent=1) + "\n"  # JSON is YAML


def proxy_environment(run_dir: Path, key: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(run_dir),
        "LC_ALL": "C.UTF-8",
        "LITELLM_MASTER_KEY": key,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_TELEMETRY": "False",
        "HF_HUB_OFFLINE": "1",
    }


def _spawn(cmd: list[str], log, env: dict[str, str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                            start_new_session=True, preexec_fn=die_with_parent)  # fmt: skip


def start(python: Path, run_dir: Path, engine_url: str, *, model: str, timeout_s: float = READY_TIMEOUT_S
          ) -> LiteLLMGateway:  # fmt: skip
    """Start the relays and the proxy in its namespace, and wait until GET /v1/models (with the key) answers 200.
    Raises RuntimeError (with the log's tail) when it does not come up; everything started is stopped then."""
    engine = httpx.URL(engine_url)
    if engine.host != HOST or engine.port is None:
        raise ValueError(f"engine_url must be http://{HOST}:PORT, got {engine_url!r}")
    run_dir.mkdir(parents=True, exist_ok=True)
    socks = run_dir / "socks"
    socks.mkdir(exist_ok=True)
    engine_sock, gw_sock = socks / "engine.sock", socks / "gw.sock"
    (run_dir / "config.yaml").write_text(config_text(model))
    key = "sk-" + secrets.token_hex(16)
    port = choose_port(HOST, 0)
    log_path = run_dir / "litellm.log"
    relay = [sys.executable, str(RELAY)]
    ns_relay = shlex.join([*relay, f"tcp:{HOST}:{NS_ENGINE_PORT}=unix:{engine_sock}",
                           f"unix:{gw_sock}=tcp:{HOST}:{NS_PROXY_PORT}"])  # fmt: skip
    proxy = shlex.join([str(python), "-m", "litellm.proxy.proxy_cli", "--config", str(run_dir / "config.yaml"),
                        "--host", HOST, "--port", str(NS_PROXY_PORT)])  # fmt: skip
    inside = f"ip link set lo up && {{ {ns_relay} & exec {proxy}; }}"
    gw = LiteLLMGateway(procs=[], port=port, key=key, log_path=log_path)
    t0 = time.monotonic()
    try:
        with open(log_path, "ab") as log:
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8"}
            gw.procs.append(_spawn([*relay, f"unix:{engine_sock}=tcp:{HOST}:{engine.port}",
                                    f"tcp:{HOST}:{port}=unix:{gw_sock}"], log, env, run_dir))  # fmt: skip
            gw.procs.append(_spawn(["unshare", "-n", "sh", "-c", inside], log, proxy_environment(run_dir, key),
                                   run_dir))  # fmt: skip
        _wait_ready(gw, timeout_s)
    except BaseException:
        gw.stop()
        raise
    gw.started_s = round(time.monotonic() - t0, 1)
    return gw


def _wait_ready(gw: LiteLLMGateway, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    with httpx.Client(trust_env=False, timeout=5.0, headers={"Authorization": f"Bearer {gw.key}"}) as client:
        while time.monotonic() < deadline:
            for p in gw.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"LiteLLM gateway: {p.args[0]} exited with {p.returncode}: {gw.log_tail(1500)}")
            try:
                r = client.get(f"{gw.base_url}/v1/models")
                if r.status_code == 200 and isinstance(r.json().get("data"), list):
                    return
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.5)
    raise RuntimeError(f"LiteLLM's proxy did not answer GET /v1/models within {timeout_s:.0f} s: {gw.log_tail(1500)}")
