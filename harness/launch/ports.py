"""Loopback ports: pick a free one, or prove a pinned one is free, before anything starts."""

from __future__ import annotations

import errno
import socket

from harness.errors import RefusedError
from harness.manifest import is_loopback_host

__all__ = ["choose_port"]


def choose_port(host: str, port: int) -> int:
    if not is_loopback_host(host):
        raise RefusedError(f"refusing to bind {host!r}: engines bind loopback (127.0.0.0/8, ::1) only")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise RefusedError(f"port {port} on {host} is busy; free it or set server.port: 0") from None
            raise RefusedError(f"cannot bind {host}:{port}: {exc.strerror}") from None
        return s.getsockname()[1]
