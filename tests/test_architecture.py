"""The shape of the package: no import cycle inside `harness/`.

Every `import` and `from ... import` in `harness/**/*.py` counts, at module level and inside functions alike (a late
import hides a cycle from Python, not from the reader). Only imports under `if TYPE_CHECKING:` are left out: they never
run. A cycle is a strongly-connected component of more than one module.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "harness"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, type_checking: bool = False):
    """Every Import/ImportFrom node, skipping the bodies of `if TYPE_CHECKING:` (unless `type_checking`)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test) and not type_checking:
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, modules: set[str]) -> set[str]:
    if isinstance(node, ast.Import):
        return {a.name for a in node.names}
    if node.level:  # relative: resolve against this module's package
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    # `from pkg import mod` imports pkg and, when it is a module, pkg.mod
    return {source} | {f"{source}.{a.name}" for a in node.names if f"{source}.{a.name}" in modules}


def import_graph(type_checking: bool = False) -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(files)
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        edges: set[str] = set()
        for node in _imports(tree, type_checking):
            edges |= _targets(node, name, path.name == "__init__.py", modules)
        graph[name] = {e for e in edges if e in modules and e != name}
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (the graph is a few hundred modules, recursion would do, but needs no limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                out.append(sorted(component))
    return out


def test_the_cycle_finder_finds_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert sorted(c for c in strongly_connected(graph) if len(c) > 1) == [["a", "b", "c"]]


def test_relative_and_from_imports_resolve():
    tree = ast.parse("from . import b\nfrom .c import x\nfrom .. import top\n")
    modules = {"p.q.a", "p.q.b", "p.q.c", "p.top"}
    found = set().union(*(_targets(n, "p.q.a", False, modules) for n in _imports(tree)))
    assert found == {"p.q", "p.q.b", "p.q.c", "p", "p.top"}


def test_no_import_cycle_inside_harness():
    graph = import_graph()
    assert len(graph) > 50  # the walk found the package
    cycles = [c for c in strongly_connected(graph) if len(c) > 1]
    assert not cycles, "import cycles in harness/: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_conformance_package_has_no_circle_even_in_type_annotations():
    """The conformance vocabulary (model), the expectations and the context stand in layers: a new surface is one new
    module of cases (and expectation entries), and a reader can enter the package from the bottom. Imports for type
    checkers count here too: `Case` (which needs `Ctx`) lives in `case.py`, above the context."""
    graph = import_graph(type_checking=True)
    conf = {m: {t for t in ts if t.startswith("harness.conformance")} for m, ts in graph.items()
            if m.startswith("harness.conformance")}  # fmt: skip
    cycles = [c for c in strongly_connected(conf) if len(c) > 1]
    assert not cycles, "import cycles in harness/conformance/: " + "; ".join(" <-> ".join(c) for c in cycles)
    below = ("harness.conformance.model", "harness.conformance.expectations", "harness.conformance.context")
    for low, high in zip(below, below[1:], strict=False):
        assert high not in _reachable(conf, low), f"{low} reaches {high}: the layers turned round"


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


# The command-line front: argparse and printing. Library code never imports it (the call path never climbs back up).
CLI_MODULES = {"harness.__main__", "harness.cli", "harness.commands"}


def _is_cli(module: str) -> bool:
    return module in CLI_MODULES or module.endswith(".cli")


def test_library_code_imports_no_cli_module():
    graph = import_graph()
    upward = sorted(f"{m} -> {t}" for m, targets in graph.items() if not _is_cli(m) for t in targets if _is_cli(t))
    assert not upward, "library modules importing a CLI module: " + "; ".join(upward)
