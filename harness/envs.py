"""Engine environments: a virtual environment per lock file, installed with `pip --require-hashes`, cached and verified.

Layout: $HARNESS_HOME/envs/<kind>-<version>-<key>/ where key = sha256(lock sha256, python version)[:16].
An environment is complete only when its marker `harness-env.json` exists (written last); an incomplete one is wiped
and rebuilt. An existing one is *verified* (every locked distribution installed at its pinned version), not reinstalled.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from harness.engines import EnvAddition
from harness.errors import InstallError
from harness.manifest import LOCK_MAX_BYTES, Manifest, parse_lock_text
from harness.readers import read_bytes, read_text
from harness.settings import harness_home

__all__ = ["EngineEnv", "env_for", "ensure_env", "verify_env", "parse_lock", "lock_sha256"]

MARKER = "harness-env.json"
PLUGIN_PROBLEM = "harness addition"  # how verify_env names a stale or missing addition of the harness's own


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_lock(lock: Path) -> dict[str, str]:
    """{normalized name: version} for every `name==version` pin; refuses a lock any line of which is not an exact,
    hashed pin (the same reading `harness validate` applies: harness.manifest.parse_lock_text)."""
    text = read_text(lock, "lock", max_bytes=LOCK_MAX_BYTES, error=InstallError)
    try:
        pins = parse_lock_text(text)
    except ValueError as exc:
        raise InstallError(f"{lock}: {exc}") from None
    return {_norm(name): version for name, version in pins.items()}


def lock_sha256(lock: Path) -> str:
    return hashlib.sha256(read_bytes(lock, "lock", max_bytes=LOCK_MAX_BYTES, error=InstallError)).hexdigest()


@dataclass(frozen=True)
class EngineEnv:
    path: Path
    lock: Path
    lock_hash: str
    python_version: str

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def marker(self) -> Path:
        return self.path / MARKER


def env_for(manifest: Manifest) -> EngineEnv:
    rt = manifest.runtime.python
    if rt is None:
        raise InstallError(f"{manifest.path}: runtime is not python; nothing to install")
    lock = manifest.lock_path
    lh = lock_sha256(lock)
    key = hashlib.sha256(f"{lh}\0{rt.version}".encode()).hexdigest()[:16]
    path = harness_home() / "envs" / f"{manifest.engine.kind}-{manifest.engine.version}-{key}"
    return EngineEnv(path=path, lock=lock, lock_hash=lh, python_version=rt.version)


def _installed(env: EngineEnv) -> dict[str, str]:
    code = (
        "import importlib.metadata as m, json;"
        "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
    )
    out = subprocess.run([str(env.python), "-c", code], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise InstallError(f"{env.path}: cannot list installed packages: {out.stderr.strip()[-300:]}")
    return {_norm(k): v for k, v in json.loads(out.stdout).items()}


def verify_env(env: EngineEnv, addition: EnvAddition | None = None) -> list[str]:
    """Problems found (empty = verified): marker, lock hash, and every pinned distribution at its version."""
    if not env.python.exists():
        return [f"{env.python} missing"]
    if not env.marker.is_file():
        return ["installation incomplete (no marker)"]
    marker = json.loads(env.marker.read_text())
    if marker.get("lock_sha256") != env.lock_hash:
        return [f"built from lock {marker.get('lock_sha256')}, manifest's lock is {env.lock_hash}"]
    installed = _installed(env)
    problems = [
        f"{name}: locked {ver}, installed {installed.get(name, 'nothing')}"
        for name, ver in parse_lock(env.lock).items()
        if installed.get(name) != ver and installed.get(name, "").split("+")[0] != ver.split("+")[0]
    ]
    if addition is not None and marker.get("platform_plugin"):
        installed_version = _addition_version_installed(env, addition)
        if installed_version != addition.version:
            problems.append(
                f"{PLUGIN_PROBLEM} {addition.name} is version {installed_version}, expected {addition.version}"
            )
    return problems


def _find_python(version: str) -> str:
    cand = shutil.which(f"python{version}")
    if cand:
        return cand
    if f"{sys.version_info.major}.{sys.version_info.minor}" == version:
        return sys.executable
    raise InstallError(f"Python {version} not found on PATH (needed for the engine environment)")


def _site_packages(env: EngineEnv) -> Path:
    return env.path / "lib" / f"python{env.python_version}" / "site-packages"


def _addition(env: EngineEnv, manifest: Manifest) -> EnvAddition | None:
    """The engine profile's own small distribution for this environment, when the manifest asks for it."""
    py = manifest.runtime.python
    return manifest.profile.env_addition if py is not None and py.platform_plugin else None


def _addition_version_installed(env: EngineEnv, addition: EnvAddition) -> str | None:
    meta = _site_packages(env) / f"{addition.name}.dist-info" / "METADATA"
    if not meta.is_file():
        return None
    m = re.search(r"^Version: (.+)$", meta.read_text(), re.M)
    return m.group(1).strip() if m else None


def _add_addition(env: EngineEnv, addition: EnvAddition) -> None:
    sp = _site_packages(env)
    for old in sp.glob(f"{addition.name}-*.dist-info"):
        shutil.rmtree(old)
    for rel, text in addition.files.items():
        target = sp / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


def _say(msg: str, quiet: bool) -> None:
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


def ensure_env(manifest: Manifest, *, quiet: bool = False) -> EngineEnv:
    """Verify the cached environment for this manifest's lock, or build it. Safe against concurrent callers."""
    env = env_for(manifest)
    env.path.parent.mkdir(parents=True, exist_ok=True)
    with open(env.path.parent / f"{env.path.name}.lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        addition = _addition(env, manifest)
        if env.marker.is_file():
            problems = verify_env(env, addition)
            if problems and addition is not None and all(p.startswith(PLUGIN_PROBLEM) for p in problems):
                _add_addition(env, addition)  # our own small addition: repaired in place, not a reason to reinstall
                problems = verify_env(env, addition)
            if not problems:
                _say(f"engine env: verified {env.path}", quiet)
                return env
            _say(f"engine env: {env.path} failed verification ({problems[0]}); rebuilding", quiet)
        _build(env, manifest, quiet)
        problems = verify_env(env, addition)
        if problems:
            raise InstallError(f"{env.path}: freshly built environment failed verification: {problems[0]}")
        return env


def _build(env: EngineEnv, manifest: Manifest, quiet: bool) -> None:
    if env.path.exists():
        shutil.rmtree(env.path)
    pins = parse_lock(env.lock)
    python = _find_python(env.python_version)
    _say(f"engine env: creating {env.path} (Python {env.python_version}, {len(pins)} locked packages)", quiet)
    subprocess.run([python, "-m", "venv", str(env.path)], check=True)
    cmd = [
        str(env.python),
        "-m",
        "pip",
        "install",
        "--require-hashes",
        "--no-deps",
        "--disable-pip-version-check",
        "-r",
        str(env.lock),
    ]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tail: list[str] = []
    done = 0
    for line in proc.stdout:  # type: ignore[union-attr]
        line = line.rstrip()
        if not line or line.startswith("WARNING: Location"):
            continue
        tail = (tail + [line])[-30:]
        if line.startswith(("Collecting", "Processing")):
            done += 1
            _say(f"  [{done}/{len(pins)}] {line}", quiet)
        elif line.startswith("Installing collected"):
            _say("  installing (unpacking wheels; this takes a few minutes)...", quiet)
    if proc.wait() != 0:
        raise InstallError(f"pip install --require-hashes failed for {env.lock}:\n" + "\n".join(tail))
    addition = _addition(env, manifest)
    if addition is not None:
        _add_addition(env, addition)
    marker = {
        "lock": str(env.lock),
        "lock_sha256": env.lock_hash,
        "python": env.python_version,
        "platform_plugin": manifest.runtime.python.platform_plugin,
        "packages": len(pins),
        "install_seconds": round(time.monotonic() - t0, 1),
        "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (env.marker).write_text(json.dumps(marker, indent=2) + "\n")
    _say(f"engine env: installed in {marker['install_seconds']} s", quiet)
