"""A Node client's environment from an npm lock (issue 33): a directory under manifests/locks/clients/ holding a
package.json and its package-lock.json (lockfileVersion 3), installed by `npm ci --ignore-scripts` into
$HARNESS_HOME/tools/<name>-<key>/node_modules, never from a global or the user's own node_modules.

    check_npm_lock(lock_text, package_text)       # ValueError naming the first entry that is not exact and hashed
    root = npm_env("client-vercel-ai", lock_dir)  # builds once (in a temp dir, renamed when complete); then reused

What guards the tarballs is npm's own check: `npm ci` verifies each one against the lock's `integrity` (sha512) and
fails with EINTEGRITY otherwise; the lock itself is pinned by its sha256 (harness.clients.env). So every entry must
carry a sha512 `integrity` and come from https://registry.npmjs.org/ (no git, file, link or other registry source),
and package.json may only name exact versions the lock's root agrees with, and nothing npm acts on besides.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.errors import InstallError
from harness.lockedenv import MARKER_NAME
from harness.outputs import atomic_write_text
from harness.settings import harness_home
from harness.shown import shown

__all__ = ["NPM_LOCK", "NPM_PACKAGE", "NPM_REGISTRY", "check_npm_lock", "find_node", "installed_npm_env", "npm_env"]

NPM_LOCK = "package-lock.json"
NPM_PACKAGE = "package.json"
NPM_REGISTRY = "https://registry.npmjs.org/"
PACKAGE_KEYS = frozenset({"name", "version", "private", "description", "dependencies"})  # nothing npm acts on
_EXACT = re.compile(r"\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?")
_INSTALL_TIMEOUT_S = 900


def _object(text: str, what: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{what} is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{what} is not a JSON object")
    return doc


def _entry(key: str, entry: Any) -> None:
    """One installed package of the lock: from the npm registry, exact, with a sha512 integrity."""
    if not key.startswith("node_modules/") or not isinstance(entry, dict):
        raise ValueError(f"entry {shown(key)[:100]!r} is not a registry package")
    if entry.get("link") or entry.get("inBundle"):
        raise ValueError(f"{shown(key)[:100]}: a link or bundled package (not fetched, not hashed)")
    version, resolved, integrity = entry.get("version"), entry.get("resolved"), entry.get("integrity")
    if not isinstance(version, str) or not _EXACT.fullmatch(version):
        raise ValueError(f"{shown(key)[:100]}: version {shown(repr(version))[:60]} is not exact")
    tarball = isinstance(resolved, str) and resolved.startswith(NPM_REGISTRY) and resolved.endswith(f"-{version}.tgz")
    if not tarball:
        raise ValueError(f"{shown(key)[:100]}: resolved {shown(repr(resolved))[:120]} is not a {NPM_REGISTRY} tarball")
    if not isinstance(integrity, str) or not integrity.startswith("sha512-"):
        raise ValueError(f"{shown(key)[:100]}: no sha512 integrity (npm ci could not check the tarball)")


def check_npm_lock(lock_text: str, package_text: str) -> None:
    """Raise ValueError (one line) unless the lock is exact and hashed throughout and package.json agrees with it."""
    lock = _object(lock_text, NPM_LOCK)
    if lock.get("lockfileVersion") != 3:
        raise ValueError(f"lockfileVersion {shown(repr(lock.get('lockfileVersion')))[:20]} is not 3")
    packages = lock.get("packages")
    if not isinstance(packages, dict) or not isinstance(packages.get(""), dict):
        raise ValueError("no packages with a root entry")
    package = _object(package_text, NPM_PACKAGE)
    extra = sorted(set(package) - PACKAGE_KEYS)
    if extra:
        raise ValueError(f"{NPM_PACKAGE} has {shown(extra[0])[:60]!r}: only {', '.join(sorted(PACKAGE_KEYS))} allowed")
    deps = package.get("dependencies")
    if not isinstance(deps, dict) or not deps:
        raise ValueError(f"{NPM_PACKAGE} names no dependencies")
    for name, spec in deps.items():
        if not isinstance(spec, str) or not _EXACT.fullmatch(spec):
            raise ValueError(f"{NPM_PACKAGE}: {shown(name)[:60]} {shown(repr(spec))[:60]} is not an exact version")
    root = packages[""]
    if root.get("dependencies") != deps or set(root) - {"name", "version", "dependencies"}:
        raise ValueError(f"the lock's root entry does not match {NPM_PACKAGE}'s dependencies")
    for key, entry in packages.items():
        if key:
            _entry(key, entry)
    for name, spec in deps.items():
        top = packages.get(f"node_modules/{name}")
        if not isinstance(top, dict) or top.get("version") != spec:
            raise ValueError(f"{shown(name)[:60]} {spec} is not the version the lock installs")


def find_node() -> tuple[str, str] | None:
    """(node, npm) on PATH, or None without either."""
    node, npm = shutil.which("node"), shutil.which("npm")
    return (node, npm) if node and npm else None


def _node_major(node: str) -> str:
    r = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30)
    return r.stdout.strip().split(".", 1)[0] if r.returncode == 0 else "?"


def _root(name: str, lock_dir: Path, node: str) -> Path:
    h = hashlib.sha256()
    for file in (NPM_LOCK, NPM_PACKAGE):
        h.update(hashlib.sha256((lock_dir / file).read_bytes()).digest())
    h.update(_node_major(node).encode())
    return harness_home() / "tools" / f"{name}-{h.hexdigest()[:16]}"


def _finished(root: Path) -> bool:
    return (root / MARKER_NAME).is_file() and (root / "node_modules").is_dir() and not root.is_symlink()


def installed_npm_env(name: str, lock_dir: Path) -> Path | None:
    """The node_modules of the finished environment for the (verified) lock directory, or None: nothing is built."""
    found = find_node()
    if found is None:
        return None
    root = _root(name, lock_dir, found[0])
    return root / "node_modules" if _finished(root) else None


def _npm_env() -> dict[str, str]:
    """The environment npm runs with: no npm_config_* of the user's (the command line says what matters)."""
    env = {k: v for k, v in os.environ.items() if not k.lower().startswith("npm_config_")}
    env.update({"npm_config_update_notifier": "false", "NO_UPDATE_NOTIFIER": "1", "DO_NOT_TRACK": "1"})
    return env


def _npm_error(stderr: str) -> str:
    """npm's own error lines (`npm error code EINTEGRITY`, then what it says), without the log's whereabouts."""
    lines = [ln.split(" ", 2)[-1] for ln in stderr.splitlines() if ln.startswith(("npm error ", "npm ERR! "))]
    said = " / ".join(ln for ln in lines if not ln.startswith("A complete log"))[:300]
    return shown(said or (stderr.strip().splitlines() or ["(nothing on stderr)"])[-1])[:300]


def npm_env(name: str, lock_dir: Path) -> Path:
    """The node_modules of the environment for the (verified) lock directory under $HARNESS_HOME/tools/: `npm ci`
    in a temporary directory beside it, renamed into place when complete; reused by its marker afterwards."""
    found = find_node()
    if found is None:
        raise InstallError(f"{name}: node and npm are needed (Node 18 or later on PATH)")
    node, npm = found
    root = _root(name, lock_dir, node)
    if _finished(root):
        return root / "node_modules"
    if root.is_symlink() or (root.exists() and not root.is_dir()):
        raise InstallError(f"{root}: not a directory the harness made; refusing to replace it")
    root.parent.mkdir(parents=True, exist_ok=True)
    cache = harness_home() / "npm-cache"
    cache.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
    try:
        for file in (NPM_PACKAGE, NPM_LOCK):
            shutil.copyfile(lock_dir / file, build / file)
        cmd = [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", f"--registry={NPM_REGISTRY}",
               f"--cache={cache}", "--loglevel=error"]  # fmt: skip
        t0 = time.monotonic()
        try:
            r = subprocess.run(cmd, cwd=build, env=_npm_env(), capture_output=True, text=True, errors="replace",
                               timeout=_INSTALL_TIMEOUT_S)  # fmt: skip
        except subprocess.TimeoutExpired:
            raise InstallError(f"{name}: npm ci took over {_INSTALL_TIMEOUT_S} s") from None
        if r.returncode != 0:
            raise InstallError(f"{name}: npm ci --ignore-scripts ({lock_dir.name}) failed: {_npm_error(r.stderr)}")
        marker = {"name": name, "lock": lock_dir.name, "install_seconds": round(time.monotonic() - t0, 1)}
        atomic_write_text(build / MARKER_NAME, json.dumps(marker) + "\n")
        if root.exists():
            shutil.rmtree(root)  # one without its marker: made again (a finished one was returned above)
        try:
            build.rename(root)
        except OSError as exc:
            if not _finished(root):  # another build finished first: theirs is as good as ours
                raise InstallError(f"{name}: cannot move the finished install to {root}: {exc.strerror}") from None
    finally:
        if build.exists():
            shutil.rmtree(build, ignore_errors=True)
    return root / "node_modules"
