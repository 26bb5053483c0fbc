"""The shapes the upgrade passes along (plain JSON-ready dicts, written as upgrade.json as they are):

Side        one engine's findings (collect.py): name, ok, engine, identity, golden_dir, metrics, models,
            conformance, timings; error and log_tail when it failed
Comparison  area by area (compare.py): manifest, golden, wire, system_fingerprint, metrics, conformance, models
Reason      one finding of the verdict (judge.py): {"level": blocking|review|info, "text": ...}
Report      upgrade.json: format, old, new, comparison, verdict, settings, created_at, wall_seconds
"""

from __future__ import annotations

from typing import Any

__all__ = ["Side", "Comparison", "Reason", "Report", "MISSING"]

Side = dict[str, Any]
Comparison = dict[str, Any]
Reason = dict[str, str]
Report = dict[str, Any]

# A conformance row's value for a case that did not run on that side (another case set), kept apart from the verdict
# `absent` (the endpoint is not served), which the judge reads as an endpoint the new engine dropped.
MISSING = "missing"
