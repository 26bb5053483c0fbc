"""What may be shown of a manifest's environment. Names are kept; a value only when the harness knows the variable
is harmless (a size, a seed, a thread count); every other value is replaced by a short hash, so a report still says
that it changed without saying what it is. An HF_TOKEN in `server.env` never reaches a recording or a report."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping

from harness.engines import harmless_env

__all__ = ["GENERIC_HARMLESS_ENV", "HARMLESS_ENV", "shown_env_value", "redact_env"]

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
