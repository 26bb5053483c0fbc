"""Docker test fixtures: a real daemon (started if needed), a registry on 127.0.0.1, the pushed-and-pulled stand-in.

A test here never skips: when no daemon can be had (started with `dockerd --storage-driver=vfs` if nothing answers) the
session fixture fails, under CI=true and locally alike. Every container, image and registry process started here is
removed at the end of the session.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from harness.hashing import tree_hash
from tests.support.dockerd import ensure_daemon, ensure_registry, free_loopback_port, stop_registry

SESSION_PREFIX = f"dockertest-{uuid.uuid4().hex[:8]}"
IN_CI = os.environ.get("CI") == "true"


@pytest.fixture(scope="session")
def docker_client(tmp_path_factory):
    # An empty client config: no credential helpers are consulted for the local registry.
    old = os.environ.get("DOCKER_CONFIG")
    os.environ["DOCKER_CONFIG"] = str(tmp_path_factory.mktemp("docker-config"))
    try:
        client = ensure_daemon(timeout=30)
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"Docker daemon unavailable{' under CI=true' if IN_CI else ''}: {exc}", pytrace=False)
    yield client
    from harness.launch.containers import list_managed_containers, remove_managed_containers

    for c in list_managed_containers(client=client):  # only this session's containers: others may share the daemon
        if (c.get("run_id") or "").startswith(SESSION_PREFIX):
            remove_managed_containers(run_id=c["run_id"], client=client, timeout=1)
    client.close()
    if old is None:
        os.environ.pop("DOCKER_CONFIG", None)
    else:
        os.environ["DOCKER_CONFIG"] = old


@pytest.fixture(scope="session")
def registry(docker_client, tmp_path_factory):
    root = tmp_path_factory.mktemp("registry")
    try:
        addr = ensure_registry(root)
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"local registry unavailable: {exc}", pytrace=False)
    yield addr
    stop_registry(root)


class Images:
    """Builds stand-in variants, pushes them to the local registry, and removes every tag it made at the end."""

    def __init__(self, client, registry: str):
        self.client, self.registry, self.refs, self.ids = client, registry, set(), set()

    def ref(self, name: str) -> str:
        return f"{self.registry}/{name}:3.3.5"

    def build(self, ref: str, variant: str) -> str:
        from tests.support.standin import build_standin_image

        self.refs.add(ref)
        image_id = build_standin_image(ref, variant, client=self.client)
        self.ids.add(image_id)
        return image_id

    def push(self, ref: str) -> str:
        repo, tag = ref.rsplit(":", 1)
        for line in self.client.images.push(repo, tag=tag, stream=True, decode=True):
            if "error" in line:
                raise AssertionError(f"push {ref}: {line['error']}")
        img = self.client.images.get(ref)
        return next(d.split("@", 1)[1] for d in img.attrs["RepoDigests"] if d.startswith(repo + "@"))

    def published(self, name: str, variant: str) -> tuple[str, str]:
        """Build, push, `docker rmi`, pull back: the image has a real RepoDigest. Returns (ref, digest)."""
        ref = self.ref(name)
        self.build(ref, variant)
        digest = self.push(ref)
        self.client.images.remove(ref, force=True)
        repo, tag = ref.rsplit(":", 1)
        self.ids.add(self.client.images.pull(repo, tag=tag).id)
        got = self.client.images.get(ref).attrs["RepoDigests"]
        assert f"{repo}@{digest}" in got, got
        return ref, digest

    def cleanup(self) -> None:
        import docker.errors

        for ref in [*self.refs, *self.ids]:  # by id too: a re-pointed tag leaves the old image untagged
            try:
                self.client.images.remove(ref, force=True)
            except docker.errors.APIError:
                pass


@pytest.fixture(scope="session")
def images(docker_client, registry):
    imgs = Images(docker_client, registry)
    yield imgs
    imgs.cleanup()


@pytest.fixture(scope="session")
def standin(images):
    """(ref, digest) of the stand-in (variant a) pushed to and pulled back from the local registry."""
    return images.published("tgi-standin", "a")


@pytest.fixture
def model_dir(tmp_path):
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}\n')
    return d


@pytest.fixture
def write_manifest(tmp_path, model_dir):
    """write_manifest(image, digest=None) -> path of a TGI 3.3.5 docker manifest (with comments)."""

    def write(image: str, digest: str | None = None, name: str = "tgi-standin.yaml") -> Path:
        digest_line = f"    digest: {digest}\n" if digest else ""
        text = (
            "# TGI 3.3.5 stand-in (tests/docker)\n"
            "engine:\n"
            "  kind: tgi\n"
            "  version: 3.3.5\n"
            "runtime:\n"
            "  # pinned by digest; `harness pin` fills it in\n"
            "  docker:\n"
            f"    image: {image}   # tag for humans\n"
            f"{digest_line}"
            "    container_port: 80\n"
            "model:\n"
            f"  source: {model_dir}\n"
            f"  sha256: {tree_hash(model_dir)}\n"
            "  served_name: /model\n"
            "server:\n"
            "  env:\n"
            "    LOG_LEVEL: info\n"
        )
        p = tmp_path / name
        p.write_text(text)
        return p

    return write


@pytest.fixture
def make_spec(tmp_path, model_dir):
    """make_spec(manifest_path, **overrides) -> LaunchSpec with a free loopback port and a session-scoped run id."""
    from harness.launch.base import LaunchSpec
    from harness.manifest import load_manifest

    def make(manifest_path, **kw) -> LaunchSpec:
        run_id = kw.pop("run_id", f"{SESSION_PREFIX}-{uuid.uuid4().hex[:6]}")
        return LaunchSpec(
            manifest=load_manifest(manifest_path), run_id=run_id, run_dir=tmp_path / "run" / run_id,
            model_dir=model_dir, port=free_loopback_port(), **kw,
        )  # fmt: skip

    return make
