"""The suite: every case family, registered in the suite's order (the import order below). The runner, the CLI and
the pytest plugin ask here for the cases; the registry itself knows none of them."""

from __future__ import annotations

from harness.conformance.cases import endpoints, stream, requests, errors, metrics, cancel, auth  # noqa: F401
from harness.conformance.model import Case
from harness.conformance.registry import CASES

__all__ = ["all_cases"]


def all_cases() -> list[Case]:
    return list(CASES)
