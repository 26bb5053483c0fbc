"""The one loopback rule, applied to a parsed address before any socket opens, and URL redaction.

    base = loopback_url(args.url)                  # UsageError if malformed, RefusedError if not loopback
    base = loopback_url(url, allow_remote=True)     # `load --allow-remote` only: still parsed and checked for shape
    shown = redact_url(base)                       # userinfo (user:password@) never reaches a log, report or recording
    host, port = loopback_host_port(text, what="--ray-address")  # HOST:PORT ([::1]:PORT), no scheme

Loopback means 127.0.0.0/8, ::1 or the literal name `localhost`, decided on the parsed value: no DNS lookup, so a name
that merely resolves to 127.0.0.1 is refused, and nothing is ever sent to find out.
"""

from __future__ import annotations

import ipaddress
import re

import httpx

from harness.errors import RefusedError, UsageError

__all__ = [
    "is_loopback_host",
    "loopback_host_port",
    "loopback_url",
    "redact_url",
    "same_loopback_server",
    "LOOPBACK_RULE",
]

LOOPBACK_RULE = "loopback only (127.0.0.0/8, ::1, localhost)"


def is_loopback_host(host: str) -> bool:
    """True only for a literal loopback address or 'localhost'. No stripping: ' 127.0.0.1' is not an address."""
    if not isinstance(host, str) or not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _parse(url: str, what: str) -> httpx.URL:
    if not isinstance(url, str) or not url:
        raise UsageError(f"{what}: need an http(s)://host:port URL, got {url!r}")
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        raise UsageError(f"{what}: URL contains whitespace or a control character: {redact_url(url)!r}")
    try:
        u = httpx.URL(url)
        port = u.port  # httpx validates the port range while parsing
    except Exception as exc:  # noqa: BLE001 - any parse failure of user input is a usage error
        raise UsageError(f"{what}: not a URL: {redact_url(url)!r} ({exc})") from None
    if u.scheme not in ("http", "https") or not u.host:
        raise UsageError(f"{what}: need an http(s)://host:port URL, got {redact_url(url)!r}")
    if port is not None and not 0 < port < 65536:
        raise UsageError(f"{what}: port {port} is out of range (1-65535)")
    return u


def loopback_url(url: str, *, allow_remote: bool = False, what: str = "--url") -> str:
    """Check `url` on its parsed form (no DNS, no socket) and return it without a trailing slash."""
    u = _parse(url, what)
    if not allow_remote and not is_loopback_host(u.host):
        raise RefusedError(f"{what}: refusing {u.host!r}: {LOOPBACK_RULE}")
    return str(u).rstrip("/")


# HOST:PORT as one exact spelling: an IPv6 address in one pair of brackets, any other host without; a port of digits
_HOST_PORT = re.compile(r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9.-]+)):(?P<port>[0-9]{1,5})")


def loopback_host_port(address: str, *, what: str) -> tuple[str, int]:
    """Check a HOST:PORT address (no scheme) on its parsed form (no DNS, no socket): (host, port) on loopback, or a
    UsageError for a malformed spelling (`[[127.0.0.1]]:6379`, `[127.0.0.1]:6379`, `::1:6379`, no port) and a
    RefusedError for a host off loopback."""
    m = _HOST_PORT.fullmatch(address) if isinstance(address, str) else None
    host = (m["v6"] or m["host"]) if m else ""
    if m is None or (m["v6"] is not None and ":" not in host):
        raise UsageError(f"{what}: need HOST:PORT (an IPv6 address as [::1]:PORT), got {str(address)[:80]!r}")
    port = int(m["port"])
    if not 0 < port < 65536:
        raise UsageError(f"{what}: port {port} is out of range (1-65535)")
    if not is_loopback_host(host):
        raise RefusedError(f"{what}: refusing {host[:80]!r}: {LOOPBACK_RULE}")
    return host, port


def redact_url(url: object) -> str:
    """The URL with any user:password@ replaced by '***@'. Never raises: unparsable text is cut at '@' instead."""
    text = str(url)
    try:
        u = httpx.URL(text)
        if u.userinfo:
            return str(u.copy_with(username=None, password=None)).replace("://", "://***@", 1)
        return text
    except Exception:  # noqa: BLE001 - redaction must not fail on garbage
        scheme, sep, rest = text.partition("://")
        if "@" in rest.split("/", 1)[0]:
            return f"{scheme}{sep}***@{rest.split('@', 1)[1]}"
        return text


# The name resolves (by /etc/hosts convention, never looked up here) to one of these: a URL naming it may reach either.
_LOCALHOST_ADDRESSES = frozenset({"127.0.0.1", "::1"})


def _server_address(url: str) -> tuple[str, int, str]:
    """The host (an address in its one written form, `localhost` as itself), the port (the scheme's default when none
    is written) and the path (without trailing slashes) a URL names: what two spellings of one server share."""
    u = httpx.URL(url)
    host = u.host.lower()
    try:
        host = str(ipaddress.ip_address(host))
    except ValueError:
        pass
    return host, u.port or {"https": 443}.get(u.scheme, 80), u.path.rstrip("/")


def same_loopback_server(a: str, b: str) -> bool:
    """Two URLs (each passed by `loopback_url`) name the same server: the same port and path, and the same address
    once spelled alike ([::1] and [0:0:0:0:0:0:0:1], LOCALHOST and localhost), or `localhost` and either
    address it resolves to. Parsed only: no DNS, no socket. 127.0.0.1 and 127.0.0.2 (or ::1) on one port are two
    servers (a listener can bind each), so they stay apart."""
    (ha, pa, sa), (hb, pb, sb) = _server_address(a), _server_address(b)
    if (pa, sa) != (pb, sb):
        return False
    return ha == hb or ({ha, hb} - {"localhost"} <= _LOCALHOST_ADDRESSES and "localhost" in {ha, hb})
