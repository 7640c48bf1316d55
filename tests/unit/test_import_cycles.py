"""No import cycles inside a package, counting every import statement: at module level, under
``TYPE_CHECKING`` and inside functions. A cycle broken only by a lazy or type-checking import still ties
the modules together (neither can be read, tested or moved without the other), so it counts here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, root: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``path`` imports anywhere in its code: ``import a.b``, ``from a.b
    import c`` (``a.b.c`` when that is a module), relative forms resolved against ``path``'s package."""
    this = module_name(path, root)
    package = this if path.name == "__init__.py" else this.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, node.module] if node.module else anchor)
            else:
                base = node.module or ""
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if name in known and name != this}


def import_graph(folder: str, root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules under ``folder`` it imports."""
    paths = sorted((root / folder).rglob("*.py"))
    known = {module_name(p, root) for p in paths}
    return {module_name(p, root): imported_modules(p, root, known) for p in paths}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or None (depth-first search, white/grey/black)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)) is not None:
            return cycle
    return None


def test_the_graph_counts_lazy_type_checking_and_relative_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import x\n"
    )
    (pkg / "b.py").write_text("def f():\n    from . import c\n")
    (pkg / "c.py").write_text("import os\nfrom pkg import a\n")
    graph = import_graph("pkg", tmp_path)
    assert graph == {"pkg": set(), "pkg.a": {"pkg.b"}, "pkg.b": {"pkg", "pkg.c"}, "pkg.c": {"pkg", "pkg.a"}}
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]
    assert find_cycle({"x": {"y"}, "y": set()}) is None


@pytest.mark.parametrize("folder", ["app", "routers", "embeddings", "replay_dataset", "bench", "workers"])
def test_no_import_cycle_inside_the_package(folder: str) -> None:
    graph = import_graph(folder)
    assert len(graph) > 1
    assert find_cycle(graph) is None
