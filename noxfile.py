"""Sessions: one ``build-<cell id>`` per matrix cell, plus tests, lint and recipe checks.

Thin by design: the cells come from ``tools.matrix`` and every step lives in ``tools``. Run
``nox -l`` to list, ``nox -s build-flash_attn-3.12-cu129`` to build one cell, ``nox -t
flash_attn`` for a package's family. Arguments after ``--`` go to ``python -m tools.build``.
"""

import sys

import nox

from tools.matrix import plan
from tools.variant import cuda_nodot



def _register(cell) -> None:
    def build(session: nox.Session) -> None:
        session.run(sys.executable, "-m", "tools.build", cell.id, *session.posargs)

    build.__doc__ = (f"Build {cell.package} {cell.version} for Python {cell.python}, "
                     f"CUDA {cell.cuda}, torch {cell.torch}"
                     + ("" if cell.default_torch else " (non-default torch)"))
    tags = [cell.package, "build", f"py{cell.python}", f"cu{cuda_nodot(cell.cuda)}",
            f"torch{cell.torch}"]
    # default=False: a plain `nox` runs tests, recipes and lint, never hours of builds
    nox.session(name=f"build-{cell.id}", venv_backend="none", tags=tags,
                default=False)(build)


for _cell in plan():
    _register(_cell)


@nox.session(venv_backend="none")
def tests(session: nox.Session) -> None:
    """Run the test suite (fast tests; the same as `make test`)."""
    session.run(sys.executable, "-m", "pytest", *session.posargs)


@nox.session(name="tests-slow", venv_backend="none", default=False)
def tests_slow(session: nox.Session) -> None:
    """Run the slow tests: real builds of real recipes (a causal_conv1d build takes ~7 min)."""
    session.run(sys.executable, "-m", "pytest", "-m", "slow", *session.posargs)


@nox.session(venv_backend="none")
def recipes(session: nox.Session) -> None:
    """Validate every recipe against the compatibility table."""
    session.run(sys.executable, "-m", "tools.recipe", *session.posargs)


@nox.session(venv_backend="none")
def lint(session: nox.Session) -> None:
    """Lint and audit the GitHub workflows (actionlint, zizmor)."""
    session.run(sys.executable, "-m", "tools.lint_workflows", *session.posargs)
