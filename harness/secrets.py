"""What may be shown of a manifest's environment. Names are kept; a value only when the harness knows the variable
is harmless (a size, a seed, a thread count); every other value is replaced by a short hash, so a report still says
that it changed without saying what it is. An HF_TOKEN in `server.env` never reaches a recording or a report."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping

from harness.engines import harmless_env

__all__ = ["GENERIC_HARMLESS_ENV", "HARMLESS_ENV", "REDACTED", "shown_env_value", "redact_env", "scrub", "scrub_tree"]

# Variables whose values are configuration, not credentials: these generic ones, and every engine profile's
# `harmless_env` (harness.engines). Anything else is hashed.
GENERIC_HARMLESS_ENV = frozenset({"PYTHONHASHSEED", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES"})
HARMLESS_ENV = GENERIC_HARMLESS_ENV | harmless_env()
# A name like these is a secret even if someone adds it to the list above by mistake.
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASS|AUTH|CRED|COOKIE|SESSION", re.IGNORECASE)


def shown_env_value(name: str, value: object) -> str | None:
    if value is None:
        return None
    if name in HARMLESS_ENV and not _SECRET_NAME.search(name):
        return str(value)
    return "sha256:" + hashlib.sha256(str(value).encode()).hexdigest()[:12]


def redact_env(env: Mapping[str, object]) -> dict[str, str | None]:
    return {k: shown_env_value(k, v) for k, v in sorted(env.items())}


# A secret shorter than this is not scrubbed by prefix: six characters of a key are already enough to narrow it down,
# and shorter runs would match ordinary text.
MIN_SECRET_PART = 6
REDACTED = "***"


def scrub(text: str, secrets: Iterable[str | None]) -> str:
    """`text` with every secret replaced by ***, and with any run of 6+ characters that begins or ends a secret (an
    excerpt cut through the key, a key echoed cut at either end) replaced too. Empty or short secrets are ignored."""
    for secret in secrets:
        if not secret or len(secret) < MIN_SECRET_PART or not text:
            continue
        if secret in text:
            text = text.replace(secret, REDACTED)
        text = _scrub_parts(text, secret)
    return text


def _scrub_parts(text: str, secret: str) -> str:
    # Longest first: a run that is a prefix (or suffix) of the secret, at least MIN_SECRET_PART long.
    parts = {secret[:n] for n in range(MIN_SECRET_PART, len(secret))} | {
        secret[-n:] for n in range(MIN_SECRET_PART, len(secret))
    }
    if not any(p in text for p in parts):
        return text
    pattern = re.compile("|".join(re.escape(p) for p in sorted(parts, key=len, reverse=True)))
    return pattern.sub(REDACTED, text)


def scrub_tree(value: object, secrets: Iterable[str | None]) -> object:
    """A JSON-like value (dicts, lists, strings; keys too) with scrub() applied to every string in it."""
    keys = [s for s in secrets if s and len(s) >= MIN_SECRET_PART]
    if not keys:
        return value
    return _scrub_tree(value, keys)


def _scrub_tree(value: object, keys: list[str]) -> object:
    if isinstance(value, str):
        return scrub(value, keys)
    if isinstance(value, dict):
        return {(scrub(k, keys) if isinstance(k, str) else k): _scrub_tree(v, keys) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub_tree(v, keys) for v in value]
    return value
