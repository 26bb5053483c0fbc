"""Health and identity endpoints: /health, /version or /info, /v1/models."""

from __future__ import annotations

from harness.conformance.context import MAX_MODELS_BYTES
from harness.conformance.model import Check, Deviations, failed, passed, skipped
from harness.conformance.registry import case


def absent_without_profile(ctx, path: str, status: int | None) -> Check | None:
    """A skip when no engine profile describes the server and it has no `path` (HTTP 404): the OpenAI API has no
    such endpoint, so only a profile could say the server should. None when the case judges the answer."""
    if ctx.profile is None and status == 404:
        return skipped(f"no engine profile describes this server, and it has no {path} (HTTP 404); the OpenAI API "
                       f"defines none")  # fmt: skip
    return None


@case("health.health", "GET /health answers 200 while the engine is ready")
async def health(ctx) -> Check:
    t = await ctx.get("/health")
    if t.status == 200:
        return passed()
    # this case's own verdict; whether the server is still there is the runner's liveness check (ctx.liveness)
    why = t.error or (f"liveness is judged by {ctx.liveness()[1]}" if ctx.profile is None else "")
    return failed(f"status-{t.status}", 200, t.status, note=why)


@case("health.version", "the engine's identity endpoint reports the engine version the expectation file names")
async def version(ctx) -> Check:
    from harness.engines import PROFILES

    want = str(ctx.exp.engine.get("version", ""))
    # the profile (the launched engine's, or the expectation file's engine kind's) names the identity endpoint;
    # without one, every profile's is tried, and a server that has none of them is not judged (skip)
    profiles = [ctx.profile] if ctx.profile is not None else list(PROFILES.values())
    for p in profiles:
        t = await ctx.get(p.identity.path)
        doc, err = t.body_json()
        got = p.reported_version(doc) if t.status == 200 and not err else None
        if got is not None:
            if want and not (got == want or got.startswith(want + ".")):
                return failed("version-mismatch", want, got, note=p.identity.path)
            return passed(f"{p.identity.path}: {got}")
    paths = " or ".join(p.identity.path for p in profiles)
    if ctx.profile is None:
        return skipped(f"no engine profile describes this server: none of its identity endpoints ({paths}) reports "
                       f"a version, and the OpenAI API has none")  # fmt: skip
    return failed("no-version-endpoint", f"{paths} with a version field", "none")


@case("health.models", "GET /v1/models lists the served model as {object: list, data: [{id, object: model}]}")
async def models(ctx) -> Check:
    t = await ctx.get("/v1/models", max_bytes=MAX_MODELS_BYTES)
    if t.status == 200 and t.ended == "limit":  # a list the harness does not read whole is not judged
        return skipped(f"GET /v1/models went past the harness's bound of {MAX_MODELS_BYTES >> 20} MiB: not judged")
    doc, err = t.body_json()
    if t.status != 200 or err:
        return failed(f"status-{t.status}", 200, t.status, note=err or "")
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or doc.get("object") != "list" or not isinstance(data, list):
        return failed("models-shape", "{object: list, data: [...]}", doc)
    ids = [m.get("id") for m in data if isinstance(m, dict)]
    dev = Deviations()
    if any(not isinstance(m, dict) or m.get("object") != "model" for m in data):
        dev.add("model-entry-shape", "each entry has object: model", data[:2])
    if ctx.model and ctx.model not in ids:
        dev.add("served-name-missing", ctx.model, ids)
    return dev.check(passed(f"ids={ids[:8]}" + (f" and {len(ids) - 8} more" if len(ids) > 8 else "")))
