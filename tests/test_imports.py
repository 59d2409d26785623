"""No import cycle among the ``tools`` modules: the pipeline's layers import downwards only.

Every module in tools/ is parsed with ``ast``; each ``import``/``from ... import`` of a
``tools`` module counts, at module level and inside functions alike (a lazy import only hides a
cycle until the function runs).
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

from tools import ROOT

TOOLS = ROOT / "tools"


def _module_name(path: Path, top: Path) -> str:
    rel = path.relative_to(top).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _imported(node: ast.AST, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The ``tools`` modules one import statement in ``module`` names."""
    found: set[str] = set()
    if isinstance(node, ast.Import):
        found = {alias.name for alias in node.names}
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            package = module.split(".") if is_package else module.split(".")[:-1]
            base = ".".join(package[:len(package) - node.level + 1])
            target = f"{base}.{node.module}" if node.module else base
        else:
            target = node.module or ""
        found = {target}
        # `from . import host` imports the module tools.host
        found |= {f"{target}.{alias.name}" for alias in node.names}
    return {name for name in found if name in known}


def import_graph(package_dir: Path = TOOLS) -> dict[str, set[str]]:
    """Each module of the package -> the package's modules it imports (anywhere in its body)."""
    files = {_module_name(p, package_dir.parent): p for p in sorted(package_dir.rglob("*.py"))}
    known = set(files)
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        edges: set[str] = set()
        for node in ast.walk(tree):
            edges |= _imported(node, module, path.name == "__init__.py", known)
        # the package's __init__ runs before any submodule: not an edge that forms cycles
        graph[module] = edges - {module, "tools"}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its modules in order, the first repeated at the end), or None."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    return None


def test_the_graph_sees_function_level_and_relative_imports(tmp_path):
    pkg = tmp_path / "tools"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import x\n")
    (pkg / "b.py").write_text("def f():\n    from . import a\n")
    (pkg / "c.py").write_text("import tools.a\nimport json\n")
    graph = import_graph(pkg)
    assert graph == {"tools": set(), "tools.a": {"tools.b"}, "tools.b": {"tools.a"},
                     "tools.c": {"tools.a"}}
    cycle = find_cycle(graph)
    assert cycle is not None and set(cycle) == {"tools.a", "tools.b"}


def test_no_import_cycle_in_tools():
    graph = import_graph()
    assert "tools.build" in graph and "tools.host" in graph["tools.build"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_backends_do_not_import_the_orchestrator():
    graph = import_graph()
    for backend in ("tools.host", "tools.container", "tools.cibw", "tools.incontainer",
                    "tools.finish"):
        assert "tools.build" not in graph[backend], backend
