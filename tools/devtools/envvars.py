"""Every environment variable the project reads, with what it does: the table
(:data:`VARIABLES`), a scanner of the code that finds the reads (:func:`read_in_code`), and the
reference page made of both (``docs/reference/environment.md``).

``tests/test_envvars.py`` fails when the code reads a variable the table lacks, or the table
lists one nothing reads, so the page can't drift from the code. The scanner reads the source
with ``ast``: ``os.environ[...]``, ``os.environ.get/pop/setdefault(...)``, ``os.getenv(...)``,
``NAME in os.environ``, the same on a mapping taken from ``os.environ`` (``env =
dict(os.environ) if env is None else env``) or a parameter named ``environ``, with the name a
literal, a module constant or a loop over a tuple of them. The Makefile's variables are those
it sets with ``?=`` (an environment variable or ``make VAR=...`` overrides them).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from tools import ROOT

#: name -> what it does. Sections: the project's own, the build's, CI's, the Makefile's.
VARIABLES: dict[str, str] = {
    # the project's own
    "CUWHEELS_INDEX": "the index the selector reads when no --index is given (a fork's, a mirror); "
                      "default: the project's own (tools/core/site.py)",
    "CUWHEELS_ROOT": "the repository the tools work on (the one holding recipes/table.yaml); "
                     "default: this checkout, or the working directory's",
    "CUWHEELS_CCACHE_DIR": "the compiler cache (default ~/.cache/cuwheels/ccache); the container "
                           "backend mounts it",
    "CUWHEELS_CUDA_WHEELS": "a folder holding the pinned nvidia wheels, so the PyPI CUDA toolkit "
                            "installs without downloading",
    "CUWHEELS_CONTAINER_PIP_CACHE": "the container builds' pip cache (default "
                                    "~/.cache/cuwheels/container-pip; empty: none)",
    "CUWHEELS_CONTAINER_MEMORY_GIB": "the container's memory limit (default: available memory "
                                     "less 1 GiB)",
    "CUWHEELS_CONTAINER_CPUS": "the container's CPU limit (default: the usable cores)",
    "CUWHEELS_MACHINE_HOOK": "module:attribute of a machine hook that adapts the container "
                             "engine to an unusual machine (tools.backends.machine)",
    "CUWHEELS_ACT_CACHE": "the workflow test's cache of act and its actions (default "
                          "~/.cache/cuwheels/act)",
    "CUWHEELS_ACT_CUDA": "the workflow test: the CUDA version of the builder image it runs",
    "CUWHEELS_ACTIONS_SRC": "the workflow test: a folder of the actions' repositories to clone "
                            "from instead of github.com",
    "XDG_CACHE_HOME": "the cache's parent: $XDG_CACHE_HOME/cuwheels (default ~/.cache/cuwheels)",
    "HOME": "pyenv's Pythons are under ~/.pyenv when PYENV_ROOT is not set",
    "PATH": "where nvcc, ccache, ninja, a cell's Python and the container engine are found",
    "VIRTUAL_ENV": "left out of uv's environment when it finds a cell's Python (uv must not "
                   "answer with the caller's virtual environment)",
    "PYENV_ROOT": "where pyenv keeps its Pythons (default ~/.pyenv)",
    # the build's
    "CUDA_HOME": "the CUDA toolkit a host build uses (default /usr/local/cuda, else nvcc on PATH)",
    "CPATH": "include directories of the build; the PyPI toolkit's headers are added after "
             "them",
    "PYTHONPATH": "the build's own: the compiler cache's fixed torch path, through which it "
                  "reaches torch and the CUDA wheels' headers; the caller's never reaches the build",
    "MAX_JOBS": "the kernel shards' build: how many compiles run at once",
    "NVCC_THREADS": "the kernel shards' build: nvcc's threads per compile (recorded with a shard)",
    "SOURCE_DATE_EPOCH": "inside the builder image: the timestamp reproducible builds use",
    "CCACHE_DIR": "inside the builder image: ccache's directory",
    "CCACHE_BASEDIR": "inside the builder image: ccache's base directory (paths under it are "
                      "hashed relative)",
    "CCACHE_STATSLOG": "inside the builder image: where ccache logs the build's statistics",
    "SSL_CERT_FILE": "a CA bundle: mounted into the container, and used by the workflow test",
    "SSL_CERT_DIR": "a CA directory: mounted into the container",
    "PIP_CERT": "pip's CA bundle: mounted into the container, and used by the workflow test",
    "REQUESTS_CA_BUNDLE": "a CA bundle: mounted into the container",
    "CURL_CA_BUNDLE": "a CA bundle: mounted into the container",
    "HTTP_PROXY": "a proxy: passed into the container", "HTTPS_PROXY": "a proxy: passed into the container",
    "NO_PROXY": "hosts reached without the proxy: passed into the container",
    "http_proxy": "a proxy: passed into the container", "https_proxy": "a proxy: passed into the container",
    "no_proxy": "hosts reached without the proxy: passed into the container",
    # CI's
    "GH_TOKEN": "the release's GitHub token (else GITHUB_TOKEN)",
    "GITHUB_TOKEN": "the release's GitHub token, when GH_TOKEN is not set",
    "GITHUB_API_URL": "GitHub's API (default https://api.github.com)",
    "GITHUB_RUN_ID": "the workflow run, named in the attempts the release records",
    "GITHUB_RUN_ATTEMPT": "the workflow run's attempt, named in the attempts the release records",
    # the Makefile's (make VAR=... or the environment)
    "PYTHON": "make: the Python that creates .venv (default python3)",
    "VENV": "make: the project's environment (default .venv)",
    "EXTRAS": "make setup: the extras installed (default farm,test)",
    "WHEELS_DIR": "make index/serve: the wheels directory (--wheels; default wheelhouse)",
    "INDEX_DIR": "make index/serve: the site (--site; default site)",
    "DOCS_DIR": "make docs: where the docs site is built (default build/docs; the publish job: site/docs)",
    "BASE_URL": "make index: where the wheels are served (--base-url)",
    "YANKED": "make index: the yank list (--yanked; default index/yanked.yaml)",
    "LEDGER": "make index: the ledger (--ledger; default $(INDEX_DIR)-ledger.json)",
    "INIT_LEDGER": "make index: --init-ledger when neither the ledger nor a site exists yet",
    "INDEX_FLAGS": "make index: more python -m tools.index options",
    "PORT": "make serve: the port (default 8765)",
    "TEST_WORKERS": "make test: pytest's worker processes (default 2)",
}


def _is_environ(node: ast.AST, aliases: set[str]) -> bool:
    if isinstance(node, ast.Attribute) and node.attr == "environ":
        return True
    if isinstance(node, ast.Name) and (node.id == "environ" or node.id in aliases):
        return True
    return isinstance(node, ast.IfExp) and (_is_environ(node.body, aliases)
                                            or _is_environ(node.orelse, aliases))


def _from_environ(value: ast.AST) -> bool:
    """Whether an assigned value is the environment or a copy of it (``dict(os.environ)``,
    ``{**os.environ, ...}``, ``os.environ.copy()``, either branch of ``a if c else b``)."""
    if _is_environ(value, set()):
        return True
    if isinstance(value, ast.IfExp):
        return _from_environ(value.body) or _from_environ(value.orelse)
    if isinstance(value, ast.Call):
        if isinstance(value.func, ast.Name) and value.func.id == "dict" and value.args:
            return _is_environ(value.args[0], set())
        return isinstance(value.func, ast.Attribute) and value.func.attr == "copy" \
            and _is_environ(value.func.value, set())
    return isinstance(value, ast.Dict) and any(k is None and _is_environ(v, set())
                                               for k, v in zip(value.keys, value.values))


def _constants(tree: ast.Module) -> dict[str, tuple[str, ...]]:
    """Module-level names bound to a string, or a tuple or list of strings."""
    found: dict[str, tuple[str, ...]] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
            node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(target, ast.Name) and (values := _strings(node.value, {})) is not None:
            found[target.id] = values
    return found


def _strings(node: ast.AST | None, names: dict[str, tuple[str, ...]]) -> tuple[str, ...] | None:
    """The strings ``node`` stands for: a literal, a tuple/list of them, or a known name."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return (node.value,)
    if isinstance(node, (ast.Tuple, ast.List)):
        parts = [_strings(e, names) for e in node.elts]
        return None if any(p is None for p in parts) else tuple(s for p in parts for s in p)
    if isinstance(node, ast.Starred):
        return _strings(node.value, names)
    if isinstance(node, ast.Name):
        return names.get(node.id)
    return None


def _reads(tree: ast.Module) -> Iterator[str]:
    """Each variable name the module reads from the environment (``? <the read>``: a name not
    worked out, which the table can't list)."""
    module = _constants(tree)
    for scope in [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.Lambda)))]:
        names = dict(module)
        aliases: set[str] = set()
        for node in ast.walk(scope):
            if isinstance(node, ast.Assign) and _from_environ(node.value):
                aliases |= {t.id for t in node.targets if isinstance(t, ast.Name)}
            if isinstance(node, ast.comprehension) and isinstance(node.target, ast.Name):
                if (values := _strings(node.iter, module)) is not None:
                    names[node.target.id] = values
            if isinstance(node, ast.For) and isinstance(node.target, ast.Name):
                if (values := _strings(node.iter, module)) is not None:
                    names[node.target.id] = values
        for node in ast.walk(scope):
            key = None
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) \
                    and _is_environ(node.value, aliases):
                key = node.slice
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
                if node.func.attr in ("get", "pop", "setdefault") and _is_environ(node.func.value, aliases):
                    key = node.args[0]
                elif node.func.attr == "getenv":
                    key = node.args[0]
            elif isinstance(node, ast.Compare) and any(isinstance(o, (ast.In, ast.NotIn)) for o in node.ops) \
                    and any(_is_environ(c, aliases) for c in node.comparators):
                key = node.left
            if key is not None:
                yield from _strings(key, names) or (f"? {ast.unparse(node)[:60]}",)


def read_in_code(root: Path = ROOT) -> dict[str, set[str]]:
    """Each variable the code reads -> the files that read it (relative to ``root``); a read
    whose name can't be worked out is listed as ``? <the read>``."""
    found: dict[str, set[str]] = {}
    files = [*sorted((root / "tools").rglob("*.py")), root / "noxfile.py"]
    for path in files:
        rel = str(path.relative_to(root))
        tree = ast.parse(path.read_text(), filename=rel)
        # a Python script the module writes out (a stand-in tool) reads the environment too
        scripts = [ast.parse(text[0]) for text in _constants(tree).values()
                   if len(text) == 1 and text[0].startswith("#!/usr/bin/env python")]
        for name in (n for t in (tree, *scripts) for n in _reads(t)):
            found.setdefault(name, set()).add(rel)
    makefile = root / "Makefile"
    for name in re.findall(r"^([A-Z_]+)\s*\?=", makefile.read_text(), re.M):
        found.setdefault(name, set()).add("Makefile")
    return found


def reference_page() -> str:
    """docs/reference/environment.md's table: each variable, who reads it, what it does."""
    found = read_in_code()
    rows = ["| Variable | Read by | What it does |", "|---|---|---|"]
    for name, what in VARIABLES.items():
        where = ", ".join(f"`{w}`" for w in sorted(found.get(name, ())))
        rows.append(f"| `{name}` | {where} | {what} |")
    return "\n".join(rows)
