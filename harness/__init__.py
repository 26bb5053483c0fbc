"""harness: pin, launch, check and compare LLM inference engines before an upgrade.

The public Python API is what `__all__` lists (tests/test_public_api.py pins it); every other module is internal.

    import harness

    with harness.launch_engine("manifests/vllm-0.11.0-cpu.yaml") as engine:  # Engine: pins verified, on loopback
        ctx = harness.new_ctx(engine.base_url, harness.load_expectations("vllm-0.11"), model=engine.served_name,
                              api_key=engine.api_key, engine=engine)
        report = harness.run_conformance(ctx)                               # SuiteReport (-> SuiteDocument)
        rec_dir, records, meta = harness.record_golden(engine, engine.spec.manifest, sets, out)
    d = harness.diff_golden(harness.load_recording(a), harness.load_recording(b))      # GoldenDiff
    result = harness.run_load(harness.load_scenario(path), harness.Target(url), out)   # RunResult
    upgrade_json = harness.run_upgrade(old, new, out, tolerance=0.02, margin=0.0)     # UpgradeReport

The verbs carry their object because `harness.launch`, `harness.load` and `harness.upgrade` are subpackages: a
function of that name here would be replaced by the subpackage as soon as it is imported.
Names resolve on first use (PEP 562), so `import harness` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> (module, attribute there)
_EXPORTS: dict[str, tuple[str, str]] = {
    "diff_golden": ("harness.golden.diff", "diff_recordings"),
    "Engine": ("harness.launch.base", "Engine"),
    "Expectations": ("harness.conformance.expectations", "Expectations"),
    "GoldenDiff": ("harness.golden.diff", "GoldenDiff"),
    "HarnessError": ("harness.errors", "HarnessError"),
    "launch_engine": ("harness.launch.session", "launch"),
    "load_expectations": ("harness.conformance.expectations", "load_expectations"),
    "load_manifest": ("harness.manifest", "load_manifest"),
    "load_recording": ("harness.golden.store", "load_recording"),
    "load_scenario": ("harness.load.scenario", "load_scenario"),
    "Manifest": ("harness.manifest", "Manifest"),
    "new_ctx": ("harness.conformance.runner", "new_ctx"),
    "read_report": ("harness.conformance.report", "read_report"),
    "record_golden": ("harness.golden.record", "record_with_engine"),
    "Recording": ("harness.golden.store", "Recording"),
    "run_conformance": ("harness.conformance.runner", "run_suite_sync"),
    "run_load": ("harness.load.runner", "run_scenario"),
    "run_upgrade": ("harness.upgrade.run", "run_upgrade"),
    "RunResult": ("harness.load.runner", "RunResult"),
    "Scenario": ("harness.load.scenario", "Scenario"),
    "SuiteDocument": ("harness.conformance.model", "SuiteDocument"),
    "SuiteReport": ("harness.conformance.runner", "SuiteReport"),
    "Target": ("harness.load.runner", "Target"),
    "UpgradeReport": ("harness.upgrade.model", "Report"),
}

__all__ = sorted([*_EXPORTS, "__version__"], key=str.casefold)

if TYPE_CHECKING:  # the same names, for type checkers (tests/test_public_api.py keeps the two lists equal)
    from harness.conformance.expectations import Expectations, load_expectations
    from harness.conformance.model import SuiteDocument
    from harness.conformance.report import read_report
    from harness.conformance.runner import SuiteReport, new_ctx
    from harness.conformance.runner import run_suite_sync as run_conformance
    from harness.errors import HarnessError
    from harness.golden.diff import GoldenDiff
    from harness.golden.diff import diff_recordings as diff_golden
    from harness.golden.record import record_with_engine as record_golden
    from harness.golden.store import Recording, load_recording
    from harness.launch.base import Engine
    from harness.launch.session import launch as launch_engine
    from harness.load.runner import RunResult, Target
    from harness.load.runner import run_scenario as run_load
    from harness.load.scenario import Scenario, load_scenario
    from harness.manifest import Manifest, load_manifest
    from harness.upgrade.model import Report as UpgradeReport
    from harness.upgrade.run import run_upgrade


def __getattr__(name: str) -> Any:
    try:
        module, attr = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'harness' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value  # resolved once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
