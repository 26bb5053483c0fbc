"""What machine and build produced a recording, and whether two of them differ.

Float32 CPU kernels are chosen by the CPU's ISA (AVX2, AVX-512, AMX ...), the core count (reduction order across
threads) and the torch build (its BLAS and kernel library): two machines of the same kind can differ in the last bits
of a logprob. A recording stores these facts so a diff can say where drift may come from.

    hw = collect(python=env_dir / "bin" / "python")     # CPU from /proc/cpuinfo, torch from the ENGINE's python
    hw = collect(python=None, torch_unknown="recorded against --url")
    cmp = compare(meta_a.get("hardware"), meta_b.get("hardware"))   # {"status": same|different|unknown, ...}

The parsers (`cpu_facts`, `torch_facts`, `gpu_facts`) are pure functions of raw text; only `collect` touches the system.
A section that could not be learned is a string starting with "unknown", never a guess.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

__all__ = [
    "KERNEL_FLAGS",
    "UNKNOWN_BEFORE_PROVENANCE",
    "cpu_facts",
    "torch_facts",
    "gpu_facts",
    "collect",
    "compare",
    "summary",
]

# CPU flags that decide which float kernels torch / oneDNN / vLLM's CPU ops run (x86 and Arm).
KERNEL_FLAGS = (
    "sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512dq", "avx512bw", "avx512vl", "avx512_vnni",
    "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "asimd", "asimdhp", "sve", "sve2", "bf16", "i8mm",
)  # fmt: skip
UNKNOWN_BEFORE_PROVENANCE = "unknown (recorded before provenance)"
# Build-setting keys of torch.__config__.show() that change CPU numerics.
TORCH_BUILD_KEYS = ("BLAS_INFO", "LAPACK_INFO", "USE_MKL", "USE_MKLDNN", "USE_OPENMP", "CUDA_VERSION")
PROBE_TIMEOUT_S = 120.0
MAX_PROBE_OUTPUT = 64 * 1024

# Runs in the engine environment's python: nothing but torch and the standard library.
_TORCH_PROBE = (
    "import json, torch\n"
    "print(json.dumps({'version': torch.__version__,"
    " 'cpu_capability': torch.backends.cpu.get_cpu_capability(),"
    " 'config': torch.__config__.show()}))\n"
)


def cpu_facts(cpuinfo: str, *, usable: int | None = None, machine: str = "") -> dict[str, Any]:
    """Model, kernel-selecting flags and processor count from /proc/cpuinfo text (x86 or Arm)."""
    fields: dict[str, str] = {}
    processors = 0
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip().lower()
        if key == "processor":
            processors += 1
        fields.setdefault(key, value.strip())
    model = fields.get("model name") or fields.get("hardware") or ""
    if not model and "cpu implementer" in fields:  # Arm names its cores by implementer/part numbers
        model = f"arm implementer {fields['cpu implementer']} part {fields.get('cpu part', '?')}"
    flags = set((fields.get("flags") or fields.get("features") or "").split())
    return {
        "model": model or "unknown",
        "machine": machine or "unknown",
        "isa": [f for f in KERNEL_FLAGS if f in flags],
        "cpus": processors or None,
        "usable_cpus": usable,
    }


def _build_settings(config: str) -> dict[str, str]:
    for line in config.splitlines():
        if line.strip().startswith("- Build settings:"):
            pairs = (p.strip().partition("=") for p in line.split(":", 1)[1].split(","))
            found = {k: v for k, _, v in pairs if k in TORCH_BUILD_KEYS}
            return {k: found[k] for k in TORCH_BUILD_KEYS if k in found}
    return {}


def torch_facts(probe_output: str) -> dict[str, Any] | str:
    """The torch build from the probe's JSON line: version, CPU capability, BLAS and the library summary lines."""
    try:
        raw = json.loads(probe_output.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return "unknown (torch probe printed no JSON)"
    if not isinstance(raw, dict) or not isinstance(raw.get("config", ""), str):
        return "unknown (torch probe printed something else)"
    config = raw.get("config", "")
    libraries = [ln.strip()[2:] for ln in config.splitlines()
                 if ln.strip().startswith("- ") and not ln.strip().startswith("- Build settings")]  # fmt: skip
    build = _build_settings(config)
    return {
        "version": str(raw.get("version")),
        "cpu_capability": str(raw.get("cpu_capability")),
        "blas": build.get("BLAS_INFO", "unknown"),
        "build": build,
        "libraries": libraries,
    }


def gpu_facts(query_csv: str, banner: str = "") -> dict[str, Any] | None:
    """GPUs from `nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader` (and the CUDA
    version from the plain `nvidia-smi` banner). None when there is no GPU."""
    devices = []
    for line in query_csv.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[0]:
            devices.append({"name": parts[0], "driver": parts[1], "memory": parts[2] if len(parts) > 2 else ""})
    if not devices:
        return None
    cuda = re.search(r"CUDA Version:\s*([0-9.]+)", banner)
    return {"devices": devices, "driver": devices[0]["driver"], "cuda": cuda.group(1) if cuda else "unknown"}


def _run(cmd: list[str], timeout: float) -> str:
    """stdout of a short local command (bounded in time and size); raises OSError/SubprocessError on failure."""
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, check=True)
    return r.stdout[:MAX_PROBE_OUTPUT].decode("utf-8", "replace")


@functools.lru_cache(maxsize=8)
def _probe_torch(python: str) -> dict[str, Any] | str:
    if not Path(python).is_file():
        return "unknown (engine environment has no python)"
    try:
        # -I: the engine env's own site-packages only (no user site, no PYTHONPATH from the harness's shell)
        return torch_facts(_run([python, "-I", "-c", _TORCH_PROBE], PROBE_TIMEOUT_S))
    except subprocess.TimeoutExpired:
        return f"unknown (torch probe took over {PROBE_TIMEOUT_S:.0f} s)"
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown (torch probe failed: {type(exc).__name__})"


def _gpu() -> dict[str, Any] | None | str:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        query = _run([smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"], 20)
        return gpu_facts(query, _run([smi], 20))
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown (nvidia-smi failed: {type(exc).__name__})"


def collect(python: Path | None, *, torch_unknown: str = "no engine environment") -> dict[str, Any]:
    """Facts of this host, plus the torch build of `python` (the engine environment's interpreter) when given."""
    from harness.errors import HarnessError
    from harness.readers import read_text

    try:
        cpu: dict[str, Any] | str = cpu_facts(
            read_text("/proc/cpuinfo", "cpuinfo", max_bytes=8 << 20),
            usable=len(os.sched_getaffinity(0)),
            machine=platform.machine(),
        )
    except (HarnessError, OSError, AttributeError):
        cpu = "unknown (no /proc/cpuinfo)"
    torch = _probe_torch(str(python)) if python is not None else f"unknown ({torch_unknown})"
    return {"cpu": cpu, "torch": torch, "gpu": _gpu()}


def _flat(hw: Any) -> dict[str, Any] | None:
    """The compared fields as dotted names; a section that is unknown is left out. None: nothing known at all."""
    if not isinstance(hw, dict):
        return None
    out: dict[str, Any] = {}
    cpu, torch, gpu = hw.get("cpu"), hw.get("torch"), hw.get("gpu", "unknown")
    if isinstance(cpu, dict):
        for k in ("model", "machine", "isa", "cpus", "usable_cpus"):
            out[f"cpu.{k}"] = cpu.get(k)
    if isinstance(torch, dict):
        for k in ("version", "cpu_capability", "blas", "libraries"):
            out[f"torch.{k}"] = torch.get(k)
    if gpu is None or isinstance(gpu, dict):
        g = gpu or {}
        out["gpu.devices"] = [d.get("name") for d in g.get("devices", []) if isinstance(d, dict)]
        out["gpu.driver"], out["gpu.cuda"] = g.get("driver"), g.get("cuda")
    return out


def _why_unknown(hw: Any) -> str:
    """'recorded before provenance' from 'unknown (recorded before provenance)'; 'no hardware block' when absent."""
    if isinstance(hw, str) and hw.startswith("unknown"):
        return hw[len("unknown") :].strip(" ()") or "unknown"
    return "no hardware block"


def _show_pair(a: Any, b: Any) -> str:
    if isinstance(a, list) and isinstance(b, list):  # ISA flags, libraries: only what differs
        gone, new = [x for x in a if x not in b], [x for x in b if x not in a]
        return " ".join([f"-{x}" for x in gone] + [f"+{x}" for x in new]) or f"{a} vs {b} (order)"
    return f"{a!r} vs {b!r}"


MEANING = (
    "last-bit float drift between them is expected and judged against the tolerance (equivalent); "
    "token changes are still judged as always"
)


def compare(a: Any, b: Any) -> dict[str, Any]:
    """Whether recordings A and B (their meta `hardware` values) come from the same hardware and build.

    status: same (every field both know agrees), different (some field both know disagrees), unknown (a side says
    nothing, or they share no known field). `line` is the sentence for a person."""
    fa, fb = _flat(a), _flat(b)
    if fa is None or fb is None:
        who = " and ".join(f"{n}: {_why_unknown(h)}" for n, h, f in (("A", a, fa), ("B", b, fb)) if f is None)
        return {
            "status": "unknown",
            "differs": [],
            "unknown": [],
            "line": f"hardware unknown ({who}): cannot tell whether drift comes from the machine; {MEANING}",
        }
    common = [k for k in fa if k in fb]
    differs = [k for k in common if fa[k] != fb[k]]
    unknown = sorted((set(fa) | set(fb)) - set(common))
    if differs:
        shown = "; ".join(f"{k} {_show_pair(fa[k], fb[k])}" for k in differs)
        return {
            "status": "different",
            "differs": differs,
            "unknown": unknown,
            "line": f"different hardware or build: {shown}: {MEANING}",
        }
    if not common:
        return {
            "status": "unknown",
            "differs": [],
            "unknown": unknown,
            "line": f"hardware unknown (no field known on both sides): {MEANING}",
        }
    tail = f" (unknown on one side: {', '.join(unknown)})" if unknown else ""
    return {
        "status": "same",
        "differs": [],
        "unknown": unknown,
        "line": f"same hardware and build ({summary(a)}){tail}",
    }


def summary(hw: Any) -> str:
    """One short phrase: CPU model, widest ISA, cores, torch version."""
    if not isinstance(hw, dict):
        return _why_unknown(hw)
    cpu, torch = hw.get("cpu"), hw.get("torch")
    parts = []
    if isinstance(cpu, dict):
        isa = cpu.get("isa") or []
        parts.append(f"{cpu.get('model')}, {cpu.get('cpus')} cpus" + (f", {isa[-1]}" if isa else ""))
    if isinstance(torch, dict):
        parts.append(f"torch {torch.get('version')} {torch.get('cpu_capability')} {torch.get('blas')}")
    return "; ".join(parts) or "unknown"
