"""An engine release's argument surface: every flag its own parser accepts, with defaults, and what that means for a
manifest's `server.args` (generic: the engine profiles capture, this module reads and compares).

    surface = surface_from_actions(actions, engine="...", release="0.11.0")   # a dump of an argparse parser's actions
    surface = surface_from_help(text, engine="...", release="0c1e570")        # a `--help` listing in two columns
    problems = check_args(surface, ["--swap-space", "4"])                      # [] or [{flag, problem, line}, ...]
    diff = diff_surfaces(old, new)                                             # removed / added / defaults changed
    findings = args_against(old, new, args)                                    # a manifest's flags on the new release

A surface (JSON, format 1):

    {"format": 1, "engine": kind, "release": version, "source": "parser" | "help", "abbrev": bool,
     "flags": {canonical: {"options": [...], "dest", "default", "choices", "nargs", "takes_value", "deprecated",
                           "help", "env", "mentions"}},
     "aliases": {other spelling: canonical}}

`canonical` is a flag's first long spelling; every other spelling (short, negated, older) is an alias. `abbrev` says
whether the engine's parser takes an unambiguous prefix of a long flag (argparse does), and `_` in a long flag is `-`
(so read, a spelling the engine accepts is never reported unknown, and one it rejects never passes).

Renamed, the rule (first that applies; the flag is gone from the new release either way, so both are blocking):
  hint       the old release's help for the flag names a flag the new release has ("... use --x instead"), or the
             new release's help for a flag it added names the old flag
  dest       a new spelling sets the same destination (argparse dest) as the old flag did
  inverted   --disable-X became --enable-X (or the reverse), or --no-X became --X
  near name  one flag the new release added is within NEAR_RATIO of the old name (separators ignored), and clearly the
             closest (NEAR_MARGIN ahead of the next)
Captures are cached as JSON under $HARNESS_HOME/surfaces/ (bounded: MAX_SURFACE_BYTES a file, MAX_CACHED files).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.errors import DataError, HarnessError
from harness.outputs import atomic_write_text
from harness.readers import read_json
from harness.settings import harness_home

__all__ = [
    "SURFACE_FORMAT",
    "SurfaceUnavailable",
    "surface_from_actions",
    "surface_from_help",
    "option_name",
    "resolve",
    "flag_tokens",
    "check_args",
    "diff_surfaces",
    "rename_of",
    "args_against",
    "run_capture",
    "cached_surface",
    "surface_cache_dir",
    "json_safe",
]

SURFACE_FORMAT = 1
MAX_SURFACE_BYTES = 8 << 20  # a release has a few hundred flags: ~200 KB
MAX_CAPTURE_BYTES = 16 << 20  # what a capture may print before it is cut off
MAX_CACHED = 64  # surfaces kept under $HARNESS_HOME/surfaces (oldest removed first)
CAPTURE_SECONDS = 180.0
NEAR_RATIO = 0.8
NEAR_MARGIN = 0.05
MAX_LISTED = 40  # names listed per category in a diff (the counts are always complete)


class SurfaceUnavailable(HarnessError):
    """A release's argument surface cannot be captured here (one line saying why)."""


# -- reading values ------------------------------------------------------------------------------------------------


def json_safe(v: Any, depth: int = 0) -> Any:
    """A default as JSON: scalars and small containers as themselves, anything else as {"repr": first 200 chars}."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if v == v and abs(v) != float("inf") else {"repr": repr(v)}
    if isinstance(v, (list, tuple)) and depth < 3:
        return [json_safe(x, depth + 1) for x in v]
    if isinstance(v, dict) and depth < 3:
        return {str(k): json_safe(x, depth + 1) for k, x in v.items()}
    return {"repr": repr(v)[:200]}


_FLAG_IN_TEXT = re.compile(r"(?<![\w-])--[a-z0-9][a-z0-9-]*[a-z0-9](?:\.[a-z0-9_]+)*", re.I)
_FIELD_IN_TEXT = re.compile(r"`([a-z][a-z0-9_]*_[a-z0-9_]+)`")  # "Use `pooler_config` instead": the flag of a field


def _mentions(text: str, own: Sequence[str]) -> list[str]:
    """The flags a help text names (`--x`, or a config field in backticks, read as its flag `--x-y`)."""
    out: list[str] = []
    found = _FLAG_IN_TEXT.findall(text or "") + ["--" + f.replace("_", "-") for f in _FIELD_IN_TEXT.findall(text or "")]
    for m in found:
        flag = m.split(".", 1)[0]
        if flag not in own and flag not in out:
            out.append(flag)
    return out[:10]


def _canonical(options: Sequence[str]) -> str:
    longs = [o for o in options if o.startswith("--")]
    return longs[0] if longs else options[0]


def _build(entries: list[dict[str, Any]], *, engine: str, release: str, source: str, abbrev: bool) -> dict[str, Any]:
    flags: dict[str, dict[str, Any]] = {}
    aliases: dict[str, str] = {}
    for e in entries:
        options = [o for o in e["options"] if isinstance(o, str) and o.startswith("-")]
        if not options:
            continue
        canon = _canonical(options)
        if canon in flags or canon in aliases:
            continue  # a parser never registers one spelling twice; a listing that does keeps the first
        flags[canon] = {**e, "options": options}
        for o in options:
            if o != canon:
                aliases.setdefault(o, canon)
    return {
        "format": SURFACE_FORMAT,
        "engine": engine,
        "release": release,
        "source": source,
        "abbrev": abbrev,
        "flags": flags,
        "aliases": aliases,
    }


def surface_from_actions(
    actions: Sequence[Mapping[str, Any]], *, engine: str, release: str, abbrev: bool = True
) -> dict[str, Any]:
    """A surface from a dump of an argparse parser's optional actions (each: option_strings, dest, default, choices,
    nargs, takes_value, deprecated, help, and optionally help_full for the flags it names)."""
    entries = []
    for a in actions:
        opts = list(a.get("option_strings") or [])
        if not opts:
            continue
        entries.append(
            {
                "options": opts,
                "dest": a.get("dest"),
                "default": json_safe(a.get("default")),
                "choices": json_safe(a.get("choices")),
                "nargs": json_safe(a.get("nargs")),
                "takes_value": bool(a.get("takes_value", a.get("nargs") != 0)),
                "deprecated": bool(a.get("deprecated")),
                "help": str(a.get("help") or "")[:300],
                "env": None,
                "mentions": _mentions(str(a.get("help_full") or a.get("help") or ""), opts),
            }
        )
    return _build(entries, engine=engine, release=release, source="parser", abbrev=abbrev)


_DEFAULT = re.compile(r"\(?default:\s*", re.I)
_ENV = re.compile(r"\(env:\s*([A-Z0-9_]+)\)")


def _default_in(text: str) -> str | None:
    """The value after 'default:' up to its closing parenthesis (nested ones kept), or None."""
    m = _DEFAULT.search(text)
    if not m:
        return None
    depth, out = 0, []
    for ch in text[m.end() :]:
        if ch == "(":
            depth += 1
        elif ch == ")":
            if depth == 0:
                break
            depth -= 1
        out.append(ch)
    value = "".join(out).strip()
    return value.strip("'\"") if value.count("'") == 2 or value.count('"') == 2 else value


def _choices_in(placeholder: str) -> list[str] | None:
    m = re.fullmatch(r"[{\[<]([A-Za-z0-9_.-]+(?:[,|][A-Za-z0-9_.-]+)+)[}\]>]", placeholder.strip())
    if not m or "..." in m.group(1):
        return None
    return re.split(r"[,|]", m.group(1))


def surface_from_help(text: str, *, engine: str, release: str, column: int = 40) -> dict[str, Any]:
    """A surface from a two-column `--help` listing: an entry starts at column 0 with its spellings (`-c, --ctx-size
    N`), its description starts at `column` (on the same line, or on the next when the spellings are longer), and
    further description lines are indented to `column`. `(default: ...)`, `(env: VAR)` and DEPRECATED are read from
    the description; `{a,b}`, `[a|b]` or `<a|b>` after the last spelling are its choices. Section rulers (`-----`) and
    other lines are skipped."""
    entries: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    desc: list[str] = []

    def close() -> None:
        if cur is not None:
            d = " ".join(desc).strip()
            cur["help"] = (desc[0].strip() if desc else "")[:300]
            cur["default"] = _default_in(d)
            env = _ENV.search(d)
            cur["env"] = env.group(1) if env else None
            cur["deprecated"] = "deprecated" in d.lower()
            cur["mentions"] = _mentions(re.sub(r"\(env:[^)]*\)", "", d), cur["options"])
            entries.append(cur)

    for line in text.splitlines():
        if line.startswith("-") and not line.startswith("---"):
            close()
            desc = []
            left, right = line, ""
            if len(line) > column and line[column - 2 : column] == "  ":
                left, right = line[:column], line[column:]
            options, placeholder = [], ""
            for piece in left.strip().split(", "):
                head, _, rest = piece.strip().partition(" ")
                if head.startswith("-"):
                    options.append(head)
                    placeholder = rest.strip()
                else:  # a comma inside a placeholder (`<a>=<b>,...`): part of the last spelling's value
                    placeholder = (placeholder + ", " + piece).strip(", ")
            cur = {
                "options": options,
                "dest": None,
                "choices": _choices_in(placeholder) if placeholder else None,
                "nargs": None if placeholder else 0,
                "takes_value": bool(placeholder),
                "placeholder": placeholder[:80],
            }
            if right.strip():
                desc.append(right.strip())
        elif cur is not None and line.startswith(" ") and line.strip():
            desc.append(line.strip())
        elif not line.strip() or line.startswith("---"):
            continue
        else:
            close()
            cur, desc = None, []
    close()
    return _build(entries, engine=engine, release=release, source="help", abbrev=False)


# -- reading a manifest's flags ------------------------------------------------------------------------------------


def option_name(token: str, *, abbrev: bool = True) -> str | None:
    """The option a command-line token names, as the engine's parser reads it (`--flag=v` is `--flag`, `--flag.key`
    is `--flag`, `--flag+` is `--flag`, `_` is `-` in a long flag when `abbrev`, i.e. an argparse reading); None for
    a value (or a negative number)."""
    if not token.startswith("-") or token == "-" or token[1:2].isdigit() or token[1:2] == ".":
        return None
    name = token.split("=", 1)[0]
    if not name.startswith("--"):
        return name
    if abbrev:
        name = name.split(".", 1)[0].rstrip("+").replace("_", "-")
    return name


def _spellings(surface: Mapping[str, Any]) -> dict[str, str]:
    out = {f: f for f in surface["flags"]}
    out.update(surface.get("aliases") or {})
    return out


def resolve(surface: Mapping[str, Any], name: str) -> tuple[str | None, str]:
    """(canonical flag, how): how is exact, prefix, ambiguous (candidates joined) or unknown."""
    spellings = _spellings(surface)
    if name in spellings:
        return spellings[name], "exact"
    if surface.get("abbrev") and name.startswith("--") and len(name) > 2:
        hits = sorted({s for s in spellings if s.startswith("--") and s.startswith(name)})
        if len(hits) == 1:
            return spellings[hits[0]], "prefix"
        if hits:
            return None, "ambiguous: " + ", ".join(hits[:6])
    return None, "unknown"


def flag_tokens(surface: Mapping[str, Any], args: Sequence[str]) -> list[tuple[str, str, str | None]]:
    """(token, option name, its value or None) for every flag token of `args`, in order."""
    out: list[tuple[str, str, str | None]] = []
    abbrev = bool(surface.get("abbrev"))
    for i, tok in enumerate(args):
        name = option_name(tok, abbrev=abbrev)
        if name is None:
            continue
        value: str | None = None
        if "=" in tok:
            value = tok.split("=", 1)[1]
        elif i + 1 < len(args) and option_name(args[i + 1], abbrev=abbrev) is None:
            value = args[i + 1]
        out.append((tok, name, value))
    return out


def _release(surface: Mapping[str, Any]) -> str:
    return f"{surface.get('engine')} {surface.get('release')}"


def check_args(surface: Mapping[str, Any], args: Sequence[str]) -> list[dict[str, Any]]:
    """Every flag of `args` the release would not accept as given: unknown, ambiguous (an abbreviation that matches
    more than one flag), or a value outside the flag's choices. Each with a one-line `line`."""
    problems: list[dict[str, Any]] = []
    for tok, name, value in flag_tokens(surface, args):
        canon, how = resolve(surface, name)
        shown = tok.split("=", 1)[0][:60]
        if canon is None:
            kind = "ambiguous" if how.startswith("ambiguous") else "unknown"
            detail = f" ({how.split(': ', 1)[1]})" if kind == "ambiguous" else ""
            problems.append(
                {
                    "flag": shown,
                    "problem": kind,
                    "line": f"{shown}: {'an ambiguous abbreviation' if kind == 'ambiguous' else 'not a flag'} of "
                    f"{_release(surface)}{detail}",
                }
            )
            continue
        spec = surface["flags"][canon]
        choices = spec.get("choices")
        takes = spec.get("takes_value") and spec.get("nargs") in (None, "?")
        if takes and isinstance(choices, list) and value is not None and all(isinstance(c, str) for c in choices):
            if value not in choices:
                problems.append(
                    {
                        "flag": canon,
                        "problem": "bad-choice",
                        "value": value[:60],
                        "line": f"{canon} {value[:60]!r}: not one of {_release(surface)}'s choices "
                        f"({', '.join(choices[:12])})",
                    }
                )
    return problems


# -- comparing two releases ----------------------------------------------------------------------------------------


def _bare(flag: str) -> str:
    return re.sub(r"[-_]", "", flag.lstrip("-")).lower()


_POLARITY = (("--disable-", "--enable-"), ("--enable-", "--disable-"), ("--no-", "--"))


def rename_of(flag: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, str] | None:
    """What `flag` (canonical in `old`, absent from `new`) became in `new`, and by which rule (see the module doc)."""
    new_spell = _spellings(new)
    spec = old["flags"].get(flag) or {}
    for m in spec.get("mentions") or []:
        if m in new_spell:
            return {"to": new_spell[m], "rule": "hint", "why": f"the old release's help for {flag} names {m}"}
    added = [f for f in new["flags"] if f not in _spellings(old)]
    for f in added:
        if flag in (new["flags"][f].get("mentions") or []):
            return {"to": f, "rule": "hint", "why": f"the new release's help for {f} names {flag}"}
    dest = spec.get("dest")
    if dest:
        for f, s in new["flags"].items():
            if s.get("dest") == dest:
                return {"to": f, "rule": "dest", "why": f"sets the same setting ({dest})"}
    for a, b in _POLARITY:
        if flag.startswith(a):
            other = b + flag[len(a) :]
            if other in new_spell:
                return {"to": new_spell[other], "rule": "inverted", "why": f"{flag} became {other}"}
    scored = sorted(
        ((difflib.SequenceMatcher(None, _bare(flag), _bare(f)).ratio(), f) for f in added if f.startswith("--")),
        reverse=True,
    )
    if scored and scored[0][0] >= NEAR_RATIO and (len(scored) < 2 or scored[0][0] - scored[1][0] >= NEAR_MARGIN):
        return {"to": scored[0][1], "rule": "near name", "why": f"closest added flag (similarity {scored[0][0]:.2f})"}
    return None


def _plain(v: Any) -> bool:
    return not (isinstance(v, dict) and "repr" in v)


def diff_surfaces(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """Release to release: flags removed (with what each became, when a rule says), added, newly deprecated, and
    changed defaults (`defaults_changed`: plain values; `config_defaults_changed`: names of flags whose default is an
    object only its repr shows)."""
    new_spell, old_spell = _spellings(new), _spellings(old)
    removed: list[dict[str, Any]] = []
    renamed: list[dict[str, Any]] = []
    for f in old["flags"]:
        if f in new_spell or any(o in new_spell for o in old["flags"][f]["options"]):
            continue
        r = rename_of(f, old, new)
        (renamed if r else removed).append({"flag": f, **(r or {})})
    added = [
        f for f in new["flags"] if f not in old_spell and not any(o in old_spell for o in new["flags"][f]["options"])
    ]
    aliases_removed = sorted(a for a in (old.get("aliases") or {}) if a not in new_spell)
    defaults, configs, deprecated = [], [], []
    for f, spec in old["flags"].items():
        canon = new_spell.get(f)
        if canon is None:
            continue
        ns = new["flags"][canon]
        if ns.get("deprecated") and not spec.get("deprecated"):
            deprecated.append(canon)
        a, b = spec.get("default"), ns.get("default")
        if a != b:
            if _plain(a) and _plain(b):
                defaults.append({"flag": canon, "old": a, "new": b})
            else:
                configs.append(canon)
    return {
        "old": _release(old),
        "new": _release(new),
        "counts": {"old": len(old["flags"]), "new": len(new["flags"])},
        "removed": removed,
        "renamed": renamed,
        "added": added,
        "aliases_removed": aliases_removed,
        "deprecated": deprecated,
        "defaults_changed": defaults,
        "config_defaults_changed": configs,
    }


def args_against(old: Mapping[str, Any] | None, new: Mapping[str, Any], args: Sequence[str]) -> list[dict[str, Any]]:
    """Each flag of a manifest's `args` read against the new release: `removed` or `renamed` (with `to`, `rule`) when
    the new parser would not accept it, `ambiguous`, `bad-choice`, `deprecated`, or `default-changed` (the manifest
    sets it; the default it overrides moved). Flags that are simply accepted are not listed."""
    out: list[dict[str, Any]] = []
    problems = {p["flag"]: p for p in check_args(new, args)}
    for tok, name, _value in flag_tokens(new, args):
        shown = tok.split("=", 1)[0][:60]
        canon_old = resolve(old, name)[0] if old is not None else None
        p = problems.get(shown)
        if p is not None and p["problem"] == "unknown":
            r = rename_of(canon_old, old, new) if old is not None and canon_old else None
            item: dict[str, Any] = {"flag": shown, "problem": "renamed" if r else "removed", "line": p["line"]}
            if canon_old and canon_old != shown:
                item["old_flag"] = canon_old
            if r:
                item.update(r)
                item["line"] += f"; renamed to {r['to']} ({r['rule']}: {r['why']})"
            elif old is not None and canon_old is None:
                item["line"] += f" (nor of {_release(old)})"
            out.append(item)
            continue
        canon, _how = resolve(new, name)
        if p is None and canon is not None:
            p = problems.get(canon)
        if p is not None:
            out.append({**p, "flag": shown})
            continue
        if canon is None:
            continue
        spec = new["flags"][canon]
        if spec.get("deprecated"):
            out.append({"flag": shown, "problem": "deprecated", "line": f"{shown}: deprecated in {_release(new)}"})
        if old is not None and canon_old and canon_old in old["flags"]:
            a, b = old["flags"][canon_old].get("default"), spec.get("default")
            if a != b and _plain(a) and _plain(b):
                out.append(
                    {
                        "flag": shown,
                        "problem": "default-changed",
                        "old": a,
                        "new": b,
                        "line": f"{shown}: set by the manifest; its default moved {a!r} -> {b!r}",
                    }
                )
    return out


# -- capturing and caching -----------------------------------------------------------------------------------------


def run_capture(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    timeout: float = CAPTURE_SECONDS,
    max_bytes: int = MAX_CAPTURE_BYTES,
    cwd: Path | None = None,
) -> str:
    """Run one capture command (never an engine server) in its own process group; its stdout (at most max_bytes),
    or SurfaceUnavailable naming the command's exit and its last stderr line."""
    with tempfile.TemporaryDirectory(prefix="harness-surface-") as tmp:
        out_path, err_path = Path(tmp) / "out", Path(tmp) / "err"
        with out_path.open("wb") as out, err_path.open("wb") as err:
            proc = subprocess.Popen(
                list(argv), stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=dict(env),
                cwd=str(cwd or tmp), start_new_session=True,
            )  # fmt: skip
            deadline = time.monotonic() + timeout
            while proc.poll() is None:
                if time.monotonic() > deadline or out_path.stat().st_size > max_bytes:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    raise SurfaceUnavailable(f"{Path(argv[0]).name}: capture stopped (over {timeout:.0f} s or bytes)")
                time.sleep(0.05)
        if proc.returncode != 0:
            tail = err_path.read_bytes()[-4000:].decode("utf-8", "replace").strip().splitlines()
            raise SurfaceUnavailable(
                f"{Path(argv[0]).name}: capture exited {proc.returncode}" + (f": {tail[-1][:200]}" if tail else "")
            )
        return out_path.read_bytes()[:max_bytes].decode("utf-8", "replace")


def surface_cache_dir() -> Path:
    return harness_home() / "surfaces"


def cached_surface(key: str, capture: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The surface cached under `key` (a content key: lock hash or build key), or capture it and cache it."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", key)[:120] + "-" + hashlib.sha256(key.encode()).hexdigest()[:8]
    path = surface_cache_dir() / f"{safe}.json"
    if path.is_file():
        try:
            doc = read_json(path, "argument surface", max_bytes=MAX_SURFACE_BYTES, error=DataError)
            if isinstance(doc, dict) and doc.get("format") == SURFACE_FORMAT and isinstance(doc.get("flags"), dict):
                return doc
        except DataError:
            pass  # a damaged cache entry is captured again
    doc = capture()
    text = json.dumps(doc, sort_keys=True, ensure_ascii=False)
    if len(text.encode()) <= MAX_SURFACE_BYTES:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text + "\n")
        entries = sorted(path.parent.glob("*.json"), key=lambda p: p.stat().st_mtime)
        for old in entries[: max(0, len(entries) - MAX_CACHED)]:
            old.unlink(missing_ok=True)
    return doc
