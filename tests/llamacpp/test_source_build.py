"""harness.engines.llamacpp_build on a fake llama.cpp archive: pinned sha256, the vendored commit checked against the
pin, safe extraction, target-only build, marker, reuse."""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import io
import json
import subprocess
import tarfile
import threading
import time
from pathlib import Path

import pytest

from harness.engines import llamacpp_build as sb
from harness.errors import InstallError

FAKE_CMAKE = """cmake_minimum_required(VERSION 3.14)
project(fake C CXX)
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
add_executable(llama-server server.cpp)
target_compile_definitions(llama-server PRIVATE FAKE_COMMIT="${LLAMA_BUILD_COMMIT}")
add_executable(other broken.cpp)
"""
FAKE_MAIN = '#include <cstdio>\nint main() { std::printf("fake server %s\\n", FAKE_COMMIT); return 0; }\n'
FAKE_HEAD = b"abc1234" + b"0" * 33 + b"\n"  # the sdist's .git/modules/vendor/llama.cpp/HEAD: the vendored commit


def _tar(path: Path, files: dict[str, bytes], extra=None) -> str:
    with tarfile.open(path, "w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tf.addfile(info, io.BytesIO(data))
        if extra:
            extra(tf)
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture()
def fake(tmp_path):
    top = "llama_cpp_python-9.9.9/vendor/llama.cpp/"
    archive = tmp_path / "fake.tar.gz"
    sha = _tar(archive, {
        "llama_cpp_python-9.9.9/README.md": b"outside the subdir: not extracted\n",
        "llama_cpp_python-9.9.9/.git/modules/vendor/llama.cpp/HEAD": FAKE_HEAD,
        top + "CMakeLists.txt": FAKE_CMAKE.encode(),
        top + "server.cpp": FAKE_MAIN.encode(),
        top + "broken.cpp": b"this does not compile\n",  # proves only the llama-server target is built
    })  # fmt: skip
    pin = sb.SourcePin("llama-cpp-python", "9.9.9", "fake.tar.gz", sha, "vendor/llama.cpp", "abc1234")
    return archive, sha, pin, tmp_path / "home"


def test_archive_mismatch_is_refused_showing_both(fake):
    archive, sha, pin, home = fake
    wrong = "0" * 64
    with pytest.raises(InstallError) as e:
        sb.ensure_llama_server(wrong, archive=archive, pin=pin, home=home, progress=lambda s: None)
    assert wrong in str(e.value) and sha in str(e.value) and "\n" not in str(e.value)
    assert not any((home / "builds").glob("*/bin"))


def test_bad_sha_string_refused(fake):
    archive, _, pin, home = fake
    with pytest.raises(InstallError):
        sb.ensure_llama_server("ABC", archive=archive, pin=pin, home=home)


@pytest.mark.parametrize("bad", ["../evil", "/abs/evil", "top/vendor/llama.cpp/../../x", "link"])
def test_unsafe_members_refused(tmp_path, bad):
    archive = tmp_path / "bad.tar.gz"
    files = {"top/vendor/llama.cpp/CMakeLists.txt": b"x"}

    def extra(tf):
        info = tarfile.TarInfo("top/vendor/llama.cpp/link" if bad == "link" else bad)
        if bad == "link":
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            tf.addfile(info)
        else:
            info.size = 1
            tf.addfile(info, io.BytesIO(b"x"))

    _tar(archive, files, extra)
    with pytest.raises(InstallError) as e:
        sb.safe_extract(archive, tmp_path / "out", "vendor/llama.cpp")
    assert "refusing" in str(e.value)
    assert not (tmp_path / "evil").exists() and not (tmp_path / "x").exists()


def test_missing_subdir_refused(tmp_path):
    archive = tmp_path / "a.tar.gz"
    _tar(archive, {"top/README": b"x"})
    with pytest.raises(InstallError, match="no vendor/llama.cpp/"):
        sb.safe_extract(archive, tmp_path / "out", "vendor/llama.cpp")


def test_key_depends_on_every_input(fake):
    _, sha, _, _ = fake
    base = sb.build_key_inputs(sha)
    assert sb.build_key(base) == sb.build_key(json.loads(json.dumps(base)))
    for change in (
        {"archive_sha256": "1" * 64},
        {"flags": base["flags"] + ["-DGGML_NATIVE=ON"]},
        {"cxx": {**base["cxx"], "full": "99.0.0"}},
        {"cmake": "cmake version 0"},
    ):
        assert sb.build_key({**base, **change}) != sb.build_key(base)


def test_build_verify_reuse_and_tamper(fake):
    archive, sha, pin, home = fake
    lines: list[str] = []
    binary = sb.ensure_llama_server(sha, archive=archive, pin=pin, home=home, jobs=2, progress=lines.append)
    out = subprocess.run([binary], capture_output=True, text=True).stdout
    assert out == f"fake server {pin.commit}\n"  # the build flags carry the pinned commit (the identity /props reports)
    assert any(line.startswith("[") and "%]" in line for line in lines), lines  # progress lines shown
    d = binary.parent.parent
    assert d.parent == home / "builds" and len(d.name) == 64
    assert sorted(p.name for p in d.iterdir()) == ["bin", "build.log", "marker.json"]  # no sources, no objects
    marker = json.loads((d / "marker.json").read_text())
    assert marker["inputs"] == sb.build_key_inputs(sha, pin.commit) and marker["key"] == d.name
    assert marker["binary_sha256"] == hashlib.sha256(binary.read_bytes()).hexdigest()
    assert not [p for p in (home / "builds").iterdir() if p.name.endswith(".tmp") or p.name.endswith(".log")]

    # second call: verified, not rebuilt
    lines.clear()
    mtime = binary.stat().st_mtime_ns
    assert sb.ensure_llama_server(sha, archive=archive, pin=pin, home=home, progress=lines.append) == binary
    assert binary.stat().st_mtime_ns == mtime and any("verified" in s for s in lines)
    assert not any("building" in s for s in lines)

    # tampered binary: refused with both hashes, one line
    binary.write_bytes(binary.read_bytes() + b"\0")
    with pytest.raises(InstallError) as e:
        sb.ensure_llama_server(sha, archive=archive, pin=pin, home=home, progress=lambda s: None)
    msg = str(e.value)
    assert marker["binary_sha256"] in msg and hashlib.sha256(binary.read_bytes()).hexdigest() in msg and "\n" not in msg

    # marker missing (interrupted build): removed and rebuilt
    (d / "marker.json").unlink()
    lines.clear()
    again = sb.ensure_llama_server(sha, archive=archive, pin=pin, home=home, progress=lines.append)
    assert again == binary and (d / "marker.json").is_file()
    assert any("interrupted" in s for s in lines)


def test_build_failure_is_one_line_and_keeps_the_log(tmp_path):
    archive = tmp_path / "a.tar.gz"
    top = "t/vendor/llama.cpp/"
    sha = _tar(archive, {top + "CMakeLists.txt": FAKE_CMAKE.encode(), top + "server.cpp": b"syntax error here\n",
                         top + "broken.cpp": b"", "t/.git/modules/vendor/llama.cpp/HEAD": FAKE_HEAD})  # fmt: skip
    pin = sb.SourcePin("p", "1", "a.tar.gz", sha, "vendor/llama.cpp", "abc")
    home = tmp_path / "home"
    with pytest.raises(InstallError) as e:
        sb.ensure_llama_server(sha, archive=archive, pin=pin, home=home, progress=lambda s: None)
    assert "cmake --build failed" in str(e.value) and "\n" not in str(e.value)
    logs = list((home / "builds").glob("*.log"))
    assert len(logs) == 1 and "syntax" in logs[0].read_text()
    assert not [p for p in (home / "builds").iterdir() if p.is_dir()]  # no half-built directory left


def test_concurrent_caller_waits_for_the_lock(fake):
    archive, sha, pin, home = fake
    key = sb.build_key(sb.build_key_inputs(sha, pin.commit))
    (home / "builds").mkdir(parents=True)
    lines: list[str] = []
    result: list = []
    with open(home / "builds" / f"{key}.lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        t = threading.Thread(
            target=lambda: result.append(
                sb.ensure_llama_server(sha, archive=archive, pin=pin, home=home, progress=lines.append)
            )
        )
        t.start()
        time.sleep(1.0)
        assert result == [] and any("waiting for another build" in s for s in lines)
    t.join(timeout=300)
    assert result and result[0].is_file()


def _no_build(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("a build was started")

    monkeypatch.setattr(sb, "_build_into", refuse)


def test_the_vendored_commit_is_read_from_the_archive(fake):
    archive, _, pin, _ = fake
    assert sb.vendored_commit(archive, "vendor/llama.cpp") == FAKE_HEAD.decode().strip()
    assert sb.verify_commit(archive, pin) == FAKE_HEAD.decode().strip()


def test_a_pin_naming_another_commit_is_refused_before_building(fake, monkeypatch):
    """The build stamps the pinned commit into the binary (what /props reports), so a pin that is not the archive's
    own commit would build a binary that passes the identity check while running other code."""
    archive, sha, pin, home = fake
    _no_build(monkeypatch)
    other = dataclasses.replace(pin, commit="deadbee")
    with pytest.raises(InstallError) as e:
        sb.ensure_llama_server(sha, archive=archive, pin=other, home=home, progress=lambda s: None)
    msg = str(e.value)
    assert msg == (
        "fake.tar.gz: vendor/llama.cpp is commit abc123400000 (.git/modules/vendor/llama.cpp/HEAD), the manifest pins "
        "deadbee; refusing to build"
    )
    assert not [p for p in (home / "builds").iterdir() if not p.name.endswith(".lock")]  # no directory, no log


@pytest.mark.parametrize("head", [None, b"ref: refs/heads/master\n", b"abc1234\n"])
def test_an_archive_that_records_no_commit_is_refused(tmp_path, monkeypatch, head):
    top = "t/vendor/llama.cpp/"
    files = {top + "CMakeLists.txt": FAKE_CMAKE.encode(), top + "server.cpp": FAKE_MAIN.encode()}
    if head is not None:
        files["t/.git/modules/vendor/llama.cpp/HEAD"] = head
    archive = tmp_path / "a.tar.gz"
    sha = _tar(archive, files)
    pin = sb.SourcePin("p", "1", "a.tar.gz", sha, "vendor/llama.cpp", "abc1234")
    _no_build(monkeypatch)
    assert sb.vendored_commit(archive, "vendor/llama.cpp") is None
    with pytest.raises(InstallError, match=r"records no commit for vendor/llama.cpp .*refusing to build"):
        sb.ensure_llama_server(sha, archive=archive, pin=pin, home=tmp_path / "home", progress=lambda s: None)


@pytest.mark.engine
def test_the_real_archive_vendors_the_pinned_commit():
    """The pinned sdist (in $HARNESS_HOME/downloads/<sha256>/ once a build has fetched it, else fetched now with
    pip download, as the build does) records 0c1e570... itself."""
    archive = sb.fetch_archive(sb.LLAMA_CPP_SOURCE.sha256, progress=lambda s: None)
    assert sb.verify_commit(archive, sb.LLAMA_CPP_SOURCE) == "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
