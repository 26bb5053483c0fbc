"""Engine knowledge lives in harness/engines/ (profiles) and the expectation files: no other harness module names an
engine kind, an engine's metric or an engine's package in its code (identifiers and string literals).

Prose is not checked: comments and docstrings may cite where a rule comes from ("vLLM merges tokens when ...").
The exceptions below are code, each with its reason."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

HARNESS = Path(__file__).resolve().parents[1] / "harness"
ENGINE_NAME = re.compile(
    r"vllm|\btgi|text-generation|text_generation|llamacpp|llama\.cpp|llama-server|llama_cpp|LLAMA_", re.I
)

# (file relative to harness/, the token as written) -> why it may name an engine
EXCEPTIONS = {
    ("blocks/capacity.py", '"vllm_logged"'): "the block model reproduces vLLM 0.11.0's allocator; this is the "
    "'Maximum concurrency' figure that engine logs, named for where it is read",
    ("blocks/cli.py", '"KV blocks/tokens for a model config (vLLM 0.11.0 formula)"'): "the help text says whose "
    "allocator formula the block model implements",
    ("load/metrics.py", '"vllm_bench_compat"'): "figures computed with the definitions of the `vllm bench serve` "
    "benchmark tool, for like-for-like comparison with it (a tool's definitions, not an engine's behaviour)",
    ("settings.py", '"vllm-0.11.0-cpu.yaml"'): "the default manifest's file name",
}


def _docstring_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and body:
            first = body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def engine_names_in_code() -> list[tuple[str, int, str]]:
    found = []
    for path in sorted(HARNESS.rglob("*.py")):
        rel = path.relative_to(HARNESS).as_posix()
        if rel.startswith("engines/"):
            continue
        src = path.read_text()
        docs = _docstring_lines(ast.parse(src))
        for tok in tokenize.generate_tokens(io.StringIO(src).readline):
            if (
                tok.type in (tokenize.NAME, tokenize.STRING)
                and tok.start[0] not in docs
                and ENGINE_NAME.search(tok.string)
            ):
                found.append((rel, tok.start[0], tok.string))
    return found


def test_no_engine_names_outside_the_profiles():
    unexpected = [f"harness/{rel}:{line}: {tok[:80]}" for rel, line, tok in engine_names_in_code()
                  if (rel, tok) not in EXCEPTIONS]  # fmt: skip
    assert not unexpected, "engine names belong in harness/engines/:\n" + "\n".join(unexpected)


def test_every_exception_is_still_needed():
    seen = {(rel, tok) for rel, _, tok in engine_names_in_code()}
    stale = [k for k in EXCEPTIONS if k not in seen]
    assert not stale, f"exceptions that no longer occur (remove them): {stale}"


def test_the_check_sees_an_engine_name_in_code(tmp_path, monkeypatch):
    # the check itself can fail: a module naming a metric in code is found, the same name in a comment is not
    pkg = tmp_path / "harness"
    pkg.mkdir()
    (pkg / "probe.py").write_text(
        '"""docstring naming vllm is prose."""\n# vllm in a comment\nNAME = "vllm:num_requests_running"\n'
    )
    import sys

    monkeypatch.setattr(sys.modules[__name__], "HARNESS", pkg)
    assert engine_names_in_code() == [("probe.py", 3, '"vllm:num_requests_running"')]
