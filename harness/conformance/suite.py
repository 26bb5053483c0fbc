"""The suite: every case family, registered in the suite's order. The runner, the CLI and the pytest plugin ask here
for the cases; the registry itself knows none of them."""

from __future__ import annotations

# isort: off
# Importing a family registers its cases, so this import order is the suite order (a sorter must not touch it).
from harness.conformance.cases import (
    endpoints,
    http,
    stream,
    integrity,
    requests,
    stop,
    structured,
    fields,
    tools,
    reasoning,
    clientschemas,
    errors,
    metrics,
    cancel,
    auth,
    responses,
    messages,
    cross,
    streamequal,
    surfacedepth,
    clientrequests,
    clients,
)

# isort: on
from harness.conformance.case import Case
from harness.conformance.registry import CASES, select_faults

__all__ = ["FAMILIES", "all_cases", "fault_cases"]

FAMILIES = (endpoints, http, stream, integrity, requests, structured, fields, stop, tools, reasoning, clientschemas, errors,
            metrics, cancel, auth, responses, messages, cross, streamequal, surfacedepth, clientrequests,
            clients)  # fmt: skip


def all_cases() -> list[Case]:
    return list(CASES)


def fault_cases(patterns: list[str] | None) -> list[Case]:
    """The opt-in fault cases a pattern names (`fault.engine-death`); the runner runs them after every other case."""
    from harness.conformance.cases import death  # noqa: F401 - registers the fault cases (registry.FAULTS)

    return select_faults(patterns)
