"""The scripted stage of a matrix cell: the release launched a second time, with the embedded scripted model and the
tool-call and reasoning parsers it offers, for what only that model answers.

The reference model never emits a tool call or a think block, so the tools.auto.*, reasoning.* and
structured.client.* cases judge only the contract in a cell's first launch (mostly `inconclusive`: the model did not
call, did not reason), and the Responses/Messages cases that `need` the scripted model skip there. The spec's `scripted` block names the model (by hash) and, per parser flag, the values to try in order; a
release gets the first value its own argument surface offers (`scripted_args`, pure over the captured surface), a
switch when the release has it, and nothing for a flag it lacks (said in the cell). The stage's verdicts replace the
first launch's skips for those cases (`merge_cases`), its agentic golden recording's response keys become wire keys
of the endpoint "scripted/<endpoint>", and the cell keeps what the stage ran with:
  cell["scripted"] = {"args": [...], "chosen": {flag: value | true | null}, "notes": [...], "ready_s",
                      "conformance_s", "counts", "golden_dir", "error"}
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from harness.outputs import atomic_write_text
from harness.readers import read_yaml

__all__ = ["scripted_args", "scripted_manifest", "scripted_case_ids", "merge_cases", "SCRIPTED_ENDPOINT_PREFIX"]

SCRIPTED_ENDPOINT_PREFIX = "scripted/"  # wire keys of the scripted stage's recording: "scripted/chat"
# the families whose cases answer only on the scripted model (they skip, with a reason, on any other); the cases
# that say so in `Case.needs` are taken as well
SCRIPTED_FAMILIES = ("tools.auto.", "reasoning.", "structured.client.")


def scripted_args(flags: dict[str, list[str]], surface: dict[str, Any]) -> tuple[list[str], dict[str, Any], list[str]]:
    """(server args to add, {flag: the value chosen, True for a switch, None when left out}, notes). `surface` is the
    cell's captured flags ({"captured", "flags": {name: {"choices", "takes_value", ...}}}). A flag whose choices the
    surface does not list takes the first value wanted (the release's parser does not constrain it); a release whose
    surface was not captured gets every flag's first value, and a note says so."""
    captured = bool(surface.get("captured"))
    known = surface.get("flags") or {} if captured else {}
    args: list[str] = []
    chosen: dict[str, Any] = {}
    notes: list[str] = [] if captured else ["argument surface not captured: every flag's first value is tried"]
    for flag, wanted in flags.items():
        entry = known.get(flag) if captured else {"choices": None, "takes_value": bool(wanted)}
        if not isinstance(entry, dict):
            chosen[flag] = None
            notes.append(f"{flag}: not a flag of this release")
            continue
        if not wanted:  # a switch
            args.append(flag)
            chosen[flag] = True
            continue
        choices = entry.get("choices")
        value = next((v for v in wanted if v in choices), None) if isinstance(choices, list) else wanted[0]
        if value is None:
            chosen[flag] = None
            notes.append(f"{flag}: none of {', '.join(wanted)} among the release's choices")
            continue
        args += [flag, value]
        chosen[flag] = value
    return args, chosen, notes


def scripted_manifest(manifest: Any, model_sha256: str, served_name: str, args: list[str]) -> Any:
    """The cell's rendered manifest with the scripted model and `args` added, written beside it as
    <stem>-scripted.yaml and loaded (the full manifest validation applies, the parser flags checked at launch
    against the release's surface)."""
    from harness.manifest import load_manifest

    src = Path(manifest.path)
    raw = read_yaml(src, "rendered manifest")
    raw["model"] = {"source": "scripted-tiny", "sha256": model_sha256, "served_name": served_name}
    server = raw.setdefault("server", {})
    server["args"] = [*(server.get("args") or []), *args]
    target = src.with_name(f"{src.stem}-scripted.yaml")
    head = f"# Rendered by `harness matrix` from {src.name}: the scripted stage of its cell; do not edit.\n"
    atomic_write_text(target, head + yaml.safe_dump(raw, sort_keys=False))
    return load_manifest(target)


def scripted_case_ids() -> list[str]:
    """The ids of the cases only the scripted model answers, in the suite's order."""
    from harness.conformance.case import SCRIPTED_MODEL
    from harness.conformance.suite import all_cases

    return [c.id for c in all_cases() if SCRIPTED_MODEL in c.needs or c.id.startswith(SCRIPTED_FAMILIES)]


def merge_cases(conformance: dict[str, Any], scripted_cases: dict[str, Any]) -> dict[str, Any]:
    """The first launch's conformance observable with the scripted stage's verdicts in place of its own for those
    cases (inconclusive or skip there: no tool call without the scripted model), and the counts over the merged
    cases."""
    cases = dict(conformance.get("cases") or {})
    for cid, c in scripted_cases.items():
        cases[cid] = {"verdict": c.get("verdict"), "behaviours": sorted(c.get("behaviours") or [])}
    merged = {**conformance, "cases": dict(sorted(cases.items()))}
    if isinstance(conformance.get("counts"), dict):
        counts = Counter(str(c.get("verdict")) for c in cases.values())
        merged["counts"] = {k: counts.get(k, 0) for k in {*conformance["counts"], *counts}}
        merged["counts"] = dict(sorted(merged["counts"].items()))
    return merged
