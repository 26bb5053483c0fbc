"""The run registry: one JSON file per running engine under $HARNESS_HOME/runs, so that `harness ps` and
`harness down` find engines started by any harness process on this machine. Process identity is checked with the
process start time, so a reused PID is never mistaken for an engine."""

from __future__ import annotations

import json
import os
from pathlib import Path

from harness.hashing import atomic_write_text
from harness.launch.base import harness_home
from harness.procs import process_start_time

__all__ = ["register", "unregister", "entries", "alive", "harness_alive", "current_harness"]


def _dir() -> Path:
    return harness_home() / "runs"


def alive(entry: dict) -> bool:
    if entry.get("kind") != "subprocess":
        return True  # containers are checked through Docker
    return process_start_time(entry["pid"]) == entry.get("pid_start")


def register(run_id: str, entry: dict) -> None:
    atomic_write_text(_dir() / f"{run_id}.json", json.dumps({"run_id": run_id, **entry}, indent=2))


def unregister(run_id: str) -> None:
    try:
        (_dir() / f"{run_id}.json").unlink()
    except FileNotFoundError:
        pass


def entries() -> list[dict]:
    out = []
    for p in sorted(_dir().glob("*.json")) if _dir().is_dir() else []:
        try:
            out.append(json.loads(p.read_text()))
        except (OSError, ValueError):
            continue
    return out


def harness_alive(entry: dict) -> bool:
    pid = entry.get("harness_pid")
    return bool(pid) and process_start_time(pid) == entry.get("harness_pid_start")


def current_harness() -> dict:
    return {"harness_pid": os.getpid(), "harness_pid_start": process_start_time(os.getpid())}
