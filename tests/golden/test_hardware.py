"""harness.hardware: pure parsers over raw text (cpuinfo, torch config, nvidia-smi) and the comparison of two recordings."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.hardware import UNKNOWN_BEFORE_PROVENANCE, collect, compare, cpu_facts, gpu_facts, summary, torch_facts

INTEL = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse4_2 avx avx2 fma f16c avx512f avx512bw avx512vl avx512_bf16 avx512_vnni amx_bf16 amx_tile amx_int8

processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse4_2 avx avx2 fma f16c avx512f avx512bw avx512vl avx512_bf16 avx512_vnni amx_bf16 amx_tile amx_int8
"""
ARM = """processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm sve sve2 bf16 i8mm
CPU implementer\t: 0x41
CPU part\t: 0xd4f
"""
CONFIG = """PyTorch built with:
  - GCC 13.3
  - Intel(R) oneAPI Math Kernel Library Version 2024.2-Product Build 20240605
  - Intel(R) MKL-DNN v3.7.1 (Git Hash 8d263e69)
  - OpenMP 201511 (a.k.a. OpenMP 4.5)
  - CPU capability usage: AVX512
  - Build settings: BLAS_INFO=mkl, BUILD_TYPE=Release, CUDA_VERSION=12.8, LAPACK_INFO=mkl, USE_MKL=ON, USE_MKLDNN=ON, USE_OPENMP=ON,
"""


def test_cpu_facts_x86_with_amx():
    c = cpu_facts(INTEL, usable=2, machine="x86_64")
    assert c["model"] == "Intel(R) Xeon(R) Platinum 8480+" and c["cpus"] == 2 and c["usable_cpus"] == 2
    assert {"avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile"} <= set(c["isa"])
    assert "fpu" not in c["isa"]  # only flags that select kernels


def test_cpu_facts_arm_and_empty():
    c = cpu_facts(ARM)
    assert c["model"] == "arm implementer 0x41 part 0xd4f" and {"asimd", "sve", "sve2", "bf16"} <= set(c["isa"])
    e = cpu_facts("")
    assert e["model"] == "unknown" and e["isa"] == [] and e["cpus"] is None


def test_torch_facts_from_probe_output():
    t = torch_facts(
        "some warning\n" + json.dumps({"version": "2.8.0+cu128", "cpu_capability": "AVX512", "config": CONFIG})
    )
    assert t["version"] == "2.8.0+cu128" and t["cpu_capability"] == "AVX512" and t["blas"] == "mkl"
    assert t["build"] == {
        "BLAS_INFO": "mkl",
        "LAPACK_INFO": "mkl",
        "USE_MKL": "ON",
        "USE_MKLDNN": "ON",
        "USE_OPENMP": "ON",
        "CUDA_VERSION": "12.8",
    }
    assert "Intel(R) MKL-DNN v3.7.1 (Git Hash 8d263e69)" in t["libraries"]
    assert not any(x.startswith("Build settings") for x in t["libraries"])
    assert torch_facts("").startswith("unknown") and torch_facts("[1]").startswith("unknown")


def test_gpu_facts():
    g = gpu_facts(
        "NVIDIA A100-SXM4-80GB, 550.54.15, 81920 MiB\n",
        "| NVIDIA-SMI 550.54.15  Driver Version: 550.54.15  CUDA Version: 12.4 |",
    )
    assert g == {
        "devices": [{"name": "NVIDIA A100-SXM4-80GB", "driver": "550.54.15", "memory": "81920 MiB"}],
        "driver": "550.54.15",
        "cuda": "12.4",
    }
    assert gpu_facts("") is None


def test_collect_here_without_an_engine_env(tmp_path):
    hw = collect(None, torch_unknown="recorded against --url")
    assert hw["torch"] == "unknown (recorded against --url)"
    assert isinstance(hw["cpu"], dict) and hw["cpu"]["cpus"] >= 1
    assert collect(tmp_path / "no-python")["torch"].startswith("unknown")


def test_collect_probes_the_given_python_not_the_harness(tmp_path):
    # a fake "engine env python" that prints what the real probe would: collect runs IT, not sys.executable
    fake = tmp_path / "python"
    fake.write_text(
        f"#!{sys.executable}\nimport json\nprint(json.dumps({{'version': '9.9.9', 'cpu_capability': "
        f"'AVX2', 'config': {CONFIG!r}}}))\n"
    )
    fake.chmod(0o755)
    hw = collect(Path(fake))
    assert hw["torch"]["version"] == "9.9.9" and hw["torch"]["cpu_capability"] == "AVX2"


def test_compare():
    a = {
        "cpu": cpu_facts(INTEL, usable=2),
        "torch": torch_facts(json.dumps({"version": "2.8.0", "cpu_capability": "AVX512", "config": CONFIG})),
        "gpu": None,
    }
    assert compare(a, a)["status"] == "same"
    b = json.loads(json.dumps(a))
    b["torch"]["version"] = "2.9.0"
    c = compare(a, b)
    assert c["status"] == "different" and c["differs"] == ["torch.version"] and "'2.8.0' vs '2.9.0'" in c["line"]
    u = compare(UNKNOWN_BEFORE_PROVENANCE, a)
    assert u["status"] == "unknown" and "A: recorded before provenance" in u["line"]
    assert "hardware unknown" in compare(None, None)["line"]
    url = dict(a, torch="unknown (recorded against --url)")
    assert compare(a, url)["status"] == "same" and "torch" in " ".join(compare(a, url)["unknown"])
    assert summary(UNKNOWN_BEFORE_PROVENANCE) == "recorded before provenance" and "Xeon" in summary(a)
