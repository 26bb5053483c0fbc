"""Every live case, one module per area; `harness.conformance.suite` loads them (in the suite's order)."""
