"""The layout of ``tools``: layer packages that import one way, down the layers, and no cycle.

Every module in tools/ is parsed with ``ast``; each ``import``/``from ... import`` of a
``tools`` module counts, at module level and inside functions alike (a lazy import only hides a
cycle until the function runs).

The layer packages, bottom first (:data:`LAYERS`): a module may import its own package and the
packages below it, never one above. The command modules directly in ``tools/`` (``python -m
tools.<command>``) sit on top: they parse arguments, call a package and print.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

from tools import ROOT

TOOLS = ROOT / "tools"

#: The layer packages of ``tools``, bottom first. ``core`` is what the selector's zipapp ships.
LAYERS = ("core", "plan", "hostplat", "pipeline", "finish", "kernels", "backends", "builder",
          "probing", "sharding",
          "selector", "sitegen", "releasing", "upstream", "devtools")


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
        # `from . import host` imports the module tools.backends.host
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


def layer_of(module: str, layers: tuple[str, ...] = LAYERS) -> int | None:
    """The index of ``module``'s layer package in ``layers``; None for a command module
    directly in ``tools/`` (and for ``tools`` itself), which may import any package."""
    parts = module.split(".")
    if len(parts) < 2 or parts[1] not in layers:
        return None
    return layers.index(parts[1])


def upward_imports(graph: dict[str, set[str]], layers: tuple[str, ...] = LAYERS) -> list[str]:
    """Every import from a layer package into a package above it, as ``a -> b (up: P -> Q)``."""
    found = []
    for module, edges in sorted(graph.items()):
        here = layer_of(module, layers)
        if here is None:
            continue
        for target in sorted(edges):
            there = layer_of(target, layers)
            if there is None:
                found.append(f"{module} -> {target} (a layer package imports a command module)")
            elif there > here:
                found.append(f"{module} -> {target} (up: {layers[here]} -> {layers[there]})")
    return found


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


def test_an_upward_import_is_named(tmp_path):
    pkg = tmp_path / "tools"
    for sub in ("low", "high"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "cmd.py").write_text("from tools.high import h\n")   # a command: may import anything
    (pkg / "high" / "h.py").write_text("from ..low import l\n")  # down: fine
    (pkg / "low" / "l.py").write_text("def f():\n    from tools.high.h import x\n")  # up, lazily
    (pkg / "low" / "m.py").write_text("from tools import cmd\n")  # a package using a command
    found = upward_imports(import_graph(pkg), ("low", "high"))
    assert found == ["tools.low.l -> tools.high.h (up: low -> high)",
                     "tools.low.m -> tools.cmd (a layer package imports a command module)"]


def test_no_import_cycle_in_tools():
    graph = import_graph()
    assert "tools.builder.orchestrate" in graph
    assert "tools.backends.host" in graph["tools.builder.orchestrate"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_layer_packages_import_only_downwards():
    assert upward_imports(import_graph()) == []


def test_every_module_lives_in_a_layer_package_or_is_a_command():
    """Directly in tools/: ``__init__`` and the command modules, each thin (parse, call, print)."""
    packages = {p.name for p in TOOLS.iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(LAYERS), "a package missing from LAYERS, or a layer with no package"
    for path in sorted(TOOLS.glob("*.py")):
        if path.name == "__init__.py":
            continue
        tree = ast.parse(path.read_text())
        lines = len(path.read_text().splitlines())
        assert any(isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) for n in tree.body), \
            f"tools/{path.name} is not a command (no __main__ guard): move it into a layer package"
        assert lines <= 150, f"tools/{path.name} has {lines} lines: a command parses, calls and prints"


def test_no_command_shares_its_name_with_a_package_module():
    """``python -m tools.verify`` is the command; the checks it runs live in ``tools.finish.checks``.
    One name, one module: a reader (or a docstring) naming ``verify`` means the command."""
    commands = {p.stem for p in TOOLS.glob("*.py")} - {"__init__", "__main__"}  # __main__: python -m tools (the command list)
    shared = sorted(str(p.relative_to(ROOT)) for p in TOOLS.glob("*/*.py") if p.stem in commands)
    assert shared == [], f"rename these package modules by what they hold: {shared}"


#: The most parameters a function of tools may take: past it, what travels together wants an
#: object (a job, a request, a settings record) instead of a list re-forwarded by hand.
MAX_PARAMETERS = 9


def test_no_function_takes_ten_or_more_parameters():
    wide = {}
    for path in sorted(TOOLS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                names = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
                count = sum(1 for n in names if n is not None and n.arg not in ("self", "cls"))
                if count > MAX_PARAMETERS:
                    wide[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = count
    assert wide == {}, f"group what travels together (at most {MAX_PARAMETERS}): {wide}"


#: The most lines a module of tools may have: past it, a module is doing two jobs.
MAX_MODULE_LINES = 600


def test_no_module_is_over_the_line_limit():
    long = {str(p.relative_to(ROOT)): n for p in sorted(TOOLS.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}, f"split these by job (at most {MAX_MODULE_LINES} lines each): {long}"


def test_backends_do_not_import_the_orchestrator():
    graph = import_graph()
    for module, edges in graph.items():
        if module.startswith(("tools.backends.", "tools.finish.steps.")):
            assert not any(e.startswith("tools.builder") for e in edges), module


#: Modules no other module imports, each reached another way.
REACHED_OTHERWISE = {
    # copied by path beside the environment under test, which needs nothing from this project
    "tools.kernels.harness": "tools/kernels/check.py: HARNESS",
    # named by the machine hook variable of the project's development machines
    "tools.devtools.sandbox": "CUWHEELS_MACHINE_HOOK=tools.devtools.sandbox:MACHINE",
    # the selector is run as a package: python -m tools.selector
    "tools.selector.__main__": "python -m tools.selector",
    # prepares the act chain the slow workflow test runs (tests/test_actchain.py)
    "tools.devtools.actchain": "tests/test_actchain.py",
    # rewrites the generated parts of README.md and docs/ before the docs build (make docs)
    "tools.devtools.docpages": "Makefile: make docs",
}


def test_every_package_module_is_used_by_the_project():
    """A module of a package that only its own test imports is dead code kept alive by the test:
    every one is imported by another module of tools/ (or the noxfile), or is reached another
    way (:data:`REACHED_OTHERWISE`, each with where)."""
    graph = import_graph()
    noxfile = ast.parse((ROOT / "noxfile.py").read_text())
    used = set().union(*graph.values())
    used |= {n.module for n in ast.walk(noxfile) if isinstance(n, ast.ImportFrom) and n.module}
    used |= {a.name for n in ast.walk(noxfile) if isinstance(n, ast.Import) for a in n.names}
    # modules in a package, not a package itself (its __init__ runs with any of its modules)
    modules = {m for m in graph if m.count(".") >= 2
               and not (ROOT / m.replace(".", "/") / "__init__.py").is_file()}
    unused = sorted(modules - used - set(REACHED_OTHERWISE))
    assert unused == [], f"imported by no module of tools/: remove them or use them: {unused}"
    for module, where in REACHED_OTHERWISE.items():
        assert module in graph, f"{module} is gone: drop it from REACHED_OTHERWISE"
        text = where.split(":")[0]
        if "/" in text:
            assert (ROOT / text).is_file(), f"{module}: {text} is gone"


def test_the_build_records_are_typed_without_any():
    """The build report, a shard's record and the container's result are read back by other
    programs: each field has a type a reader can check, never ``dict[str, Any]`` (open-ended
    parts are ``tools.pipeline.buildreport.JSON`` values)."""
    import dataclasses
    import typing

    from tools.backends.result import ContainerResult
    from tools.pipeline import buildreport
    from tools.pipeline.shardcache import ShardResult

    def mentions_any(hint) -> bool:
        return hint is typing.Any or any(mentions_any(a) for a in typing.get_args(hint))

    types = (buildreport.BuildReport, buildreport.Step, buildreport.ReportedCache,
             buildreport.ReportedError, ShardResult, ContainerResult)
    found = {}
    for cls in types:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if mentions_any(hints[f.name]) or "Any" in str(f.type):
                found[f"{cls.__name__}.{f.name}"] = str(f.type)
    assert found == {}, f"give these fields a checkable type: {found}"


def test_one_class_per_name():
    """Two classes of one name (two ``ArchReport``, two ``Planned``) make a reader ask which one a
    signature means: each public class name in tools/ is defined once."""
    where: dict[str, list[str]] = {}
    for path in sorted(TOOLS.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                where.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    twice = {name: files for name, files in where.items() if len(files) > 1}
    assert twice == {}, f"name each by what it holds: {twice}"
