"""Record golden outputs from a running OpenAI-compatible engine (non-streaming, temperature 0, one request at a time).

`record_with_engine(engine, manifest, sets, out)` records from a launched engine (or a `UrlEngine`) and writes the
recording with its provenance; the golden command, the `harness run` stage and the upgrade report all record through it.

`record_sets(base_url, served_name, sets, api_key=None)` -> ({set: [record]}, {set: seconds}). Requests are sent
sequentially so the engine never batches two golden prompts together (batch shape can change CPU numerics).
An HTTP error or malformed response is an EngineResponseError naming the prompt: a recording is all or nothing
(a connection closed before any answer began is sent once more, and the record says so: `connection_retried`).
A 4xx refusal of one prompt is that prompt's golden outcome, but a set whose every prompt was refused records nothing
of the engine (a wrong URL, a proxy, an API mismatch): EngineResponseError too (exit 1, like any engine failure).
Each answer is bounded in wall time and bytes (a server that drips or never ends is a failure, not a hang).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx

from harness import __version__
from harness.client import make_sync_client
from harness.engines import EngineProfile
from harness.errors import HarnessError
from harness.golden.constraints import check_output, tool_call_view
from harness.golden.prompts import Prompt, PromptSet
from harness.net import redact_url
from harness.secrets import redact_env, scrub, scrub_tree

MAX_RESPONSE_BYTES = 64 << 20  # a golden answer is a few KB of logprobs

__all__ = [
    "EngineResponseError",
    "record_prompt",
    "record_sets",
    "normalize_response",
    "key_paths",
    "build_meta",
    "bounded_request",
    "NoAnswer",
    "repo_relative",
    "reported_version",
    "record_with_engine",
    "UrlEngine",
]


class EngineResponseError(HarnessError):
    exit_code = 1


def _token_id(tok: Any) -> int | None:
    if isinstance(tok, str) and tok.startswith("token_id:"):
        try:
            return int(tok[len("token_id:") :])
        except ValueError:
            return None
    return None


def key_paths(obj: Any, prefix: str = "") -> set[str]:
    """Dotted key paths of a JSON value (lists become `[]`), with `=null` for keys whose value is null.
    Used to show wire-shape changes (e.g. `system_fingerprint` appearing) between engine versions."""
    out: set[str] = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            p = f"{prefix}.{k}" if prefix else k
            if v is None:
                out.add(p + "=null")
            else:
                out.add(p)
                if k not in ("logprobs", "prompt_token_ids", "token_ids", "prompt_logprobs"):
                    out |= key_paths(v, p)
    elif isinstance(obj, list):
        for v in obj:
            out |= key_paths(v, prefix + "[]")
    return out


def _sorted_top(pairs: list[tuple[int, float]]) -> list[list]:
    return [[i, lp] for i, lp in sorted(pairs, key=lambda t: (-t[1], t[0]))]


def _entry_token_id(entry: dict) -> int | None:
    """A logprob entry's token id: `token` written as "token_id:N" (return_tokens_as_token_ids), or an integer `id`
    field next to it (servers that send the id with every entry)."""
    tid = _token_id(entry.get("token"))
    if tid is None and type(entry.get("id")) is int:
        tid = entry["id"]
    return tid


def _chat_logprobs(ch: dict) -> list[list]:
    content = ((ch.get("logprobs") or {}).get("content")) or []
    rows = []
    for item in content:
        tid = _entry_token_id(item)
        tops = [(_entry_token_id(t), float(t.get("logprob"))) for t in item.get("top_logprobs") or []]
        rows.append([tid, float(item.get("logprob")), _sorted_top([(i, lp) for i, lp in tops if i is not None])])
    return rows


def _completion_logprobs(ch: dict) -> list[list]:
    lp = ch.get("logprobs") or {}
    toks, vals, tops = lp.get("tokens") or [], lp.get("token_logprobs") or [], lp.get("top_logprobs") or []
    rows = []
    for j, tok in enumerate(toks):
        top = tops[j] if j < len(tops) and isinstance(tops[j], dict) else {}
        pairs = [(_token_id(k), float(v)) for k, v in top.items()]
        val = vals[j] if j < len(vals) and vals[j] is not None else float("-inf")
        rows.append([_token_id(tok), float(val), _sorted_top([(i, v) for i, v in pairs if i is not None])])
    return rows


def _record_head(prompt: Prompt, set_name: str) -> dict[str, Any]:
    """What every golden record starts with: which prompt, which set, and the exact request sent."""
    return {
        "id": prompt.id,
        "set": set_name,
        "endpoint": prompt.endpoint,
        "request_sha256": prompt.request_sha256(),
        "request": prompt.body(),
    }


REASONING_FIELDS = ("reasoning_content", "reasoning")  # vLLM renamed the first to the second (~0.12)


def _reasoning_view(message: dict) -> dict | None:
    """{field, text} of a message's reasoning (the first non-empty reasoning field), or None when it has none."""
    for f in REASONING_FIELDS:
        v = message.get(f)
        if isinstance(v, str) and v:
            return {"field": f, "text": v}
    return None


def normalize_response(prompt: Prompt, set_name: str, resp: dict) -> dict:
    """One golden record from one raw response. Raises ValueError when the response lacks what a record needs."""
    choices = []
    constraint = prompt.constraint()
    for ch in sorted(resp.get("choices") or [], key=lambda c: c.get("index", 0)):
        calls: list[dict] = []
        if prompt.endpoint == "chat":
            message = ch.get("message") or {}
            text = message.get("content") or ""
            calls = tool_call_view(message.get("tool_calls"))
            rows = _chat_logprobs(ch)
        else:
            text = ch.get("text") or ""
            # a completion answered with chat-shaped logprobs ({content: [...]}) is read as such
            chat_shaped = isinstance((ch.get("logprobs") or {}).get("content"), list)
            rows = _chat_logprobs(ch) if chat_shaped else _completion_logprobs(ch)
        ids = ch.get("token_ids")
        from_logprobs = [r[0] for r in rows]
        if not isinstance(ids, list):
            if any(i is None for i in from_logprobs):
                raise ValueError("no token_ids, and logprob entries carry no token id (token_id:N or an id field)")
            ids = from_logprobs
        if any(r[0] is None for r in rows):
            raise ValueError("logprob entries carry no token id (return_tokens_as_token_ids ignored, no id field)")
        entry = {
            "index": ch.get("index", 0),
            "text": text,
            "token_ids": [int(i) for i in ids],
            "finish_reason": ch.get("finish_reason"),
            "stop_reason": ch.get("stop_reason"),
            "logprobs": rows,
        }
        # what a client sees of a constrained prompt: its tool calls, and whether the output held the constraint
        # (both only where they mean something, so the records of unconstrained prompts keep their old shape)
        if "tools" in prompt.options or calls:
            entry["tool_calls"] = calls
        reasoning = _reasoning_view(ch.get("message") or {}) if prompt.endpoint == "chat" else None
        if reasoning is not None:  # only where an engine's reasoning parser spoke: older records keep their shape
            entry["reasoning"] = reasoning
        if constraint is not None:
            entry["constraint"] = check_output(constraint, text, calls, entry["finish_reason"])
        choices.append(entry)
    n = int(prompt.body()["n"])
    if len(choices) != n:
        raise ValueError(f"expected {n} choices, got {len(choices)}")
    return {
        **_record_head(prompt, set_name),
        "choices": choices,
        "usage": resp.get("usage"),
        "system_fingerprint": resp.get("system_fingerprint"),
        "response_keys": sorted(key_paths({k: v for k, v in resp.items() if k not in ("id", "created")})),
    }


class _Answer:
    """Status and body of one bounded POST (httpx.Response-like for what record_prompt needs)."""

    def __init__(self, status_code: int, content: bytes):
        self.status_code, self.content = status_code, content
        self.text = content.decode("utf-8", "replace")

    def json(self) -> Any:
        from harness.readers import parse_json

        return parse_json(self.text, "response", "engine answer", allow_nan=True)


class NoAnswer(httpx.TransportError):
    """The connection failed before any answer began (no status line): on a kept-alive connection, the server
    closed it after its previous answer."""


def bounded_request(client: httpx.Client, method: str, path: str, wall_s: float, **kw: Any) -> _Answer:
    """Send and read the whole answer within `wall_s` seconds and MAX_RESPONSE_BYTES (httpx's timeout is per read
    only: a server that drips a byte a second would never time out). A reset or close before the status line is
    NoAnswer."""
    deadline = time.monotonic() + wall_s
    try:
        stream = client.stream(method, path, **kw)
        r = stream.__enter__()
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
        raise NoAnswer(f"{type(exc).__name__}: {exc}") from None
    try:
        buf = bytearray()
        for chunk in r.iter_bytes():
            buf += chunk
            if len(buf) > MAX_RESPONSE_BYTES:
                raise httpx.ReadError(f"answer larger than {MAX_RESPONSE_BYTES} bytes")
            if time.monotonic() > deadline:
                raise httpx.ReadTimeout(f"answer not complete after {wall_s:.0f} s")
        return _Answer(r.status_code, bytes(buf))
    finally:
        stream.__exit__(None, None, None)


def record_prompt(client: httpx.Client, served_name: str, prompt: Prompt, set_name: str, *,
                  wall_s: float = 120.0) -> dict:  # fmt: skip
    body = dict(prompt.body(), model=served_name)
    retried: str | None = None
    for attempt in (1, 2):
        try:
            r = bounded_request(client, "POST", prompt.path, wall_s, json=body)
            break
        except NoAnswer as exc:
            # vLLM 0.18.1 to 0.25.1 answer 400 to an n=2 greedy request and then raise in the handler, and uvicorn
            # resets that kept-alive connection: the next prompt's request dies on it unanswered. Sent once more, on
            # a new connection (a golden request is deterministic, so a second send is the same request); said in
            # the record.
            if attempt == 2:
                raise EngineResponseError(f"prompt {set_name}/{prompt.id}: request failed twice: {exc}") from None
            retried = str(exc)
        except httpx.HTTPError as exc:
            raise EngineResponseError(
                f"prompt {set_name}/{prompt.id}: request failed: {type(exc).__name__}: {exc}"
            ) from None
    rec = _record_answer(r, prompt, set_name)
    if retried:
        rec["connection_retried"] = retried[:300]
    return rec


def _record_answer(r: _Answer, prompt: Prompt, set_name: str) -> dict:
    if 400 <= r.status_code < 500 and r.status_code not in (401, 403, 404, 408, 429):
        # The engine refused this request (e.g. 0.32.0: "n must be 1 when using greedy sampling"): that *is* its
        # golden output; the diff compares it with the other version's answer.
        try:
            answer = r.json()
            err = (answer.get("error") if isinstance(answer, dict) else None) or {}
        except HarnessError:
            err = {}
        if not isinstance(err, dict):
            err = {"message": str(err)}
        kind = err.get("type")
        return {
            **_record_head(prompt, set_name),
            "choices": [],
            "error": {
                "status": r.status_code,
                "type": kind if isinstance(kind, (str, type(None))) else str(kind),
                "message": str(err.get("message", r.text[:300]))[:2000],
            },
            "usage": None,
            "system_fingerprint": None,
            "response_keys": [],
        }
    if r.status_code != 200:
        raise EngineResponseError(f"prompt {set_name}/{prompt.id}: HTTP {r.status_code}: {r.text[:300]}")
    try:
        answer = r.json()
        if not isinstance(answer, dict):
            raise ValueError("not a JSON object")
        rec = normalize_response(prompt, set_name, answer)
    except (HarnessError, ValueError, TypeError, AttributeError) as exc:
        # the engine's answer is data we did not write: any shape problem is that prompt's failure, not a traceback
        msg = exc.one_line() if isinstance(exc, HarnessError) else f"{type(exc).__name__}: {exc}"
        raise EngineResponseError(f"prompt {set_name}/{prompt.id}: malformed response: {msg}") from None
    from harness.golden.store import validate_record

    problem = validate_record(rec)
    if problem:
        raise EngineResponseError(f"prompt {set_name}/{prompt.id}: malformed response: {problem}")
    return rec


def _refused_everything(set_name: str, records: list[dict]) -> EngineResponseError | None:
    errors = [r["error"] for r in records if r.get("error")]
    if records and len(errors) == len(records):
        e = errors[0]
        return EngineResponseError(
            f"set {set_name}: the engine refused every prompt ({len(errors)} of {len(records)}; first: HTTP {e['status']} "
            f"{e.get('type')}: {str(e.get('message'))[:160]}); that is no golden recording, nothing written"
        )
    return None


# What a record holds of the prompt file (never of the server): left as written, so a key that happens to share six
# characters with a request hash cannot change which prompt a record belongs to.
_OWN_FIELDS = ("id", "set", "endpoint", "request_sha256", "request")


def _scrubbed(record: dict, keys: list[str | None]) -> dict:
    """`record` with the key (and its 6+ character prefixes and suffixes) cut out of everything the server sent."""
    answer = scrub_tree({k: v for k, v in record.items() if k not in _OWN_FIELDS}, keys)
    assert isinstance(answer, dict)  # scrub_tree keeps a dict a dict
    return {**{k: record[k] for k in _OWN_FIELDS if k in record}, **answer}


def reported_version(
    base_url: str, api_key: str | None = None, wall_s: float = 10.0, *, profile: EngineProfile
) -> str | None:
    """The version the engine's identity endpoint (its profile's) reports, or None when it does not say."""
    try:
        with make_sync_client(base_url, api_key=api_key, timeout=wall_s) as client:
            doc = bounded_request(client, "GET", profile.identity.path, wall_s).json()
    except (httpx.HTTPError, HarnessError, ValueError):
        return None
    return profile.reported_version(doc)


def record_sets(
    base_url: str,
    served_name: str,
    sets: list[PromptSet],
    *,
    api_key: str | None = None,
    timeout: float = 120.0,
    failed: dict[str, str] | None = None,
) -> tuple[dict[str, list[dict]], dict[str, float]]:
    """failed: when given, a set that fails is left out and its one-line reason put there (the matrix keeps the
    sets that recorded); without it the first failure raises (a recording is all or nothing).
    A server may echo the API key (in a completion, an error message): every record and every failure's text has the
    key, and any 6+ character prefix or suffix of it, replaced by *** (harness.secrets.scrub) before it goes anywhere."""
    out: dict[str, list[dict]] = {}
    timing: dict[str, float] = {}
    keys = [api_key]
    with make_sync_client(base_url, api_key=api_key, timeout=timeout) as client:
        for s in sets:
            t0 = time.perf_counter()
            try:
                records = [record_prompt(client, served_name, p, s.name, wall_s=timeout) for p in s.prompts]
                refused = _refused_everything(s.name, records)
                if refused:
                    raise refused
            except EngineResponseError as exc:
                if failed is None:
                    raise EngineResponseError(scrub(str(exc), keys)) from None
                failed[s.name] = scrub(exc.one_line(), keys)
                continue
            out[s.name] = [_scrubbed(r, keys) for r in records]
            timing[s.name] = round(time.perf_counter() - t0, 3)
    return out, timing


def repo_relative(path: Any) -> str | None:
    """`path` relative to the repository (posix), or None outside it: no machine's absolute path in a recording."""
    from harness.settings import REPO_ROOT

    if not path:
        return None
    try:
        return Path(path).resolve().relative_to(REPO_ROOT.resolve()).as_posix()
    except ValueError:
        return None


def build_meta(
    manifest: Any,
    sets: list[PromptSet],
    *,
    identity: dict | None,
    engine_version: str | None,
    timing: dict[str, float],
    base_url: str,
    hardware: dict | str | None = None,
) -> dict:
    """Provenance of a recording: manifest pins, engine /version, lock hash or image digest, model, args, harness,
    and the hardware (harness.hardware). URLs lose their userinfo, env values their secrets (harness.secrets)."""
    py, dk = manifest.runtime.python, manifest.runtime.docker
    runtime: dict[str, Any] = {}
    if py is not None:
        from harness.hashing import file_sha256

        lock = manifest.lock_path
        runtime = {
            "kind": "python",
            "python": py.version,
            "lock": py.lock,
            "lock_sha256": file_sha256(lock) if lock and lock.is_file() else None,
        }
    elif dk is not None:
        runtime = {"kind": "docker", "image": dk.image, "digest": dk.digest}
    elif manifest.runtime.source is not None:
        runtime = {"kind": "source", **manifest.runtime.source.model_dump()}
    ident = dict(identity or {})
    if "base_url" in ident:
        ident["base_url"] = redact_url(ident["base_url"])
    meta = {
        "engine": {
            "kind": manifest.engine.kind,
            "version": manifest.engine.version,
            "reported_version": engine_version,
        },
        "manifest": {"name": manifest.name, "path": repo_relative(manifest.path), "sha256": manifest.file_sha256()},
        "runtime": runtime,
        "model": {
            "source": manifest.model.source,
            "sha256": manifest.model.sha256,
            "served_name": manifest.model.served_name,
        },
        "server": {"args": list(manifest.server.args), "env": redact_env(manifest.server.env)},
        "identity": ident,
        "harness_version": __version__,
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "base_url": redact_url(base_url),
        "timing_s": timing,
        "sets": {
            s.name: {
                "prompt_file": s.path.name if s.path else None,
                "prompt_file_sha256": s.file_sha256,
                "ids": s.ids(),
            }
            for s in sets
        },
    }
    if hardware is not None:
        meta["hardware"] = hardware
    return meta


def _hardware(engine) -> dict:
    """The recording's hardware: this host's CPU/GPU, and the torch build of the engine environment's python when
    the harness launched the engine from one (Docker and --url engines: torch unknown)."""
    from harness.hardware import collect

    spec = getattr(engine, "spec", None)
    env_dir = getattr(spec, "env_dir", None)
    if getattr(engine, "torch_unknown", None):  # --url: the harness did not start it, so it knows no environment
        return collect(None, torch_unknown=engine.torch_unknown)
    if env_dir:
        return collect(Path(env_dir) / "bin" / "python")
    if spec is not None and getattr(spec.manifest.runtime, "docker", None) is not None:
        return collect(None, torch_unknown="docker engine: the image's torch is not probed")
    return collect(None, torch_unknown="engine not launched from a python environment (no torch)")


def record_with_engine(
    engine, manifest, sets, out: Path | None, *, force: bool = False, write: bool = True, failed=None
):
    """Record `sets` from a running, verified engine. Returns (recording dir or None, {set: records}, meta).
    failed: see record_sets; the recording then holds the sets that recorded (none written when no set did)."""
    api_key = engine.spec.api_key() if hasattr(engine, "spec") else None
    reported = reported_version(engine.base_url, api_key, profile=manifest.profile)
    if reported is not None:  # the server's own text: no echoed key in meta.json or on the terminal
        reported = scrub(reported, [api_key])
    records, timing = record_sets(engine.base_url, manifest.model.served_name, sets, api_key=api_key, failed=failed)
    if failed is not None and not records:
        return None, records, None
    meta = build_meta(
        manifest,
        [s for s in sets if s.name in records],
        identity=getattr(engine, "identity", None),
        engine_version=reported,
        timing=timing,
        base_url=engine.base_url,
        hardware=_hardware(engine),
    )
    if write and out is not None:
        from harness.golden.store import write_recording

        write_recording(out, meta, records, force=force)
    return out, records, meta


class UrlEngine:
    """A running engine given by URL (no launch, no identity check beyond /version)."""

    torch_unknown = "recorded against --url"

    def __init__(self, url: str, manifest):
        self.base_url = url.rstrip("/")
        self.identity = {"note": "recorded from --url; identity not verified by the harness"}
        self._manifest = manifest

    class _Spec:
        def __init__(self, m):
            self.manifest = m

        def api_key(self):
            from harness.settings import api_key_from_env

            # the manifest names a variable on purpose: unset or empty is refused, never a run without the key
            name = self.manifest.server.api_key_env
            return api_key_from_env(name) if name else None

    @property
    def spec(self):
        return self._Spec(self._manifest)
