"""Engine environments: a virtual environment per lock file, installed hash-checked (`--require-hashes --no-deps`),
cached and verified.

Layout: $HARNESS_HOME/envs/<kind>-<version>-<key>/ where key = sha256(lock sha256, python version)[:16].
An environment is complete only when its marker `harness-env.json` exists (written last); an incomplete one is wiped
and rebuilt. An existing one is *verified* (every locked distribution installed at its pinned version), not reinstalled.

The installer is `uv pip install --require-hashes --no-deps` with one shared cache, $HARNESS_HOME/uv-cache, linked
into each environment by hardlinks (UV_LINK_MODE=hardlink), so a wheel shared by many environments is on disk once.
uv ignores pip's configuration; the find-links directories pip is configured with are passed to it explicitly. Where
uv is not installed, pip is the fallback; the marker's `installer` says which one built the environment.
`list_envs()` and `gc_envs(keep)` keep the disk bounded; an environment a running engine uses is never deleted, and
nothing under $HARNESS_HOME/envs but the names the harness makes (`<kind>-<version>-<key>` and its `.lock`) is touched.
A lock file is opened without following a symlink and never truncated; `gc --dry-run` creates nothing.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.engines import PROFILES, EnvAddition
from harness.errors import HarnessError, InstallError
from harness.lockedenv import find_uv, uv_environment
from harness.manifest import LOCK_MAX_BYTES, Manifest, env_dir_name, load_manifest, parse_lock_text
from harness.outputs import atomic_write_text
from harness.readers import read_bytes, read_json, read_text
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
    "is_env_name",
    "read_marker",
]

MARKER = "harness-env.json"
MARKER_MAX_BYTES = 1 << 20  # a marker is a few hundred bytes
MARKER_MAX_DEPTH = 16  # the harness writes a flat object
PLUGIN_PROBLEM = "harness addition"  # how verify_env names a stale or missing addition of the harness's own
NOT_OURS = "not the harness's, left alone"
_KEY = re.compile(r"[0-9a-f]{16}")


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
    path = harness_home() / "envs" / env_dir_name(manifest.engine.kind, manifest.engine.version, lh, rt.version)
    return EngineEnv(path=path, lock=lock, lock_hash=lh, python_version=rt.version)


def is_env_name(name: str) -> bool:
    """Whether `name` is one env_for makes: `<kind>-<version>-<key>`, a known kind, its version pattern, 16 hex."""
    head, _, key = name.rpartition("-")
    kind, _, version = head.partition("-")
    profile = PROFILES.get(kind)
    return (
        profile is not None
        and _KEY.fullmatch(key) is not None
        and re.fullmatch(profile.version_pattern, version) is not None
    )


def read_marker(env_path: Path) -> tuple[dict | None, str | None]:
    """(marker, None), (None, None) when there is no marker, or (None, problem) when it cannot be read: read bounded
    in size and depth, so a hostile marker is one line of problem, never a RecursionError."""
    path = env_path / MARKER
    if not os.path.lexists(path):
        return None, None
    try:
        marker = read_json(path, MARKER, max_bytes=MARKER_MAX_BYTES, max_depth=MARKER_MAX_DEPTH)
    except HarnessError as exc:
        return None, exc.one_line().removeprefix(f"{path}: ")
    if not isinstance(marker, dict):
        return None, f"{MARKER} is not a JSON object"
    return marker, None


_LOCK_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # no O_TRUNC: nothing to clear
_PROBE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def _lock_path(env_path: Path) -> Path:
    return env_path.parent / f"{env_path.name}.lock"


def _open_lock(path: Path, flags: int = _LOCK_FLAGS) -> int | None:
    """A descriptor of lock file `path` (None: absent and not to be created). A symlink or anything but a regular file
    is refused, so taking a lock can never create, truncate or block on a file elsewhere."""
    try:
        fd = os.open(path, flags, 0o644)
    except FileNotFoundError:
        if flags & os.O_CREAT:
            raise InstallError(f"{path}: cannot create the lock file (its directory is gone)") from None
        return None
    except OSError as exc:
        why = "is a symlink" if exc.errno == errno.ELOOP else f"cannot be opened ({exc.strerror})"
        raise InstallError(f"{path}: lock file {why}; refusing to use it") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InstallError(f"{path}: lock file is not a regular file; refusing to use it")
    return fd


@contextlib.contextmanager
def _env_lock(env_path: Path, *, wait: bool, create: bool = True) -> Iterator[bool]:
    """Hold the environment's lock (True), or yield False when another process holds it and `wait` is off. Without
    `create` nothing is made: an absent lock file is one nobody holds (ensure_env creates it before taking it)."""
    fd = _open_lock(_lock_path(env_path), _LOCK_FLAGS if create else _PROBE_FLAGS)
    if fd is None:
        yield True
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


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
    marker, problem = read_marker(env.path)
    if problem is not None:
        return [f"marker unreadable: {problem}"]
    if marker is None:
        return ["installation incomplete (no marker)"]
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
    marker, _problem = read_marker(env.path)
    if marker is None:
        return
    marker.update(fields)
    atomic_write_text(env.marker, json.dumps(marker, indent=2) + "\n")  # replaces the file, never writes through it


def _say(msg: str, quiet: bool) -> None:
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


def ensure_env(manifest: Manifest, *, quiet: bool = False) -> EngineEnv:
    """Verify the cached environment for this manifest's lock, or build it. Safe against concurrent callers."""
    env = env_for(manifest)
    env.path.parent.mkdir(parents=True, exist_ok=True)
    with _env_lock(env.path, wait=True):
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
    atomic_write_text(env.marker, json.dumps(marker, indent=2) + "\n")
    _say(f"engine env: installed in {marker['install_seconds']} s with {installer}", quiet)


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


_PROC = Path("/proc")
_CMDLINE_MAX_BYTES = 64 << 10  # argv[0] is at the start
_MAPS_MAX_BYTES = 16 << 20  # an engine with torch loaded maps a few thousand files, well under this


def _read_proc(path: Path, limit: int) -> bytes:
    with open(path, "rb") as f:
        return f.read(limit)


def _process_paths(pid_dir: Path, needle: bytes) -> list[str]:
    """Where one process runs from: its executable, its working directory, argv[0] (relative to that directory when
    relative: a venv's python is a symlink to the base interpreter, so only argv[0] names the venv unless the process
    retitled itself, as vLLM's `VLLM::EngineCore` does) and every mapped file whose path holds `needle` (a venv's
    site-packages). What cannot be read (a process gone, or another user's) contributes nothing."""
    paths: list[str] = []
    try:
        cwd = os.readlink(pid_dir / "cwd")
        paths.append(cwd)
    except OSError:
        cwd = ""
    with contextlib.suppress(OSError):
        paths.append(os.readlink(pid_dir / "exe"))
    with contextlib.suppress(OSError):
        argv0 = os.fsdecode(_read_proc(pid_dir / "cmdline", _CMDLINE_MAX_BYTES).split(b"\0", 1)[0])
        if argv0:
            paths.append(os.path.join(cwd, argv0) if cwd else argv0)
    with contextlib.suppress(OSError):
        for line in _read_proc(pid_dir / "maps", _MAPS_MAX_BYTES).splitlines():
            fields = line.split(maxsplit=5) if needle in line else []
            if len(fields) == 6:
                paths.append(os.fsdecode(fields[5]))
    return paths


def _env_of(path: str, roots: tuple[Path, ...], root: Path) -> Path | None:
    """The environment directory (root/<name>) that `path` lies in, or None."""
    p = Path(os.path.normpath(path.removesuffix(" (deleted)")))  # a mapped file deleted since is still in use
    for r in roots:
        try:
            rel = p.relative_to(r)
        except ValueError:
            continue
        return root / rel.parts[0] if rel.parts else None
    return None


def _registry_envs() -> set[Path]:
    """The environments the live engines of the run registry (harness/launch/registry.py) were started from: their
    manifest names the environment, whatever the process looks like now."""
    from harness.launch import registry

    used: set[Path] = set()
    for entry in registry.entries():
        manifest = entry.get("manifest")
        if entry.get("kind") != "subprocess" or not isinstance(manifest, str) or not registry.alive(entry):
            continue
        try:
            used.add(env_for(load_manifest(manifest, require_digest=False)).path.resolve())
        except (HarnessError, OSError):
            continue  # not a python runtime, or the manifest is no longer readable: the /proc walk still sees it
    return used


def envs_in_use() -> set[Path]:
    """Environments a live process runs from: any process on this machine whose executable, working directory,
    argv[0] or a mapped file lies in an environment (an engine started by an older harness, a process outside the
    registry, one that rewrote its argv[0]), and every environment a live engine of the run registry was started
    from."""
    raw = Path(os.path.normpath(harness_home().absolute() / "envs"))
    root = raw.resolve()
    roots = (root, raw) if raw != root else (root,)  # argv[0] may name the unresolved path
    needle = os.fsencode(f"{root}{os.sep}")
    used = _registry_envs()
    try:
        pid_dirs = [p for p in _PROC.iterdir() if p.name.isdigit()]
    except OSError:
        pid_dirs = []
    for pid_dir in pid_dirs:
        for path in _process_paths(pid_dir, needle):
            env = _env_of(path, roots, root)
            if env is not None:
                used.add(env)
    return used


def _mtime(path: Path) -> float:
    try:
        return path.lstat().st_mtime  # set by touch_env on every verified use (atime is unreliable under relatime)
    except OSError:
        return 0.0


def _field(marker: dict | None, key: str) -> str | None:
    """A marker field as short text (a hostile marker may hold anything there); None when absent."""
    value = None if marker is None else marker.get(key)
    if value is None:
        return None
    return (value if isinstance(value, str) else json.dumps(value))[:200]


def _is_env_lock(path: Path) -> bool:
    name = path.name
    return name.endswith(".lock") and is_env_name(name.removesuffix(".lock")) and not path.is_symlink()


def _not_ours(path: Path) -> str | None:
    """Why an entry of the envs directory is not an environment the harness made, or None if it is one."""
    if _is_env_lock(path):
        return None if path.is_file() else "a lock file's name, but not a regular file"
    if path.name.endswith(".lock") and is_env_name(path.name.removesuffix(".lock")):
        return "a lock file's name, but a symlink"
    if not is_env_name(path.name):
        return "not a name the harness gives an environment"
    if path.is_symlink() or not path.is_dir():
        return "not a directory"
    return None


def _foreign_entry(path: Path, why: str) -> dict:
    return {
        "name": path.name,
        "path": str(path),
        "harness": False,
        "complete": False,
        "marker_problem": None,
        "lock_sha256": None,
        "installer": None,
        "installed_at": None,
        "last_used": _mtime(path),
        "bytes": None,
        "in_use": False,
        "note": f"{NOT_OURS} ({why})",
    }


def _env_entry(d: Path, used: set[Path], sizes: bool) -> dict:
    marker, problem = read_marker(d)
    return {
        "name": d.name,
        "path": str(d),
        "harness": True,
        "complete": bool(marker),
        "marker_problem": problem,
        "lock_sha256": _field(marker, "lock_sha256"),
        "installer": _field(marker, "installer") if not marker or "installer" in marker else "pip",
        "installed_at": _field(marker, "installed_at"),
        "last_used": _mtime(d),
        "bytes": _du(d) if sizes else None,
        "in_use": d.resolve() in used,
        "note": f"marker unreadable: {problem}; in doubt, left alone" if problem else None,
    }


def list_envs(*, sizes: bool = True) -> list[dict]:
    """Every entry of $HARNESS_HOME/envs but the environments' lock files, newest use first: name, path, harness
    (named as env_for names an environment, and a directory), complete (marker), marker_problem, lock hash,
    installer, installed_at, last used (directory mtime), size, in_use, note (why gc leaves it alone: not the
    harness's, or its marker unreadable)."""
    root = harness_home() / "envs"
    if not root.is_dir():
        return []
    used = envs_in_use()
    out = []
    for path in sorted(root.iterdir()):
        why = _not_ours(path)
        if why is not None:
            out.append(_foreign_entry(path, why))
        elif not _is_env_lock(path):
            out.append(_env_entry(path, used, sizes))
    out.sort(key=lambda e: e["last_used"], reverse=True)
    return out


def touch_env(env: EngineEnv) -> None:
    """Mark an environment as just used (gc keeps the most recently used ones)."""
    try:
        os.utime(env.path)
    except OSError:
        pass


def _collect(e: dict, dry_run: bool) -> dict | None:
    """Delete one environment under its lock (with dry_run: only find that it could be). None when deleted, else what
    its kept entry says. A dry run opens an existing lock read-only and creates nothing."""
    path = Path(e["path"])
    try:
        with _env_lock(path, wait=False, create=not dry_run) as held:
            if not held:
                return {"note": "being built or verified by another harness process"}
            if path.resolve() in envs_in_use():
                return {"in_use": True}
            if not dry_run:
                shutil.rmtree(path)
    except InstallError as exc:
        return {"note": exc.one_line()}
    except OSError as exc:
        return {"note": f"cannot delete it: {exc.strerror}"}
    return None


def gc_envs(keep: int, *, dry_run: bool = False) -> tuple[list[dict], list[dict]]:
    """Delete all but the `keep` most recently used environments (incomplete ones first); never one in use, never
    one whose marker cannot be read (in doubt), never anything not named as the harness names environments, and
    never while another harness process builds it (its .lock is taken here first). Returns (deleted, or with dry_run
    would be deleted; kept, with a note where the reason is not `keep` or in use)."""
    if keep < 0:
        raise InstallError(f"--keep must be 0 or more, got {keep}")
    envs = list_envs(sizes=True)
    left_alone = [e for e in envs if e["note"]]
    ours = [e for e in envs if not e["note"]]
    complete = [e for e in ours if e["complete"]]
    keep_names = {e["name"] for e in complete[:keep]}
    deleted: list[dict] = []
    kept: list[dict] = list(left_alone)
    for e in [e for e in ours if not e["complete"]] + complete:
        if e["name"] in keep_names or e["in_use"]:
            kept.append(e)
            continue
        why_kept = _collect(e, dry_run)
        if why_kept is None:
            deleted.append(e)
        else:
            kept.append({**e, **why_kept})
    return deleted, kept
