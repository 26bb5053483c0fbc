"""Docker launcher, pinning and the dead-man's switch, against a real daemon and the TGI stand-in image."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from harness.errors import DockerUnavailable, ManifestError, PinMismatch, RefusedError
from harness.launch.containers import (
    LABEL_MANAGED,
    LABEL_RUN_ID,
    list_managed_containers,
    remove_managed_containers,
    wait_gone,
)
from harness.launch.docker import DockerEngine
from harness.manifest import load_manifest
from harness.pin import pin_manifest

pytestmark = pytest.mark.docker
REPO_ROOT = Path(__file__).resolve().parents[2]
http = httpx.Client(trust_env=False)  # loopback only: never through a proxy from the environment


def wait_health(url: str, engine: DockerEngine | None = None, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if http.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if engine is not None and engine.exit_status() is not None:
            raise AssertionError(f"container exited {engine.exit_status()}:\n{engine.log_tail()}")
        time.sleep(0.2)
    raise AssertionError(f"{url}/health not ready in {timeout} s:\n{engine.log_tail() if engine else ''}")


def listening_addresses(port: int) -> list[str]:
    out = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True, check=True).stdout
    addrs = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[3].rsplit(":", 1)[-1] == str(port):
            addrs.append(parts[3].rsplit(":", 1)[0])
    return addrs


@pytest.fixture
def pinned(standin, write_manifest):
    """A manifest for the stand-in, pinned with pin_manifest."""
    ref, digest = standin
    path = write_manifest(ref)
    assert pin_manifest(path) == digest
    return path


# -- no daemon / malformed manifests ----------------------------------------------------------------------------


def test_missing_daemon_is_one_clear_line(monkeypatch):
    from harness.dockerd import docker_client

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    with pytest.raises(DockerUnavailable) as ei:
        docker_client()
    msg = str(ei.value)
    assert "\n" not in msg
    assert msg.startswith("no Docker daemon answers at unix:///nonexistent.sock; start it with")
    assert ei.value.exit_code == 2


def test_docker_manifest_without_digest_is_rejected(write_manifest):
    path = write_manifest("127.0.0.1:5000/tgi-standin:3.3.5")
    with pytest.raises(ManifestError) as ei:
        load_manifest(path)
    assert ei.value.field == "runtime.docker.digest"
    assert str(path) in ei.value.one_line()


# -- pinning ----------------------------------------------------------------------------------------------------


def test_pin_writes_the_registry_digest_and_keeps_the_text(standin, write_manifest):
    ref, digest = standin
    path = write_manifest(ref)
    before = path.read_text()
    assert pin_manifest(path) == digest
    after = path.read_text()
    assert load_manifest(path).runtime.docker.digest == digest
    # one line inserted after image:, everything else (comments included) unchanged
    added = [ln for ln in after.splitlines() if ln not in before.splitlines()]
    assert added == [f"    digest: {digest}"]
    assert after.replace(f"    digest: {digest}\n", "") == before
    # pinning again is a no-op; a stale digest is replaced in place
    assert pin_manifest(path) == digest and path.read_text() == after
    stale = after.replace(digest, "sha256:" + "0" * 64)
    path.write_text(stale)
    assert pin_manifest(path) == digest and path.read_text() == after


def test_pin_refuses_an_image_that_was_never_pushed(images, write_manifest):
    ref = f"{images.registry}/tgi-standin-local:3.3.5"
    images.build(ref, "local")
    with pytest.raises(RefusedError, match="no repo digest"):
        pin_manifest(write_manifest(ref))


def test_pin_refuses_a_missing_image(registry, write_manifest):
    with pytest.raises(RefusedError, match="not present locally"):
        pin_manifest(write_manifest(f"{registry}/no-such-image:1"))


# -- launching --------------------------------------------------------------------------------------------------


def test_start_on_loopback_only_with_labels_then_stop_removes(pinned, make_spec, docker_client):
    spec = make_spec(pinned)
    engine = DockerEngine(spec)
    try:
        engine.start()
        wait_health(spec.base_url, engine)
        info = http.get(f"{spec.base_url}/info", timeout=5).json()
        assert info["version"] == "3.3.5" and info["router"] == "text-generation-router"
        assert info["model_id"] == "/model" and info["docker_label"] == "standin-a"
        models = http.get(f"{spec.base_url}/v1/models", timeout=5).json()
        assert [m["id"] for m in models["data"]] == ["/model"]
        assert "tgi_request_count" in http.get(f"{spec.base_url}/metrics", timeout=5).text

        # a recorded TGI stream, replayed as SSE
        with http.stream(
            "POST",
            f"{spec.base_url}/v1/chat/completions",
            timeout=10,
            json={"model": "tgi", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
        ) as r:
            events = [ln[len("data: ") :] for ln in r.iter_lines() if ln.startswith("data: ")]
        assert events[-1] == "[DONE]"
        assert (
            "".join(c["choices"][0]["delta"]["content"] for c in map(json.loads, events[:-1]) if c["choices"]) == "OK!"
        )

        c = docker_client.containers.get(engine.describe()["container_id"])
        bindings = c.attrs["HostConfig"]["PortBindings"]
        assert bindings == {"80/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(spec.port)}]}
        assert c.attrs["NetworkSettings"]["Ports"]["80/tcp"][0]["HostIp"] == "127.0.0.1"
        assert set(listening_addresses(spec.port)) == {"127.0.0.1"}
        assert c.labels[LABEL_MANAGED] == "1" and c.labels[LABEL_RUN_ID] == spec.run_id
        assert c.image.id == engine.image_id
        mounts = {m["Destination"]: m for m in c.attrs["Mounts"]}
        assert mounts["/model"]["RW"] is False and Path(mounts["/model"]["Source"]) == spec.model_dir.resolve()
        env = dict(e.split("=", 1) for e in c.attrs["Config"]["Env"])
        assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1" and env["LOG_LEVEL"] == "info"
        args = c.attrs["Args"]
        assert args[:6] == ["--model-id", "/model", "--hostname", "0.0.0.0", "--port", "80"]
        assert "--usage-stats" in args
        assert not c.attrs["HostConfig"].get("DeviceRequests")
        assert engine.exit_status() is None
        assert [r["name"] for r in list_managed_containers(spec.run_id)] == [engine.name]
    finally:
        engine.stop(timeout=5)
    assert wait_gone([engine.name], timeout=5)
    assert engine.exit_status() == 0
    log = spec.log_path.read_text()
    assert "standin: TGI 3.3.5 stand-in" in log and "GET /info" in log
    engine.stop()  # idempotent
    assert engine._reaper is None


def test_stop_tolerates_a_container_already_gone(pinned, make_spec, docker_client):
    spec = make_spec(pinned)
    engine = DockerEngine(spec)
    engine.start()
    docker_client.containers.get(engine.name).remove(force=True)
    engine.stop(timeout=1)
    assert engine.exit_status() is not None


def test_exit_is_reported_with_the_log(pinned, make_spec):
    spec = make_spec(pinned, extra_args=("--port", "not-a-port"))
    engine = DockerEngine(spec)
    try:
        engine.start()
        # a bound, not a speed: on a loaded machine the container's Python takes more than 15 s to start and refuse
        deadline = time.monotonic() + 60
        while engine.exit_status() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert engine.exit_status() not in (None, 0)
        while "port=not-a-port" not in engine.log_tail() and time.monotonic() < deadline:
            time.sleep(0.2)  # the log is copied from the daemon after the exit: its last line may come a moment later
        assert "port=not-a-port" in engine.log_tail()
    finally:
        engine.stop(timeout=1)
    assert not list_managed_containers(spec.run_id)


def test_repointed_tag_is_refused_showing_both_digests(images, write_manifest, make_spec):
    ref, digest_a = images.published("tgi-standin-repoint", "a")
    path = write_manifest(ref)
    assert pin_manifest(path) == digest_a
    images.build(ref, "b")  # the same tag now points at another image ...
    digest_b = images.push(ref)  # ... with its own registry digest
    assert digest_b != digest_a
    spec = make_spec(path)
    with pytest.raises(PinMismatch) as ei:
        DockerEngine(spec).start()
    msg = ei.value.one_line()
    assert digest_a in msg and digest_b in msg and ref in msg
    assert ei.value.exit_code == 2
    assert not list_managed_containers(spec.run_id)
    assert not spec.log_path.exists()


def test_image_missing_is_refused(registry, write_manifest, make_spec):
    path = write_manifest(f"{registry}/no-such-image:1", digest="sha256:" + "1" * 64)
    spec = make_spec(path)
    with pytest.raises(RefusedError, match="not present locally"):
        DockerEngine(spec).start()
    assert not list_managed_containers(spec.run_id)


HARNESS_SCRIPT = """
import sys, time
from pathlib import Path
from harness.launch.base import LaunchSpec
from harness.launch.docker import DockerEngine
from harness.manifest import load_manifest
manifest, run_id, run_dir, model_dir, port = sys.argv[1:6]
spec = LaunchSpec(manifest=load_manifest(manifest), run_id=run_id, run_dir=Path(run_dir),
                  model_dir=Path(model_dir), port=int(port))
engine = DockerEngine(spec)
engine.start()
print(engine.name, flush=True)
time.sleep(600)
"""


def test_kill_9_of_the_harness_removes_the_container(pinned, make_spec, docker_client):
    spec = make_spec(pinned)
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-c", HARNESS_SCRIPT, str(pinned), spec.run_id, str(spec.run_dir), str(spec.model_dir),
         str(spec.port)],
        stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        name = proc.stdout.readline().strip()
        assert name, "the harness process did not start a container"
        wait_health(spec.base_url)
        assert docker_client.containers.get(name).status == "running"
        os.kill(proc.pid, signal.SIGKILL)
        t0 = time.monotonic()
        proc.wait(timeout=5)
        assert wait_gone([name], timeout=10), "container still there 10 s after kill -9 of the harness"
        print(f"container gone {time.monotonic() - t0:.1f} s after kill -9")
        assert not list_managed_containers(spec.run_id)
        assert "removed" in (spec.run_dir / "docker-reaper.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        remove_managed_containers(spec.run_id, timeout=1)


def test_remove_managed_containers_by_run_id(pinned, make_spec):
    specs = [make_spec(pinned) for _ in range(2)]
    engines = [DockerEngine(s) for s in specs]
    try:
        for e in engines:
            e.start()
        listed = {r["name"] for r in list_managed_containers()}
        assert {e.name for e in engines} <= listed
        removed = remove_managed_containers(run_id=specs[0].run_id, timeout=1)
        assert removed == [engines[0].name]
        assert [r["name"] for r in list_managed_containers(specs[1].run_id)] == [engines[1].name]
        assert remove_managed_containers(run_id=specs[1].run_id, timeout=1) == [engines[1].name]
        assert not list_managed_containers(specs[0].run_id) and not list_managed_containers(specs[1].run_id)
    finally:
        for e in engines:
            e.stop(timeout=1)  # tolerant of the containers being gone already


# -- through the CLI (`harness pin`, `harness up`) ------------------------------------------------------------------


def _harness(*args, **kw) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    return subprocess.Popen([sys.executable, "-m", "harness", *args], env=env, text=True, **kw)


def _containers_of(pid: int) -> list[str]:
    return [r["name"] for r in list_managed_containers() if r.get("harness_pid") == str(pid)]


def _force_remove(names: list[str]) -> None:
    from harness.dockerd import docker_client

    client = docker_client()
    for n in names:
        try:
            client.containers.get(n).remove(force=True)
        except Exception:  # noqa: BLE001 - already gone
            pass


def _up(manifest: Path) -> tuple[subprocess.Popen, str]:
    proc = _harness("up", str(manifest), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = proc.stdout.readline().strip()
    if not line.startswith("ready: http://127.0.0.1:"):
        proc.kill()
        raise AssertionError(f"harness up printed {line!r}; stderr:\n{proc.communicate()[1]}")
    return proc, line.removeprefix("ready: ")


def test_cli_pin_then_up_sigterm_leaves_nothing(standin, write_manifest):
    ref, digest = standin
    path = write_manifest(ref)
    pin = _harness("pin", str(path), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = pin.communicate(timeout=60)
    assert pin.returncode == 0, err
    assert load_manifest(path).runtime.docker.digest == digest
    proc, url = _up(path)
    try:
        assert http.get(f"{url}/info", timeout=5).json()["version"] == "3.3.5"
        names = _containers_of(proc.pid)
        assert len(names) == 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert wait_gone(names, timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _force_remove(_containers_of(proc.pid))


def test_cli_up_kill_9_leaves_no_container(pinned):
    proc, url = _up(pinned)
    names = _containers_of(proc.pid)
    try:
        assert len(names) == 1
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)
        assert wait_gone(names, timeout=10), "container still there 10 s after kill -9 of `harness up`"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _force_remove(names)
