"""`harness check-stream`: run the pure stream-shape cases over a recorded stream (raw SSE bytes, a JSON list of
chunks, or a saved Trace). Case ids are the live ones, so a production capture reads like a live run."""

from __future__ import annotations

from pathlib import Path

from harness.conformance.expectations import Expectations, resolve
from harness.conformance.model import CaseResult, Check, errored
from harness.conformance.suite import all_cases
from harness.conformance.view import StreamView, guess_kind, load_recorded

__all__ = ["check_view", "check_file"]


def check_view(view: StreamView, exp: Expectations, kind: str | None = None) -> list[CaseResult]:
    kind = kind or guess_kind(view)
    out = []
    for c in all_cases():
        if c.shape is None or c.kind != kind:
            continue
        try:
            chk: Check = c.shape(view)
        except Exception as exc:  # a check bug must not hide the other verdicts
            chk = errored(f"harness error: {type(exc).__name__}: {exc}")
        out.append(resolve(c, chk, exp))
    return out


def check_file(path: str | Path, exp: Expectations, kind: str | None = None) -> tuple[list[CaseResult], str]:
    """(results, note). A non-stream JSON response yields no results and a note saying so."""
    view = load_recorded(path)
    if view is None:
        return [], "not a stream: a single JSON response (nothing to check)"
    return check_view(
        view, exp, kind
    ), f"{len(view.chunks)} chunks, {'framed SSE' if view.framed else 'JSON chunk list'}"
