"""llama.cpp's `llama-server`, built from a pinned source archive (harness.engines.llamacpp_build), serving a GGUF."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.engines.profile import HEALTH_LIVENESS, EngineProfile, Identity, MetricNames

__all__ = ["LLAMACPP"]

_HARNESS = "set by the harness from"


class _LlamaCpp(EngineProfile):
    def server_args(self, model: str, served_name: str, host: str, port: int) -> list[str]:
        # --metrics: /metrics is off unless asked for; --alias: the name /v1/models lists and responses carry
        return ["-m", model, "--alias", served_name, "--host", host, "--port", str(port), "--metrics"]

    def build_from_source(self, source: Any, version: str, *, quiet: bool = False,
                          build_lock: Path | None = None) -> Path:  # fmt: skip
        from harness.engines.llamacpp_build import SourcePin, ensure_llama_server

        pin = SourcePin(
            package=source.package, version=source.version, filename=source.filename, sha256=source.sha256,
            subdir=source.subdir, commit=version, build_lock=build_lock,
        )  # fmt: skip
        if quiet:
            return ensure_llama_server(pin.sha256, pin=pin, progress=lambda line: None)
        return ensure_llama_server(pin.sha256, pin=pin)

    def built_binary(self, source: Any, version: str) -> Path | None:
        """The verified binary of a finished build of this pin, or None when it has not been built (nothing built)."""
        from harness.engines.llamacpp_build import MARKER, build_dir, build_key, build_key_inputs, verify_build

        inputs = build_key_inputs(source.sha256, version)
        final = build_dir(build_key(inputs))
        return verify_build(final, inputs) if (final / MARKER).exists() else None

    def argument_surface(self, runtime: Path, release: str) -> dict[str, Any]:
        """`llama-server --help` of the verified binary at `runtime` (it prints and exits; nothing is served)."""
        from harness.launch.argsurface import SurfaceUnavailable, run_capture, surface_from_help

        if not runtime.is_file():
            raise SurfaceUnavailable(f"{runtime}: no llama-server binary")
        text = run_capture([str(runtime), "--help"], env=self.capture_env(), timeout=30)
        surface = surface_from_help(text, engine=self.kind, release=release)
        if len(surface["flags"]) < 20 or "--port" not in surface["flags"]:
            raise SurfaceUnavailable(f"{runtime} --help: not a flag listing ({len(surface['flags'])} flags read)")
        surface["captured_with"] = "llama-server --help"
        return surface


LLAMACPP = _LlamaCpp(
    kind="llamacpp",
    title="llama.cpp",
    runtimes=frozenset({"source"}),
    # a source build has no release number: it is the upstream commit the archive vendors (what /props reports)
    version_pattern=r"[0-9a-f]{7,40}",
    version_example="0c1e570",
    api_key_env="LLAMA_API_KEY",
    # /props build_info is "b<build number>-<commit>"; the harness builds with build number 0
    identity=Identity(path="/props", version_field="build_info", version_prefix="b0-"),
    metrics=MetricNames(
        prefix="llamacpp:",
        running="llamacpp:requests_processing",
        waiting="llamacpp:requests_deferred",
        # "Number of prompt tokens processed, excluding cached tokens": the reused ones are counted apart
        prompt_tokens="llamacpp:prompt_tokens_total",
        prompt_tokens_cached="llamacpp:prompt_tokens_cached_total",
        generation_tokens="llamacpp:tokens_predicted_total",
        prefix_hits="llamacpp:prompt_tokens_cached_total",  # "Number of prompt tokens reused from the cache"
    ),
    liveness=HEALTH_LIVENESS,  # GET /health == 200 while the engine is ready
    # llama.cpp's common_params parser: each flag has short and long spellings and an LLAMA_ARG_* variable
    forbidden_args={
        "--host": f"{_HARNESS} server.host",
        "--port": f"{_HARNESS} server.port",
        "--api-key": f"{_HARNESS} server.api_key_env (a key never goes in a manifest)",
        "--api-key-file": f"{_HARNESS} server.api_key_env (a key never goes in a manifest)",
        "-m": f"{_HARNESS} model.source (the verified model)",
        "--model": f"{_HARNESS} model.source (the verified model)",
        "-mu": "would download a model by URL",
        "--model-url": "would download a model by URL",
        "-hf": "would download a model from Hugging Face",
        "-hfr": "would download a model from Hugging Face",
        "--hf-repo": "would download a model from Hugging Face",
        "-dr": "would download a model from Docker Hub",
        "--docker-repo": "would download a model from Docker Hub",
        "-a": f"{_HARNESS} model.served_name",
        "--alias": f"{_HARNESS} model.served_name",
        "--path": "would serve static files from a directory of the manifest's choice",
        "--rpc": "would send work to RPC servers on other hosts",
        "--models-dir": "would serve other models than the verified one (router mode)",
        "--models-preset": "would serve other models than the verified one (router mode)",
        "-mmu": "would download a multimodal projector by URL",
        "--mmproj-url": "would download a multimodal projector by URL",
        "--spec-draft-hf": "would download a draft model from Hugging Face",
        "-hfd": "would download a draft model from Hugging Face",
        "-hfrd": "would download a draft model from Hugging Face",
        "--hf-repo-draft": "would download a draft model from Hugging Face",
        "-hft": "a token on the command line (ps shows it), for downloads the harness does not allow",
        "--hf-token": "a token on the command line (ps shows it), for downloads the harness does not allow",
        # llama-server's agent features (0c1e570: "do not enable in untrusted environments")
        "--tools": "would let any client run the server's agent tools (shell commands, file writes) on this machine",
        "--tools-runtime": "would run agent tools elsewhere (a container, or a remote host over SSH)",
        "-ag": "would enable every agent tool (shell commands, file writes) and the CORS proxy",
        "--agent": "would enable every agent tool (shell commands, file writes) and the CORS proxy",
        "--mcp-servers-config": "would connect the server to MCP servers of the manifest's choice",
        "--mcp-servers-json": "would connect the server to MCP servers of the manifest's choice",
        "--ui-mcp-proxy": "would proxy clients' requests from the server to other hosts",
        "--webui-mcp-proxy": "would proxy clients' requests from the server to other hosts",
    },
    forbidden_env={
        "LLAMA_API_KEY": "the key comes from server.api_key_env, never from the manifest",
        "LLAMA_ARG_HOST": f"{_HARNESS} server.host",
        "LLAMA_ARG_PORT": f"{_HARNESS} server.port",
        "LLAMA_ARG_MODEL": f"{_HARNESS} model.source (the verified model)",
        "LLAMA_ARG_MODEL_URL": "would download a model by URL",
        "LLAMA_ARG_HF_REPO": "would download a model from Hugging Face",
        "LLAMA_ARG_ALIAS": f"{_HARNESS} model.served_name",
        # the variables of the flags refused above (common/arg.cpp set_env)
        "LLAMA_ARG_API_KEY_FILE": f"{_HARNESS} server.api_key_env (a key never goes in a manifest)",
        "LLAMA_ARG_DOCKER_REPO": "would download a model from Docker Hub",
        "LLAMA_ARG_MMPROJ_URL": "would download a multimodal projector by URL",
        "LLAMA_ARG_SPEC_DRAFT_HF_REPO": "would download a draft model from Hugging Face",
        "HF_TOKEN": "a Hugging Face token, for downloads the harness does not allow",
        "LLAMA_ARG_STATIC_PATH": "would serve static files from a directory of the manifest's choice",
        "LLAMA_ARG_RPC": "would send work to RPC servers on other hosts",
        "LLAMA_ARG_MODELS_DIR": "would serve other models than the verified one (router mode)",
        "LLAMA_ARG_MODELS_PRESET": "would serve other models than the verified one (router mode)",
        "LLAMA_ARG_TOOLS": "would let any client run the server's agent tools (shell commands, file writes) here",
        "LLAMA_ARG_TOOLS_RUNTIME": "would run agent tools elsewhere (a container, or a remote host over SSH)",
        "LLAMA_ARG_AGENT": "would enable every agent tool (shell commands, file writes) and the CORS proxy",
        "LLAMA_ARG_MCP_SERVERS_CONFIG": "would connect the server to MCP servers of the manifest's choice",
        "LLAMA_ARG_MCP_SERVERS_JSON": "would connect the server to MCP servers of the manifest's choice",
        "LLAMA_ARG_UI_MCP_PROXY": "would proxy clients' requests from the server to other hosts",
        # Vertex AI compatibility (server-http.cpp gcp_params): AIP_MODE=PREDICTION replaces --port with AIP_HTTP_PORT
        "AIP_MODE": f"{_HARNESS} server.port (AIP_MODE=PREDICTION makes llama-server listen on AIP_HTTP_PORT)",
        "AIP_HTTP_PORT": f"{_HARNESS} server.port",
    },
    harmless_env=frozenset({"LLAMA_ARG_THREADS", "LLAMA_ARG_CTX_SIZE", "LLAMA_ARG_N_PARALLEL"}),
    dropped_env_prefixes=("LLAMA_", "AIP_"),  # AIP_*: an inherited AIP_MODE=PREDICTION would move the port
    model_format="gguf",
    series_digits=0,  # a commit has no series: only the exact expectation file
    notes={
        "blocks": "llama-server keeps its KV cache per slot (/slots), not in PagedAttention blocks, and exports no "
        "block configuration or KV usage gauge: the block model's cross-check does not apply",
        "hidden_metrics": "a source build keeps only the binary: there is no source tree to look for metric names in",
        "ttft": "llama-server exports no time-to-first-token or inter-token histograms",
        "itl": "llama-server exports no time-to-first-token or inter-token histograms",
        "preemptions": "llama-server has no preemption counter (a slot is never preempted)",
        "logprobs": "llama-server gives one logprob entry per text piece, not per token: a token that ends inside a "
        "UTF-8 character is held back and merged with the next into one entry (its id and logprob are the last "
        "token's), so a golden diff against a per-token engine diverges at such pieces without the model differing",
        "kv_usage": "llama-server exports no KV cache usage gauge (its cache is per slot, see /slots)",
        "queue_time": "llama-server exports no queue-time histogram (requests_deferred counts the requests waiting now)",
        "request_success": "llama-server counts no finished requests",
        "prefix_queries": "llama-server counts reused (prompt_tokens_cached_total) and evaluated (prompt_tokens_total) "
        "prompt tokens apart; their sum is what was looked up",
        "cache_config": "llama-server exports no block configuration (its KV cache is per slot, not in blocks)",
    },
)
