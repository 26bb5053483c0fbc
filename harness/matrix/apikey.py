"""The API key a matrix cell's engine runs with. The rendered manifest names the variable (`server.api_key_env`, as
every manifest does; the spec's `api_key`); when it is not set, the cell sets it to a fresh random key for as long as the cell runs, so the
engine guards /v1 and the auth.* cases judge how. A key already set (a CI secret, a caller's) is used as it is."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["cell_api_key"]


@contextmanager
def cell_api_key(manifest: Any) -> Iterator[None]:
    name = getattr(getattr(manifest, "server", None), "api_key_env", None)
    if not name or os.environ.get(name):
        yield
        return
    os.environ[name] = "matrix-" + secrets.token_urlsafe(24)  # never written anywhere: it lives as long as the cell
    try:
        yield
    finally:
        os.environ.pop(name, None)
