"""Harness-managed containers, found by label: for `harness ps`, `harness down --all` and the watchdog's sweep.

Every container the Docker launcher creates carries `harness.managed=1`, `harness.run-id=<run id>` and
`harness.engine-id=<uuid>`; nothing here looks at a container without `harness.managed=1`.
"""

from __future__ import annotations

import time
from typing import Any

from harness.dockerd import connect

__all__ = [
    "LABEL_MANAGED",
    "LABEL_RUN_ID",
    "LABEL_ENGINE_ID",
    "list_managed_containers",
    "remove_managed_containers",
    "wait_gone",
]

LABEL_MANAGED = "harness.managed"
LABEL_RUN_ID = "harness.run-id"
LABEL_ENGINE_ID = "harness.engine-id"


def _label_filters(run_id: str | None, engine_id: str | None = None) -> dict[str, list[str]]:
    labels = [f"{LABEL_MANAGED}=1"]
    if run_id:
        labels.append(f"{LABEL_RUN_ID}={run_id}")
    if engine_id:
        labels.append(f"{LABEL_ENGINE_ID}={engine_id}")
    return {"label": labels}


def list_managed_containers(run_id: str | None = None, client: Any = None) -> list[dict[str, Any]]:
    """Every container (running or not) labelled harness.managed=1 (optionally of one run), as plain dicts."""
    client = connect(client)
    out = []
    for c in client.containers.list(all=True, filters=_label_filters(run_id)):
        labels = c.labels or {}
        ports = (c.attrs.get("HostConfig") or {}).get("PortBindings") or {}
        bindings = [
            f"{b.get('HostIp') or '0.0.0.0'}:{b.get('HostPort')}->{cp}" for cp, bs in ports.items() for b in (bs or [])
        ]
        out.append(
            {
                "kind": "docker",
                "id": c.id,
                "container_id": c.id,
                "name": c.name,
                "status": c.status,
                "run_id": labels.get(LABEL_RUN_ID),
                "engine": labels.get("harness.engine"),
                "base_url": labels.get("harness.url"),
                "harness_pid": labels.get("harness.pid"),
                "image": (c.attrs.get("Config") or {}).get("Image"),
                "ports": bindings,
            }
        )
    return out


def remove_managed_containers(
    run_id: str | None = None, client: Any = None, *, engine_id: str | None = None, timeout: float = 10.0
) -> list[str]:
    """Stop and remove harness-managed containers (all, one run's, or one engine's); returns the removed names."""
    import docker.errors

    client = connect(client)
    removed = []
    for c in client.containers.list(all=True, filters=_label_filters(run_id, engine_id)):
        try:
            if c.status in ("running", "restarting", "paused"):
                c.stop(timeout=max(1, int(timeout)))
        except docker.errors.APIError:
            pass
        try:
            c.remove(force=True)
            removed.append(c.name)
        except docker.errors.NotFound:
            removed.append(c.name)
        except docker.errors.APIError as exc:
            if "already in progress" not in str(exc):
                raise
            removed.append(c.name)
    return removed


def wait_gone(names_or_ids: list[str], timeout: float = 10.0, client: Any = None) -> bool:
    """True once none of the containers exists (used by tests and `harness down`)."""
    import docker.errors

    client = connect(client)
    deadline = time.monotonic() + timeout
    while True:
        left = []
        for n in names_or_ids:
            try:
                client.containers.get(n)
                left.append(n)
            except docker.errors.NotFound:
                pass
        if not left:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
