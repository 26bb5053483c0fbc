"""Golden recordings on disk: `meta.json` + one `<set>.jsonl` per prompt set, in one directory.

Default location: `golden/<engine>-<version>/<model-hash-12>/`. Format `harness-golden/1`; one JSON object per line:

    {"id", "set", "endpoint", "request_sha256", "request", "choices": [
        {"index", "text", "token_ids": [int], "finish_reason", "stop_reason",
         "logprobs": [[token_id, logprob, [[top_id, top_logprob], ...]], ...]}],
     "usage", "system_fingerprint", "response_keys": [dotted key paths seen in the raw response]}

A request the engine refuses with a 4xx (other than 401/403/404/408/429) is recorded as that outcome:
`"choices": [], "error": {"status", "type", "message"}`; the diff compares it with the other side's answer.

Volatile fields (`id`, `created`) are never stored; `system_fingerprint` is stored but never compared.
Reading is strict: any unparsable or malformed line is a DataError naming the file and the line. Writing is atomic per
file (harness.hashing) and refuses an existing recording unless `force`; nothing is written until every set is complete.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import DataError, RefusedError
from harness.hashing import atomic_write_text, file_sha256
from harness.manifest import REPO_ROOT

__all__ = ["FORMAT", "Recording", "default_recording_dir", "load_recording", "write_recording", "validate_record"]

FORMAT = "harness-golden/1"
GOLDEN_ROOT = REPO_ROOT / "golden"


def default_recording_dir(manifest: Any, root: Path = GOLDEN_ROOT) -> Path:
    return root / f"{manifest.engine.kind}-{manifest.engine.version}" / manifest.model.sha256[:12]


@dataclass
class Recording:
    path: Path
    meta: dict[str, Any]
    sets: dict[str, dict[str, dict]] = field(default_factory=dict)  # set name -> prompt id -> record

    @property
    def model_sha256(self) -> str:
        return str(self.meta.get("model", {}).get("sha256", ""))

    @property
    def label(self) -> str:
        e = self.meta.get("engine", {})
        return f"{e.get('kind', '?')}-{e.get('version', '?')}"

    def prompts(self) -> dict[tuple[str, str], dict]:
        return {(s, pid): rec for s, recs in self.sets.items() for pid, rec in recs.items()}


def _fail(path: Path, line: int | None, msg: str) -> DataError:
    where = f"{path}:{line}" if line else str(path)
    return DataError(f"{where}: {msg}")


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and not math.isnan(x)


def validate_record(rec: Any) -> str | None:
    """None when rec is a well-formed record, else what is wrong (a field path and a reason)."""
    if not isinstance(rec, dict):
        return "a line must be a JSON object"
    for k, typ in (("id", str), ("set", str), ("endpoint", str), ("request_sha256", str), ("choices", list)):
        if not isinstance(rec.get(k), typ):
            return f"field {k!r} missing or not a {typ.__name__}"
    err = rec.get("error")
    if err is not None and not (isinstance(err, dict) and isinstance(err.get("status"), int)):
        return "field 'error' must be an object with an integer 'status'"
    if err is None and not rec["choices"]:
        return "field 'choices' is empty and there is no 'error'"
    if rec["endpoint"] not in ("chat", "completions"):
        return f"field 'endpoint' must be chat or completions, got {rec['endpoint']!r}"
    for i, ch in enumerate(rec["choices"]):
        w = f"choices[{i}]"
        if not isinstance(ch, dict):
            return f"{w} must be an object"
        if not isinstance(ch.get("text"), str):
            return f"{w}.text missing or not a string"
        ids = ch.get("token_ids")
        if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
            return f"{w}.token_ids missing or not a list of integers"
        lps = ch.get("logprobs")
        if not isinstance(lps, list):
            return f"{w}.logprobs missing or not a list"
        for j, row in enumerate(lps):
            ok = (
                isinstance(row, list)
                and len(row) == 3
                and isinstance(row[0], int)
                and _is_num(row[1])
                and isinstance(row[2], list)
                and all(isinstance(t, list) and len(t) == 2 and isinstance(t[0], int) and _is_num(t[1]) for t in row[2])
            )
            if not ok:
                return f"{w}.logprobs[{j}] must be [token_id, logprob, [[id, logprob], ...]]"
    return None


def _load_meta(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _fail(path, None, "missing: not a golden recording directory (no meta.json)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _fail(path, None, f"unreadable: {exc}") from None
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _fail(path, exc.lineno, f"not valid JSON ({exc.msg}, column {exc.colno}); truncated or corrupt?") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise _fail(path, 1, f"not a {FORMAT} meta file (format={meta.get('format') if isinstance(meta, dict) else None!r})")
    for k in ("engine", "model", "sets"):
        if not isinstance(meta.get(k), dict):
            raise _fail(path, 1, f"field {k!r} missing or not an object")
    if not isinstance(meta["model"].get("sha256"), str):
        raise _fail(path, 1, "field 'model.sha256' missing")
    return meta


def load_recording(directory: str | Path) -> Recording:
    d = Path(directory)
    if not d.is_dir():
        raise DataError(f"{d}: no such golden recording directory")
    meta = _load_meta(d / "meta.json")
    rec = Recording(path=d, meta=meta)
    for set_name, info in sorted(meta["sets"].items()):
        fname = info.get("file", f"{set_name}.jsonl") if isinstance(info, dict) else f"{set_name}.jsonl"
        f = d / fname
        try:
            raw = f.read_bytes()
        except FileNotFoundError:
            raise _fail(f, None, f"missing: meta.json lists set {set_name!r} but the file is not there") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = raw[: exc.start].count(b"\n") + 1
            raise _fail(f, line, "not UTF-8") from None
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        elif lines:
            # The writer always ends the file with a newline; a missing one means a cut-off write.
            n = len(lines)
            try:
                json.loads(lines[-1])
            except json.JSONDecodeError:
                raise _fail(f, n, "truncated: the last line is incomplete JSON") from None
            raise _fail(f, n, "truncated: the file does not end with a newline")
        records: dict[str, dict] = {}
        for n, line in enumerate(lines, start=1):
            if not line.strip():
                raise _fail(f, n, "empty line")
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise _fail(f, n, f"not valid JSON ({exc.msg}, column {exc.colno})") from None
            problem = validate_record(obj)
            if problem:
                raise _fail(f, n, problem)
            if obj["set"] != set_name:
                raise _fail(f, n, f"record belongs to set {obj['set']!r}, file is set {set_name!r}")
            if obj["id"] in records:
                raise _fail(f, n, f"duplicate prompt id {obj['id']!r}")
            records[obj["id"]] = obj
        want = info.get("sha256") if isinstance(info, dict) else None
        if want and want != file_sha256(f):
            raise _fail(f, None, f"content does not match meta.json (sha256 {file_sha256(f)[:12]}…, meta says {want[:12]}…)")
        rec.sets[set_name] = records
    return rec


def _jsonl(records: list[dict]) -> str:
    return "".join(json.dumps(r, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n" for r in records)


def write_recording(directory: str | Path, meta: dict, sets: dict[str, list[dict]], *, force: bool = False) -> Path:
    """Write every set file, then meta.json (with each file's sha256), each atomically. Refuses to replace an
    existing recording (any meta.json or *.jsonl in the directory) unless force."""
    d = Path(directory)
    if d.exists() and not d.is_dir():
        raise RefusedError(f"{d}: exists and is not a directory")
    if d.is_dir() and not force:
        existing = sorted(p.name for p in d.iterdir() if p.name == "meta.json" or p.suffix == ".jsonl")
        if existing:
            raise RefusedError(f"{d}: a recording is already there ({', '.join(existing)}); pass --force to replace it")
    for name, recs in sets.items():
        for r in recs:
            problem = validate_record(r)
            if problem:
                raise DataError(f"refusing to write set {name!r}, prompt {r.get('id')!r}: {problem}")
    meta = dict(meta, format=FORMAT)
    meta_sets = {}
    for name, recs in sorted(sets.items()):
        text = _jsonl(recs)
        atomic_write_text(d / f"{name}.jsonl", text)
        meta_sets[name] = dict(meta.get("sets", {}).get(name, {}), file=f"{name}.jsonl", prompts=len(recs),
                               sha256=file_sha256(d / f"{name}.jsonl"))
    meta["sets"] = meta_sets
    if force:  # a forced re-record replaces the whole recording: drop set files that are no longer listed
        for p in d.glob("*.jsonl"):
            if p.stem not in meta_sets:
                p.unlink()
    atomic_write_text(d / "meta.json", json.dumps(meta, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    return d
