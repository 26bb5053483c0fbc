"""Hostile input for the CLI's own output (issue 21: #29, and the error line of #8): a reader that goes away, and an
error whose text quotes a server. Subprocesses of the real `harness` entry point; no socket opens."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _harness(*args: str) -> list[str]:
    return [sys.executable, "-c", "import sys; from harness.cli import main; sys.exit(main())", *args]


def test_conform_list_into_a_closed_pipe_ends_without_a_traceback():
    """#29: `harness conform --list | head -1` raised BrokenPipeError with a traceback."""
    proc = subprocess.Popen(_harness("conform", "--list"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # the reader goes away, as `head -1` does
    err = proc.stderr.read().decode()
    rc = proc.wait(timeout=60)
    assert first.strip(), "conform --list printed nothing"
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert rc in (0, 141), (rc, err)


def test_an_error_quoting_a_server_reaches_the_terminal_escaped(monkeypatch, capsys):
    """#8: an error's text (a server's, a cell's) is printed with its control characters escaped."""
    from harness import cli
    from harness.errors import DataError

    def boom(args):
        raise DataError("server said: fail\x1b[2K\r  pass \x1b]0;owned\x07 \x9b31m")

    monkeypatch.setattr(cli, "build_parser", lambda: _parser_with(boom))
    rc = cli.main(["x"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "\x1b" not in err and "\r" not in err and "\x07" not in err and "\x9b" not in err
    assert "\\x1b[2K\\r" in err  # shown, not dropped


def _parser_with(func):
    import argparse

    p = argparse.ArgumentParser(prog="harness")
    sub = p.add_subparsers(dest="command")
    sub.add_parser("x").set_defaults(func=func)
    return p


@pytest.mark.parametrize(
    "text, must_not_contain",
    [("a\x1b[2Kb", "\x1b"), ("x\ry", "\r"), ("t\x07", "\x07"), ("c1\x9b", "\x9b"), ("bidi\u202e", "\u202e"),
     ("nl\nfake line", "\n"), ("del\x7f", "\x7f")],
)  # fmt: skip
def test_shown_escapes_every_control(text, must_not_contain):
    from harness.shown import shown

    out = shown(text)
    assert must_not_contain not in out
    assert out.isprintable()


def test_md_text_makes_images_links_and_cells_inert():
    from harness.shown import md_code, md_text

    out = md_text("![x](https://host/p.png) [a](javascript:alert(1)) | cell <img src=x>")
    assert "![" not in out and "](" not in out and "<img" not in out and " | " not in out
    assert "`" not in md_code("a`b") and "\\|" in md_code("a|b")


def test_scrub_removes_a_key_and_its_cut_excerpts():
    from harness.secrets import scrub, scrub_tree

    key = "sk-test-0123456789abcdef"
    text = f"echo {key}; excerpt {key[:9]}…; tail …{key[-7:]}"
    out = scrub(text, [key])
    assert key not in out and key[:9] not in out and key[-7:] not in out
    assert scrub("short abc", ["abc"]) == "short abc"  # a secret under 6 characters is not matched by parts
    tree = scrub_tree({"a": [key, {"k": f"x{key[:6]}"}], key: 1}, [key])
    assert key not in repr(tree) and key[:6] not in repr(tree)


def test_a_lock_that_is_any_file_is_named_by_its_line_never_quoted(tmp_path, capsys):
    """#5 on the manifest side: `validate` of a manifest whose lock is a netrc-like file quoted its first line."""
    from harness import cli
    from harness.manifest import DEFAULT_MANIFEST

    secret = "TOP-SECRET-TOKEN-4f1c9a"
    (tmp_path / "netrc").write_text(f"machine index.example login me password {secret}\n")
    text = DEFAULT_MANIFEST.read_text().replace("lock: locks/vllm-0.11.0-cpu.txt", f"lock: {tmp_path / 'netrc'}")
    text = "\n".join(line for line in text.splitlines() if "lock_sha256" not in line)
    (tmp_path / "m.yaml").write_text(text)
    rc = cli.main(["validate", str(tmp_path / "m.yaml")])
    out = capsys.readouterr()
    assert rc == 2
    assert "line 1" in out.err and secret not in out.err + out.out and "password" not in out.err


def test_extra_engine_environment_gets_the_loader_rule(tmp_path):
    """#7 for a caller's extra_env (the pytest plugin, the matrix): a PYTHONPATH is refused before anything starts."""
    from harness.errors import UsageError
    from harness.launch.session import check_launch_inputs
    from harness.manifest import DEFAULT_MANIFEST, load_manifest

    m = load_manifest(DEFAULT_MANIFEST)
    with pytest.raises(UsageError) as e:
        check_launch_inputs(m, (), {"PYTHONPATH": str(tmp_path)})
    assert "PYTHONPATH" in str(e.value)
    check_launch_inputs(m, (), {"VLLM_CPU_KVCACHE_SPACE": "1"})  # an engine setting still passes
