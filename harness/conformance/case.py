"""A conformance case: its id, requirement and level (what judging it needs, `model.CaseHead`), and the code that runs
it against a server (`run(ctx)`) or over a recorded stream (`shape(view)`). It stands above the context and the stream
view it is run with, so the vocabulary (`model`), the expectations and the context import each other in no circle."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from harness.conformance.context import Ctx
from harness.conformance.model import Check, Level
from harness.conformance.view import StreamView

__all__ = ["Case", "ENDS_ANSWERS", "SCRIPTED_MODEL", "provided_by"]

# `needs` of a case that only a scripted model can answer (its greedy output is a known tool call when tools are
# offered); such a case is selected only when the manifest's model says it is one (`Ctx.provides`)
SCRIPTED_MODEL = "scripted-model"
# a trained model (harness.models.catalog.TRAINED_MODELS): its answers end on their own, so the stop.* cases judge it
# (they run on every server and skip, with the reason, where this is not provided)
ENDS_ANSWERS = "model-ends-answers"


def provided_by(manifest: object) -> frozenset[str]:
    """What a manifest's server provides for `Case.needs`: the scripted model when `model.source` is one (any parser
    family's), a model that ends its answers when it is a trained one."""
    from harness.models.catalog import TRAINED_MODELS
    from harness.models.families import family_of_source

    source = getattr(getattr(manifest, "model", None), "source", None)
    if family_of_source(source) is not None:
        return frozenset({SCRIPTED_MODEL})
    return frozenset({ENDS_ANSWERS}) if source in TRAINED_MODELS else frozenset()


@dataclass(frozen=True)
class Case:
    id: str  # stable hierarchical id, e.g. chat.stream.role-first
    requirement: str  # one line: what a conformant server does
    level: Level
    run: Callable[[Ctx], Awaitable[Check]]  # live: run(ctx) -> Check
    shape: Callable[[StreamView], Check] | None = None  # pure check over a recorded stream (check-stream uses it)
    kind: str = "chat"  # chat | completions | other: which recorded streams the shape check applies to
    timeout_s: float = 60.0
    needs: frozenset[str] = frozenset()  # what the server must provide for the case to be selected at all
