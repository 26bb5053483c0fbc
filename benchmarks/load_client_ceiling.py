#!/usr/bin/env python3
"""Client ceiling: chunks/s the harness load client ingests vs `vllm bench serve`'s client, same server, same work.

Server: shared/tools/fast_sse_server.py on 127.0.0.1 (sends each response in one write, so the client is the
bottleneck). Work (as in engine-notes.md): chat, 1000 requests x 512 output chunks, concurrency 64, all at once.
Rounds alternate vllm bench / harness. Rate = output chunks (tokens) / the tool's own benchmark duration; for the
harness also over the whole call including parsing the recorded bytes and writing events.jsonl.

    python benchmarks/load_client_ceiling.py --tokenizer DIR --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from load_agreement import WRAPPER  # noqa: E402  (same directory)

from harness.load.report import build_summary  # noqa: E402
from harness.load.runner import Target, run_scenario  # noqa: E402
from harness.load.scenario import parse_scenario  # noqa: E402

# shared/ sits beside the repository (as on the developers' machines and in CI); override with HARNESS_SHARED
FAST = (
    Path(os.environ.get("HARNESS_SHARED", Path(__file__).resolve().parents[2] / "shared"))
    / "tools"
    / "fast_sse_server.py"
)


def default_engine_python() -> Path:
    from harness.envs import env_for
    from harness.manifest import DEFAULT_MANIFEST, load_manifest

    return env_for(load_manifest(DEFAULT_MANIFEST)).python


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_vb(py, port, tokenizer, out: Path, n, tokens, conc) -> dict:
    cmd = [
        py,
        "-c",
        WRAPPER,
        "--backend",
        "openai-chat",
        "--endpoint",
        "/v1/chat/completions",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--model",
        "tiny",
        "--tokenizer",
        tokenizer,
        "--dataset-name",
        "random",
        "--random-input-len",
        "32",
        "--random-output-len",
        str(tokens),
        "--num-prompts",
        str(n),
        "--max-concurrency",
        str(conc),
        "--ignore-eos",
        "--disable-tqdm",
        "--save-result",
        "--result-dir",
        str(out),
        "--result-filename",
        "vb.json",
    ]
    p = subprocess.run(
        cmd, capture_output=True, text=True, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}, timeout=900
    )
    if p.returncode != 0:
        sys.exit(f"vllm bench serve failed:\n{p.stderr[-3000:]}")
    d = json.loads((out / "vb.json").read_text())
    return {
        "chunks": d["total_output_tokens"],
        "duration_s": d["duration"],
        "chunks_per_s": d["total_output_tokens"] / d["duration"],
        "completed": d["completed"],
    }


def run_h(port, out: Path, n, tokens, conc) -> dict:
    sc = parse_scenario(
        {
            "name": "ceiling",
            "endpoint": "chat",
            "prompt_unit": "char",
            "ignore_eos": True,
            "bounds": {"max_requests": n, "max_duration_s": 600},
            "arrival": {"kind": "concurrency", "concurrency": conc},
            "prompt_tokens": {"kind": "fixed", "value": 32},
            "output_tokens": {"kind": "fixed", "value": tokens},
            "scrape_interval_s": None,
        },
        "<ceiling>",
    )
    t = time.monotonic()
    run_scenario(sc, Target(f"http://127.0.0.1:{port}", model="tiny"), out, progress=False)
    whole = time.monotonic() - t
    s = build_summary(out)
    m = s["metrics"]
    chunks = sum(1 for line in open(out / "events.jsonl") if '"type":"request"' in line) and m["tokens"]["output"]
    return {
        "chunks": chunks,
        "duration_s": m["duration_s"],
        "chunks_per_s": chunks / m["duration_s"],
        "chunks_per_s_incl_parse_and_write": chunks / whole,
        "completed": m["requests"]["ok"],
        "send_lag_p99_ms": s["client"]["send_lag_ms"]["p99"],
        "send_lag_max_ms": s["client"]["send_lag_ms"]["max"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument(
        "--engine-python",
        default=str(default_engine_python()),
        help="python of the 0.11.0 engine environment (default: the one `harness install` built)",
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--out")
    a = ap.parse_args()
    root = Path(a.out or tempfile.mkdtemp(prefix="load-ceiling-"))
    port = free_port()
    srv = subprocess.Popen([sys.executable, str(FAST), str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(50):
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        rows = []
        for r in range(a.rounds):
            vb = run_vb(a.engine_python, port, a.tokenizer, root / f"vb{r}", a.requests, a.tokens, a.concurrency)
            h = run_h(port, root / f"h{r}", a.requests, a.tokens, a.concurrency)
            rows.append({"vllm_bench": vb, "harness": h})
            print(
                f"round {r}: vllm bench {vb['chunks_per_s']:,.0f} chunks/s ({vb['duration_s']:.2f} s) | harness "
                f"{h['chunks_per_s']:,.0f} chunks/s ({h['duration_s']:.2f} s; {h['chunks_per_s_incl_parse_and_write']:,.0f} "
                f"incl. parse+write) send lag p99 {h['send_lag_p99_ms']:.3f} ms | ratio {h['chunks_per_s'] / vb['chunks_per_s']:.2f}x",
                flush=True,
            )
        vbs = sorted(x["vllm_bench"]["chunks_per_s"] for x in rows)
        hs = sorted(x["harness"]["chunks_per_s"] for x in rows)
        hw = sorted(x["harness"]["chunks_per_s_incl_parse_and_write"] for x in rows)
        print(
            f"median: vllm bench {vbs[len(vbs) // 2]:,.0f} chunks/s, harness {hs[len(hs) // 2]:,.0f} chunks/s "
            f"({hw[len(hw) // 2]:,.0f} incl. parse+write) → {hs[len(hs) // 2] / vbs[len(vbs) // 2]:.2f}x "
            f"({hw[len(hw) // 2] / vbs[len(vbs) // 2]:.2f}x incl. parse+write)"
        )
        (root / "ceiling.json").write_text(json.dumps(rows, indent=1))
        print(f"raw: {root}")
    finally:
        srv.terminate()
        srv.wait(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
