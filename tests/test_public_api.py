"""The public Python API: `harness.__all__` is pinned, every name resolves, `import harness` stays cheap, and the
type checkers' list (the `if TYPE_CHECKING:` imports) says the same as the lazy table."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import harness

PUBLIC = [
    "__version__",
    "diff_golden",
    "Engine",
    "Expectations",
    "GoldenDiff",
    "HarnessError",
    "launch_engine",
    "load_expectations",
    "load_manifest",
    "load_recording",
    "load_scenario",
    "Manifest",
    "new_ctx",
    "read_report",
    "record_golden",
    "Recording",
    "run_conformance",
    "run_load",
    "run_upgrade",
    "RunResult",
    "Scenario",
    "SuiteDocument",
    "SuiteReport",
    "Target",
    "UpgradeReport",
]
ROOT = Path(__file__).resolve().parent.parent


def test_all_is_pinned_and_sorted():
    assert harness.__all__ == PUBLIC
    assert PUBLIC == sorted(PUBLIC, key=str.casefold)


def test_every_public_name_resolves():
    for name in PUBLIC:
        value = getattr(harness, name)
        assert value is not None, name
        assert name in dir(harness)
    assert callable(harness.launch_engine) and callable(harness.run_conformance) and callable(harness.record_golden)
    assert callable(harness.diff_golden) and callable(harness.run_load) and callable(harness.run_upgrade)
    for name in ("Engine", "GoldenDiff", "Recording", "RunResult", "SuiteDocument", "SuiteReport", "Target"):
        assert inspect.isclass(getattr(harness, name)), name


def test_the_verbs_survive_their_subpackages_being_imported():
    import harness.launch.session  # noqa: F401
    import harness.load.runner  # noqa: F401
    import harness.upgrade.run  # noqa: F401

    assert harness.launch_engine is harness.launch.session.launch
    assert harness.run_load is harness.load.runner.run_scenario
    assert harness.run_upgrade is harness.upgrade.run.run_upgrade


def test_an_unknown_name_is_an_attribute_error():
    try:
        harness.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("harness.no_such_name resolved")


def test_import_harness_is_cheap():
    code = "import sys, harness; print(sorted(m for m in sys.modules if m.startswith('harness')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.strip() == "['harness']"


def test_type_checkers_see_the_same_names():
    tree = ast.parse((ROOT / "harness" / "__init__.py").read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    seen = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom)
        for a in node.names:
            seen[a.asname or a.name] = (node.module, a.name)
    assert seen == harness._EXPORTS


def test_the_package_ships_its_type_marker():
    assert (ROOT / "harness" / "py.typed").is_file()


def test_the_readme_documents_the_variables_settings_reads():
    import re

    import harness.settings

    doc_vars = re.findall(r"^\| (\w+)\s+\|", harness.settings.__doc__ or "", re.M)
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Settings and environment variables", 1)[1].split("\n## ", 1)[0]
    readme_vars = re.findall(r"^\| `(\w+)` \|", section, re.M)
    assert [v for v in doc_vars if v != "variable"] == readme_vars and readme_vars
