"""Start a Docker daemon and a local registry on 127.0.0.1 for the tests and CI (the harness itself never starts one:
it only finds one, harness.dockerd).

- ensure_daemon(): if nothing answers, start `dockerd --storage-driver=vfs` in the background (its own session, log in
  $HARNESS_HOME/dockerd.log) and wait up to ~30 s for it. The daemon is left running.
- ensure_registry(root_dir) -> "127.0.0.1:PORT": Debian's `docker-registry serve CONFIG`, listening on 127.0.0.1 only,
  storage under root_dir. stop_registry(root_dir) stops the one started for that root_dir.

The daemon talks plain HTTP to a registry on 127.0.0.1 without any insecure-registry setting, so
tag/push/rmi/pull gives an image a real RepoDigest.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from harness.client import make_sync_client, wire_errors
from harness.dockerd import DEFAULT_SOCKET, START_HINT, docker_client, docker_host
from harness.errors import DockerUnavailable, WireError
from harness.procs import pid_alive, terminate
from harness.settings import harness_home

__all__ = ["ping", "ensure_daemon", "ensure_registry", "stop_registry", "free_loopback_port"]


def ping() -> bool:
    try:
        docker_client(timeout=5).close()
        return True
    except DockerUnavailable:
        return False


def ensure_daemon(timeout: float = 30.0, log_path: str | Path | None = None) -> Any:
    """Return a client for a running daemon, starting `dockerd --storage-driver=vfs` if none answers.

    Raises DockerUnavailable when dockerd is not installed, we are not root, or it does not answer within `timeout`
    seconds (the message names the log file).
    """
    if ping():
        return docker_client()
    host = docker_host()
    if host != DEFAULT_SOCKET:
        raise DockerUnavailable(f"no Docker daemon answers at {host} (DOCKER_HOST is set; not starting one there)")
    dockerd = shutil.which("dockerd") or ("/usr/sbin/dockerd" if Path("/usr/sbin/dockerd").exists() else None)
    if dockerd is None:
        raise DockerUnavailable(
            f"no Docker daemon answers at {host} and dockerd is not installed; run .ci/docker-setup.sh"
        )
    if os.geteuid() != 0:
        raise DockerUnavailable(f"no Docker daemon answers at {host}; starting dockerd needs root; {START_HINT}")
    log = Path(log_path) if log_path else harness_home() / "dockerd.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        subprocess.Popen(
            [dockerd, "--storage-driver=vfs"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # survives us: the daemon is shared machine state
            close_fds=True,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ping():
            return docker_client()
        time.sleep(0.5)
    raise DockerUnavailable(f"started dockerd but it did not answer at {host} within {timeout:.0f} s; see {log}")


def free_loopback_port() -> int:
    """A port that is free on 127.0.0.1 right now (bind to port 0 and let the kernel choose)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _registry_answers(addr: str, timeout: float = 1.0) -> bool:
    base = f"http://{addr}"
    try:
        with make_sync_client(base, timeout=timeout) as http, wire_errors(base):
            return http.get("/v2/").status_code in (200, 401)
    except WireError:
        return False


def ensure_registry(root_dir: str | Path, port: int | None = None, timeout: float = 20.0) -> str:
    """Start (or reuse) a `docker-registry` on 127.0.0.1 storing under root_dir; return "127.0.0.1:PORT".

    Port 5000 if free, else a free one (or the given one). The pid and address are kept in root_dir so a second call
    reuses the running registry and stop_registry(root_dir) can stop it.
    """
    root = Path(root_dir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    pidfile, addrfile = root / "registry.pid", root / "registry.addr"
    if pidfile.exists() and addrfile.exists():
        try:
            pid, addr = int(pidfile.read_text().strip()), addrfile.read_text().strip()
            if pid_alive(pid) and _registry_answers(addr):
                return addr
        except ValueError:
            pass
    binary = shutil.which("docker-registry") or (
        "/usr/bin/docker-registry" if Path("/usr/bin/docker-registry").exists() else None
    )
    if binary is None:
        raise DockerUnavailable(
            "docker-registry is not installed (Debian package docker-registry); run .ci/docker-setup.sh"
        )
    if port is None:
        port = 5000 if _port_free(5000) else free_loopback_port()
    addr = f"127.0.0.1:{port}"
    storage = root / "storage"
    storage.mkdir(exist_ok=True)
    config = root / "config.yml"
    config.write_text(
        "version: 0.1\n"
        "log:\n  level: warn\n"
        "storage:\n"
        f"  filesystem:\n    rootdirectory: {storage}\n"
        "  delete:\n    enabled: true\n"
        "http:\n"
        f"  addr: {addr}\n"
    )
    log = open(root / "registry.log", "ab")
    proc = subprocess.Popen(
        [binary, "serve", str(config)],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        close_fds=True,
    )
    log.close()
    pidfile.write_text(f"{proc.pid}\n")
    addrfile.write_text(addr + "\n")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = (root / "registry.log").read_text(errors="replace")[-400:].strip().replace("\n", " | ")
            raise DockerUnavailable(f"docker-registry exited with {proc.returncode}: {tail}")
        if _registry_answers(addr):
            return addr
        time.sleep(0.2)
    stop_registry(root)
    raise DockerUnavailable(
        f"docker-registry did not answer at {addr} within {timeout:.0f} s; see {root / 'registry.log'}"
    )


def stop_registry(root_dir: str | Path, timeout: float = 10.0) -> None:
    """Stop the registry that ensure_registry(root_dir) started (by its recorded pid); idempotent."""
    root = Path(root_dir).resolve()
    pidfile = root / "registry.pid"
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        cmdline = b""
    if b"docker-registry" in cmdline:  # never signal a recycled pid
        terminate(pid, timeout)
        try:  # we started it: reap it if it is our child (no-op otherwise)
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
    pidfile.unlink(missing_ok=True)
    (root / "registry.addr").unlink(missing_ok=True)
