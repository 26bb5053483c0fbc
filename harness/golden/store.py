"""Golden recordings on disk: `meta.json` + one `<set>.jsonl` per prompt set, in one directory.

Default location: `golden/<engine>-<version>/<model-hash-12>/`. Format `harness-golden/1`; one JSON object per line:

    {"id", "set", "endpoint", "request_sha256", "request", "choices": [
        {"index", "text", "token_ids": [int], "finish_reason", "stop_reason",
         "logprobs": [[token_id, logprob, [[top_id, top_logprob], ...]], ...],
         "tool_calls": [{"type", "name", "arguments"}],            (prompts with tools, or when the engine sent calls)
         "constraint": {"kind", "held": bool, "detail"}},            (prompts with response_format or tool_choice)
         "reasoning": {"field", "text"}}],                          (when the engine's reasoning parser returned some)
     "usage", "system_fingerprint", "response_keys": [dotted key paths seen in the raw response]}

A request the engine refuses with a 4xx (other than 401/403/404/408/429) is recorded as that outcome:
`"choices": [], "error": {"status", "type", "message"}`; the diff compares it with the other side's answer.

Volatile fields (`id`, `created`) are never stored; `system_fingerprint` is stored but never compared.
Reading is strict and bounded (harness.readers: size, nesting, no FIFOs or devices): any unparsable or malformed line is
a DataError naming the file and the line, and a set file is a plain name inside the recording directory. Writing is
atomic per file (harness.outputs) and refuses an existing recording unless `force`; nothing is written until every set
is complete.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import DataError, OutputError, RefusedError
from harness.outputs import atomic_write_bytes, atomic_write_text
from harness.readers import MAX_DATA_BYTES, parse_json, read_bytes, read_json
from harness.settings import GOLDEN_ROOT

__all__ = [
    "FORMAT",
    "Recording",
    "default_recording_dir",
    "load_recording",
    "write_recording",
    "validate_record",
    "existing_recording",
    "listed_files",
]

FORMAT = "harness-golden/1"
PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")  # set names and set file names: never a path
MAX_META_BYTES = 16 << 20


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
    where = f"{path}: line {line}" if line else str(path)
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
    if err is not None and not (
        isinstance(err, dict)
        and isinstance(err.get("status"), int)
        and all(isinstance(err.get(k), (str, type(None))) for k in ("type", "message"))
    ):
        return "field 'error' must be an object with an integer 'status' and string 'type'/'message'"
    if not isinstance(rec.get("request", {}), dict) or not _is_num(rec.get("request", {}).get("temperature", 0) or 0):
        return "field 'request' must be an object (with a numeric 'temperature' if any)"
    keys = rec.get("response_keys", [])
    if not (isinstance(keys, list) and all(isinstance(k, str) for k in keys)):
        return "field 'response_keys' must be a list of strings"
    if not isinstance(rec.get("system_fingerprint"), (str, type(None))):
        return "field 'system_fingerprint' must be a string or null"
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
        if not isinstance(ch.get("finish_reason"), (str, type(None))):
            return f"{w}.finish_reason must be a string or null"
        ids = ch.get("token_ids")
        if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
            return f"{w}.token_ids missing or not a list of integers"
        problem = _check_client_view(ch, w)
        if problem:
            return problem
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


def _check_client_view(ch: dict, w: str) -> str | None:
    """The optional `tool_calls` and `constraint` of a choice (constrained prompts only)."""
    calls = ch.get("tool_calls", [])
    if not isinstance(calls, list):
        return f"{w}.tool_calls must be a list"
    for j, c in enumerate(calls):
        if not (
            isinstance(c, dict)
            and isinstance(c.get("arguments"), str)
            and all(isinstance(c.get(k), (str, type(None))) for k in ("type", "name", "arguments_type"))
        ):
            return f"{w}.tool_calls[{j}] must be {{type, name, arguments: string}}"
    con = ch.get("constraint")
    if con is not None and not (
        isinstance(con, dict)
        and isinstance(con.get("kind"), str)
        and isinstance(con.get("held"), bool)
        and isinstance(con.get("detail", ""), str)
    ):
        return f"{w}.constraint must be {{kind: string, held: true|false, detail: string}}"
    r = ch.get("reasoning")
    if r is not None and not (
        isinstance(r, dict) and set(r) == {"field", "text"} and all(isinstance(v, str) for v in r.values())
    ):
        return f"{w}.reasoning must be {{field: string, text: string}}"
    return None


def _plain_file_name(name: Any) -> bool:
    """A set file is a plain `*.jsonl` name inside the recording directory: no '/', no '..', no hidden file."""
    return isinstance(name, str) and bool(PLAIN_NAME.match(name)) and ".." not in name and name.endswith(".jsonl")


def _check_meta(path: Path, meta: Any) -> dict:
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise _fail(
            path, None, f"not a {FORMAT} meta file (format={meta.get('format') if isinstance(meta, dict) else None!r})"
        )
    for k in ("engine", "model", "sets"):
        if not isinstance(meta.get(k), dict):
            raise _fail(path, None, f"field {k!r} missing or not an object")
    if not isinstance(meta["model"].get("sha256"), str):
        raise _fail(path, None, "field 'model.sha256' missing or not a string")
    hw = meta.get("hardware")
    if hw is not None and not isinstance(hw, (dict, str)):
        raise _fail(path, None, "field 'hardware' must be an object or an 'unknown (...)' string")
    for name, info in meta["sets"].items():
        if not PLAIN_NAME.match(name):
            raise _fail(path, None, f"sets: set name {name!r} is not a plain name")
        if not isinstance(info, dict):
            raise _fail(path, None, f"sets.{name} must be an object")
        fname = info.get("file", f"{name}.jsonl")
        if not _plain_file_name(fname):
            raise _fail(
                path,
                None,
                f"sets.{name}.file {fname!r} must be a plain *.jsonl name inside the recording "
                "directory (no '/', no '..')",
            )
        if info.get("sha256") is not None and not isinstance(info["sha256"], str):
            raise _fail(path, None, f"sets.{name}.sha256 must be a string")
    return meta


def _load_meta(path: Path) -> dict:
    if not path.exists() and not path.is_symlink():
        raise _fail(path, None, "missing: not a golden recording directory (no meta.json)")
    return _check_meta(path, read_json(path, "golden meta", max_bytes=MAX_META_BYTES, error=DataError))


def _read_set_file(f: Path, set_name: str) -> bytes:
    if f.is_symlink():
        raise _fail(f, None, "is a symbolic link; set files must be plain files in the recording directory")
    if not f.exists():
        raise _fail(f, None, f"missing: meta.json lists set {set_name!r} but the file is not there")
    return read_bytes(f, "golden set", max_bytes=MAX_DATA_BYTES, error=DataError)


def _parse_set(f: Path, set_name: str, raw: bytes) -> dict[str, dict]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _fail(f, raw[: exc.start].count(b"\n") + 1, "not UTF-8") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    elif lines:
        # The writer always ends the file with a newline; a missing one means a cut-off write.
        n = len(lines)
        try:
            json.loads(lines[-1])
        except (ValueError, RecursionError):
            raise _fail(f, n, "truncated: the last line is incomplete JSON") from None
        raise _fail(f, n, "truncated: the file does not end with a newline")
    records: dict[str, dict] = {}
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            raise _fail(f, n, "empty line")
        # -Infinity is a real logprob (a completion's first token); NaN is refused by validate_record
        obj = parse_json(line, f, "golden record", allow_nan=True, error=DataError, where=f"line {n}")
        problem = validate_record(obj)
        if problem:
            raise _fail(f, n, problem)
        if obj["set"] != set_name:
            raise _fail(f, n, f"record belongs to set {obj['set']!r}, file is set {set_name!r}")
        if obj["id"] in records:
            raise _fail(f, n, f"duplicate prompt id {obj['id']!r}")
        records[obj["id"]] = obj
    return records


def load_recording(directory: str | Path) -> Recording:
    """Read and check a recording: every file through the bounded readers, set files confined to the directory."""
    d = Path(directory)
    if not d.is_dir():
        raise DataError(f"{d}: no such golden recording directory")
    meta = _load_meta(d / "meta.json")
    rec = Recording(path=d, meta=meta)
    for set_name, info in sorted(meta["sets"].items()):
        f = d / info.get("file", f"{set_name}.jsonl")
        raw = _read_set_file(f, set_name)
        records = _parse_set(f, set_name, raw)
        want, got = info.get("sha256"), hashlib.sha256(raw).hexdigest()
        if want and want != got:
            raise _fail(f, None, f"content does not match meta.json (sha256 {got[:12]}…, meta says {want[:12]}…)")
        rec.sets[set_name] = records
    return rec


def _jsonl(records: list[dict]) -> str:
    return "".join(json.dumps(r, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n" for r in records)


def listed_files(directory: Path) -> list[str]:
    """The set files an existing meta.json in `directory` lists (plain names only); [] when it cannot be read."""
    try:
        meta = _load_meta(directory / "meta.json")
    except DataError:
        return []
    return sorted(info.get("file", f"{name}.jsonl") for name, info in meta["sets"].items())


def existing_recording(directory: str | Path, set_names: list[str] | None = None) -> str | None:
    """What in `directory` a new recording (of `set_names`; every set when None) would replace, said as it is;
    None when nothing would be replaced."""
    d = Path(directory)
    if not d.is_dir():
        return None
    names = sorted(p.name for p in d.iterdir())
    if "meta.json" in names:
        listed = [n for n in listed_files(d) if n in names]
        return "a recording is already there (" + ", ".join(["meta.json"] + listed) + ")"
    ours = [f"{s}.jsonl" for s in set_names] if set_names is not None else [n for n in names if n.endswith(".jsonl")]
    clash = [n for n in ours if n in names]
    if clash:
        return f"no meta.json, but it holds {', '.join(clash)}, which this recording would replace"
    return None


def write_recording(directory: str | Path, meta: dict, sets: dict[str, list[dict]], *, force: bool = False) -> Path:
    """Write every set file, then meta.json (with each file's sha256), each atomically. Refuses to replace an
    existing recording (a meta.json, or a set file it would write) unless force. With force it removes only the
    set files the old meta.json listed that the new recording no longer has: never a file it did not write."""
    d = Path(directory)
    if d.exists() and not d.is_dir():
        raise OutputError(f"{d}: exists and is not a directory")
    for name in sets:
        if not PLAIN_NAME.match(name):
            raise DataError(f"refusing to write set {name!r}: not a plain name")
    there = existing_recording(d, list(sets))
    if there and not force:
        raise RefusedError(f"{d}: {there}; pass --force to replace it")
    for name, recs in sets.items():
        for r in recs:
            problem = validate_record(r)
            if problem:
                raise DataError(f"refusing to write set {name!r}, prompt {r.get('id')!r}: {problem}")
    old_files = listed_files(d) if d.is_dir() else []
    meta = dict(meta, format=FORMAT)
    meta_sets = {}
    for name, recs in sorted(sets.items()):
        data = _jsonl(recs).encode()
        atomic_write_bytes(d / f"{name}.jsonl", data)
        meta_sets[name] = dict(
            meta.get("sets", {}).get(name, {}),
            file=f"{name}.jsonl",
            prompts=len(recs),
            sha256=hashlib.sha256(data).hexdigest(),
        )
    meta["sets"] = meta_sets
    atomic_write_text(d / "meta.json", json.dumps(meta, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    written = {info["file"] for info in meta_sets.values()}
    for name in old_files:  # the old recording's sets that the new one no longer has
        if name not in written and (d / name).is_file() and not (d / name).is_symlink():
            (d / name).unlink()
    return d
