"""`harness pin MANIFEST`: write the digest of the locally present image into a docker manifest.

The image named by runtime.docker.image (repository:tag) must be present locally; its RepoDigests entry for that
repository is the digest. An image that was built or imported locally and never pushed to or pulled from a registry
has no RepoDigest, and pinning refuses it (a local image id is not a digest anyone else can verify).

The manifest text is edited minimally: the `digest:` line under `runtime:` / `docker:` is replaced, or inserted after
the `image:` line, so comments and formatting survive. The result is re-parsed and must equal the original data plus
the digest before it is written (atomically).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from harness.errors import ManifestError, RefusedError
from harness.outputs import atomic_write_text
from harness.readers import parse_yaml, read_text
from harness.yamlfile import validate_as

__all__ = ["pin_manifest", "local_repo_digest", "set_digest_in_text"]

_KEY = re.compile(r"^(?P<indent>[ ]*)(?P<key>[A-Za-z_][A-Za-z0-9_-]*)\s*:(?P<rest>.*)$")


def _normalize_repo(repo: str) -> str:
    """Docker's familiar form: docker.io/library/x -> x, docker.io/u/x -> u/x."""
    for prefix in ("docker.io/library/", "index.docker.io/library/", "docker.io/", "index.docker.io/"):
        if repo.startswith(prefix):
            return repo[len(prefix) :]
    return repo


def local_repo_digest(image: str, client=None) -> str:
    """The sha256 digest under which the locally present `image` (repository:tag) is known to its repository."""
    import docker.errors

    from harness.dockerd import connect
    from harness.launch.docker import _split_ref

    client = connect(client)
    repo, _tag = _split_ref(image)
    try:
        img = client.images.get(image)
    except docker.errors.ImageNotFound:
        raise RefusedError(f"image {image} is not present locally; pull or load it first, then pin") from None
    entries = list(img.attrs.get("RepoDigests") or [])
    want = _normalize_repo(repo)
    mine = [e.split("@", 1)[1] for e in entries if "@" in e and _normalize_repo(e.split("@", 1)[0]) == want]
    if not mine:
        if entries:
            raise RefusedError(
                f"image {image} (id {img.id[:19]}) has no repo digest for {repo} (it has: {', '.join(entries)}); "
                f"push it to {repo} or pull it from there first"
            )
        raise RefusedError(
            f"image {image} (id {img.id[:19]}) has no repo digest: it was built or imported locally and never pushed "
            f"or pulled, so there is no registry digest to pin; push it to a registry (or pull it) first"
        )
    return mine[0]


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _is_filler(line: str) -> bool:
    s = line.strip()
    return not s or s.startswith("#")


def _block_end(lines: list[str], start: int, indent: int) -> int:
    """Index after the last line of the block opened at lines[start] (children are indented more than `indent`)."""
    end = start + 1
    last = start + 1
    while end < len(lines):
        if _is_filler(lines[end]):
            end += 1
            continue
        if _indent(lines[end]) <= indent:
            break
        end += 1
        last = end
    return last


def _find_key(lines: list[str], lo: int, hi: int, key: str, parent_indent: int) -> tuple[int, int] | None:
    """(index, indent) of `key:` as a direct child in lines[lo:hi] (the first child's indentation is the level)."""
    level = None
    for i in range(lo, hi):
        if _is_filler(lines[i]):
            continue
        ind = _indent(lines[i])
        if ind <= parent_indent:
            break
        if level is None:
            level = ind
        if ind != level:
            continue
        m = _KEY.match(lines[i])
        if m and m.group("key") == key:
            return i, ind
    return None


def set_digest_in_text(text: str, digest: str, where: str = "manifest") -> str:
    """The manifest text with runtime.docker.digest set to `digest`, editing one line (replace or insert)."""
    lines = text.splitlines(keepends=True)
    rt = _find_key(lines, 0, len(lines), "runtime", -1)
    if rt is None:
        raise ManifestError(where, "runtime", "no `runtime:` block to pin")
    rt_i, rt_ind = rt
    rt_end = _block_end(lines, rt_i, rt_ind)
    dk = _find_key(lines, rt_i + 1, rt_end, "docker", rt_ind)
    if dk is None:
        raise ManifestError(where, "runtime.docker", "no `docker:` block (written in block style) under runtime")
    dk_i, dk_ind = dk
    if _KEY.match(lines[dk_i]).group("rest").split("#", 1)[0].strip():
        raise ManifestError(
            where, "runtime.docker", "written in flow style; use block style so `harness pin` can edit it"
        )
    dk_end = _block_end(lines, dk_i, dk_ind)
    newline = "\r\n" if lines[dk_i].endswith("\r\n") else "\n"
    found = _find_key(lines, dk_i + 1, dk_end, "digest", dk_ind)
    if found is not None:
        i, ind = found
        rest = _KEY.match(lines[i].rstrip("\r\n")).group("rest")
        comment = ""
        m = re.search(r"\s#.*$", rest)
        if m and "'" not in rest and '"' not in rest:
            comment = " " + m.group(0).strip()
        lines[i] = f"{' ' * ind}digest: {digest}{comment}{newline}"
    else:
        img = _find_key(lines, dk_i + 1, dk_end, "image", dk_ind)
        if img is not None:
            i, ind = img
            at = i + 1
            # a multi-line image value (unlikely) continues on more-indented lines
            while at < dk_end and not _is_filler(lines[at]) and _indent(lines[at]) > ind:
                at += 1
        else:
            child = next((ln for ln in lines[dk_i + 1 : dk_end] if not _is_filler(ln)), None)
            ind = _indent(child) if child is not None else dk_ind + 2
            at = dk_i + 1
        if at > 0 and not lines[at - 1].endswith(("\n", "\r")):
            lines[at - 1] += newline
        lines.insert(at, f"{' ' * ind}digest: {digest}{newline}")
    return "".join(lines)


def pin_manifest(path: str | Path, client=None) -> str:
    """Write the local image's registry digest into the manifest at `path` (minimal text edit, atomic); return it."""
    from harness.manifest import Manifest, load_manifest

    p = Path(path)
    m = load_manifest(p, require_digest=False)
    if m.runtime.docker is None:
        raise ManifestError(
            p, "runtime.docker", "not a docker manifest: only runtime.docker images are pinned by digest"
        )
    digest = local_repo_digest(m.runtime.docker.image, client)
    if m.runtime.docker.digest == digest:
        return digest
    old_text = read_text(p, "manifest")  # bounded, like every reader; the same text load_manifest accepted
    new_text = set_digest_in_text(old_text, digest, str(p))
    expected = parse_yaml(old_text, p, "manifest")
    expected["runtime"]["docker"]["digest"] = digest
    edited = parse_yaml(new_text, p, "manifest")
    if edited != expected:
        raise ManifestError(
            p, "runtime.docker.digest", "could not edit the digest line safely; set it by hand: " + digest
        )
    validate_as(Manifest, edited, p, context={"engine_kind": m.engine.kind})
    mode = p.stat().st_mode & 0o7777
    atomic_write_text(p, new_text)
    os.chmod(p, mode)  # the temporary file was created 0600
    return digest
