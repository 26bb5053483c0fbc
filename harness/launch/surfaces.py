"""A manifest's release surface: the argument surface (harness.launch.argsurface) of the engine release a manifest
pins, read by its engine profile from the pinned runtime and cached by content key. No engine starts.

    surface = release_surface(manifest, install=True)     # SurfaceUnavailable (one line) when it cannot be read
    problems = manifest_arg_problems(manifest, surface)   # check_args of its server.args

The cache key is what fixes the parser: a Python runtime's environment key (lock sha256 + Python version, the
environment's directory name), a source build's archive sha256 and commit. With `install` the runtime is installed or
verified first (what a launch does anyway); without it only an existing one is used, else SurfaceUnavailable.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.launch.argsurface import SURFACE_FORMAT, SurfaceUnavailable, cached_surface, check_args
from harness.manifest import Manifest

__all__ = ["release_surface", "cached_release_surface", "surface_key", "manifest_arg_problems", "SurfaceUnavailable"]


def surface_key(manifest: Manifest) -> str | None:
    """The cache key of the manifest's release surface, or None for a runtime with none (a container image)."""
    kind, version = manifest.engine.kind, manifest.engine.version
    rev = manifest.profile.surface_revision()  # a new capture code is a new capture, never an old one's cache
    rev = f"-r{rev}" if rev else ""
    if manifest.runtime.python is not None:
        from harness.envs import env_for

        return f"{kind}-{version}-env-{env_for(manifest).path.name}-f{SURFACE_FORMAT}{rev}"
    src = manifest.runtime.source
    if src is not None:
        return f"{kind}-{version}-src-{src.sha256[:32]}-f{SURFACE_FORMAT}{rev}"
    return None


def _runtime(manifest: Manifest, install: bool, say: Callable[[str], None]) -> Path:
    p = manifest.profile
    what = f"{p.title} {manifest.engine.version}"
    if manifest.runtime.python is not None:
        from harness.envs import ensure_env, env_for, verify_env

        if install:
            return ensure_env(manifest, quiet=True).path
        env = env_for(manifest)
        problems = verify_env(env, p.env_addition if manifest.runtime.python.platform_plugin else None)
        if problems:
            raise SurfaceUnavailable(
                f"argument surface of {what} not captured: its environment is not installed ({problems[0]}); "
                f"run `harness install {manifest.path}`"
            )
        return env.path
    src = manifest.runtime.source
    if src is not None:
        if install:
            return p.build_from_source(src, manifest.engine.version, quiet=True, build_lock=manifest.source_build_lock)
        binary = p.built_binary(src, manifest.engine.version)
        if binary is None:
            raise SurfaceUnavailable(
                f"argument surface of {what} not captured: it is not built yet; run `harness install {manifest.path}`"
            )
        return binary
    why = p.notes.get("argument_surface") or "a container image's flags are not read here (it would have to run)"
    raise SurfaceUnavailable(f"argument surface of {what} not captured: {why}")


def release_surface(
    manifest: Manifest, *, install: bool, say: Callable[[str], None] = lambda s: None
) -> dict[str, Any]:
    """The argument surface of the release `manifest` pins (cached; captured without starting the engine)."""
    key = surface_key(manifest)
    if key is None:
        _runtime(manifest, install, say)  # raises the reason
        raise SurfaceUnavailable(f"argument surface of {manifest.profile.title} not captured")  # pragma: no cover

    def capture() -> dict[str, Any]:
        runtime = _runtime(manifest, install, say)
        say(f"[{manifest.name}] reading the argument surface of {manifest.profile.title} {manifest.engine.version}")
        return manifest.profile.argument_surface(runtime, manifest.engine.version)

    return cached_surface(key, capture)


def cached_release_surface(manifest: Manifest) -> dict[str, Any] | None:
    """The release surface when it was captured before (nothing is run), else None."""
    key = surface_key(manifest)
    if key is None:
        return None

    def none() -> dict[str, Any]:
        raise LookupError

    try:
        return cached_surface(key, none)
    except LookupError:
        return None


def manifest_arg_problems(manifest: Manifest, surface: dict[str, Any]) -> list[dict[str, Any]]:
    """The manifest's own server.args that its release would not accept (check_args)."""
    return check_args(surface, list(manifest.server.args))
