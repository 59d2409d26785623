# /// script
# requires-python = ">=3.10"
# # What listing the sessions needs: the planner reads YAML recipes, checks their shape against
# # a JSON Schema and compares versions. nox re-runs itself in an environment with these when
# # the one it was installed in lacks them (`pipx install nox`, `uv tool install nox`);
# # `.venv/bin/nox` after `make setup` has them.
# dependencies = ["nox>=2025.2.9", "PyYAML>=6", "jsonschema>=4.18", "packaging>=24"]
# ///
"""Sessions: one ``build-<cell id>`` per matrix cell, plus tests, lint and recipe checks.

Thin by design: the cells come from ``python -m tools.matrix`` and every step lives in ``tools``.
Run ``nox -l`` to list, ``nox -s build-flash_attn-3.12-cu129`` to build one cell, ``nox -t
flash_attn`` for a package's family. Arguments after ``--`` go to ``python -m tools.build``, which
gets the plan the listing made (``--plan``) instead of planning the matrix again.

Every session runs in the project's own environment, ``.venv``, which ``make setup`` creates and
keeps in step with pyproject.toml (a no-op when it is current): the sessions need the pinned
build tools (cibuildwheel, auditwheel, uv, ...), which nox's own environment doesn't have.
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import nox

HERE = Path(__file__).resolve().parent
#: The project's environment, as the Makefile's ``setup`` target makes it.
PROJECT_PYTHON = str(HERE / ".venv" / "bin" / "python")


def _cells() -> list[dict]:
    """The planned cells, from the planner itself (``python -m`` puts this checkout first on the
    import path, so nox needs neither the project installed nor a path edit)."""
    proc = subprocess.run([sys.executable, "-m", "tools.matrix", "--format", "json"], cwd=HERE,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"noxfile.py: planning the cells failed:\n{proc.stderr}")
    return json.loads(proc.stdout)


def _project(session: nox.Session, *args: str) -> None:
    """Run ``python args...`` in the project's environment, creating or updating it first."""
    session.run("make", "--no-print-directory", "-C", str(HERE), "setup", external=True,
                silent=True)
    session.run(PROJECT_PYTHON, *args, external=True)


def _register(cell: dict, cells: list[dict]) -> None:
    def build(session: nox.Session) -> None:
        # The listing was planned from this checkout's recipes and table: hand it on, unless
        # the arguments name other recipes, another table or a plan of their own.
        own = {arg.split("=", 1)[0] for arg in session.posargs}
        if own & {"--recipes", "--table", "--plan"}:
            _project(session, "-m", "tools.build", cell["id"], *session.posargs)
            return
        with tempfile.TemporaryDirectory(prefix="cuwheels-plan-") as tmp:
            plan = Path(tmp) / "plan.json"
            plan.write_text(json.dumps(cells))
            _project(session, "-m", "tools.build", cell["id"], "--plan", str(plan),
                     *session.posargs)

    # A collapsed cell (one build serving several Pythons or torch series) is tagged with each.
    pythons = cell.get("serves_python") or [cell["python"]]
    torches = cell.get("serves_torch") or [cell["torch"]]
    platform = cell.get("platform", "linux_x86_64")
    build.__doc__ = (f"Build {cell['package']} {cell['version']} for Python {', '.join(pythons)}, "
                     f"CUDA {cell['cuda']}, torch {', '.join(torches)}, {platform}"
                     + ("" if cell["default_torch"] else " (non-default torch)")
                     + (f" (one build, against torch {cell['torch']})" if len(torches) > 1 else ""))
    tags = [cell["package"], "build", *(f"py{py}" for py in pythons),
            f"cu{cell['cuda'].replace('.', '')}", *(f"torch{t}" for t in torches), platform]
    # default=False: a plain `nox` runs tests, recipes and lint, never hours of builds
    nox.session(name=f"build-{cell['id']}", venv_backend="none", tags=tags,
                default=False)(build)


_CELLS = _cells()
for _cell in _CELLS:
    _register(_cell, _CELLS)


@nox.session(venv_backend="none")
def tests(session: nox.Session) -> None:
    """Run the test suite (fast tests; the same as `make test`)."""
    _project(session, "-m", "pytest", *session.posargs)


@nox.session(name="tests-slow", venv_backend="none", default=False)
def tests_slow(session: nox.Session) -> None:
    """Run the slow tests: real builds of real recipes (a causal_conv1d build takes ~7 min)."""
    _project(session, "-m", "pytest", "-m", "slow", *session.posargs)


@nox.session(venv_backend="none", default=False)
def probe(session: nox.Session) -> None:
    """Probe one cell: its heaviest units compiled with its own build's command lines."""
    _project(session, "-m", "tools.probe", *session.posargs)


@nox.session(venv_backend="none")
def recipes(session: nox.Session) -> None:
    """Validate every recipe against the compatibility table."""
    _project(session, "-m", "tools.recipe", *session.posargs)


@nox.session(venv_backend="none")
def lint(session: nox.Session) -> None:
    """Lint and audit the GitHub workflows (actionlint, zizmor)."""
    _project(session, "-m", "tools.lint_workflows", *session.posargs)


@nox.session(venv_backend="none", default=False)
def release(session: nox.Session) -> None:
    """Run a compile group's release here: its shards, then its cells (``tools.shard release``)."""
    _project(session, "-m", "tools.shard", "release", *session.posargs)
