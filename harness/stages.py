"""What `harness run` hands each later stage (conformance, golden, load) and what a stage hands back.

A stage module exposes `run_stage(ctx: StageContext) -> StageResult` (the `RunStage` shape); it must not raise for
engine misbehaviour (that is a failed result), only for harness bugs or bad input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # types only: the stage seam sits below the launcher and the manifest
    from harness.launch.base import Engine
    from harness.manifest import Manifest

__all__ = ["StageContext", "StageResult", "RunStage"]


@dataclass
class StageContext:
    engine: Engine  # running and verified
    manifest: Manifest
    run_dir: Path  # reports/<run-id>/ ; a stage writes under run_dir/<stage name>/
    identity: dict[str, Any]  # what the identity check verified (engine version, model hash, lock hash / image digest)
    force: bool = False  # `harness run --out DIR --force`: a stage replaces an earlier run's files in run_dir/<stage>/


@dataclass
class StageResult:
    name: str
    ok: bool
    summary: str  # one line for the terminal
    data: dict[str, Any] = field(default_factory=dict)  # goes into run.json as it is (a JSON object)


class RunStage(Protocol):
    """A stage module's `run_stage`."""

    def __call__(self, ctx: StageContext) -> StageResult: ...
