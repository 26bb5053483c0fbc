"""The clients people run, as judges (`client.<name>.<feature>`, issue 33): each pinned client (harness.clients.spec)
runs its driver with its own interpreter against the server, through the harness's loopback recording proxy (so the
wire exchange is the case's evidence like every other case's), and the client's own result is judged against the
scripted model's scripts (harness.models.scripted). The client's exception is the evidence of a non-pass: its HTTP
status as the tag (`status-400`) when it carries one, else its type (`error-ValidationError`).

A client whose environment is not installed skips, saying how to install it (`harness clients install`); a lock that
does not match its pinned sha256 is an error before anything of it runs. Selected only with the scripted model.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

from harness.clients.env import installed_client
from harness.clients.proxy import LoopbackProxy
from harness.clients.run import DriverOutcome, run_driver
from harness.clients.spec import CLIENTS, FEATURES, ClientSpec
from harness.conformance.case import SCRIPTED_MODEL
from harness.conformance.model import ABSENT_STATUSES, Check, Deviations, Verdict, errored, failed, passed, skipped
from harness.conformance.registry import case
from harness.errors import HarnessError
from harness.models.scripted import ANSWERS, TOOL_CALLS
from harness.shown import shown

__all__ = ["judge_result", "error_tag", "CASE_TIMEOUT_S", "DRIVER_TIMEOUT_S"]

CASE_TIMEOUT_S = 90.0
DRIVER_TIMEOUT_S = 75.0  # under the case's bound: the harness kills a hanging client itself and says so
TEXT_SHOWN = 300
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_GREETING = ANSWERS["think"]
_AFTER_TOOL = ANSWERS["after_tool"]
_ONE_CALL = [[name, args] for name, args in TOOL_CALLS["call"]]
_TWO_CALLS = [[name, args] for name, args in TOOL_CALLS["parallel"]]
# feature -> what the client's result must hold
_ANSWER = {"chat", "stream", "responses", "messages", "messages-stream"}
_TOOL_LOOP = {"tools": _ONE_CALL, "responses-tools": _ONE_CALL, "messages-tools": _ONE_CALL,
              "parallel": _TWO_CALLS, "messages-parallel": _TWO_CALLS}  # fmt: skip
_STRUCTURED = {"structured", "structured-json"}


def _text(value: Any) -> Any:
    return shown(value)[:TEXT_SHOWN] if isinstance(value, str) else value


def error_tag(error: Any) -> str:
    """The tag for a client's exception: `status-NNN` when it carries an HTTP status, else `error-<its type>` (a
    type name that is not a plain identifier is `client-error`: a tag is the harness's word, never free text)."""
    err = error if isinstance(error, dict) else {}
    status = err.get("status")
    if type(status) is int and 100 <= status <= 599:
        return f"status-{status}"
    typ = err.get("type")
    return f"error-{typ}" if isinstance(typ, str) and _IDENTIFIER.fullmatch(typ) else "client-error"


def _client_error(result: dict[str, Any]) -> Check:
    raw = result.get("error")
    err: dict[str, Any] = raw if isinstance(raw, dict) else {}
    tag = error_tag(err)
    actual: dict[str, Any] = {k: _text(err.get(k)) for k in ("type", "message", "status") if k in err}
    cause = err.get("cause")
    if isinstance(cause, dict):
        actual["cause"] = {k: _text(cause.get(k)) for k in ("type", "message")}
    note = f"{_text(result.get('client'))} raised {_text(err.get('type'))}: {_text(err.get('message'))}"
    status = err.get("status")
    message = str(err.get("message") or "")
    if status in ABSENT_STATUSES and "model" not in message.lower():  # the route itself is not served
        return Check(Verdict.ABSENT, tag, actual=actual, note=f"not served: {note}")
    return failed(tag, "the client's result", actual, note=note)


def _calls(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def judge_result(feature: str, result: dict[str, Any]) -> Check:
    """The verdict on one driver result (`ok` false: the client's exception)."""
    if result.get("ok") is not True:
        return _client_error(result)
    text = result.get("text")
    said = text.strip() if isinstance(text, str) else text
    dev = Deviations()
    if feature in _ANSWER and said != _GREETING:
        dev.add("wrong-answer", _GREETING, _text(text))
    if feature in _TOOL_LOOP:
        want = _TOOL_LOOP[feature]
        seen = _calls(result.get("calls"))
        ordered = sorted(seen, key=lambda c: str(c[0]) if isinstance(c, list) and c else "")
        if ordered != sorted(want, key=lambda c: str(c[0])):
            dev.add("wrong-tool-calls", want, _text(repr(seen)) if len(repr(seen)) > TEXT_SHOWN else seen)
        if said != _AFTER_TOOL:
            dev.add("wrong-answer", _AFTER_TOOL, _text(text))
    if feature in _STRUCTURED:
        parsed = result.get("parsed")
        ok = isinstance(parsed, dict) and isinstance(parsed.get("name"), str) and type(parsed.get("count")) is int
        if not ok:
            dev.add("not-parsed", "an Item(name: str, count: int)", _text(repr(parsed)) if parsed else _text(text))
    return dev.check(otherwise=passed(_text(repr(result.get("parsed") or text))[:120]))


def _with_driver(chk: Check, outcome: DriverOutcome, result: dict[str, Any] | None) -> Check:
    chk.extra["driver_s"] = round(outcome.duration_s, 2)
    if result is not None and isinstance(result.get("client"), str):
        chk.extra["client"] = _text(result["client"])
    if outcome.stderr_tail and (chk.status is not Verdict.PASS or result is None):
        chk.extra["stderr_tail"] = outcome.stderr_tail[-1000:]
    return chk


async def run_client(ctx: Any, spec: ClientSpec, feature: str, case_id: str) -> Check:
    try:
        env = installed_client(spec)
    except HarnessError as exc:  # a lock that is not the pinned one: refused before anything of it runs
        return errored(f"client {spec.name} refused: {shown(exc.one_line())}")
    if env is None:
        return skipped(f"client {spec.name} ({spec.package} {spec.version}) is not installed: "
                       f"harness clients install {spec.name}")  # fmt: skip
    async with LoopbackProxy(ctx.new_client(ctx.api_key), case_id) as proxy:
        with tempfile.TemporaryDirectory(prefix="harness-client-") as home:
            outcome = await run_driver(env, spec.driver, base_url=proxy.base_url, model=ctx.model, feature=feature,
                                       timeout_s=DRIVER_TIMEOUT_S, secrets=[ctx.api_key, ctx.engine_api_key],
                                       home=Path(home))  # fmt: skip
    if outcome.timed_out:
        chk = failed("client-timeout", f"an answer within {DRIVER_TIMEOUT_S:g} s", None, note=outcome.problem)
    elif outcome.result is None:
        chk = errored(f"client {spec.name}: {outcome.problem}")
    else:
        chk = judge_result(feature, outcome.result)
    return _with_driver(chk, outcome, outcome.result)


def _register(spec: ClientSpec, feature: str) -> None:
    case_id = f"client.{spec.name}.{feature}"

    async def run(ctx: Any) -> Check:
        return await run_client(ctx, spec, feature, case_id)

    case(case_id, f"{spec.package} {spec.version}: {FEATURES[feature]}",
         timeout_s=CASE_TIMEOUT_S, needs=(SCRIPTED_MODEL,))(run)  # fmt: skip


for _spec in CLIENTS.values():
    for _feature in _spec.features:
        _register(_spec, _feature)
