"""Hostile input for `harness model build` and `harness model hash` (issue 31: #5, #23).

#5: `model build DIR --format gguf --force` deleted a directory holding other files, turned a file into a directory,
replaced a symlink and gave a traceback on `.`; both formats now go through one destination check.
#23: `model hash` accepted names with C1 controls, and the README's shell recipe gave another hash for names with
spaces, quotes or backslashes. The recipe is taken from README.md itself, so the test fails if the README drifts.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.cli import main
from harness.hashing import tree_hash

ROOT = Path(__file__).resolve().parents[2]
FORMATS = ("safetensors", "gguf")


def _snapshot(root: Path) -> dict[str, object]:
    """Every entry under root (not following links): a link's target, a file's bytes, a directory as such."""
    seen: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                seen[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                seen[rel] = "dir"
            else:
                seen[rel] = p.read_bytes()
    return seen


def _refused(capsys, argv: list[str]) -> str:
    """Run the CLI in process (a traceback would fail the test); it must exit 2 with one error line."""
    rc = main(argv)
    captured = capsys.readouterr()
    assert rc == 2, (rc, captured)
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("harness: error: "), captured.err
    return lines[0]


def _a_directory_holding_other_files(area: Path) -> str:
    d = area / "keep"
    d.mkdir()
    (d / "notes.txt").write_text("precious")
    return str(d)


def _a_file(area: Path) -> str:
    (area / "afile").write_text("data")
    return str(area / "afile")


def _a_symlink(area: Path) -> str:
    target = area / "target"
    target.mkdir()
    (target / "notes.txt").write_text("precious")
    (area / "link").symlink_to(target)
    return str(area / "link")


def _the_current_directory(area: Path) -> str:
    (area / "notes.txt").write_text("precious")
    return "."


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(
    "destination", [_a_directory_holding_other_files, _a_file, _a_symlink, _the_current_directory]
)  # fmt: skip
def test_model_build_force_never_replaces_what_is_not_its_model(tmp_path, monkeypatch, capsys, fmt, destination):
    """#5: a directory of other files, a file, a symlink or `.` is refused with --force too, in both formats, and
    nothing under the parent is deleted, replaced or left behind."""
    area = tmp_path / "area"
    area.mkdir()
    dest = destination(area)
    monkeypatch.chdir(area)
    before = _snapshot(area)
    line = _refused(capsys, ["model", "build", dest, "--format", fmt, "--force"])
    assert "refusing" in line or "give a new or empty directory" in line, line
    assert _snapshot(area) == before


def test_gguf_force_replaces_only_the_same_embedded_model(tmp_path, capsys):
    """#5: --force replaces a GGUF model of the same kind built before, but not a foreign model.gguf, nor a GGUF of the
    other embedded model, nor a safetensors model (the rule the safetensors path already had)."""
    d = tmp_path / "m"
    assert main(["model", "build", str(d), "--format", "gguf"]) == 0
    built = capsys.readouterr().out.strip()
    _refused(capsys, ["model", "build", str(d), "--format", "gguf"])  # without --force: refused
    assert main(["model", "build", str(d), "--format", "gguf", "--force"]) == 0
    assert capsys.readouterr().out.strip() == built == tree_hash(d)

    before = _snapshot(tmp_path)
    _refused(capsys, ["model", "build", str(d), "--format", "gguf", "--model", "scripted-tiny", "--force"])
    assert _snapshot(tmp_path) == before

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "model.gguf").write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 64)
    safetensors = tmp_path / "st"
    assert main(["model", "build", str(safetensors)]) == 0
    capsys.readouterr()
    before = _snapshot(tmp_path)
    for other in (foreign, safetensors):
        line = _refused(capsys, ["model", "build", str(other), "--format", "gguf", "--force"])
        assert str(other) in line and "does not hold" in line, line
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("bad", ["c1\x85next", "csi\x9b31m", "line\u2028sep", "bidi\u202eoverride", "iso\u2066late"])
def test_model_hash_refuses_a_name_with_a_control_character(tmp_path, capsys, bad):
    """#23: the controls harness.shown escapes (C1, line separators, bidi overrides) are refused like C0, in one line
    naming the entry with the control escaped."""
    d = tmp_path / "m"
    (d / "sub").mkdir(parents=True)
    (d / "sub" / bad).write_text("x")
    line = _refused(capsys, ["model", "hash", str(d)])
    assert "control character" in line, line
    escaped = bad.encode("ascii", "backslashreplace").decode()
    assert escaped in line and bad not in line, line


def _readme_recipe() -> str:
    """The shell recipe of README.md's model content hash paragraph, `cd DIR && ...`, as written there."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    at = readme.index("**Model content hash**")
    found = re.search(r"cd DIR && [^`\n]+", readme[at:])
    assert found, "README.md: no `cd DIR && ...` recipe after **Model content hash**"
    return found.group(0).rstrip(". ")


HOSTILE_NAMES = [
    "with space",
    " leading space",
    "it's",
    'say "hi"',
    "back\\slash",
    "\\n-looking",
    "-n",
    "dir with space/inner 'q' \"dq\" \\ end",
    "sub-dir",
    "sub dir/x",
    "caf\u00e9",
    "plain",
]


def test_the_readme_recipe_gives_the_harness_hash_for_spaces_quotes_and_backslashes(tmp_path, capsys):
    """#23: the README's shell recipe, run with bash, gives `harness model hash`'s value for names with spaces, quotes,
    backslashes and a leading dash."""
    if shutil.which("sha256sum") is None:
        raise AssertionError("sha256sum missing")
    d = tmp_path / "model dir"
    for i, name in enumerate(HOSTILE_NAMES):
        p = d / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(f"content {i}\n".encode())
    assert main(["model", "hash", str(d)]) == 0
    harness_hash = capsys.readouterr().out.strip()
    assert harness_hash == tree_hash(d)

    recipe = _readme_recipe().replace("cd DIR", f"cd {shlex.quote(str(d))}", 1)
    proc = subprocess.run(["bash", "-c", f"set -o pipefail; {recipe}"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, (recipe, proc.stderr)
    assert proc.stdout.split()[0] == harness_hash, (recipe, proc.stdout, proc.stderr)
