"""A tiny TGI 3.3.5 stand-in image, built locally with `docker import` (no registry, no base image, ~2 MB).

Root filesystem: Debian's static busybox (`/bin/busybox`, package busybox-static) plus the scripts in rootfs/:
- /entrypoint.sh accepts text-generation-launcher style arguments (`--model-id /model --hostname H --port P`, others
  logged and ignored; MODEL_ID/PORT environment too), writes /info and /v1/models documents, then runs
  `nc -ll -p PORT -e /bin/handler.sh` (one shell handler per connection).
- /bin/handler.sh answers TGI-shaped `GET /health` (200, empty), `GET /info` (version 3.3.5, router
  text-generation-router, model_id = the --model-id value, docker_label "standin-<variant>"), `GET /v1/models`,
  `GET /metrics` (a few tgi_* series), and `POST /v1/chat/completions`: with `"stream": true` it replays a
  recorded TGI chat stream (fixture test_chat_hfhub_usage.json) as SSE `data: {...}` events then `data: [DONE]`,
  otherwise the same answer as one chat.completion object.
- /etc/standin-variant holds the variant string, so two variants are two different images (different digests).

busybox nc binds every address of the container's own network namespace; the launcher publishes the port on the
host's 127.0.0.1 only, so nothing outside the host's loopback can reach it.
"""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

from harness.dockerd import connect
from harness.errors import DockerUnavailable

__all__ = ["build_standin_image", "standin_rootfs_tar", "BUSYBOX_PATHS", "STANDIN_CHANGES"]

HERE = Path(__file__).resolve().parent
ROOTFS = HERE / "rootfs"
BUSYBOX_PATHS = ("/bin/busybox", "/usr/bin/busybox")
APPLETS = ("sh", "nc", "cat", "head", "wc", "printf", "echo", "mkdir", "rm", "sleep", "ls", "env", "ps", "kill")
STANDIN_CHANGES = [
    'ENTRYPOINT ["/entrypoint.sh"]',
    "ENV PORT=80 HF_HOME=/data",
    "EXPOSE 80/tcp",
]
_MTIME = 1_700_000_000  # fixed, so the layer of one variant is byte-identical across builds


def _busybox() -> Path:
    for p in BUSYBOX_PATHS:
        path = Path(p)
        if path.is_file():
            return path
    found = shutil.which("busybox")
    if found:
        return Path(found)
    raise DockerUnavailable("the stand-in image needs a static busybox: apt-get install busybox-static")


def _info(name: str, *, mode: int = 0o644, kind: bytes = tarfile.REGTYPE, size: int = 0) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type, ti.mode, ti.size, ti.mtime, ti.uid, ti.gid = kind, mode, size, _MTIME, 0, 0
    return ti


def standin_rootfs_tar(variant: str = "a") -> bytes:
    """The stand-in's root filesystem as an uncompressed tar (deterministic for a given variant and busybox)."""
    busybox = _busybox()
    stream = json.loads((ROOTFS / "chat_stream.json").read_text())
    files: dict[str, tuple[bytes, int]] = {
        "bin/busybox": (busybox.read_bytes(), 0o755),
        "entrypoint.sh": ((ROOTFS / "entrypoint.sh").read_bytes(), 0o755),
        "bin/handler.sh": ((ROOTFS / "handler.sh").read_bytes(), 0o755),
        "www/chat.json": ((ROOTFS / "chat.json").read_bytes(), 0o644),
        "www/chat_stream.jsonl": ("".join(json.dumps(c, separators=(",", ":")) + "\n" for c in stream).encode(), 0o644),
        "etc/standin-variant": (f"{variant}\n".encode(), 0o644),
        "etc/passwd": (b"root:x:0:0:root:/root:/bin/sh\n", 0o644),
        "etc/group": (b"root:x:0:\n", 0o644),
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d, mode in (
            ("bin", 0o755),
            ("etc", 0o755),
            ("www", 0o755),
            ("model", 0o755),
            ("data", 0o755),
            ("root", 0o700),
            ("proc", 0o555),
            ("sys", 0o555),
            ("dev", 0o755),
            ("tmp", 0o1777),
        ):
            tar.addfile(_info(d, mode=mode, kind=tarfile.DIRTYPE))
        for name, (data, mode) in files.items():
            tar.addfile(_info(name, mode=mode, size=len(data)), io.BytesIO(data))
        for applet in APPLETS:
            ti = _info(f"bin/{applet}", mode=0o777, kind=tarfile.SYMTYPE)
            ti.linkname = "busybox"
            tar.addfile(ti)
    return buf.getvalue()


def build_standin_image(tag: str, variant: str = "a", client=None) -> str:
    """`docker import` the stand-in root filesystem as `tag` (repository:tag); return the image id (sha256:...).

    Different variants differ by one file (/etc/standin-variant), so they are different images with different digests.
    """
    client = connect(client)
    repo, _, tg = tag.rpartition(":")
    if not repo or "/" in tg:
        repo, tg = tag, "latest"
    client.api.import_image_from_data(standin_rootfs_tar(variant), repository=repo, tag=tg, changes=STANDIN_CHANGES)
    return client.images.get(f"{repo}:{tg}").id
