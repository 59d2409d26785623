"""Every exit status the project's commands use, each with one meaning.

A workflow, a script or a person reading ``$?`` can tell what went wrong from the number alone,
so no two meanings share a number: :data:`TABLE` lists them all (``tests/test_exitcodes.py``
fails on a collision, and ``docs/reference/exit-codes.md`` is generated from it). The error
classes of ``tools.core.errors`` and the commands take their numbers from here.

The selector's 0/1/2/3 are public (scripts test them), so they keep their numbers; 2 is
argparse's own status for a bad command line.
"""

from __future__ import annotations

from dataclasses import dataclass

OK = 0
FAILED = 1            # a check found problems; the selector: no wheel fits
USAGE = 2             # argparse: the command line is wrong
INDEX_UNREADABLE = 3  # the selector: the index can't be read
PLAN = 4
SOURCE = 5
PATCH = 6
TOOLCHAIN = 7
COMPILE = 8
REPAIR = 9
VERIFY = 10
INDEX_BUILD = 11
KERNEL_NOT_RUN = 12
PROBE = 13
TABLE_ERROR = 14
RECIPE = 15
GITHUB_API = 16
REGISTRY = 17
TIMEOUT = 124
KILLED = 137
TERMINATED = 143


@dataclass(frozen=True)
class ExitCode:
    """One exit status: its number, a short name and what it means."""

    code: int
    name: str
    meaning: str


#: Every exit status, in order. The meanings are what the reference page shows.
TABLE: tuple[ExitCode, ...] = (
    ExitCode(OK, "ok", "done; every check passed"),
    ExitCode(FAILED, "failed", "a check found problems (lint_workflows, abicheck, docpages "
             "--check, oci_runtime), or the selector found no wheel that fits; also any error "
             "without a class of its own"),
    ExitCode(USAGE, "usage", "the command line is wrong (argparse's status; the message says "
             "which option)"),
    ExitCode(INDEX_UNREADABLE, "index unreadable", "the selector could not read the index "
             "(network, HTTP status, a page it refuses)"),
    ExitCode(PLAN, "plan", "a matrix selection matches nothing, or names an unknown cell or value"),
    ExitCode(SOURCE, "source", "the sdist can't be fetched, its hash is wrong or its archive is "
             "unsafe"),
    ExitCode(PATCH, "patch", "a recipe patch does not apply to the source"),
    ExitCode(TOOLCHAIN, "toolchain", "nvcc, the Python version or the container engine is missing "
             "or incompatible"),
    ExitCode(COMPILE, "compile", "the package's own build failed (also: a cell of a local shard "
             "release failed)"),
    ExitCode(REPAIR, "repair", "auditwheel could not repair the wheel"),
    ExitCode(VERIFY, "verify", "a built wheel failed a check, or a kernel check failed"),
    ExitCode(INDEX_BUILD, "index build", "the index could not be built, or wheels were left out"),
    ExitCode(KERNEL_NOT_RUN, "kernel check not run", "the kernel check could not run: no GPU"),
    ExitCode(PROBE, "probe", "a probe build can't be done as asked"),
    ExitCode(TABLE_ERROR, "table", "the compatibility table (recipes/table.yaml) is malformed"),
    ExitCode(RECIPE, "recipe", "a recipe is malformed or asks for what the table lacks"),
    ExitCode(GITHUB_API, "github api", "a call to GitHub's API failed for good"),
    ExitCode(REGISTRY, "registry", "the package registry (or torch's index) did not answer, or "
             "answered nonsense"),
    ExitCode(TIMEOUT, "timeout", "stopped by `timeout` at its budget (the workflows read it)"),
    ExitCode(KILLED, "killed", "killed by SIGKILL (128 + 9): out of memory, or `timeout "
             "--kill-after` (the workflows read it)"),
    ExitCode(TERMINATED, "terminated", "a build, shard or probe stopped by SIGTERM (128 + 15) "
             "after stopping its compilers"),
)


def meaning(code: int) -> str:
    """The meaning of ``code``; KeyError for a number the table lacks."""
    for entry in TABLE:
        if entry.code == code:
            return entry.meaning
    raise KeyError(code)


def reference_page() -> str:
    """The table as Markdown, for docs/reference/exit-codes.md."""
    rows = [f"| {e.code} | {e.name} | {e.meaning} |" for e in TABLE]
    return "\n".join(["| Exit | Name | Meaning |", "|---:|---|---|", *rows])
