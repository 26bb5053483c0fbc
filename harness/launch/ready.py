"""Readiness and identity, shared by every launcher.

Ready means `/health` answers 200 *and* `/v1/models` lists the served name. We fail fast, with the log tail, when the
process or container exits, and a timeout also carries the log tail. Identity: the profile's identity endpoint must
report the pinned version (and, in a container, the model we mounted where the profile says the endpoint names it).
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from harness.client import make_sync_client, wire_errors
from harness.engines import IdentityProblem
from harness.errors import EngineExited, IdentityMismatch, StartupTimeout, WireError
from harness.launch.base import Engine
from harness.progress import Stage

__all__ = ["wait_ready", "verify_identity"]

MODEL_MOUNT = "/model"  # where the Docker launcher mounts the model (harness.launch.docker.MODEL_MOUNT)


def _client(engine: Engine, seconds: float) -> httpx.Client:
    return make_sync_client(engine.base_url, api_key=engine.spec.api_key(), timeout=seconds)


def _log_tail(engine: Engine) -> str:
    tail = engine.log_tail()
    return f"{tail}\n(full log: {engine.log_path})" if tail.strip() else f"(nothing in {engine.log_path} yet)"


def wait_ready(engine: Engine, timeout: float, poll: float = 0.5, *, stage: Stage | None = None) -> float:
    """Block until ready; returns the seconds waited. `stage` (harness.progress) shows why it is not ready yet."""
    served = engine.spec.manifest.model.served_name
    t0 = time.monotonic()
    last = "no answer yet"
    with _client(engine, 5.0) as http:
        while True:
            code = engine.exit_status()
            if code is not None:
                raise EngineExited(f"engine exited with status {code} before it was ready", _log_tail(engine))
            try:
                with wire_errors():
                    health = http.get("/health")
                    models = http.get("/v1/models") if health.status_code == 200 else None
                if models is not None:
                    ids = [d.get("id") for d in models.json().get("data", [])] if models.status_code == 200 else []
                    if served in ids:
                        return time.monotonic() - t0
                    last = f"/v1/models {models.status_code}, lists {ids}, not {served!r}"
                else:
                    last = f"/health {health.status_code}"
            except WireError as exc:  # not up yet: say how it failed, keep polling
                last = exc.one_line()
            except ValueError as exc:
                last = type(exc).__name__
            if stage is not None:
                stage.detail(last)
            if time.monotonic() - t0 > timeout:
                raise StartupTimeout(f"engine not ready after {timeout:.0f} s ({last})", _log_tail(engine))
            time.sleep(poll)


def _identity_doc(response: httpx.Response) -> dict[str, Any]:
    """The identity endpoint's JSON object; anything else is a mismatch named in one line, not a traceback."""
    where = f"{response.request.url.path} answered HTTP {response.status_code}"
    if response.status_code != 200:
        raise IdentityMismatch(f"{where}; cannot verify the engine's identity")
    try:
        doc = response.json()
    except ValueError:
        raise IdentityMismatch(f"{where} with a body that is not JSON; cannot verify the engine's identity") from None
    if not isinstance(doc, dict):
        raise IdentityMismatch(f"{where} with JSON that is not an object; cannot verify the engine's identity")
    return doc


def verify_identity(engine: Engine) -> dict[str, Any]:
    m = engine.spec.manifest
    p = m.profile
    with _client(engine, 10.0) as http, wire_errors(engine.base_url):
        doc = _identity_doc(http.get(p.identity.path))
    mount = MODEL_MOUNT if m.runtime.docker is not None else None
    try:
        return p.read_identity(doc, m.engine.version, model_mount=mount)
    except IdentityProblem as exc:
        raise IdentityMismatch(str(exc)) from None
