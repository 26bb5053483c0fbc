"""What a manifest's `server.args`/`server.env` (and `conform --extra-arg`) may not set, read as the engine reads it.

    problem = refused_arg(kind, ["--ho", "0.0.0.0"])   # "'--ho' is read as --host: ...", or None
    problem = refused_env(kind, {"SOME_HOST_VAR": "0.0.0.0"})

The tables live in the engine profiles (harness/engines/). The reading is argparse's (the Python engine's parser,
FlexibleArgumentParser), which means: `_` and `-` are the same in a
long flag's name (`--api_key`), any unambiguous prefix of a long flag is that flag (`--ho` is `--host`), `--flag=value`
is `--flag value`, `--flag.key value` is a JSON field of `--flag`, and `--config FILE` reads more flags from a YAML
file. Other engines' parsers are stricter, but the same reading is applied to them: refusing a spelling the engine
would reject anyway costs nothing, and missing one it accepts would let a manifest bind elsewhere.

`--config` is refused outright rather than followed: the engine resolves the path against its own working directory
when it starts, so the file the harness checked need not be the file the engine reads. Put the flags in server.args.

The tables are per engine kind; an unknown kind is checked against all of them.

Beside the tables, one rule for every engine (refused_loader_env): no variable that changes what code the engine
loads or runs (the dynamic loader's LD_*, the interpreter's PYTHON*, BASH_ENV, ...): it would put unverified code
into an engine the harness calls verified. The one exception is LD_PRELOAD (vLLM 0.18.1's CPU worker needs tcmalloc
and libiomp preloaded), whose every entry must be a file of a system package (`dpkg -S`) or a normalised path inside
the engine's own environment (`{env_dir}/...`).
"""

from __future__ import annotations

import functools
import os
import posixpath
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence

from harness.engines import PROFILES

__all__ = [
    "FORBIDDEN_ARGS",
    "FORBIDDEN_ENV",
    "ENV_DIR_PLACEHOLDER",
    "refused_arg",
    "refused_env",
    "refused_loader_env",
    "code_variable",
    "preloaded_files",
]

# flag -> why the manifest must not set it, per engine kind: the profiles' tables (harness/engines/). Long flags match
# by prefix as argparse does; short ones exactly.
FORBIDDEN_ARGS: dict[str, Mapping[str, str]] = {kind: p.forbidden_args for kind, p in PROFILES.items()}
# variable -> why the manifest's server.env must not set it (the launchers set these themselves).
FORBIDDEN_ENV: dict[str, Mapping[str, str]] = {kind: p.forbidden_env for kind, p in PROFILES.items()}


def _table(tables: dict[str, Mapping[str, str]], kind: str | None) -> dict[str, str]:
    if kind in tables:
        return dict(tables[kind])
    merged: dict[str, str] = {}
    for t in tables.values():
        merged.update(t)
    return merged


def _flag_name(token: str) -> str | None:
    """The option a token names, normalised as FlexibleArgumentParser does; None for a value."""
    if not token.startswith("-") or token == "-" or token[1:2].isdigit():
        return None  # a value, or a negative number
    name = token.split("=", 1)[0]
    if not name.startswith("--"):
        return name  # short options: matched exactly
    name = name.split(".", 1)[0].rstrip("+")  # --flag.key v is a JSON field of --flag
    return name.replace("_", "-")


def _means(name: str, flag: str) -> bool:
    if name.startswith("--") and flag.startswith("--"):
        return len(name) > 2 and flag.startswith(name)  # argparse takes any unambiguous prefix
    return name == flag


def refused_arg(kind: str | None, args: Sequence[str]) -> str | None:
    """Why `args` may not be given to a `kind` engine (naming the offending token), or None when they may."""
    table = _table(FORBIDDEN_ARGS, kind)
    for token in args:
        if token == "--":
            return "a bare '--' would turn the harness's own flags into positional arguments"
        name = _flag_name(token)
        if name is None:
            continue
        for flag, why in table.items():
            if _means(name, flag):
                written = token.split("=", 1)[0][:60]  # never the value: it may be a key
                return f"{flag}: {why}" if written == flag else f"{written!r} is read as {flag}: {why}"
    return None


def refused_env(kind: str | None, env: Mapping[str, str]) -> str | None:
    table = _table(FORBIDDEN_ENV, kind)
    for name in env:
        if name in table:
            return f"{name}: {table[name]}"
    return None


# ------------------------------------------------------------------------------------------ loader and interpreter

ENV_DIR_PLACEHOLDER = "{env_dir}"  # a matrix spec's name for the release's environment directory

# Interpreter variables that change only how a run behaves, not which code it runs.
_HARMLESS_PYTHON = frozenset(
    {"PYTHONHASHSEED", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONIOENCODING", "PYTHONUTF8"}
)
# Other variables that make a program load or run code from a path they name.
_CODE_ENV = {
    "BASH_ENV": "a script every non-interactive bash runs first",
    "ENV": "a script every POSIX shell runs first",
    "PATH": "decides which programs the engine runs (compilers, helpers it spawns by name)",
    "GCONV_PATH": "glibc loads character-conversion modules from it",
    "PERL5LIB": "Perl loads modules from it",
    "PERL5OPT": "options (modules) every Perl run takes",
    "RUBYLIB": "Ruby loads libraries from it",
    "RUBYOPT": "options (libraries) every Ruby run takes",
    "NODE_OPTIONS": "options (--require) every Node.js run takes",
    "NODE_PATH": "Node.js loads modules from it",
}
_PRELOAD_SPLIT = re.compile(r"[:\s]+")  # ld.so splits LD_PRELOAD on colons and whitespace
_DPKG_TIMEOUT_S = 20


def code_variable(name: str) -> str | None:
    """Why `name` changes what code runs, or None when it does not."""
    if name.startswith("LD_"):
        return "a dynamic-loader variable: it loads libraries the harness never verified"
    if name.startswith("PYTHON") and name not in _HARMLESS_PYTHON:
        return "an interpreter variable: it changes which Python code the engine runs"
    return _CODE_ENV.get(name)


@functools.lru_cache(maxsize=256)
def _dpkg_owner(path: str) -> str | None:
    """The Debian package that ships `path` (`dpkg -S`, exact path), or None when none does. RuntimeError when dpkg
    cannot say (absent, hung, failed otherwise)."""
    dpkg = shutil.which("dpkg")
    if dpkg is None:
        raise RuntimeError("dpkg is not available to check that it belongs to a system package")
    try:
        r = subprocess.run(
            [dpkg, "-S", path], capture_output=True, text=True, timeout=_DPKG_TIMEOUT_S,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}, errors="replace",
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        raise RuntimeError(f"dpkg -S could not check it ({type(exc).__name__})") from None
    for line in r.stdout.splitlines():
        if line.startswith("diversion "):
            continue
        packages, sep, owned = line.partition(": ")
        if sep and owned == path:  # dpkg -S also answers for patterns; only the exact path counts
            return packages
    return None


def _preload_problem(entry: str, env_dirs: Sequence[str], check_system_files: bool = True) -> str | None:
    if not entry.startswith("/") and not any(entry.startswith(d + "/") for d in env_dirs):
        return "not an absolute path"
    if posixpath.normpath(entry) != entry or entry.startswith("//"):  # normpath keeps a leading '//' only
        return "not a normalised path ('..', '//' or '.' in it)"
    if any(entry.startswith(d + "/") for d in env_dirs):
        return None  # inside the engine's own (verified) environment
    if any(c in entry for c in "*?[]\\"):
        return "a pattern, not a file"
    if not check_system_files:
        return None  # a spec read on one machine runs on another: which package owns it is asked at launch
    try:
        owner = _dpkg_owner(entry)
    except RuntimeError as exc:
        return str(exc)
    return None if owner else "neither a file of a system package (dpkg -S) nor inside the engine's environment"


def refused_loader_env(
    env: Mapping[str, str], *, env_dirs: Sequence[str] = (ENV_DIR_PLACEHOLDER,), check_system_files: bool = True
) -> str | None:
    """Why `env` may not be given to an engine (one line naming the variable), or None when it may: no variable that
    changes what code the engine loads (the loader's LD_*, the interpreter's PYTHON*, BASH_ENV, PATH, ...), except an
    LD_PRELOAD whose every entry is a system package's file or a normalised path under one of `env_dirs` (the
    engine's environment: `{env_dir}` in a matrix spec, the directory itself once it is known; none: system files
    only). `check_system_files=False` checks an absolute entry's form only (a spec is read before the machine that
    runs the release is known; its manifest is checked in full when it is rendered there)."""
    dirs = tuple(d.rstrip("/") for d in env_dirs if d and d.strip("/"))
    for name, value in env.items():
        if name == "LD_PRELOAD":
            for entry in _PRELOAD_SPLIT.split(value):
                problem = _preload_problem(entry, dirs, check_system_files) if entry else None
                if problem:
                    return f"LD_PRELOAD: {entry[:120]!r}: {problem}; refusing to preload it into a verified engine"
            continue
        why = code_variable(name)
        if why:
            return f"{name}: {why}; the harness refuses it in an engine's environment"
    return None


def preloaded_files(env: Mapping[str, str]) -> list[str]:
    """The LD_PRELOAD entries of `env`, in order (what a record names as preloaded)."""
    return [e for e in _PRELOAD_SPLIT.split(env.get("LD_PRELOAD", "")) if e]
