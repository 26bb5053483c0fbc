"""The ranges every number the block tools accept must fall in (command-line flags, scenario fields, config.json).

Each limit is far above any real model or scenario and low enough that the arithmetic, the memory and the time a
command takes stay small: an absurd number is refused with one line naming the flag or field, never a crash or a
run that does not end.
"""

from __future__ import annotations

import argparse

__all__ = [
    "MAX_LAYERS",
    "MAX_HEADS",
    "MAX_HEAD_SIZE",
    "MAX_BLOCK_SIZE",
    "MAX_TP",
    "MAX_KV_BYTES",
    "MAX_BLOCKS",
    "MAX_LENGTH",
    "MAX_WASTE_LENGTH",
    "MAX_SAMPLE",
    "MAX_RESERVES",
    "MAX_SEED",
    "MAX_REQUESTS",
    "MAX_SIM_BLOCKS",
    "MAX_SIM_TOKENS",
    "MAX_STEPS",
    "MAX_WALL_S",
    "MIN_RATE",
    "MAX_RATE",
    "MIN_STEP_S",
    "MAX_STEP_S",
    "int_in",
]

# model shape (config.json) and the capacity planner: pure arithmetic, bounded so the figures stay meaningful
MAX_LAYERS = 10_000
MAX_HEADS = 100_000
MAX_HEAD_SIZE = 1 << 16
MAX_BLOCK_SIZE = 1 << 16
MAX_TP = 4096
MAX_KV_BYTES = 1 << 50  # 1 PiB
MAX_BLOCKS = 1 << 40  # --num-gpu-blocks-override
MAX_LENGTH = 1 << 30  # a request length in tokens (--length, --max-model-len, --reserve)

# waste: every length min..max is enumerated, and every sampled one
MAX_WASTE_LENGTH = 1_000_000
MAX_SAMPLE = 1_000_000
MAX_RESERVES = 16
MAX_SEED = 2**63 - 1

# simulator: what is built before the run and how long the run may take
MAX_REQUESTS = 100_000
MAX_SIM_BLOCKS = 1 << 20  # the pool keeps per-block lists
MAX_SIM_TOKENS = 4_000_000  # requests x (longest prompt + longest output): token ids are held in memory
MAX_STEPS = 1_000_000
MAX_WALL_S = 120.0
MIN_RATE, MAX_RATE = 1e-6, 1e9  # req/s
MIN_STEP_S, MAX_STEP_S = 1e-6, 60.0


def int_in(lo: int, hi: int):
    """An argparse type: a base-10 integer in [lo, hi]; anything else is one line naming the flag (argparse adds it)."""

    def parse(text: str) -> int:
        try:
            n = int(text, 10)
        except ValueError:
            shown = text if len(text) <= 40 else text[:40] + "..."
            raise argparse.ArgumentTypeError(f"not an integer: {shown!r}") from None
        if not lo <= n <= hi:
            shown = str(n) if len(str(n)) <= 40 else f"a {len(str(n))}-digit number"
            raise argparse.ArgumentTypeError(f"must be between {lo} and {hi}, got {shown}")
        return n

    parse.__name__ = "integer"
    return parse
