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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from harness.engines import PROFILES

__all__ = ["FORBIDDEN_ARGS", "FORBIDDEN_ENV", "refused_arg", "refused_env"]

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
