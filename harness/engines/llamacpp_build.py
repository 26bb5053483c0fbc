"""A pinned source build of llama.cpp's `llama-server`, cached and verified under `$HARNESS_HOME/builds/<key>`.

    binary = ensure_llama_server(LLAMA_CPP_SOURCE.sha256)         # fetch (pip download), verify, build once, verify after

Source: llama.cpp is vendored in the `llama-cpp-python` sdist on PyPI (`vendor/llama.cpp`, with `tools/server`); the
archive is pinned by sha256 (LLAMA_CPP_SOURCE). It is fetched with `pip download --no-deps --no-binary :all:
--require-hashes -r <requirement with --hash=sha256:PIN>` (pip's own index configuration, no other network) into
`$HARNESS_HOME/downloads/<sha256>/`, or taken from `archive=`. pip compares the hash as soon as the file is downloaded,
before it prepares the sdist's metadata (which runs the archive's build backend): an archive that is not the pinned one
never runs. Either way its sha256 is checked again against the pin before anything is extracted, and a mismatch is
refused showing both. Then the
commit the archive's git metadata records for the subdir (`<top>/.git/modules/<subdir>/HEAD`) must start with the
pinned commit (the manifest's engine.version): the build stamps the pinned commit into the binary, so this is what
makes the post-launch identity check (/props build_info) mean something.

Build: only `vendor/llama.cpp/` is extracted (tarfile `filter="data"`, and every member name checked first: no absolute
path, no `..`, no link or device), configured with CMake (Release, static, curl/OpenSSL/web UI/tests/examples off,
GGML_NATIVE off: see CMAKE_FLAGS) and only the `llama-server` target is built with `-j<jobs>` (2 by default), progress
lines (`[ 42%] Building CXX object ...`) shown as they come and the whole log kept in `build.log`. The build runs in a
temporary directory beside the final one with a minimal environment (CFLAGS, CXXFLAGS, LDFLAGS and friends from the
caller's environment cannot change the binary behind the key), then the binary, the log and `marker.json` (written last)
are renamed into place as one directory; sources and objects are deleted.

Key: sha256 of the canonical JSON of the key inputs: archive sha256, the C and C++ compilers' `--version` first lines
and full versions, the CMake version, the machine architecture, the CMake flags and the target. A different compiler
or flag is a different directory, never a silent reuse.

Verification: an existing `builds/<key>/marker.json` must name the same key inputs, and the binary's sha256 must equal
the one it records; then the build is reused without rebuilding. A mismatch is refused (InstallError, one line, both
values); a directory without a marker (an interrupted build) is removed and rebuilt. A file lock (`builds/<key>.lock`,
flock) serialises concurrent builds of one key: the second caller waits, then verifies the first one's result.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, TextIO

from harness.downloads import pip_download_failure, verify_archive
from harness.errors import InstallError
from harness.hashing import file_sha256
from harness.pkgnames import PROJECT_NAME, SDIST_FILENAME
from harness.settings import harness_home
from harness.shown import shown

__all__ = [
    "SourcePin",
    "LLAMA_CPP_SOURCE",
    "CMAKE_FLAGS",
    "TARGET",
    "MARKER",
    "build_key_inputs",
    "build_key",
    "build_dir",
    "fetch_archive",
    "verify_archive",
    "vendored_commit",
    "verify_commit",
    "safe_extract",
    "verify_build",
    "ensure_llama_server",
    "cmake_flags",
]

_EXACT_VERSION = re.compile(r"\d+(?:\.\d+)*")
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class SourcePin:
    package: str  # PyPI project holding the source
    version: str
    filename: str  # the sdist's file name on PyPI
    sha256: str  # of that file
    subdir: str  # the llama.cpp tree inside the archive, below its top directory
    commit: str  # upstream llama.cpp commit vendored there (what --version and /props report)
    build_lock: Path | None = None  # hashed lock of the sdist's build backend (runtime.source.build_lock)


LLAMA_CPP_SOURCE = SourcePin(
    package="llama-cpp-python",
    version="0.3.36",
    filename="llama_cpp_python-0.3.36.tar.gz",
    sha256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e",
    subdir="vendor/llama.cpp",
    commit="0c1e570",
)

TARGET = "llama-server"
MARKER = "marker.json"
MARKER_FORMAT = 1


# Why each flag:
# - Release, static libraries: one self-contained binary whose sha256 covers libllama and libggml too (no RPATH into a
#   deleted build tree).
# - GGML_NATIVE=OFF: no -march=native. The build directory is a cache that CI carries between machines; a native build
#   is tied to the build host's CPU (SIGILL elsewhere) and its numerics (AVX-512 vs AVX2 kernels) would differ by host
#   without the key saying so. With NATIVE off, ggml's fixed x86-64 baseline is used (SSE4.2, AVX, AVX2, BMI2, FMA,
#   F16C; no AVX-512), checked against /proc/cpuinfo before building.
# - LLAMA_OPENSSL=OFF, LLAMA_CURL=OFF: no HTTPS client, no model downloads by URL (LLAMA_CURL is deprecated in this
#   version and ignored, passed so an older tree also stays off).
# - LLAMA_BUILD_UI=OFF, LLAMA_USE_PREBUILT_UI=OFF: otherwise the build downloads the web UI from a Hugging Face bucket.
# - LLAMA_BUILD_COMMIT / LLAMA_BUILD_NUMBER pinned: the vendored tree's git metadata is a shallow clone (count 1), so
#   without these `--version` would report build 1; 0 says "not an upstream release build", the commit identifies it.
# - GGML_CCACHE=OFF: a ccache on the host must not feed the build.
# - tests, examples, the unified app off: only what llama-server needs is configured.
def cmake_flags(commit: str) -> tuple[str, ...]:
    return (
        "-DCMAKE_BUILD_TYPE=Release",
        "-DBUILD_SHARED_LIBS=OFF",
        "-DGGML_NATIVE=OFF",
        "-DGGML_CCACHE=OFF",
        "-DLLAMA_CURL=OFF",
        "-DLLAMA_OPENSSL=OFF",
        "-DLLAMA_BUILD_UI=OFF",
        "-DLLAMA_USE_PREBUILT_UI=OFF",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_EXAMPLES=OFF",
        "-DLLAMA_BUILD_APP=OFF",
        "-DLLAMA_BUILD_TOOLS=ON",
        "-DLLAMA_BUILD_SERVER=ON",
        f"-DLLAMA_BUILD_COMMIT={commit}",
        "-DLLAMA_BUILD_NUMBER=0",
    )


CMAKE_FLAGS: tuple[str, ...] = cmake_flags(LLAMA_CPP_SOURCE.commit)

# x86-64 instruction sets the GGML_NATIVE=OFF baseline compiles in (names as in /proc/cpuinfo)
_X86_BASELINE = ("sse4_2", "avx", "avx2", "bmi2", "fma", "f16c")

# environment passed to cmake/make: nothing else from the caller's environment reaches the compiler
_ENV_KEEP = ("PATH", "HOME", "TMPDIR")

Progress = Callable[[str], None]


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _tool_version(exe: str, *args: str) -> str:
    try:
        out = subprocess.run([exe, *args], capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise InstallError(f"cannot run {exe} {' '.join(args)}: {exc}") from None
    return out.strip().splitlines()[0].strip() if out.strip() else ""


def _compilers() -> tuple[str, str, str]:
    cc, cxx, cmake = shutil.which("gcc"), shutil.which("g++"), shutil.which("cmake")
    missing = [n for n, p in (("gcc", cc), ("g++", cxx), ("cmake", cmake)) if not p]
    if missing:
        raise InstallError(f"building {TARGET} needs {', '.join(missing)} on PATH (Debian: apt-get install cmake g++)")
    return cc, cxx, cmake  # type: ignore[return-value]


def build_key_inputs(archive_sha256: str, commit: str = LLAMA_CPP_SOURCE.commit) -> dict:
    """Everything the binary depends on that may differ between machines or calls."""
    cc, cxx, cmake = _compilers()
    return {
        "archive_sha256": archive_sha256,
        "cc": {"path": cc, "version": _tool_version(cc, "--version"), "full": _tool_version(cc, "-dumpfullversion")},
        "cxx": {
            "path": cxx,
            "version": _tool_version(cxx, "--version"),
            "full": _tool_version(cxx, "-dumpfullversion"),
        },
        "cmake": _tool_version(cmake, "--version"),
        "machine": platform.machine(),
        "flags": list(cmake_flags(commit)),
        "target": TARGET,
        "format": MARKER_FORMAT,
    }


def _canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def build_key(inputs: dict) -> str:
    return hashlib.sha256(_canonical(inputs)).hexdigest()


def build_dir(key: str, home: Path | None = None) -> Path:
    return Path(home or harness_home()) / "builds" / key


# ---------------------------------------------------------------------------------------------------------- archive


def _requirement_line(pin: SourcePin, archive_sha256: str) -> str:
    """`name==version --hash=sha256:PIN` for pip's --require-hashes, after checking each part is only what it says
    (a manifest's package could otherwise be a URL or a pip option)."""
    for what, value, pattern in (
        ("package", pin.package, PROJECT_NAME),
        ("version", pin.version, _EXACT_VERSION),
        ("filename", pin.filename, SDIST_FILENAME),
        ("sha256", archive_sha256, _SHA256),
    ):
        if not (isinstance(value, str) and pattern.fullmatch(value)):
            raise InstallError(f"source pin {what} {shown(repr(value))[:80]} is not a plain {what}; refusing to fetch")
    return f"{pin.package}=={pin.version} --hash=sha256:{archive_sha256}\n"


def _pip_download_failure(pin: SourcePin, archive_sha256: str, r: subprocess.CompletedProcess[str]) -> InstallError:
    return pip_download_failure(pin.package, pin.version, pin.filename, archive_sha256, r)


def fetch_archive(
    archive_sha256: str, pin: SourcePin = LLAMA_CPP_SOURCE, home: Path | None = None, progress: Progress = _say
) -> Path:
    """The pinned sdist under $HARNESS_HOME/downloads/<sha256>/, fetched with `pip download` if absent, verified.

    The hash goes to pip as a requirement file in --require-hashes mode: pip then compares it right after the
    download, before preparing the sdist's metadata, which would run the archive's own build backend. That
    preparation runs with --no-build-isolation in a Python made from the pin's hashed build lock (harness.lockedenv),
    so pip installs nothing from the index for it; without a build lock, only the harness's own Python may prepare it
    (and an archive whose backend it lacks is refused rather than given one from the index)."""
    requirement = _requirement_line(pin, archive_sha256)
    dest = Path(home or harness_home()) / "downloads" / archive_sha256
    path = dest / pin.filename
    if path.is_file():
        verify_archive(path, archive_sha256)
        return path
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{archive_sha256[:12]}.", suffix=".tmp", dir=dest.parent))
    try:
        python = _fetch_python(pin, progress)
        progress(f"fetching {pin.package}=={pin.version} (sdist) with pip download, sha256 checked by pip first")
        req_file = tmp / "requirement.txt"
        req_file.write_text(requirement, encoding="ascii")
        downloaded = tmp / "download"
        cmd = [
            str(python),
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--no-build-isolation",  # the metadata is prepared with the hashed build lock's packages, none from the index
            "--require-hashes",
            "--disable-pip-version-check",
            "-r",
            str(req_file),
            "-d",
            str(downloaded),
        ]
        r = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
        got = downloaded / pin.filename
        if r.returncode != 0 or not got.is_file():
            raise _pip_download_failure(pin, archive_sha256, r)
        verify_archive(got, archive_sha256)
        dest.mkdir(exist_ok=True)
        os.replace(got, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def _fetch_python(pin: SourcePin, progress: Progress) -> Path:
    """The Python whose pip fetches the archive: one made from the pin's hashed build lock, else the harness's own."""
    if pin.build_lock is None:
        return Path(sys.executable)
    from harness.lockedenv import locked_env

    progress(f"build backend for {pin.package}=={pin.version}: from {pin.build_lock.name} (hashed)")
    return locked_env(f"fetch-{pin.package}-{pin.version}", [pin.build_lock])


def vendored_commit(archive: Path, subdir: str) -> str | None:
    """The commit the archive's own git metadata records for `subdir` (the sdist carries the submodule's
    `<top>/.git/modules/<subdir>/HEAD`, a detached 40-hex commit); None when it records none."""
    want = f".git/modules/{subdir.strip('/')}/HEAD"
    try:
        with tarfile.open(archive, "r:*") as tf:
            for m in tf:
                parts = PurePosixPath(m.name).parts
                if len(parts) > 1 and "/".join(parts[1:]) == want and m.isfile() and m.size <= 4096:
                    f = tf.extractfile(m)
                    head = f.read().decode("ascii", "replace").strip() if f is not None else ""
                    return head if len(head) == 40 and all(c in "0123456789abcdef" for c in head) else None
    except tarfile.TarError as exc:
        raise InstallError(f"{archive}: cannot read: {exc}") from None
    return None


def verify_commit(archive: Path, pin: SourcePin) -> str:
    """The archive's vendored commit, which must start with the pinned one: the build stamps the pinned commit into
    the binary (what /props reports), so without this check a manifest could name any commit and still pass the
    identity check after launch."""
    head = vendored_commit(archive, pin.subdir)
    where = f".git/modules/{pin.subdir.strip('/')}/HEAD"
    if head is None:
        raise InstallError(
            f"{Path(archive).name}: records no commit for {pin.subdir} ({where}); cannot check the pinned commit "
            f"{pin.commit}; refusing to build"
        )
    if not head.startswith(pin.commit):
        raise InstallError(
            f"{Path(archive).name}: {pin.subdir} is commit {head[:12]} ({where}), the manifest pins {pin.commit};"
            " refusing to build"
        )
    return head


def _top_and_members(tf: tarfile.TarFile, subdir: str) -> tuple[str, list[tarfile.TarInfo]]:
    members = tf.getmembers()
    tops = set()
    for m in members:
        p = PurePosixPath(m.name)
        if m.name.startswith("/") or p.is_absolute() or ".." in p.parts:
            raise InstallError(f"archive member {m.name!r}: absolute or '..' path; refusing to extract")
        if p.parts:
            tops.add(p.parts[0])
    if len(tops) != 1:
        raise InstallError(f"archive has {len(tops)} top-level entries, expected one directory; refusing to extract")
    top = tops.pop()
    prefix = f"{top}/{subdir.strip('/')}/"
    chosen = []
    for m in members:
        if not (m.name + "/").startswith(prefix) and m.name != prefix.rstrip("/"):
            continue
        if not (m.isfile() or m.isdir()):
            raise InstallError(f"archive member {m.name!r}: not a regular file or directory; refusing to extract")
        chosen.append(m)
    if not chosen:
        raise InstallError(f"archive has no {subdir}/ below {top}/; refusing to build")
    return top, chosen


def safe_extract(archive: Path, dest: Path, subdir: str) -> Path:
    """Extract only `<top>/<subdir>/` into dest (filter="data" plus our own name checks); return the tree's path."""
    try:
        with tarfile.open(archive, "r:*") as tf:
            top, members = _top_and_members(tf, subdir)
            tf.extractall(dest, members=members, filter="data")
    except tarfile.TarError as exc:
        raise InstallError(f"{archive}: cannot extract: {exc}") from None
    return dest / top / subdir


# ---------------------------------------------------------------------------------------------------------- build


def _check_cpu() -> None:
    if platform.machine() not in ("x86_64", "AMD64"):
        return
    try:
        flags = set()
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags.update(line.split(":", 1)[1].split())
                break
    except OSError:
        return
    missing = [f for f in _X86_BASELINE if f not in flags]
    if missing:
        raise InstallError(
            f"this CPU lacks {', '.join(missing)}: the GGML_NATIVE=OFF baseline build would not run here"
        )


def _run_logged(cmd: list[str], log, env: dict, progress: Progress, show: Callable[[str], bool], what: str) -> None:
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        errors="replace",
        start_new_session=True,
    )
    last: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            line = line.rstrip("\n")
            if line.strip():
                last = (last + [line])[-5:]
            if show(line):
                progress(line)
        rc = proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    log.flush()
    if rc != 0:
        hint = next((x for x in reversed(last) if "error" in x.lower()), last[-1] if last else "no output")
        raise InstallError(f"{what} failed (exit {rc}): {hint.strip()} (log: {log.name})")


def _new_log(path: Path) -> TextIO:
    """A fresh build log at `path`: whatever is there (a stale log, or a symlink or hard link planted to make the
    build write over another file) is unlinked, never followed or truncated, and the file is created anew."""
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise InstallError(f"{path}: cannot replace the build log ({exc.strerror}); refusing to build") from None
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise InstallError(f"{path}: cannot create the build log ({exc.strerror}); refusing to build") from None
    return os.fdopen(fd, "w", encoding="utf-8")


def _copy_log(src: Path, dst: Path) -> None:
    """Copy the build log without following a symlink put in its place meanwhile."""
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise InstallError(f"{src}: cannot read the build log back ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as f, open(dst, "xb") as out:
        shutil.copyfileobj(f, out)


def _open_lock(path: Path) -> IO[bytes]:
    """The build lock file, created if absent; never truncated, and a symlink there is refused, not followed."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise InstallError(f"{path}: cannot open the build lock ({exc.strerror}); refusing to build") from None
    return os.fdopen(fd, "r+b")


def _build_into(
    tmp: Path, archive: Path, pin: SourcePin, inputs: dict, jobs: int, progress: Progress, log_path: Path
) -> None:
    _check_cpu()
    t0 = time.monotonic()
    progress(f"extracting {pin.subdir} from {archive.name}")
    src = safe_extract(archive, tmp / "src", pin.subdir)
    build = tmp / "build"
    env = {k: os.environ[k] for k in _ENV_KEEP if k in os.environ}
    env["LC_ALL"] = "C"
    cc, cxx = inputs["cc"]["path"], inputs["cxx"]["path"]
    with _new_log(log_path) as log:
        configure = [
            "cmake",
            "-S",
            str(src),
            "-B",
            str(build),
            "-G",
            "Unix Makefiles",
            f"-DCMAKE_C_COMPILER={cc}",
            f"-DCMAKE_CXX_COMPILER={cxx}",
            *inputs["flags"],
        ]
        progress(f"configuring ({' '.join(inputs['flags'])})")
        _run_logged(configure, log, env, progress, lambda s: s.startswith("CMake Error"), "cmake configure")
        progress(f"building {TARGET} with -j{jobs} (a few minutes on 2 cores)")
        compile_cmd = ["cmake", "--build", str(build), "--target", TARGET, f"-j{jobs}"]
        _run_logged(compile_cmd, log, env, progress, lambda s: s.startswith("[") and "%]" in s[:8], "cmake --build")
        log.write(f"# build wall time {time.monotonic() - t0:.1f} s\n")
    built = build / "bin" / TARGET
    if not built.is_file():
        raise InstallError(f"build finished but {built} is missing (log: {log_path})")
    _copy_log(log_path, tmp / "build.log")
    (tmp / "bin").mkdir()
    shutil.copy2(built, tmp / "bin" / TARGET)
    os.chmod(tmp / "bin" / TARGET, 0o755)
    shutil.rmtree(tmp / "src", ignore_errors=True)
    shutil.rmtree(build, ignore_errors=True)
    marker = {
        "inputs": inputs,
        "key": build_key(inputs),
        "source": {"package": pin.package, "version": pin.version, "filename": pin.filename, "commit": pin.commit},
        "binary": f"bin/{TARGET}",
        "binary_sha256": file_sha256(tmp / "bin" / TARGET),
        "build_seconds": round(time.monotonic() - t0, 1),
    }
    with open(tmp / MARKER, "wb") as f:  # written last: its presence means the directory is complete
        f.write(json.dumps(marker, sort_keys=True, indent=2).encode() + b"\n")
        f.flush()
        os.fsync(f.fileno())


def verify_build(directory: Path, inputs: dict) -> Path:
    """The binary of a finished build directory, after checking its marker and the binary's sha256."""
    marker_path = directory / MARKER
    try:
        marker = json.loads(marker_path.read_text())
    except (OSError, ValueError) as exc:
        raise InstallError(f"{marker_path}: unreadable build marker ({exc}); remove {directory} to rebuild") from None
    if not isinstance(marker, dict) or marker.get("inputs") != inputs:
        raise InstallError(f"{marker_path}: records other build inputs than key {directory.name}; remove it to rebuild")
    binary = directory / "bin" / TARGET
    if not binary.is_file():
        raise InstallError(f"{binary}: missing from a finished build; remove {directory} to rebuild")
    actual = file_sha256(binary)
    if actual != marker.get("binary_sha256"):
        raise InstallError(
            f"{binary}: sha256 mismatch: marker {marker.get('binary_sha256')}, found {actual};"
            f" remove {directory} to rebuild"
        )
    return binary


def ensure_llama_server(
    archive_sha256: str = LLAMA_CPP_SOURCE.sha256,
    *,
    archive: Path | None = None,
    pin: SourcePin = LLAMA_CPP_SOURCE,
    home: Path | None = None,
    jobs: int = 2,
    progress: Progress = _say,
) -> Path:
    """Path of a verified `llama-server` built from the archive pinned by `archive_sha256` (building it once)."""
    if not (
        isinstance(archive_sha256, str)
        and len(archive_sha256) == 64
        and all(c in "0123456789abcdef" for c in archive_sha256)
    ):
        raise InstallError(f"archive sha256 must be 64 lowercase hex digits, got {archive_sha256!r}")
    inputs = build_key_inputs(archive_sha256, pin.commit)
    key = build_key(inputs)
    final = build_dir(key, home)
    final.parent.mkdir(parents=True, exist_ok=True)
    with _open_lock(final.parent / f"{key}.lock") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"waiting for another build of {TARGET} ({key[:12]}) to finish")
            fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / MARKER).exists():
            binary = verify_build(final, inputs)
            progress(f"{TARGET}: verified existing build {final}")
            return binary
        if final.exists() or final.is_symlink():
            progress(f"{final}: no marker (an interrupted build); removing it")
            if final.is_dir() and not final.is_symlink():
                shutil.rmtree(final)
            else:
                final.unlink()
        if archive is None:
            archive = fetch_archive(archive_sha256, pin, home, progress)
        else:
            verify_archive(Path(archive), archive_sha256)
        verify_commit(Path(archive), pin)  # before any build: the commit is what the binary will report
        tmp = Path(tempfile.mkdtemp(prefix=f".{key[:12]}.", suffix=".tmp", dir=final.parent))
        try:
            os.chmod(tmp, 0o755)
            log_path = final.parent / f"{key}.log"  # outside tmp, so a failed build's log survives
            _build_into(tmp, Path(archive), pin, inputs, jobs, progress, log_path)
            os.replace(tmp, final)
            log_path.unlink(missing_ok=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        binary = verify_build(final, inputs)
        progress(f"{TARGET}: built {binary}")
        return binary
