"""Error types, one per failure class, each with its own exit code (from ``tools.core.exitcodes``).

Every message is meant to be read by a person who didn't write the code: it names the file (or
the input), the field, the rule that was broken and what to do about it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps

from tools.core import exitcodes


class CuwheelsError(Exception):
    """Base class: a failure with a human explanation and a distinct exit code."""

    exit_code = exitcodes.FAILED
    kind = "error"

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message}\n  fix: {self.hint}"
        return self.message


class TableError(CuwheelsError):
    """The global compatibility table is malformed."""

    exit_code = exitcodes.TABLE_ERROR
    kind = "table"


class RecipeError(CuwheelsError):
    """A recipe is malformed or asks for something the table says doesn't exist."""

    exit_code = exitcodes.RECIPE
    kind = "recipe"


class PlanError(CuwheelsError):
    """A matrix selection matches nothing, or names an unknown cell."""

    exit_code = exitcodes.PLAN
    kind = "plan"


class SourceError(CuwheelsError):
    """The sdist can't be fetched, its hash is wrong, or its archive is unsafe."""

    exit_code = exitcodes.SOURCE
    kind = "source"


class PatchError(CuwheelsError):
    """A recipe patch does not apply to the source."""

    exit_code = exitcodes.PATCH
    kind = "patch"


class ToolchainError(CuwheelsError):
    """nvcc, the Python version or the container engine is missing or incompatible."""

    exit_code = exitcodes.TOOLCHAIN
    kind = "toolchain"


class CompileError(CuwheelsError):
    """The package's own build (setup.py / nvcc) failed."""

    exit_code = exitcodes.COMPILE
    kind = "compile"


class RepairError(CuwheelsError):
    """auditwheel could not repair the wheel."""

    exit_code = exitcodes.REPAIR
    kind = "repair"


class VerifyError(CuwheelsError):
    """A built wheel failed a check; it is not published."""

    exit_code = exitcodes.VERIFY
    kind = "verify"


class IndexBuildError(CuwheelsError):
    """The index could not be built (an immutable file changed, a bad yank list...)."""

    exit_code = exitcodes.INDEX_BUILD
    kind = "index"


class RegistryError(CuwheelsError):
    """The package registry (or torch's own index) did not answer, or answered nonsense."""

    exit_code = exitcodes.REGISTRY
    kind = "registry"


class ProbeError(CuwheelsError):
    """A probe build can't be done as asked: too little memory, no compile commands, no such unit."""

    exit_code = exitcodes.PROBE
    kind = "probe"


def cli(func: Callable[..., int | None]) -> Callable[..., int]:
    """Wrap a ``main()`` so a CuwheelsError prints its message and exits with its code."""

    @wraps(func)
    def wrapper(*args, **kwargs) -> int:
        try:
            return func(*args, **kwargs) or 0
        except CuwheelsError as exc:
            print(f"{exc.kind} error: {exc}", file=sys.stderr)
            return exc.exit_code

    return wrapper
