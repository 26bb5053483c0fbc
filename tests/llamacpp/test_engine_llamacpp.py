"""The real llama-server, launched through harness.launch (the session fixture, tests/llamacpp/conftest.py): its
identity (/props build_info b0-<commit>) and the launcher's check of it, the key by environment only, loopback-only
listening sockets read from /proc, and the refusals of a manifest that pins another commit."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from harness.errors import IdentityMismatch, InstallError, RefusedError
from harness.launch import registry
from harness.launch.listening import listening_sockets, non_loopback
from harness.launch.ready import verify_identity
from harness.manifest import load_manifest
from harness.procs import process_group
from tests.llamacpp.conftest import API_KEY, COMMIT, KEY_ENV, LLAMACPP_MANIFEST, manifest_variant

pytestmark = pytest.mark.engine


def _get(engine, path: str, key: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with httpx.Client(trust_env=False, timeout=10.0) as c:
        return c.get(engine.base_url + path, headers=headers)


def test_props_reports_the_pinned_commit_and_the_identity_check_passes(llamacpp_engine):
    eng = llamacpp_engine
    props = _get(eng, "/props", API_KEY)
    assert props.status_code == 200
    assert props.json()["build_info"] == f"b0-{COMMIT}"
    # what the launcher recorded after its own check
    ident = eng.identity
    assert (ident["engine"], ident["version"]) == ("llamacpp", COMMIT)
    m = load_manifest(LLAMACPP_MANIFEST)
    assert ident["source_sha256"] == m.runtime.source.sha256 and ident["model_hash"] == m.model.sha256
    # the build key names the verified build directory; no host path is recorded (recordings are committed)
    assert eng.spec.binary.parent.parent.name == ident["build_key"] and len(ident["build_key"]) == 64
    assert not any(isinstance(v, str) and v.startswith("/") for v in ident.values()), ident
    assert props.json()["model_path"] == str(eng.spec.model_dir / "model.gguf")  # the verified model was served
    # the check itself, asked again of the running server
    assert verify_identity(eng) == {"engine": "llamacpp", "version": COMMIT}


def test_identity_check_refuses_a_manifest_that_pins_another_commit(llamacpp_engine, tmp_path):
    eng = llamacpp_engine
    other = load_manifest(manifest_variant(tmp_path, engine__version="deadbee", server__api_key_env=KEY_ENV))
    attached = SimpleNamespace(spec=dataclasses.replace(eng.spec, manifest=other), base_url=eng.base_url)
    with pytest.raises(IdentityMismatch) as e:
        verify_identity(attached)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg == "engine reports version 'b0-0c1e570' (/props build_info), manifest pins 'deadbee'"


def test_a_manifest_pinning_another_commit_is_refused_before_anything_is_built(tmp_path):
    """The build stamps the manifest's commit into the binary (/props reports it), so the commit must be checked
    against the archive before building: otherwise `version: deadbee` would build a binary that says deadbee and
    pass the identity check. Refused before any process starts, naming both commits."""
    from harness.launch.session import prepare
    from harness.settings import harness_home

    builds = harness_home() / "builds"
    before = set(builds.iterdir()) if builds.is_dir() else set()
    path = manifest_variant(tmp_path, engine__version="deadbee")
    with pytest.raises(InstallError) as e:
        prepare(path, run_dir=tmp_path / "run", quiet=True)
    msg = str(e.value)
    assert "\n" not in msg and "is commit 0c1e57098bba" in msg and "the manifest pins deadbee" in msg
    after = set(builds.iterdir())
    assert {p for p in after - before if not p.name.endswith(".lock")} == set()  # no build directory, no log
    assert not (tmp_path / "run").exists()


def test_the_key_reaches_llama_server_by_environment_only(llamacpp_engine):
    eng = llamacpp_engine
    pid = eng.proc.pid
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert argv[0].endswith(b"/llama-server")
    assert not any(API_KEY.encode() in a for a in argv)
    assert f"LLAMA_API_KEY={API_KEY}".encode() in environ
    assert API_KEY not in eng.log_path.read_text(errors="replace")
    # and the server enforces it: only /health is public
    assert _get(eng, "/health").status_code == 200
    for path in ("/props", "/v1/models", "/metrics"):
        assert _get(eng, path).status_code == 401, path
        assert _get(eng, path, "wrong-key").status_code == 401, path
        assert _get(eng, path, API_KEY).status_code == 200, path


def test_it_listens_on_loopback_only_as_proc_shows(llamacpp_engine):
    eng = llamacpp_engine
    pids = eng.local_pids()
    assert pids and eng.proc.pid in pids
    sockets = listening_sockets(pids)
    assert ("127.0.0.1", eng.spec.port) in sockets
    assert non_loopback(sockets) == [], sockets


def test_a_non_loopback_listener_is_refused_and_the_engine_stopped(tmp_path, monkeypatch):
    """The post-launch /proc check is the launcher's, for llama.cpp as for vLLM: a socket elsewhere (simulated here:
    llama-server cannot be told to bind elsewhere through a manifest) stops the engine and refuses it."""
    import harness.launch.session as session

    real = session.listening_sockets
    seen: list[set[int]] = []

    def with_an_exposed_socket(pids):
        seen.append(set(pids))
        return [*real(pids), ("0.0.0.0", 9)]

    monkeypatch.setattr(session, "listening_sockets", with_an_exposed_socket)
    engine = session.prepare(LLAMACPP_MANIFEST, run_dir=tmp_path / "run", quiet=True)
    with pytest.raises(RefusedError, match=r"non-loopback address \(0\.0\.0\.0:9\); stopped it"):
        session.start_verified(engine, quiet=True)
    assert seen and seen[0], "the check was asked with no engine pids"
    pid = engine.proc.pid
    assert engine.proc.poll() is not None  # stopped, and reaped
    deadline = time.monotonic() + 10
    while process_group(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not process_group(pid)
    assert all(e.get("run_id") != engine.spec.run_id for e in registry.entries())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
