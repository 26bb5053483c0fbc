"""What `harness run` hands each later stage (conformance, golden, load) and what a stage hands back.

A stage module exposes `run_stage(ctx: StageContext) -> StageResult`; it must not raise for engine misbehaviour
(that is a failed result), only for harness bugs or bad input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["StageContext", "StageResult"]


@dataclass
class StageContext:
    engine: Any  # harness.launch.base.Engine, running and verified
    manifest: Any  # harness.manifest.Manifest
    run_dir: Path  # reports/<run-id>/ ; a stage writes under run_dir/<stage name>/
    identity: dict  # what the identity check verified (engine version, model hash, lock hash / image digest)


@dataclass
class StageResult:
    name: str
    ok: bool
    summary: str  # one line for the terminal
    data: dict[str, Any] = field(default_factory=dict)  # goes into run.json
