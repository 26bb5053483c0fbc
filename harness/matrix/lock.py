"""`harness lock NAME==VERSION`: a hashed lock for one release with `uv pip compile --generate-hashes`.

A release's wheel can pin a local-version build of a dependency (`dep==2.11.0+cpu`) that the public index does not
carry. Such a pin is read from the wheel's own METADATA (fetched with `pip download --no-deps`, through pip's
configuration); it is kept when a find-links directory holds that exact build, and otherwise overridden with the public
version (`dep==2.11.0`), the way the pinned locks were made by hand. The inputs are written beside the lock
(`<stem>.in`, `<stem>.overrides`) so it can be made again with the command in its header.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import InstallError, UsageError
from harness.manifest import parse_lock_text
from harness.outputs import atomic_write_text

__all__ = ["LockResult", "lock_release", "local_pin_overrides", "parse_requirement", "DEFAULT_PLATFORM"]

DEFAULT_PLATFORM = "x86_64-manylinux_2_28"
_REQ = re.compile(r"(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?)==(?P<version>[0-9][0-9A-Za-z.+!]{0,40})")
_PIN = re.compile(
    r"^Requires-Dist:\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*"
    r"\(?\s*==\s*(?P<version>[0-9][0-9A-Za-z.!]*)\+(?P<local>[0-9A-Za-z.]+)\s*\)?\s*(?P<marker>;.*)?$"
)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


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

    def to_json(self) -> dict[str, object]:
        return {
            "lock": str(self.lock),
            "requirement": self.requirement,
            "packages": self.packages,
            "seconds": self.seconds,
            "overrides": self.overrides,
            "kept_local": self.kept_local,
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
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise InstallError(f"cannot fetch the wheel of {requirement}: " + " | ".join(tail))
        say(f"lock: read the pins of {wheels[0].name}")
        with zipfile.ZipFile(wheels[0]) as z:
            names = [n for n in z.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1]
            if not names:
                raise InstallError(f"{wheels[0].name}: no .dist-info/METADATA")
            return z.read(names[0]).decode("utf-8", "replace")


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
    say: Callable[[str], None] = print,
) -> LockResult:
    """Write `out` (and its .in/.overrides inputs beside it). Refuses to replace an existing lock without force."""
    from harness.envs import find_uv, pip_find_links, uv_environment

    parse_requirement(requirement)
    for o in [*overrides, *extra]:
        parse_requirement(o)
    out = Path(out)
    if out.suffix != ".txt":
        raise UsageError(f"{out}: a lock file's name ends in .txt")
    if out.exists() and not force:
        raise UsageError(f"{out}: a lock is already there; pass --force to replace it")
    uv = find_uv()
    if uv is None:
        raise InstallError("uv is not installed (pip install uv, or the project's test extra)")
    links = list(pip_find_links() if find_links is None else find_links)
    all_overrides = list(overrides)
    kept: list[str] = []
    if auto_overrides:
        auto, kept = local_pin_overrides(_wheel_metadata(requirement, say), links)
        named = {_norm(o.split("==")[0]) for o in all_overrides}
        all_overrides += [o for o in auto if _norm(o.split("==")[0]) not in named]
    out.parent.mkdir(parents=True, exist_ok=True)
    stem = out.name[: -len(".txt")]
    atomic_write_text(out.parent / f"{stem}.in", "\n".join([requirement, *extra]) + "\n")
    cmd = [uv, "pip", "compile", "--no-config", f"{stem}.in", "--generate-hashes", "--python-version", python_version]
    cmd += ["--python-platform", python_platform]
    if all_overrides:
        atomic_write_text(out.parent / f"{stem}.overrides", "\n".join(all_overrides) + "\n")
        cmd += ["--override", f"{stem}.overrides"]
    for fl in links:
        cmd += ["--find-links", fl]
    for pkg in no_emit:
        cmd += ["--no-emit-package", pkg]
    cmd += ["-o", out.name]
    say(f"lock: {' '.join(['uv', *cmd[1:]])}")
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=out.parent, capture_output=True, text=True, env=uv_environment(), timeout=900)
    seconds = round(time.monotonic() - t0, 1)
    if proc.returncode != 0:
        tail = [ln for ln in proc.stderr.splitlines() if ln.strip()][-8:]
        raise InstallError(f"uv pip compile failed for {requirement}:\n" + "\n".join(tail))
    try:
        pins = parse_lock_text(out.read_text())
    except ValueError as exc:
        raise InstallError(f"{out}: uv wrote a lock the harness cannot read: {exc}") from None
    return LockResult(out, requirement, len(pins), seconds, all_overrides, kept, cmd)
