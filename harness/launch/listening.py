"""Which TCP addresses a set of processes listens on, read from /proc (Linux). Used to prove, after start, that an
engine listens on loopback only, including its internal sockets (not just the HTTP port we asked for)."""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path

__all__ = ["listening_sockets", "non_loopback"]

_LISTEN = "0A"


def _socket_inodes(pids: set[int]) -> set[str]:
    inodes = set()
    for pid in pids:
        try:
            for fd in os.scandir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(fd.path)
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    return inodes


def _decode(hex_addr: str, family: int) -> str:
    raw = bytes.fromhex(hex_addr)
    if family == socket.AF_INET:
        return str(ipaddress.IPv4Address(raw[::-1]))
    # /proc/net/tcp6 stores four little-endian 32-bit words
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    return str(ipaddress.IPv6Address(words))


def listening_sockets(pids: set[int]) -> list[tuple[str, int]]:
    """(address, port) of every listening TCP socket owned by these processes."""
    inodes = _socket_inodes(pids)
    found = []
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if cols[3] == _LISTEN and cols[9] in inodes:
                addr, port = cols[1].split(":")
                found.append((_decode(addr, family), int(port, 16)))
    return sorted(set(found))


def non_loopback(sockets: list[tuple[str, int]]) -> list[tuple[str, int]]:
    return [(a, p) for a, p in sockets if not ipaddress.ip_address(a).is_loopback]
