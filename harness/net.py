"""The one loopback rule, applied to a parsed address before any socket opens, and URL redaction.

    base = loopback_url(args.url)                  # UsageError if malformed, RefusedError if not loopback
    base = loopback_url(url, allow_remote=True)     # `load --allow-remote` only: still parsed and checked for shape
    shown = redact_url(base)                       # userinfo (user:password@) never reaches a log, report or recording

Loopback means 127.0.0.0/8, ::1 or the literal name `localhost`, decided on the parsed value: no DNS lookup, so a name
that merely resolves to 127.0.0.1 is refused, and nothing is ever sent to find out.
"""

from __future__ import annotations

import ipaddress

import httpx

from harness.errors import RefusedError, UsageError

__all__ = ["is_loopback_host", "loopback_url", "redact_url", "LOOPBACK_RULE"]

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
