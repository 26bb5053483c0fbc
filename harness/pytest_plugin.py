"""pytest plugin (pytest11 entry point): run the conformance suite inside a team's own pytest run.

Filled in by the conformance issue.
"""
