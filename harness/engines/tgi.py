"""Text Generation Inference (the ghcr.io image; not runnable here, checked from its recordings and a stand-in)."""

from __future__ import annotations

from harness.engines.profile import HEALTH_LIVENESS, EngineProfile, Identity, MetricNames

__all__ = ["TGI"]

_HARNESS = "set by the harness from"


class _Tgi(EngineProfile):
    def server_args(self, model: str, served_name: str, host: str, port: int) -> list[str]:
        # TGI serves the model under its model id; `--hostname` is passed even in a container so TGI never falls back
        # to the HOSTNAME variable Docker sets (a container id)
        return ["--model-id", model, "--hostname", host, "--port", str(port)]


TGI = _Tgi(
    kind="tgi",
    title="TGI",
    runtimes=frozenset({"docker"}),
    version_pattern=r"\d+\.\d+\.\d+",
    version_example="3.3.5",
    api_key_env="API_KEY",
    identity=Identity(
        path="/info", version_field="version", recorded=("model_id", "model_sha"), container_model_field="model_id"
    ),
    metrics=MetricNames(
        prefix="tgi_",
        running="tgi_batch_current_size",
        waiting="tgi_queue_size",
        queue_time="tgi_request_queue_duration",
        prompt_tokens="tgi_request_input_length_sum",
        generation_tokens="tgi_request_generated_tokens_sum",
        request_success="tgi_request_success",
    ),
    liveness=HEALTH_LIVENESS,  # GET /health == 200 while the engine is ready
    forbidden_args={
        "--hostname": f"{_HARNESS} server.host",
        "--port": f"{_HARNESS} server.port / runtime.docker.container_port",
        "--api-key": f"{_HARNESS} server.api_key_env (a key never goes in a manifest)",
        "--model-id": f"{_HARNESS} model.source (the verified model)",
        "--otlp-endpoint": "would send traces off this machine",
        "--master-addr": "would bind the shard rendezvous elsewhere",
    },
    forbidden_env={"API_KEY": "the key comes from server.api_key_env, never from the manifest"},
    harmless_env=frozenset({"MAX_BATCH_PREFILL_TOKENS", "MAX_INPUT_TOKENS", "MAX_TOTAL_TOKENS", "LOG_LEVEL"}),
    container_env={"USAGE_STATS": "off"},
    default_args=(("--usage-stats", "off"),),  # no telemetry from a container
    key_packages=(),
    notes={
        "blocks": "TGI exports no block configuration (num_gpu_blocks / block_size) and no KV usage gauge",
        "hidden_metrics": "TGI is a container image: there is no source tree to look for metric names in",
        "argument_surface": "TGI runs only from its container image, which cannot be pulled here, so its launcher's "
        "--help cannot be read (none captured)",
    },
)
