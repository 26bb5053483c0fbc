"""Engine environments: a virtual environment per lock file, installed hash-checked (`--require-hashes --no-deps`),
cached and verified.

Layout: $HARNESS_HOME/envs/<kind>-<version>-<key>/ where key = sha256(lock sha256, python version)[:16].
An environment is complete only when its marker `harness-env.json` exists (written last); an incomplete one is wiped
and rebuilt. An existing one is *verified* (every locked distribution installed at its pinned version), not reinstalled.

The installer is `uv pip install --require-hashes --no-deps` with one shared cache, $HARNESS_HOME/uv-cache, linked
into each environment by hardlinks (UV_LINK_MODE=hardlink), so a wheel shared by many environments is on disk once.
uv ignores pip's configuration; the find-links directories pip is configured with are passed to it explicitly. Where
uv is not installed, pip is the fallback; the marker's `installer` says which one built the environment.
`list_envs()` and `gc_envs(keep)` keep the disk bounded; an environment a running engine uses is never deleted.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
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

__all__ = [
    "EngineEnv",
    "env_for",
    "ensure_env",
    "verify_env",
    "parse_lock",
    "lock_sha256",
    "find_uv",
    "pip_find_links",
    "uv_environment",
    "list_envs",
    "envs_in_use",
    "gc_envs",
]

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
    if addition is not None:  # asked for by this manifest, whatever the manifest that built the env asked for
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


def _drop_addition(env: EngineEnv, manifest: Manifest) -> None:
    """Remove the profile's addition from an environment whose manifest does not ask for it."""
    addition = manifest.profile.env_addition if manifest.runtime.python is not None else None
    if addition is None or _addition_version_installed(env, addition) is None:
        return
    sp = _site_packages(env)
    for rel in addition.files:
        (sp / rel).unlink(missing_ok=True)
    for old in sp.glob(f"{addition.name}*.dist-info"):
        shutil.rmtree(old, ignore_errors=True)
    _set_marker(env, platform_plugin=False)


def _set_marker(env: EngineEnv, **fields: object) -> None:
    try:
        marker = json.loads(env.marker.read_text())
    except (OSError, ValueError):
        return
    marker.update(fields)
    env.marker.write_text(json.dumps(marker, indent=2) + "\n")


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
                _set_marker(env, platform_plugin=True)
                problems = verify_env(env, addition)
            if not problems and addition is None:
                _drop_addition(env, manifest)  # one env (one lock) serves manifests with and without the addition
            if not problems:
                touch_env(env)
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
    uv = find_uv()
    t0 = time.monotonic()
    if uv is not None:
        _install_uv(uv, env, quiet)
        installer = f"uv {_tool_version([uv, '--version'])}"
    else:
        _install_pip(env, pins, quiet)
        installer = "pip (uv not installed)"
    addition = _addition(env, manifest)
    if addition is not None:
        _add_addition(env, addition)
    marker = {
        "lock": str(env.lock),
        "lock_sha256": env.lock_hash,
        "python": env.python_version,
        "platform_plugin": manifest.runtime.python.platform_plugin,
        "packages": len(pins),
        "installer": installer,
        "install_seconds": round(time.monotonic() - t0, 1),
        "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (env.marker).write_text(json.dumps(marker, indent=2) + "\n")
    _say(f"engine env: installed in {marker['install_seconds']} s with {installer}", quiet)


def find_uv() -> str | None:
    """The uv binary: the one the `uv` distribution ships beside this Python, else `uv` on PATH; None without it."""
    beside = Path(sys.executable).parent / "uv"
    if beside.is_file():
        return str(beside)
    return shutil.which("uv")


def _tool_version(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return out[1] if len(out) > 1 else "?"


def pip_find_links() -> list[str]:
    """The find-links directories pip is configured with here (config files and PIP_FIND_LINKS), in order: uv ignores
    pip's configuration, so a lock pinning a wheel that lies only there (a local torch build) needs them passed on."""
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    found: list[str] = []
    for line in out.splitlines():
        key, _, value = line.partition("=")
        if key.rsplit(".", 1)[-1] != "find-links":
            continue
        for item in value.strip().strip("'\"").split():
            if item not in found:
                found.append(item)
    return found


def uv_environment() -> dict[str, str]:
    """The environment uv runs with: the shared cache under $HARNESS_HOME, linked by hardlinks, no pip config, and no
    uv config either (UV_NO_CONFIG: a uv.toml beside the lock or above it, a pyproject's [tool.uv] or the user's uv
    config would otherwise choose the index the lock is resolved or installed from)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_"))}
    env["UV_NO_CONFIG"] = "1"
    env["UV_CACHE_DIR"] = str(harness_home() / "uv-cache")
    env["UV_LINK_MODE"] = "hardlink"
    env["UV_NO_PROGRESS"] = "1"
    return env


def _install_uv(uv: str, env: EngineEnv, quiet: bool) -> None:
    cmd = [
        uv,
        "pip",
        "install",
        "--no-config",
        "--python",
        str(env.python),
        "--require-hashes",
        "--no-deps",
        "-r",
        str(env.lock),
    ]
    for fl in pip_find_links():
        cmd += ["--find-links", fl]
    (harness_home() / "uv-cache").mkdir(parents=True, exist_ok=True)
    _say("  installing with uv (shared cache, hardlinks)...", quiet)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=uv_environment())
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    if proc.returncode != 0:
        raise InstallError(f"uv pip install --require-hashes failed for {env.lock}:\n" + "\n".join(lines[-30:]))
    for line in lines[-3:]:
        _say(f"  {line.strip()}", quiet)


def _install_pip(env: EngineEnv, pins: dict[str, str], quiet: bool) -> None:
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


def _du(path: Path) -> int:
    """Bytes under path, each inode once (hardlinked wheels shared between environments are counted where first seen)."""
    total = 0
    seen: set[tuple[int, int]] = set()
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                st = os.lstat(os.path.join(root, f))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
    return total


def envs_in_use() -> set[Path]:
    """Environments a live process runs from: every engine in the run registry (harness/launch/registry.py) whose
    process is alive, and any process on this machine whose executable lies in an environment (an engine started by
    an older harness, a process outside the registry), read from its argv[0] (a venv's python is a symlink, so the
    executable itself would name the base interpreter)."""
    from harness.launch import registry

    root = (harness_home() / "envs").resolve()
    pids: list[int] = [e["pid"] for e in registry.entries() if e.get("kind") == "subprocess" and registry.alive(e)]
    proc = Path("/proc")
    pids += [int(p.name) for p in proc.iterdir() if p.name.isdigit()] if proc.is_dir() else []
    used: set[Path] = set()
    for pid in pids:
        try:
            argv0 = (proc / str(pid) / "cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
        except OSError:
            continue
        p = Path(argv0)
        if not p.is_absolute():
            continue
        try:
            rel = Path(os.path.normpath(p)).relative_to(root)
        except ValueError:
            continue
        if rel.parts:
            used.add(root / rel.parts[0])
    return used


def list_envs(*, sizes: bool = True) -> list[dict]:
    """Every environment directory under $HARNESS_HOME/envs, newest use first: name, path, complete (marker), lock
    hash, installer, installed_at, last used (directory mtime or the marker's), size, in_use."""
    root = harness_home() / "envs"
    if not root.is_dir():
        return []
    used = envs_in_use()
    out = []
    for d in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()):
        marker: dict = {}
        if (d / MARKER).is_file():
            try:
                marker = json.loads((d / MARKER).read_text())
            except (OSError, ValueError):
                marker = {}
        try:
            last = d.stat().st_mtime  # set by touch_env on every verified use (atime is unreliable under relatime)
        except OSError:
            last = 0
        out.append(
            {
                "name": d.name,
                "path": str(d),
                "complete": bool(marker),
                "lock_sha256": marker.get("lock_sha256"),
                "installer": marker.get("installer", "pip" if marker else None),
                "installed_at": marker.get("installed_at"),
                "last_used": last,
                "bytes": _du(d) if sizes else None,
                "in_use": d.resolve() in used,
            }
        )
    out.sort(key=lambda e: e["last_used"], reverse=True)
    return out


def touch_env(env: EngineEnv) -> None:
    """Mark an environment as just used (gc keeps the most recently used ones)."""
    try:
        os.utime(env.path)
    except OSError:
        pass


def gc_envs(keep: int, *, dry_run: bool = False) -> tuple[list[dict], list[dict]]:
    """Delete all but the `keep` most recently used environments (incomplete ones first); never one in use, and
    never while another harness process builds it (its .lock is taken here first). Returns (deleted, kept)."""
    if keep < 0:
        raise InstallError(f"--keep must be 0 or more, got {keep}")
    envs = list_envs(sizes=True)
    complete = [e for e in envs if e["complete"]]
    incomplete = [e for e in envs if not e["complete"]]
    keep_names = {e["name"] for e in complete[:keep]}
    deleted, kept = [], []
    for e in incomplete + complete:
        if e["name"] in keep_names or e["in_use"]:
            kept.append(e)
            continue
        path = Path(e["path"])
        with open(path.parent / f"{path.name}.lock", "w") as guard:
            try:
                fcntl.flock(guard, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                kept.append({**e, "note": "being built or verified by another harness process"})
                continue
            if path.resolve() in envs_in_use():
                kept.append(e)
                continue
            if not dry_run:
                shutil.rmtree(path)
            deleted.append(e)
    return deleted, kept
