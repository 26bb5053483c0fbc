"""Docker launcher pieces that need no daemon: container arguments, GPU requests, digest-line editing."""

from __future__ import annotations

import pytest

from harness.errors import ManifestError, RefusedError
from harness.launch.docker import DockerEngine, _publish_ip, _split_ref, engine_args
from harness.pin import set_digest_in_text

pytestmark = pytest.mark.docker
D = "sha256:" + "a" * 64


@pytest.fixture
def spec_for(write_manifest, make_spec):
    def make(extra: str = "", **kw):
        path = write_manifest("127.0.0.1:5000/tgi-standin:3.3.5", digest=D)
        if extra:
            path.write_text(path.read_text().replace("    container_port: 80\n", "    container_port: 80\n" + extra))
        return make_spec(path, **kw)

    return make


def test_tgi_container_arguments(spec_for):
    spec = spec_for(extra_args=("--max-total-tokens", "512"))
    kw = DockerEngine(spec, client=object()).create_kwargs()
    assert kw["command"] == ["--model-id", "/model", "--hostname", "0.0.0.0", "--port", "80", "--usage-stats", "off",
                             "--max-total-tokens", "512"]  # fmt: skip
    assert kw["ports"] == {"80/tcp": ("127.0.0.1", spec.port)}
    assert kw["volumes"] == {str(spec.model_dir.resolve()): {"bind": "/model", "mode": "ro"}}
    assert kw["environment"]["HF_HUB_OFFLINE"] == "1" and kw["environment"]["TRANSFORMERS_OFFLINE"] == "1"
    assert kw["labels"]["harness.managed"] == "1" and kw["labels"]["harness.run-id"] == spec.run_id
    assert kw["network_mode"] == "bridge"
    assert "device_requests" not in kw and "shm_size" not in kw


def test_gpus_and_shm_only_when_asked(spec_for):
    kw = DockerEngine(spec_for("    gpus: true\n    shm_size: 1g\n"), client=object()).create_kwargs()
    (req,) = kw["device_requests"]
    assert req["Count"] == -1 and req["Capabilities"] == [["gpu"]]
    assert kw["shm_size"] == "1g"


def test_vllm_image_arguments(spec_for):
    spec = spec_for()
    m = spec.manifest
    m2 = m.model_copy(update={"engine": m.engine.model_copy(update={"kind": "vllm", "version": "0.11.0"})})
    args = engine_args(spec.__class__(**{**spec.__dict__, "manifest": m2}))
    assert args == ["--model", "/model", "--served-model-name", "/model", "--host", "0.0.0.0", "--port", "80"]


def test_publish_address_is_loopback_only():
    assert _publish_ip("127.0.0.1") == "127.0.0.1"
    assert _publish_ip("localhost") == "127.0.0.1"
    assert _publish_ip("::1") == "::1"
    with pytest.raises(RefusedError):
        _publish_ip("0.0.0.0")


def test_split_ref():
    assert _split_ref("127.0.0.1:5000/x/y:1.2") == ("127.0.0.1:5000/x/y", "1.2")
    assert _split_ref("127.0.0.1:5000/x") == ("127.0.0.1:5000/x", None)
    assert _split_ref("ghcr.io/huggingface/text-generation-inference:3.3.5@" + D) == (
        "ghcr.io/huggingface/text-generation-inference",
        "3.3.5",
    )


def test_digest_line_edits():
    text = "# c\nruntime:\n  docker:\n    image: x:1  # tag\n    container_port: 80\nmodel: {}\n"
    assert set_digest_in_text(text, D) == text.replace("  # tag\n", f"  # tag\n    digest: {D}\n")
    replaced = set_digest_in_text(text.replace("    container_port", "    digest: null\n    container_port"), D)
    assert replaced == text.replace("  # tag\n", f"  # tag\n    digest: {D}\n")
    assert set_digest_in_text("runtime:\n  docker:\n    image: x:1", D).endswith(f"    image: x:1\n    digest: {D}\n")
    with pytest.raises(ManifestError):
        set_digest_in_text("runtime:\n  docker: {image: x:1}\n", D)
    with pytest.raises(ManifestError):
        set_digest_in_text("runtime:\n  python:\n    version: '3.11'\n", D)
