"""A guard for the whole test session: any connect() to an address outside loopback fails the test at once, before
a packet leaves. Refusal tests use it to show the harness refused on the parsed address (no socket was needed)."""

from __future__ import annotations

import ipaddress
import socket

ATTEMPTS: list[object] = []
_original_connect = socket.socket.connect
_original_connect_ex = socket.socket.connect_ex


class RemoteConnectAttempt(AssertionError):
    pass


def _check(sock: socket.socket, address: object) -> None:
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    host = address[0] if isinstance(address, tuple) else address
    try:
        if ipaddress.ip_address(str(host).split("%")[0]).is_loopback:
            return
    except ValueError:
        pass
    ATTEMPTS.append(address)
    raise RemoteConnectAttempt(f"a test tried to connect to {address!r}: only loopback is allowed")


def _connect(self, address):
    _check(self, address)
    return _original_connect(self, address)


def _connect_ex(self, address):
    _check(self, address)
    return _original_connect_ex(self, address)


def install() -> None:
    socket.socket.connect = _connect  # type: ignore[method-assign]
    socket.socket.connect_ex = _connect_ex  # type: ignore[method-assign]
