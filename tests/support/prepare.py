"""Build and verify what the engine tests need, while the unit tests run (`scripts/run-tests.sh`, issue 34 item 7).

On a fresh machine the first engine test used to wait for what only it needed: the llama-server build (about 6 min on
2 cores), the llama-cpp-python build (about 4.5 min), the engine and tool environments and the models. Here each is
made the way its session fixture makes it on first use (the same functions, locks and caches), in the background of
the unit tests, which use one core. On a warm machine every step is a verification of a second or two.

A step that fails is reported in one line and left to the tests: under CI=true they then fail with their own reason.
Exit status: the number of failed steps (0 when all are ready).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from harness.settings import REPO_ROOT

MANIFESTS = REPO_ROOT / "manifests"


def _engine(name: str) -> Callable[[], object]:
    """The manifest's engine (its environment or its source build) and its model, as `harness install` and the
    launcher make them."""

    def step() -> object:
        from harness.envs import ensure_env
        from harness.manifest import load_manifest
        from harness.models.resolve import resolve_model

        m = load_manifest(MANIFESTS / name)
        if m.runtime.source is not None:
            m.profile.build_from_source(m.runtime.source, m.engine.version, build_lock=m.source_build_lock)
        elif m.runtime.python is not None:
            ensure_env(m)
        return resolve_model(m)

    return step


# the parser families' scripted models (harness/models/families.py), each in both formats
FAMILY_SLUGS = ("qwen3-coder", "llama3-json", "pythonic", "deepseek-v3", "kimi-k2")


def _family(slug: str) -> Callable[[], object]:
    vllm, llama = (
        _engine(f"vllm-0.11.0-cpu-scripted-{slug}.yaml"),
        _engine(f"llamacpp-0c1e570-cpu-scripted-{slug}.yaml"),
    )
    return lambda: (vllm(), llama())


def _clients() -> object:
    """The pinned client libraries' environments (harness/clients), from their verified locks: uv for the Python
    clients, npm ci for the Node one (vercel-ai: node and npm must be on PATH)."""
    from harness.clients.env import install_client
    from harness.clients.spec import CLIENTS

    return [install_client(spec) for spec in CLIENTS.values()]


def _tool(module: str) -> Callable[[], object]:
    def step() -> object:
        import importlib

        return importlib.import_module(f"tests.support.{module}").install()

    return step


# Longest first, so the build that takes longest overlaps the most unit tests.
STEPS: list[tuple[str, Callable[[], object]]] = [
    ("llama-server 0c1e570 build, reference model (GGUF)", _engine("llamacpp-0c1e570-cpu.yaml")),
    ("llama-cpp-python server env", _tool("llama_cpp_python_server")),
    ("vLLM 0.11.0 env, reference model", _engine("vllm-0.11.0-cpu.yaml")),
    ("vLLM 0.32.0 env", _engine("vllm-0.32.0-cpu.yaml")),
    ("scripted model (safetensors)", _engine("vllm-0.11.0-cpu-scripted.yaml")),
    ("scripted model (GGUF)", _engine("llamacpp-0c1e570-cpu-scripted.yaml")),
    *[(f"scripted {slug} model (safetensors, GGUF)", _family(slug)) for slug in FAMILY_SLUGS],
    ("SmolLM2-135M (checkpoint)", _engine("vllm-0.11.0-cpu-smollm2.yaml")),
    ("SmolLM2-135M (GGUF)", _engine("llamacpp-0c1e570-cpu-smollm2.yaml")),
    ("LiteLLM proxy env", _tool("litellm_gateway")),
    ("client library envs (openai-agents, pydantic-ai, instructor, litellm, anthropic, vercel-ai)", _clients),
]


def main() -> int:
    failed = 0
    for label, step in STEPS:
        t0 = time.monotonic()
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - reported; the tests that need it fail with their own reason
            failed += 1
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            print(f"prepare: {label}: FAILED after {time.monotonic() - t0:.0f} s: {type(exc).__name__}: {first}")
            continue
        print(f"prepare: {label}: ready in {time.monotonic() - t0:.1f} s", flush=True)
    return failed


if __name__ == "__main__":
    sys.exit(main())
