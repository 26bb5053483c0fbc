"""Cells that read the same on any machine: the machine's own directories in a cell's text (an engine log's
traceback, the model directory /v1/models names, the scratch directory of a log's path) are put back as
placeholders, and terminal escapes are dropped, before a cell is written or leaves the node that built it.

    {env_dir}       the release's engine environment ($HARNESS_HOME/envs/<install.env>)
    {out}           the matrix directory (--out)
    {harness_home}  $HARNESS_HOME (models, builds, other environments)
    {python}        the Python installations (this interpreter's prefix and base prefix, the environment's base)
    {tmp}           the temporary directory
    {home}          the user's home

A root is replaced only as a whole path component (/tmp never inside /var/tmp, /root never in /rootfs), the longest
root first, so a path under $HARNESS_HOME/envs/X becomes {env_dir}/..., not {harness_home}/envs/X/...
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from harness.shown import strip_ansi

__all__ = ["portable_text", "portable_value", "machine_roots", "portable_cell"]

Roots = dict[str, list[str]]  # placeholder name -> the absolute directories it stands for


def _pattern(roots: Roots) -> tuple[re.Pattern[str], dict[str, str]] | None:
    by_path: dict[str, str] = {}
    for name, paths in roots.items():
        for p in paths:
            p = str(p).rstrip("/")
            if len(p) > 1 and p.startswith("/") and p not in by_path:  # "/" itself would eat every path
                by_path[p] = name
    if not by_path:
        return None
    alts = "|".join(re.escape(p) for p in sorted(by_path, key=len, reverse=True))
    # a whole component: not the tail of a longer one (/var/tmp), not followed by more of the same one (/rootfs)
    return re.compile(rf"(?<![\w.-])({alts})(?![\w.-])"), by_path


def portable_text(text: str, roots: Roots) -> str:
    """text with every root replaced by its {placeholder} and terminal escapes removed."""
    text = strip_ansi(text)
    compiled = _pattern(roots)
    if compiled is None:
        return text
    pattern, by_path = compiled
    return pattern.sub(lambda m: "{" + by_path[m.group(1)] + "}", text)


def portable_value(value: Any, roots: Roots) -> Any:
    """Every string of a JSON value (keys too) through portable_text; numbers, booleans, null as they are."""
    if isinstance(value, str):
        return portable_text(value, roots)
    if isinstance(value, list):
        return [portable_value(v, roots) for v in value]
    if isinstance(value, dict):
        return {
            portable_value(k, roots) if isinstance(k, str) else k: portable_value(v, roots) for k, v in value.items()
        }
    return value


def _env_base_python(env_dir: Path) -> list[str]:
    """The Python an engine environment was made from (pyvenv.cfg's `home` is its bin directory)."""
    try:
        lines = (env_dir / "pyvenv.cfg").read_text(encoding="utf-8", errors="replace").splitlines()[:50]
    except OSError:
        return []
    for line in lines:
        k, sep, v = line.partition("=")
        if sep and k.strip() == "home" and v.strip():
            home = Path(v.strip())
            return [str(home.parent if home.name == "bin" else home)]
    return []


def machine_roots(out: Path | None = None, env_dir: Path | None = None, harness_home: Path | None = None) -> Roots:
    """This machine's roots, for a cell built here (out and env_dir when known)."""
    from harness.settings import harness_home as configured_home

    hh = Path(harness_home) if harness_home is not None else configured_home()
    python = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    roots: Roots = {
        "harness_home": [str(hh), str(hh.resolve())],
        "python": sorted(python | set(_env_base_python(env_dir) if env_dir else [])),
        "tmp": [tempfile.gettempdir()],
        "home": [str(Path.home())],
    }
    if out is not None:
        roots["out"] = [str(Path(out).absolute()), str(Path(out).resolve())]
    if env_dir is not None:
        roots["env_dir"] = [str(Path(env_dir).absolute()), str(Path(env_dir).resolve())]
    return roots


def portable_cell(cell: dict[str, Any], out: Path | None = None, env_dir: Path | None = None) -> dict[str, Any]:
    """The cell with this machine's roots replaced. Its environment is the one it names (install.env) when env_dir
    is not given. The key (hashes) and numbers are untouched, so reuse decides as before."""
    from harness.settings import harness_home

    if env_dir is None:
        name = (cell.get("install") or {}).get("env") if isinstance(cell.get("install"), dict) else None
        if isinstance(name, str) and name and "/" not in name:
            env_dir = harness_home() / "envs" / name
    result = portable_value(cell, machine_roots(out, env_dir))
    assert isinstance(result, dict)
    return result
