"""What a package name and an sdist's file name may look like where the harness hands them to pip or uv: a PyPI
project name as a requirement line may hold it (PEP 508: no URL, marker, extra or option) and a plain file name (no
directory, no leading '-'). Use with fullmatch only. Below every module that names a package from a manifest."""

from __future__ import annotations

import re

__all__ = ["PROJECT_NAME", "SDIST_FILENAME"]

PROJECT_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
SDIST_FILENAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*\.(?:tar\.gz|zip)")
