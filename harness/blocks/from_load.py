"""Replay a load-test scenario (`loadtests/*.yaml`, the format `harness load` runs) through the block simulator.

The requests are exactly those `harness load` would send (`harness.load.scenario.plan`: same seed, arrival offsets,
prompt texts, shared prefix and max_tokens), turned into the token ids the engine sees with the embedded reference
model, whose tokenizer is byte-level (token id = byte value) and whose chat template is
`<s><|user|>\\n{content}\\n<|assistant|>\\n` (`harness.tinymodel.CHAT_TEMPLATE`); completions get `<s>` + the prompt.
So a shared text prefix gives the same leading token ids, and the prefix cache sees what the engine sees.

Approximations, stated: output length = max_tokens (the scenarios set ignore_eos); a closed-loop scenario (arrival kind
`concurrency`) is replayed as every request arriving at t=0 with max_num_seqs capped at the concurrency, which holds
the same number in flight (waiting requests hold no blocks); warm-up requests are not replayed. Engine defaults are the
default manifest's engine (vLLM 0.11.0 CPU, float32, 1 GiB KV: 8192 blocks of 128, max_model_len 1024).
"""

from __future__ import annotations

from pathlib import Path

from harness.blocks.limits import MAX_SIM_TOKENS
from harness.blocks.scenario import EngineSettings, Lengths, SimRequestSpec, SimScenario
from harness.errors import ManifestError

__all__ = ["is_load_scenario", "from_load_scenario", "DEFAULT_ENGINE"]

DEFAULT_ENGINE = EngineSettings(num_blocks=8192, block_size=128, max_model_len=1024)


def is_load_scenario(doc: object) -> bool:
    return isinstance(doc, dict) and "bounds" in doc and "engine" not in doc and "requests" not in doc


def _prompt_ids(text: str, endpoint: str) -> tuple[int, ...]:
    from harness.tinymodel import BOS_ID

    if endpoint == "chat":
        return (BOS_ID, *f"<|user|>\n{text}\n<|assistant|>\n".encode())
    return (BOS_ID, *text.encode())


def _longest_units(lengths, listed) -> int:
    if lengths.kind == "fixed":
        return lengths.value
    if lengths.kind == "uniform":
        return lengths.max
    return max(listed or (0,))


def _check_size(sc) -> None:
    """Refuse before planning: plan() builds every prompt text at once, and a unit is at least one token."""
    n = sc.bounds.max_requests
    units = n * (_longest_units(sc.prompt_tokens, sc.prompt_lengths_list)
                 + _longest_units(sc.output_tokens, sc.output_lengths_list))
    if units > MAX_SIM_TOKENS:
        raise ManifestError(sc.source or "<scenario>", "bounds.max_requests",
                            f"{n} requests x (longest prompt + longest output) = at least {units} tokens, over the "
                            f"simulator's limit of {MAX_SIM_TOKENS}")


def from_load_scenario(path: str | Path, doc: dict | None = None) -> tuple[SimScenario, list[SimRequestSpec]]:
    """`doc`: the file's YAML already read (by scenario.load_any), so it is read once."""
    from harness.load.scenario import load_scenario, parse_scenario, plan

    sc = load_scenario(path) if doc is None else parse_scenario(doc, path)
    _check_size(sc)
    planned = plan(sc)
    total = sum(len(p.prompt) + p.max_tokens for p in planned)  # prompt text is ASCII: one byte-level token a char
    if total > MAX_SIM_TOKENS:  # word prompts are several tokens a word
        raise ManifestError(path, "prompt_tokens", f"the planned requests hold {total} tokens, over the simulator's "
                                                   f"limit of {MAX_SIM_TOKENS}")
    specs = [SimRequestSpec(f"req-{p.index}", p.offset_s or 0.0, _prompt_ids(p.prompt, sc.endpoint), p.max_tokens)
             for p in planned]
    engine = DEFAULT_ENGINE
    if sc.arrival.kind == "concurrency":
        engine = EngineSettings(**{**engine.__dict__, "max_num_seqs": min(engine.max_num_seqs, sc.arrival.concurrency)})
    sim = SimScenario(name=sc.name, requests=len(specs), rate=None, prompt_tokens=Lengths(), output_tokens=Lengths(),
                      seed=sc.seed, engine=engine)
    return sim, specs
