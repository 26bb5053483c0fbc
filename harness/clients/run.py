"""Running a client driver and reading what it printed: untrusted output from a third-party library, so it is read
bounded (MAX_OUTPUT_BYTES of stdout, the tail of stderr), bounded in time (the process group is killed at the
deadline, or when the case itself is cancelled), parsed as one JSON object of bounded depth, and scrubbed of the
run's keys; every text shown from it goes through harness.shown.

    outcome = await run_driver(env, spec.driver, base_url=proxy.base_url, model=m, feature="tools",
                               timeout_s=60, secrets=[ctx.api_key])
    outcome.result        # the driver's JSON object, or None with outcome.problem saying why
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.clients.env import ClientEnv
from harness.readers import check_depth
from harness.secrets import scrub, scrub_tree
from harness.shown import shown

__all__ = ["DriverOutcome", "run_driver", "parse_output", "driver_env", "MAX_OUTPUT_BYTES", "STDERR_TAIL_BYTES"]

MAX_OUTPUT_BYTES = 256 << 10  # one JSON line: a result and an exception text of 2000 characters are a few KB
STDERR_TAIL_BYTES = 4 << 10
MAX_DEPTH = 32
DEAD_PROXY = "http://127.0.0.1:9"  # the discard port: a client that tries to leave loopback through a proxy fails
_KEEP_ENV = ("PATH", "LANG", "LC_ALL", "TZ")


@dataclass
class DriverOutcome:
    result: dict[str, Any] | None  # the driver's JSON object (scrubbed), None when there is none to judge
    problem: str = ""  # why there is no result: timed out, output over its bound, not JSON, exited without one
    timed_out: bool = False
    exit_code: int | None = None
    stderr_tail: str = ""  # scrubbed and shown escaped
    duration_s: float = 0.0


def driver_env(home: Path) -> dict[str, str]:
    """A minimal environment: no key of the user's, no proxy of the user's (every proxy variable points at a dead
    loopback port, loopback itself excepted), no telemetry, nothing fetched at import."""
    env = {k: os.environ[k] for k in _KEEP_ENV if k in os.environ}
    env.update({
        "HOME": str(home), "OPENAI_API_KEY": "harness-client-key", "ANTHROPIC_API_KEY": "harness-client-key",
        "HTTP_PROXY": DEAD_PROXY, "HTTPS_PROXY": DEAD_PROXY, "ALL_PROXY": DEAD_PROXY, "http_proxy": DEAD_PROXY,
        "https_proxy": DEAD_PROXY, "all_proxy": DEAD_PROXY, "NO_PROXY": "127.0.0.1,localhost,::1",
        "no_proxy": "127.0.0.1,localhost,::1", "OPENAI_AGENTS_DISABLE_TRACING": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_TELEMETRY": "False", "HF_HUB_OFFLINE": "1", "DO_NOT_TRACK": "1",
    })  # fmt: skip
    return env


def parse_output(stdout: bytes, secrets: Iterable[str | None], *, over_bound: bool = False) -> tuple[dict | None, str]:
    """(the driver's JSON object, "") or (None, why not). The object is the last non-empty line; any key of the run
    in it is replaced by ***; a problem quotes at most 200 characters of the output, escaped."""
    keys = list(secrets)
    if over_bound:
        return None, f"the driver printed over {MAX_OUTPUT_BYTES} bytes; not read"
    text = stdout.decode("utf-8", "replace")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return None, "the driver printed nothing"
    last = lines[-1]
    try:
        doc = json.loads(last)
    except (ValueError, RecursionError):
        return None, f"the driver's last line is not JSON: {shown(scrub(last, keys))[:200]}"
    if check_depth(doc, MAX_DEPTH) is not None:
        return None, f"the driver's JSON is nested deeper than {MAX_DEPTH}"
    if not isinstance(doc, dict) or not isinstance(doc.get("ok"), bool):
        return None, f"the driver's JSON is not an object with ok true/false: {shown(scrub(last, keys))[:200]}"
    scrubbed = scrub_tree(doc, keys)
    return scrubbed if isinstance(scrubbed, dict) else None, ""


async def _read_bounded(stream: asyncio.StreamReader, limit: int) -> tuple[bytes, bool]:
    """At most `limit` bytes, and whether there was more (the rest is read and dropped, so the writer never blocks)."""
    buf = bytearray()
    over = False
    while chunk := await stream.read(65536):
        if len(buf) + len(chunk) > limit:
            over = True
            continue
        buf += chunk
    return bytes(buf), over


async def _tail(stream: asyncio.StreamReader, keep: int) -> bytes:
    buf = b""
    while chunk := await stream.read(65536):
        buf = (buf + chunk)[-keep:]
    return buf


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)  # the driver's own group (start_new_session): the client's children too


def _staged(env: ClientEnv, driver: Path, stage: Path) -> Path:
    """The driver to run: itself, or (with node_modules) a copy in `stage` beside a link to them, the way a project
    imports its packages: from its own node_modules, never a global one or the user's."""
    if env.modules is None:
        return driver
    copy = stage / driver.name
    shutil.copyfile(driver, copy)
    (stage / "node_modules").symlink_to(env.modules, target_is_directory=True)
    return copy


async def run_driver(env: ClientEnv, driver: Path, *, base_url: str, model: str, feature: str, timeout_s: float,
                     secrets: Iterable[str | None] = (), home: Path | None = None) -> DriverOutcome:  # fmt: skip
    """Run one feature of a driver with its client's interpreter; the outcome, never an exception for what the
    driver did. Killed (with its process group) at `timeout_s` or when the calling task is cancelled."""
    work = home if home is not None else Path(os.environ.get("TMPDIR", "/tmp"))
    with tempfile.TemporaryDirectory(prefix="harness-driver-", dir=work) as stage:
        return await _run(env, _staged(env, driver, Path(stage)), base_url=base_url, model=model, feature=feature,
                          timeout_s=timeout_s, keys=list(secrets), work=work)  # fmt: skip


async def _run(env: ClientEnv, driver: Path, *, base_url: str, model: str, feature: str, timeout_s: float,
               keys: list[str | None], work: Path) -> DriverOutcome:  # fmt: skip
    argv = [*env.command, str(driver), "--base-url", base_url, "--model", model, "--feature", feature]
    t0 = time.monotonic()
    proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE, env=driver_env(work), cwd=str(work),
                                                start_new_session=True)  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    reading = asyncio.gather(_read_bounded(proc.stdout, MAX_OUTPUT_BYTES), _tail(proc.stderr, STDERR_TAIL_BYTES))
    timed_out = False
    try:
        (out, over), err = await asyncio.wait_for(asyncio.shield(reading), timeout_s)
        await asyncio.wait_for(proc.wait(), max(1.0, timeout_s - (time.monotonic() - t0)))
    except TimeoutError:
        timed_out = True
        _kill(proc.pid)
        (out, over), err = await reading  # the pipes close with the process group
        await proc.wait()
    finally:
        if proc.returncode is None:  # cancelled (the case's own bound): nothing of the client outlives it
            _kill(proc.pid)
            reading.cancel()
            with contextlib.suppress(BaseException):
                await proc.wait()
    tail = shown(scrub(err.decode("utf-8", "replace"), keys))[-2000:]
    outcome = DriverOutcome(None, timed_out=timed_out, exit_code=proc.returncode, stderr_tail=tail,
                            duration_s=time.monotonic() - t0)  # fmt: skip
    if timed_out:
        outcome.problem = f"the client did not finish within {timeout_s:g} s (killed)"
        return outcome
    outcome.result, outcome.problem = parse_output(out, keys, over_bound=over)
    if outcome.result is None and proc.returncode:
        outcome.problem += f" (exit code {proc.returncode})"
    return outcome
