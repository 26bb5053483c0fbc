"""Every live case, one module per area. Import order is the suite order."""

from harness.conformance.cases import endpoints, stream, requests, errors, metrics, cancel, auth  # noqa: F401
