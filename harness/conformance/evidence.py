"""Evidence: every HTTP exchange a conformance run makes, saved per case, and judged again from what was saved.

Recording sits at the one seam every case's requests pass through: the context's clients (`Ctx.client`,
`Ctx.new_client`: the cases' own requests, the shared probes, the OpenAI SDK's client, the keep-alive case's pool) are
built on a `RecordingTransport`, which keeps, per exchange, the request (method, path, headers, body), the status, the
response headers, the raw body bytes as they arrived (chunk boundaries kept: SSE stays byte-exact) and how it ended
(eof, closed by the client, a transport error). Each exchange belongs to the case that was running (a context variable
the runner sets), or to the shared probe that made it (saved once, named by every case that read it), or to the suite
(model discovery).

    DIR/evidence/index.json          run settings, and per case: file, verdict, exchanges, bytes, truncated, probes
    DIR/evidence/<case-id>.json      {"key", "exchanges": [...], "probes": [...]}
    DIR/evidence/probe--<name>.json  a shared probe's exchanges

Bounded: at most `cap_bytes` (default 1 MiB) of bodies are kept per case or probe; past it an exchange keeps what fit
and says `truncated` (with the bytes seen). Secrets never reach a file: Authorization (and cookie / api-key) header
values are replaced by a placeholder, the run's API keys (the engine's own behind a gateway too) are cut out of every
stored byte, URLs are redacted.

Re-judging (`rejudge`): a `ReplayTransport` answers each case's requests, in order, from its saved exchanges (matched
by method, path and body), so every case's own code judges exactly what the server said, with no engine. Polls that
ask more often than the live run did (GET of /metrics in a loop that waits by the clock) get the last saved answer
again; a request with no saved answer, or an answer cut by the cap, means the case cannot be re-judged: its note says
so and the run counts it, rather than pretending. The replay never sleeps: where the live run's time bound ended an
exchange it raises TimeoutError at once, which the replayed client's own bound takes as its expiry.

Reading back is bounded as a whole: every file of the directory is read once, within one byte budget, and the index's
numbers (max_stream_s, ...) must lie in the ranges a run writes them in.
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import json
import math
import os
import re
import shutil
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from harness.errors import DataError, OutputError
from harness.net import redact_url
from harness.outputs import atomic_write_text
from harness.readers import parse_json, read_bytes
from harness.secrets import scrub as scrub_secret

__all__ = [
    "CASE_CAP_BYTES",
    "EVIDENCE_DIR",
    "SUITE_KEY",
    "EvidenceRecorder",
    "RecordingTransport",
    "ReplayTransport",
    "EvidenceStore",
    "current_case",
    "probe_scope",
    "load_store",
    "case_file_name",
    "check_evidence_out",
    "REDACTED",
]

EVIDENCE_DIR = "evidence"
INDEX = "index.json"
FORMAT = 1
CASE_CAP_BYTES = 1 << 20  # a case's bodies: a stream is a few KB; the cancellation cases' scrapes are the big ones
SUITE_KEY = "(suite)"  # what the runner does outside any case: model discovery
OUTCOME_MARK = "#"  # `<case-id>#<sample>`: a repeated run's first sample of a later distinct outcome of the case
REDACTED = "***"
SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "api-key"})
MAX_INDEX_BYTES = 16 << 20
MAX_FILE_BYTES = 256 << 20
# every file of one evidence directory together (the index included), each read once: a run's bodies are at most
# 1 MiB per case (the cap), so a whole suite is tens of MiB; an index naming one big file many times costs it once
MAX_EVIDENCE_BYTES = 512 << 20
# the index's numbers a re-judge sets its context from, and the ranges a run of this harness writes them in (seconds
# over 0, up to a day; whole bytes): a number outside was not written by a run, and is refused rather than trusted
MAX_STREAM_S_SAVED = 86400.0
INDEX_NUMBERS: dict[str, tuple[type, float, float]] = {
    "max_stream_s": (float, 0.0, MAX_STREAM_S_SAVED),
    "max_stream_bytes": (int, 1, 1 << 30),
    "cap_bytes": (int, 0, 1 << 30),
}

_CASE: contextvars.ContextVar[str] = contextvars.ContextVar("harness_evidence_case", default=SUITE_KEY)
_PROBE: contextvars.ContextVar[str | None] = contextvars.ContextVar("harness_evidence_probe", default=None)
_LIVENESS: contextvars.ContextVar[bool] = contextvars.ContextVar("harness_evidence_liveness", default=False)
_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def current_case(case_id: str) -> contextvars.Token[str]:
    """Attribute what follows (in this task and the tasks it starts) to `case_id`; `_CASE.reset(token)` ends it."""
    return _CASE.set(case_id)


def end_case(token: contextvars.Token[str]) -> None:
    _CASE.reset(token)


def probe_scope(name: str) -> contextvars.Token[str | None]:
    return _PROBE.set(name)


def liveness_scope() -> contextvars.Token[bool]:
    """The runner's own liveness check after a failed case (`_LIVENESS.reset(token)` ends it)."""
    return _LIVENESS.set(True)


def end_liveness(token: contextvars.Token[bool]) -> None:
    _LIVENESS.reset(token)


def _key() -> str:
    p = _PROBE.get()
    return f"probe:{p}" if p else _CASE.get()


def case_file_name(key: str) -> str:
    """The file a key's exchanges go to: the case id (path-safe), `probe--<name>`, or `_suite`."""
    if key == SUITE_KEY:
        return "_suite.json"
    if key.startswith("probe:"):
        return "probe--" + _SAFE.sub("_", key[6:]) + ".json"
    return _SAFE.sub("_", key) + ".json"


# -- one exchange ---------------------------------------------------------------------------------------------------


def _text_or_b64(data: bytes) -> dict[str, str]:
    try:
        return {"text": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"b64": base64.b64encode(data).decode()}


def _bytes_of(d: Any, where: str) -> bytes:
    if d is None:
        return b""
    if not isinstance(d, dict):
        raise DataError(f"{where}: must be an object with text or b64")
    if isinstance(d.get("text"), str):
        return d["text"].encode("utf-8")
    if isinstance(d.get("b64"), str):
        try:
            return base64.b64decode(d["b64"], validate=True)
        except ValueError:
            raise DataError(f"{where}: b64 is not base64") from None
    raise DataError(f"{where}: must hold text or b64")


@dataclass
class Exchange:
    key: str
    seq: int
    method: str
    path: str
    request_headers: dict[str, str]
    request_body: bytes
    t_start: float
    status: int | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)
    chunks: list[int] = field(default_factory=list)  # sizes of the body pieces as they arrived (kept bytes)
    body: bytearray = field(default_factory=bytearray)
    seen_bytes: int = 0
    truncated: bool = False
    ended: str = ""  # eof | closed (by the client) | error | cancelled (a time bound, before or during the body)
    phase: str = ""  # headers | body: where an error or a cancel came
    error_type: str = ""
    error: str = ""
    duration_ms: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "seq": self.seq, "method": self.method, "path": self.path, "request_headers": self.request_headers,
            "request_body": _text_or_b64(self.request_body), "status": self.status,
            "headers": [list(h) for h in self.headers], "body": _text_or_b64(bytes(self.body)),
            "chunks": self.chunks, "seen_bytes": self.seen_bytes, "stored_bytes": len(self.body),
            "truncated": self.truncated, "ended": self.ended, "phase": self.phase, "duration_ms": self.duration_ms,
        }  # fmt: skip
        if self.error_type:
            d["error"] = {"type": self.error_type, "message": self.error}
        return d


@dataclass
class Saved:
    """An exchange read back from a file (what the replay answers with)."""

    method: str
    path: str
    request_body: bytes
    status: int | None
    headers: list[tuple[str, str]]
    body: bytes
    chunks: list[int]
    truncated: bool
    ended: str
    phase: str
    error_type: str
    error: str

    @classmethod
    def from_dict(cls, raw: Any, where: str) -> Saved:
        if not isinstance(raw, dict):
            raise DataError(f"{where}: must be an object")
        for name, kind in (("method", str), ("path", str), ("ended", str)):
            if not isinstance(raw.get(name), kind):
                raise DataError(f"{where}: {name}: missing or not a {kind.__name__}")
        status = raw.get("status")
        if status is not None and (type(status) is not int or not 100 <= status <= 999):
            raise DataError(f"{where}: status: not an HTTP status")
        heads = raw.get("headers") or []
        if not isinstance(heads, list) or not all(
            isinstance(h, list) and len(h) == 2 and all(isinstance(x, str) for x in h) for h in heads
        ):
            raise DataError(f"{where}: headers: must be a list of [name, value]")
        chunks = raw.get("chunks") or []
        if not isinstance(chunks, list) or not all(type(c) is int and c >= 0 for c in chunks):
            raise DataError(f"{where}: chunks: must be a list of sizes")
        err = raw.get("error") or {}
        if not isinstance(err, dict):
            raise DataError(f"{where}: error: must be an object")
        return cls(
            method=raw["method"], path=raw["path"], request_body=_bytes_of(raw.get("request_body"), f"{where}.request_body"),
            status=status, headers=[(h[0], h[1]) for h in heads], body=_bytes_of(raw.get("body"), f"{where}.body"),
            chunks=chunks, truncated=raw.get("truncated") is True, ended=raw["ended"], phase=str(raw.get("phase") or ""),
            error_type=str(err.get("type") or ""), error=str(err.get("message") or ""),
        )  # fmt: skip


# -- recording ------------------------------------------------------------------------------------------------------


class EvidenceRecorder:
    """Collects every exchange of a run, by key (case id, `probe:<name>`, or the suite)."""

    def __init__(self, api_key: str | None = None, cap_bytes: int = CASE_CAP_BYTES, *,
                 other_keys: tuple[str | None, ...] = ()) -> None:  # fmt: skip
        self.api_key = api_key or None
        # every key given to the run (the engine's own behind a gateway too): any of them a server echoes is cut out
        self.secrets = [k for k in dict.fromkeys((api_key, *other_keys)) if k]
        self.cap_bytes = cap_bytes
        self.exchanges: dict[str, list[Exchange]] = {}
        self.stored: dict[str, int] = {}
        self.probes_read: dict[str, list[str]] = {}  # case id -> the probes it read (in order, once each)
        self._seq = 0

    def transport(self, inner: httpx.AsyncBaseTransport | None, **http: Any) -> RecordingTransport:
        return RecordingTransport(self, inner if inner is not None else httpx.AsyncHTTPTransport(**http))

    def read_probe(self, name: str) -> None:
        """The running case read the shared probe `name` (its evidence is the probe's file)."""
        case = _CASE.get()
        seen = self.probes_read.setdefault(case, [])
        if name not in seen:
            seen.append(name)

    # redaction: the run's keys (and any 6+ character run that begins or ends one: a body cut at the cap through a
    # key) are cut out of every stored byte; secret headers are placeholders
    def scrub(self, data: bytes) -> bytes:
        if not self.secrets:
            return data
        for key in self.secrets:
            data = data.replace(key.encode(), REDACTED.encode())
        # latin-1 maps every byte to one character and back: harness.secrets.scrub works on the bytes as they are
        text = data.decode("latin-1")
        scrubbed = scrub_secret(text, [key.encode().decode("latin-1") for key in self.secrets])
        return data if scrubbed == text else scrubbed.encode("latin-1")

    def _header(self, name: str, value: str) -> str:
        if name.lower() in SECRET_HEADERS:
            if self.api_key and self.api_key in value:
                return f"{REDACTED} (redacted: the run's API key)"
            if any(key in value for key in self.secrets):
                return f"{REDACTED} (redacted: a key given to the run)"
            return f"{REDACTED} (redacted)"
        return self.scrub(value.encode("utf-8", "replace")).decode("utf-8", "replace")

    def begin(self, request: httpx.Request) -> Exchange:
        self._seq += 1
        key = _key()
        url = request.url
        path = url.raw_path.decode("ascii", "replace")
        body = self.scrub(bytes(request.content))
        ex = Exchange(key, self._seq, request.method, redact_url(path),
                      {k.lower(): self._header(k, v) for k, v in request.headers.items()}, body, time.time())  # fmt: skip
        self.exchanges.setdefault(key, []).append(ex)
        self.stored[key] = self.stored.get(key, 0) + len(body)
        return ex

    def keep(self, ex: Exchange, chunk: bytes) -> None:
        ex.seen_bytes += len(chunk)
        room = self.cap_bytes - self.stored.get(ex.key, 0)
        if room <= 0 or ex.truncated:
            ex.truncated = True
            return
        piece = chunk if len(chunk) <= room else chunk[:room]
        if len(piece) < len(chunk):
            ex.truncated = True
        ex.body += piece
        ex.chunks.append(len(piece))
        self.stored[ex.key] = self.stored.get(ex.key, 0) + len(piece)

    def finish(self, ex: Exchange) -> None:
        """Scrub the keys out of the whole body once (a key split across two chunks is caught too)."""
        if not self.secrets:
            return
        whole = self.scrub(bytes(ex.body))
        if whole != ex.body:
            ex.body = bytearray(whole)
            ex.chunks = _resplit(ex.chunks, len(whole))

    # -- writing ------------------------------------------------------------------------------------------------
    def write(self, run_dir: str | Path, results: list[Any], settings: dict[str, Any]) -> Path:
        """DIR/evidence/<file> per key and the index; `results` are the suite's CaseResults (id, verdict). Written
        into a new directory beside it, then renamed into place: an earlier DIR/evidence (the caller checked --force,
        `check_evidence_out`) is replaced whole, never mixed with this run's files, and never written through."""
        final = Path(run_dir) / EVIDENCE_DIR
        fresh = _new_dir(Path(run_dir))
        try:
            self._write_files(fresh, results, settings)
            _swap_in(fresh, final)
        except BaseException:
            shutil.rmtree(fresh, ignore_errors=True)
            raise
        return final / INDEX

    def _write_files(self, d: Path, results: list[Any], settings: dict[str, Any]) -> None:
        files: dict[str, dict[str, Any]] = {}
        for key, exs in self.exchanges.items():
            name = case_file_name(key)
            doc = {"format": FORMAT, "key": key, "exchanges": [e.to_dict() for e in exs]}
            if not key.startswith("probe:"):
                doc["probes"] = self.probes_read.get(key, [])
            atomic_write_text(d / name, json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
            files[key] = self._sizes(key, name)
        cases = []
        for r in results:
            entry = {"id": r.id, "verdict": r.verdict, "probes": self.probes_read.get(r.id, [])}
            entry.update(
                files.get(r.id) or {"file": None, "exchanges": 0, "bytes": 0, "seen_bytes": 0, "truncated": False}
            )
            # a repeated run (harness.conformance.repeat): the first sample of each later distinct outcome
            more = [{"key": k, **v} for k, v in files.items() if k.startswith(f"{r.id}{OUTCOME_MARK}")]
            if more:
                entry["outcome_files"] = more
            cases.append(entry)
        probes = [{"name": k[6:], **v} for k, v in files.items() if k.startswith("probe:")]
        index = {"format": FORMAT, "cap_bytes": self.cap_bytes, **settings, "suite": files.get(SUITE_KEY),
                 "cases": cases, "probes": probes}  # fmt: skip
        atomic_write_text(d / INDEX, json.dumps(index, indent=1, ensure_ascii=False) + "\n")

    def _sizes(self, key: str, name: str) -> dict[str, Any]:
        exs = self.exchanges.get(key, [])
        return {"file": name, "exchanges": len(exs), "bytes": self.stored.get(key, 0),
                "seen_bytes": sum(e.seen_bytes + len(e.request_body) for e in exs),
                "truncated": any(e.truncated for e in exs)}  # fmt: skip


def check_evidence_out(out: str | Path, *, force: bool, inputs: tuple[Path, ...] = ()) -> None:
    """Before any work: OUT/evidence may be written. A symbolic link is refused (the files would land wherever it
    points: another run's evidence), so is anything there that is not a directory; an existing directory only with
    --force (it is then replaced whole). `inputs`: evidence directories this command reads, never replaced."""
    d = Path(out) / EVIDENCE_DIR
    if d.is_symlink():
        raise OutputError(f"--out {out}: {EVIDENCE_DIR} is a symbolic link; refusing to write through it")
    if d.exists() and not d.is_dir():
        raise OutputError(f"--out {out}: {EVIDENCE_DIR} exists and is not a directory; refusing to replace it")
    for inp in inputs:
        if _within(inp, d):
            raise OutputError(f"--out {out}: its {EVIDENCE_DIR}/ holds {inp}, an input of this command")
    if d.exists() and not force:
        raise OutputError(f"--out {out}: already holds {EVIDENCE_DIR}/; pass --force to replace it, or choose another"
                          " directory")  # fmt: skip


def _within(path: Path, directory: Path) -> bool:
    """`path` is `directory` or below it (both resolved: symbolic links followed)."""
    try:
        p, d = Path(path).resolve(), Path(directory).resolve()
    except (OSError, RuntimeError):  # a symlink loop: not a place anything was read from
        return False
    return p == d or d in p.parents


def _new_dir(parent: Path) -> Path:
    """A new, empty directory in `parent` (mode from the umask, as mkdir makes it), for files renamed into place."""
    try:
        parent.mkdir(parents=True, exist_ok=True)
        d = parent / f".{EVIDENCE_DIR}.{uuid.uuid4().hex[:12]}.tmp"
        d.mkdir()
    except OSError as exc:
        raise OutputError(f"{parent}: cannot create the evidence directory: {exc.strerror}") from None
    return d


def _swap_in(fresh: Path, final: Path) -> None:
    """Rename `fresh` to `final`; a `final` already there (a real directory: checked again here) is removed after."""
    if final.is_symlink() or (final.exists() and not final.is_dir()):
        raise OutputError(f"{final}: not a directory of this harness; refusing to replace it")
    old = final.with_name(f".{final.name}.{uuid.uuid4().hex[:12]}.old") if final.exists() else None
    try:
        if old is not None:
            os.replace(final, old)
        try:
            os.replace(fresh, final)
        except OSError:
            if old is not None:
                os.replace(old, final)  # put the earlier one back: a failed write replaces nothing
            raise
    except OSError as exc:
        raise OutputError(f"{final}: cannot replace the evidence directory: {exc.strerror}") from None
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)  # a symlink inside is unlinked, never followed


def _resplit(chunks: list[int], total: int) -> list[int]:
    """Chunk sizes adjusted to a body that redaction shortened or lengthened (the last piece takes the difference)."""
    out, left = [], total
    for c in chunks[:-1]:
        take = min(c, left)
        out.append(take)
        left -= take
    out.append(max(left, 0))
    return out


class _TeeStream(httpx.AsyncByteStream):
    def __init__(self, inner: Any, rec: EvidenceRecorder, ex: Exchange, t0: float) -> None:
        self.inner, self.rec, self.ex, self.t0 = inner, rec, ex, t0

    def _end(self, how: str, phase: str = "body", exc: BaseException | None = None) -> None:
        if self.ex.ended:
            return
        self.ex.ended, self.ex.phase = how, phase
        if exc is not None:
            self.ex.error_type, self.ex.error = type(exc).__name__, self.rec._header("x", str(exc))
        self.ex.duration_ms = round((time.monotonic() - self.t0) * 1000, 1)
        self.rec.finish(self.ex)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self.inner:
                self.rec.keep(self.ex, chunk)
                yield chunk
        except (asyncio.CancelledError, TimeoutError):  # a time bound (a replay raises TimeoutError for one)
            self._end("cancelled")
            raise
        except Exception as exc:
            self._end("error", exc=exc)
            raise
        self._end("eof")

    async def aclose(self) -> None:
        self._end("closed")
        await self.inner.aclose()


class RecordingTransport(httpx.AsyncBaseTransport):
    def __init__(self, rec: EvidenceRecorder, inner: httpx.AsyncBaseTransport) -> None:
        self.rec, self.inner = rec, inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        ex = self.rec.begin(request)
        t0 = time.monotonic()
        try:
            response = await self.inner.handle_async_request(request)
        except (asyncio.CancelledError, TimeoutError):  # a time bound (a replay raises TimeoutError for one)
            ex.ended, ex.phase = "cancelled", "headers"
            ex.duration_ms = round((time.monotonic() - t0) * 1000, 1)
            raise
        except Exception as exc:
            ex.ended, ex.phase, ex.error_type = "error", "headers", type(exc).__name__
            ex.error = self.rec._header("x", str(exc))
            ex.duration_ms = round((time.monotonic() - t0) * 1000, 1)
            raise
        ex.status = response.status_code
        ex.headers = [(k.lower(), self.rec._header(k, v)) for k, v in response.headers.multi_items()]
        content = getattr(response, "_content", None)
        if content is not None:  # a response built from bytes (an injected mock) is read already: keep it whole
            self.rec.keep(ex, content)
            ex.ended, ex.phase, ex.duration_ms = "eof", "body", round((time.monotonic() - t0) * 1000, 1)
            self.rec.finish(ex)
            return response
        response.stream = _TeeStream(response.stream, self.rec, ex, t0)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


# -- reading back and replaying --------------------------------------------------------------------------------------


@dataclass
class EvidenceStore:
    """A saved run's evidence: the index and every key's exchanges."""

    directory: Path
    index: dict[str, Any]
    exchanges: dict[str, list[Saved]]
    files: dict[str, dict[str, Any]]  # key -> the raw file document (for the HTML report)

    @property
    def case_ids(self) -> list[str]:
        return [c["id"] for c in self.index["cases"]]

    def verdicts(self) -> dict[str, str]:
        return {c["id"]: c["verdict"] for c in self.index["cases"]}


def _index_entry(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise DataError(f"{where}: must be an object")
    if not isinstance(raw.get("id", raw.get("name")), str):
        raise DataError(f"{where}: id: missing or not a string")
    f = raw.get("file")
    if f is not None and (not isinstance(f, str) or _SAFE.sub("_", f) != f or f.startswith(".")):
        raise DataError(f"{where}: file: not a file name of this directory: {f!r}")
    probes = raw.get("probes", [])
    if not isinstance(probes, list) or not all(isinstance(p, str) for p in probes):
        raise DataError(f"{where}: probes: must be a list of names")
    return raw


class _Reader:
    """The files of one evidence directory, each read once (by resolved path: an index naming one file for many
    entries, or two names of one file, cost it once), all of them within one byte budget (MAX_EVIDENCE_BYTES)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.left = MAX_EVIDENCE_BYTES
        self.docs: dict[Path, tuple[dict[str, Any], list[Saved]]] = {}

    def json(self, path: Path, what: str, max_bytes: int) -> Any:
        try:
            size = path.stat().st_size
        except OSError:
            size = 0  # read_bytes says what is wrong with it
        if size > self.left:
            raise DataError(f"{path}: (file) the evidence files together are over {MAX_EVIDENCE_BYTES} bytes; refusing"
                            " to read more of them")  # fmt: skip
        data = read_bytes(path, what, max_bytes=min(max_bytes, self.left), error=DataError)
        self.left -= len(data)
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            line = data[: exc.start].count(b"\n") + 1
            raise DataError(f"{path}: line {line}: {what} is not UTF-8 text (byte {exc.start})") from None
        return parse_json(text, path, what, error=DataError)

    def exchanges(self, name: str) -> tuple[dict[str, Any], list[Saved]]:
        """(the file's document, its exchanges): read and checked the first time the file is named."""
        path = self.directory / name
        try:
            real = path.resolve()
        except (OSError, RuntimeError):  # a symlink loop: read_bytes refuses it by its own name
            real = path
        if real not in self.docs:
            doc = self.json(path, "evidence file", MAX_FILE_BYTES)
            if not isinstance(doc, dict) or not isinstance(doc.get("exchanges"), list):
                raise DataError(f"{path}: exchanges: must be a list")
            saved = [Saved.from_dict(e, f"{path}: exchanges[{i}]") for i, e in enumerate(doc["exchanges"])]
            self.docs[real] = (doc, saved)
        return self.docs[real]


def load_store(run_dir: str | Path) -> EvidenceStore:
    """RUN_DIR/evidence read back (bounded, strict JSON; a bad file or field is one DataError naming it)."""
    d = Path(run_dir) / EVIDENCE_DIR
    if not (d / INDEX).is_file():
        raise DataError(f"{run_dir}: no {EVIDENCE_DIR}/{INDEX} (was the run written by `harness conform --out`?)")
    reader = _Reader(d)
    index = reader.json(d / INDEX, "evidence index", MAX_INDEX_BYTES)
    where = str(d / INDEX)
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise DataError(f"{where}: format: this harness reads evidence format {FORMAT}")
    for name in INDEX_NUMBERS:
        if name in index:
            index_number(index, name, 0, where)
    cases = index.get("cases")
    if not isinstance(cases, list):
        raise DataError(f"{where}: cases: must be a list")
    for i, c in enumerate(cases):
        _index_entry(c, f"{where}: cases[{i}]")
        if not isinstance(c.get("verdict"), str):
            raise DataError(f"{where}: cases[{i}].verdict: missing")
    probes = index.get("probes") or []
    if not isinstance(probes, list):
        raise DataError(f"{where}: probes: must be a list")
    keyed: list[tuple[str, Any]] = [(c["id"], c.get("file")) for c in cases]
    for i, c in enumerate(cases):  # a repeated run's evidence of each later distinct outcome
        more = c.get("outcome_files", [])
        if not isinstance(more, list):
            raise DataError(f"{where}: cases[{i}].outcome_files: must be a list")
        for j, o in enumerate(more):
            at = f"{where}: cases[{i}].outcome_files[{j}]"
            _index_entry({**o, "id": o.get("key")} if isinstance(o, dict) else o, at)
            if not str(o["key"]).startswith(f"{c['id']}{OUTCOME_MARK}"):
                raise DataError(f"{at}: key: not an outcome of {c['id']!r}")
            keyed.append((o["key"], o.get("file")))
    keyed += [
        ("probe:" + _index_entry(p, f"{where}: probes[{i}]")["name"], p.get("file")) for i, p in enumerate(probes)
    ]
    suite = index.get("suite")
    if suite is not None:
        if not isinstance(suite, dict):
            raise DataError(f"{where}: suite: must be an object")
        keyed.append((SUITE_KEY, _index_entry({**suite, "id": SUITE_KEY}, f"{where}: suite").get("file")))
    exchanges: dict[str, list[Saved]] = {}
    files: dict[str, dict[str, Any]] = {}
    for key, name in keyed:
        if name:
            files[key], exchanges[key] = reader.exchanges(name)
    return EvidenceStore(d, index, exchanges, files)


@dataclass
class ReplayLog:
    """What the replay could not answer from the evidence, per case."""

    missed: dict[str, list[str]] = field(default_factory=dict)  # requests with no saved exchange
    repeated: dict[str, int] = field(default_factory=dict)  # polls answered with the last saved answer again
    cut: dict[str, list[str]] = field(default_factory=dict)  # saved answers that the cap had cut
    # saved answers read past the point where the live client had closed them itself (the evidence ends there)
    short: dict[str, list[str]] = field(default_factory=dict)

    def for_case(self, case_id: str, probes: list[str]) -> tuple[list[str], int, list[str], list[str]]:
        """(missed, repeated polls, cut, read past the live client's close) for a case and the probes it read."""
        keys = [case_id, *(f"probe:{p}" for p in probes)]
        missed = [m for k in keys for m in self.missed.get(k, [])]
        cut = [m for k in keys for m in self.cut.get(k, [])]
        short = [m for k in keys for m in self.short.get(k, [])]
        return missed, sum(self.repeated.get(k, 0) for k in keys), cut, short


_REPLAY_ERRORS = {
    name: getattr(httpx, name)
    for name in dir(httpx)
    if isinstance(getattr(httpx, name), type) and issubclass(getattr(httpx, name), httpx.TransportError)
}


def _bound_reached(where: str) -> TimeoutError:
    """What a replay raises where the live run's time bound ended the exchange (`cancelled`): at once, never after a
    sleep. The innermost bound of the replayed client (record()'s `max_duration_s`, a case's or the suite's
    wait_for) takes it as its own expiry, so the replayed trace ends as the live one did ("timeout") without the
    re-judge waiting for anything, whatever duration the evidence claims."""
    return TimeoutError(f"replay: the live run's time bound ended this exchange {where}")


class _ReplayStream(httpx.AsyncByteStream):
    def __init__(self, saved: Saved, request: httpx.Request, log: ReplayLog, key: str) -> None:
        self.saved, self.request, self.log, self.key = saved, request, log, key

    async def __aiter__(self) -> AsyncIterator[bytes]:
        s, pos = self.saved, 0
        for n in s.chunks or ([len(s.body)] if s.body else []):
            piece = s.body[pos : pos + n]
            pos += n
            if piece:
                yield piece
        if pos < len(s.body):
            yield s.body[pos:]
        if s.truncated:
            self.log.cut.setdefault(self.key, []).append(f"{s.method} {s.path}")
            raise httpx.ReadError("replay: the saved answer was cut at the evidence cap", request=self.request)
        if s.ended == "error":
            raise _REPLAY_ERRORS.get(s.error_type, httpx.ReadError)(s.error, request=self.request)
        if s.ended == "cancelled":
            raise _bound_reached("during the body")
        if s.ended == "closed":
            # the live client closed it here itself; one that reads on asks for what the evidence does not hold
            self.log.short.setdefault(self.key, []).append(f"{s.method} {s.path}")
            raise httpx.ReadError("replay: the live run stopped reading here", request=self.request)


class ReplayTransport(httpx.AsyncBaseTransport):
    """Answers each case's requests, in order, from its saved exchanges."""

    def __init__(self, store: EvidenceStore) -> None:
        self.pending = {k: list(v) for k, v in store.exchanges.items()}
        self.last: dict[tuple[str, str, str], Saved] = {}
        self.log = ReplayLog()

    def _take(self, key: str, method: str, path: str, body: bytes) -> Saved | None:
        queue = self.pending.get(key, [])
        same = [i for i, s in enumerate(queue) if s.method == method and s.path == path]
        exact = [i for i in same if queue[i].request_body == body]
        picks = exact or same
        return queue.pop(picks[0]) if picks else None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        key = _key()
        path = redact_url(request.url.raw_path.decode("ascii", "replace"))
        saved = self._take(key, request.method, path, bytes(request.content))
        if saved is None and request.method == "GET" and (key, request.method, path) in self.last:
            saved = self.last[(key, request.method, path)]  # a poll by the clock: the state when the run stopped
            self.log.repeated[key] = self.log.repeated.get(key, 0) + 1
        if saved is None and _LIVENESS.get():
            # the runner checks liveness after a case that failed; the live run saved that check only where it made
            # one (a case that passed there); the live run went on after this case, so the server answered. A JSON
            # list satisfies every liveness check: /health's status and, without a profile, /v1/models's list
            return httpx.Response(200, json={"object": "list", "data": []}, request=request)
        if saved is None:
            self.log.missed.setdefault(key, []).append(f"{request.method} {path}")
            raise httpx.ConnectError(f"replay: no saved answer for {request.method} {path}", request=request)
        self.last[(key, request.method, path)] = saved
        if saved.status is None:  # no response was had
            if saved.ended == "cancelled":
                raise _bound_reached("before any answer")
            raise _REPLAY_ERRORS.get(saved.error_type, httpx.ConnectError)(saved.error, request=request)
        return httpx.Response(saved.status, headers=saved.headers,
                              stream=_ReplayStream(saved, request, self.log, key))  # fmt: skip


# -- re-judging a saved run ------------------------------------------------------------------------------------------

REPLAY_URL = "http://127.0.0.1:9"  # never dialled: every client of the context answers from the replay transport
REPLAY_KEY = "replayed-api-key"  # the saved run had a key (never saved); the auth cases need one to run


def run_settings(ctx: Any, engine: dict[str, Any]) -> dict[str, Any]:
    """What a re-judge needs to set up the same context (the index's header)."""
    return {"expectations": ctx.exp.name, "model": ctx.model, "api_key": bool(ctx.api_key),
            "max_stream_s": ctx.max_stream_s, "max_stream_bytes": ctx.max_stream_bytes,
            "engine": {k: redact_url(v) if k == "url" else v for k, v in engine.items() if k != "identity"}}  # fmt: skip


def index_number(index: dict[str, Any], name: str, default: float, where: str = "evidence index") -> float:
    """One of the index's INDEX_NUMBERS (`default` when it is not there), within the range a run writes it in."""
    v = index.get(name, default)
    kind, lo, hi = INDEX_NUMBERS[name]
    if kind is float:
        ok = isinstance(v, (int, float)) and math.isfinite(v) and lo < v <= hi
        want = f"a number of seconds over {lo:g} and at most {hi:g}"
    else:
        ok = isinstance(v, int) and lo <= v <= hi
        want = f"a whole number from {int(lo)} to {int(hi)}"
    if isinstance(v, bool) or not ok:
        raise DataError(f"{where}: {name}: must be {want}, got {v!r}")
    return float(v)
