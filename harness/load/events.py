"""Reading a load run's `events.jsonl` back: bounded (harness.readers), and every record checked for the fields and
types the reports use, so a corrupt or hand-edited file is one DataError naming the file, the line and the field,
never a traceback later in the metrics.

Unknown extra fields are kept (newer writers may add some); a torn last line (a killed run) is dropped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harness.engines import PROFILES
from harness.errors import DataError
from harness.load.scenario import Scenario
from harness.readers import MAX_DATA_BYTES, MAX_LINE_BYTES, parse_json, read_text
from harness.yamlfile import field_name

__all__ = ["read_events", "OUTCOMES"]

OUTCOMES = ("ok", "http_error", "rejected", "stream_error", "incomplete", "no_output", "too_large", "timeout",
            "transport_error", "cancelled")  # fmt: skip


class _Record(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class RunRecord(_Record):
    type: Literal["run"]
    scenario: dict
    target: str
    model: str | None
    endpoint: Literal["chat", "completions"]
    started: str | None = None
    scenario_source: str | None = None
    engine: str | None = None  # the engine kind whose profile the run kept series for (None: not known)
    engine_source: str | None = None  # where the kind came from: manifest | --engine

    @field_validator("engine")
    @classmethod
    def _known_kind(cls, v: str | None) -> str | None:
        if v is not None and v not in PROFILES:
            raise ValueError(f"unknown engine kind {v[:40]!r} (known: {', '.join(PROFILES)})")
        return v


class RequestRecord(_Record):
    type: Literal["request"]
    id: int | str
    warmup: bool = False
    outcome: Literal[OUTCOMES]  # type: ignore[valid-type]
    error: str | None = None
    status: int | None = None
    scheduled_ns: int
    ready_ns: int | None = None
    sent_ns: int
    headers_ns: int | None = None
    first_byte_ns: int | None = None
    end_ns: int | None = None
    ev_t: list[int] | None = None
    ev_k: str | None = None
    ev_b: list[int] | None = None
    ev_c: list[int] | None = None
    usage: dict[str, int] | None = None
    bytes: int = Field(default=0, ge=0)
    max_tokens: int | None = None
    prompt_units: int | None = None

    @model_validator(mode="after")
    def _events_line_up(self) -> RequestRecord:
        n = len(self.ev_k or "")
        for name in ("ev_t", "ev_b", "ev_c"):
            v = getattr(self, name)
            if v is not None and len(v) != n:
                raise ValueError(f"{name} has {len(v)} entries but ev_k has {n} events")
        if self.ev_k and set(self.ev_k) - set("rceuxd?"):
            raise ValueError(f"ev_k holds unknown event kinds {''.join(sorted(set(self.ev_k) - set('rceuxd?')))!r}")
        if self.usage and any(v < 0 for v in self.usage.values()):
            raise ValueError("usage counts must not be negative")
        return self


class ScrapeRecord(_Record):
    type: Literal["scrape"]
    phase: str
    t_ns: int | None = None
    status: int | None = None
    text: str | None = None
    error: str | None = None


class Abort(_Record):
    rule: str
    detail: str


class EndRecord(_Record):
    type: Literal["end"]
    stop_reason: str
    bound_step: str | None = None
    abort: Abort | None = None
    measured_start_ns: int | None = None
    end_ns: int | None = None
    client_cpu_s: float | int | None = None
    client_cpu_wait_s: float | int | None = Field(default=None, ge=0)
    planned: int | None = Field(default=None, ge=0)
    sent: int | None = Field(default=None, ge=0)


def _validate(model: type[BaseModel], obj: dict, where: str) -> None:
    try:
        model.model_validate(obj)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise DataError(f"{where}.{field_name(err['loc'])}: {err['msg'].removeprefix('Value error, ')}") from None


MODELS = {"run": RunRecord, "request": RequestRecord, "scrape": ScrapeRecord, "end": EndRecord}


def _check(path: Path, lineno: int, obj: object) -> dict:
    if not isinstance(obj, dict):
        raise DataError(f"{path}: line {lineno}: a record must be a JSON object, not {type(obj).__name__}")
    kind = obj.get("type")
    model = MODELS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise DataError(f"{path}: line {lineno}: unknown record type {str(kind)[:40]!r}")
    _validate(model, obj, f"{path}: line {lineno}: {kind}")
    if kind == "run":
        _validate(Scenario, obj["scenario"], f"{path}: line {lineno}: run.scenario")
    return obj


def read_events(path: str | Path) -> dict:
    """{"run": header, "requests": [...], "scrapes": [...], "end": end record or None}, every record checked."""
    path = Path(path)
    if not path.exists() and (path.parent / (path.name + ".partial")).exists():
        raise DataError(f"{path}: no events file, but {path.name}.partial holds an unfinished run (was it killed?); "
                        f"rename it to {path.name} to report on what it recorded")  # fmt: skip
    if not path.exists():
        raise DataError(f"{path}: no events file (was the run written to this directory?)")
    text = read_text(path, "events", max_bytes=MAX_DATA_BYTES, error=DataError)
    lines = text.split("\n")
    torn = lines[-1] != ""  # a complete file ends with a newline; a killed run may not
    run, end, reqs, scrapes = None, None, [], []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if len(line) > MAX_LINE_BYTES:
            raise DataError(f"{path}: line {n}: line is longer than {MAX_LINE_BYTES} bytes")
        try:
            obj = parse_json(line, path, "events", error=DataError, where=f"line {n}")
        except DataError:
            if torn and n == len(lines) and n > 1:
                break  # the torn last line of a killed run: keep everything before it
            raise
        obj = _check(path, n, obj)
        t = obj["type"]
        if t == "run":
            if run is not None:
                raise DataError(f"{path}: line {n}: a second run header")
            run = obj
        elif run is None:
            raise DataError(f"{path}: line {n}: a {t} record before the run header")
        elif t == "request":
            reqs.append(obj)
        elif t == "scrape":
            scrapes.append(obj)
        else:
            end = obj
    if run is None:
        raise DataError(f"{path}: line 1: no run header")
    return {"run": run, "requests": reqs, "scrapes": scrapes, "end": end}
