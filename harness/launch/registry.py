"""The run registry: one JSON file per running engine under $HARNESS_HOME/runs, so that `harness ps` and
`harness down` find engines started by any harness process on this machine. Process identity is checked with the
process start time, so a reused PID is never mistaken for an engine."""

from __future__ import annotations

import json
import os
from pathlib import Path

from harness.errors import HarnessError
from harness.outputs import atomic_write_text
from harness.procs import process_start_time
from harness.readers import read_json
from harness.settings import harness_home

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


def _usable(entry: object) -> bool:
    if not isinstance(entry, dict) or not isinstance(entry.get("run_id"), str):
        return False
    return entry.get("kind") != "subprocess" or (isinstance(entry.get("pid"), int) and entry["pid"] > 0)


def entries() -> list[dict]:
    """Every readable entry; a corrupt, foreign or non-regular file (a FIFO would block) is skipped, not fatal."""
    out = []
    for p in sorted(_dir().glob("*.json")) if _dir().is_dir() else []:
        try:
            entry = read_json(p, "run registry entry", max_bytes=1 << 20)
        except HarnessError:
            continue
        if _usable(entry):
            out.append(entry)
    return out


def harness_alive(entry: dict) -> bool:
    pid = entry.get("harness_pid")
    return bool(pid) and process_start_time(pid) == entry.get("harness_pid_start")


def current_harness() -> dict:
    return {"harness_pid": os.getpid(), "harness_pid_start": process_start_time(os.getpid())}
