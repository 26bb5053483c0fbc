"""The upgrade's argument check, made before any engine starts: the old manifest's `server.args` read against the new
release's own argument surface (and the new manifest's against it too), plus the release-to-release surface diff.

    found = check_arguments(old_m, new_m, say=print)     # a JSON-ready dict; never raises for a surface not read

`found["old_args"]`: each old flag the new release would not accept (removed / renamed, see harness.launch.argsurface
for the rename rule; ambiguous; a value outside its choices), deprecated, or whose default moved. `found["new_args"]`:
the new manifest's own flags its release would not accept: the new engine would not start with them, so the upgrade
does not launch it (`launch_refused`). The surfaces are read from the installed (or now installed/verified) runtimes
and cached; reading them starts no engine.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from harness.errors import HarnessError
from harness.launch.argsurface import MAX_LISTED, args_against, check_args, diff_surfaces
from harness.launch.surfaces import SurfaceUnavailable, release_surface
from harness.manifest import Manifest

__all__ = ["check_arguments", "surface_summary", "BLOCKING_PROBLEMS"]

BLOCKING_PROBLEMS = ("removed", "renamed", "unknown", "ambiguous", "bad-choice")


def surface_summary(surface: dict[str, Any]) -> dict[str, Any]:
    return {
        "release": f"{surface.get('engine')} {surface.get('release')}",
        "flags": len(surface.get("flags") or {}),
        "aliases": len(surface.get("aliases") or {}),
        "captured_with": surface.get("captured_with") or surface.get("source"),
    }


def _surface(m: Manifest, install: bool, say: Callable[[str], None]) -> tuple[dict[str, Any] | None, str]:
    try:
        return release_surface(m, install=install, say=say), ""
    except SurfaceUnavailable as exc:
        return None, exc.one_line()
    except HarnessError as exc:  # an install that fails here fails the launch later: a finding, not a crash
        return None, f"argument surface of {m.engine.kind} {m.engine.version} not captured: {exc.one_line()}"


def _trim(diff: dict[str, Any]) -> dict[str, Any]:
    out = dict(diff)
    for key in ("removed", "renamed", "added", "aliases_removed", "deprecated", "defaults_changed"):
        items = diff.get(key) or []
        out[f"{key}_count"] = len(items)
        out[key] = items[: MAX_LISTED * 5]
    return out


def check_arguments(
    old_m: Manifest, new_m: Manifest, *, say: Callable[[str], None] = lambda s: None, install: bool = True
) -> dict[str, Any]:
    t0 = time.perf_counter()
    migration = old_m.engine.kind != new_m.engine.kind
    say(f"[arguments] reading {new_m.name}'s release flags before any engine starts")
    new_s, new_why = _surface(new_m, install, say)
    # the old release's surface is read only when it is already there (cached, or installed): it names what a removed
    # flag became; the old side's own launch installs it otherwise
    old_s, old_why = (
        (None, "engine migration: the old flags are another engine's") if migration else _surface(old_m, False, say)
    )
    found: dict[str, Any] = {
        "checked_before_launch": True,
        "migration": migration,
        "old_surface": surface_summary(old_s) if old_s else {"unavailable": old_why},
        "new_surface": surface_summary(new_s) if new_s else {"unavailable": new_why},
        "old_args": [],
        "new_args": [],
        "launch_refused": "",
    }
    if new_s is not None:
        found["new_args"] = check_args(new_s, list(new_m.server.args))
        if not migration:
            found["old_args"] = args_against(old_s, new_s, list(old_m.server.args))
        if old_s is not None:
            found["release"] = _trim(diff_surfaces(old_s, new_s))
        bad = [p for p in found["new_args"] if p["problem"] in BLOCKING_PROBLEMS]
        if bad:
            found["launch_refused"] = (
                f"the new manifest's server.args are not accepted by {new_s['engine']} {new_s['release']}: "
                + "; ".join(p["line"] for p in bad[:5])
            )
    found["seconds"] = round(time.perf_counter() - t0, 2)
    blocking = [p for p in found["old_args"] if p["problem"] in BLOCKING_PROBLEMS]
    say(
        "[arguments] "
        + (
            f"{new_why}"
            if new_s is None
            else f"old server.args vs {new_s['engine']} {new_s['release']}: "
            + ("; ".join(p["line"] for p in blocking) if blocking else "every flag accepted")
        )
    )
    return found
