"""What a backend is: one way to compile a cell's wheel, called the same way whichever it is.

The orchestrator (``tools.builder.orchestrate``) settles what every backend takes alike (the
archs, where wheels and work go, the sdist, the needed wheels, the compiler cache, whether to
plan only) as :class:`BuildOptions`, makes the :class:`Progress` that names the backend's
:attr:`Backend.steps`, and calls :meth:`Backend.build`. What only one backend knows (the host's
interpreter and wheelhouse, the container's engine, image and limits) is given to that backend
when it is made. Each backend writes its own build report, ``<work>/<cell id>/report.json``,
however its build ends, and answers with a :class:`BuildResult`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tools.plan.job import BuildJob
from tools.pipeline.buildreport import BuildReport
from tools.pipeline.report import Progress


@dataclass(frozen=True)
class BuildOptions:
    """What every backend's build takes, settled by the orchestrator."""

    #: The arch list to compile (the cell's, or ``--archs`` checked against its toolkit).
    archs: tuple[str, ...]
    #: Where the wheel goes once every check passed.
    out_dir: Path
    #: Per-cell work directories: the backend works in ``<work_root>/<cell id>``.
    work_root: Path
    #: Why this backend builds the cell (``--backend host``, ``auto: ...``): the report says it.
    why: str
    sdist: Path | None = None
    sdist_dir: Path | None = None
    #: The wheels of the cells this one needs (``tools.builder.needs``), in one directory.
    needed: tuple[Path, ...] = ()
    #: Compile through the compiler cache (``tools.pipeline.ccache``).
    cache: bool = True
    #: Plan only: print what would run and build nothing (a backend that can't says so).
    dry_run: bool = False
    #: Shard caches offered to the build (``tools.pipeline.shardcache``): those of the cell's
    #: compile group are read, read-only, after the build's own cache.
    shard_caches: tuple[Path, ...] = ()


@dataclass
class BuildResult:
    """What a backend's build answers: the report (as written to ``report.json``) and the
    published wheel, None when nothing was built (a dry run)."""

    report: BuildReport
    wheel: Path | None = None


class Backend(Protocol):
    """One way to build a cell's wheel: ``host`` (this machine's toolchain) or ``container``
    (cibuildwheel in the cell's image)."""

    #: The name ``--backend`` and the report give it.
    name: str

    @property
    def steps(self) -> list[str]:
        """The steps the build runs, as the progress lines and the report name them."""
        ...

    def build(self, job: BuildJob, *, options: BuildOptions, progress: Progress) -> BuildResult:
        """Build ``job``'s wheel, its steps run and timed by ``progress``, and write the build
        report; raise the failed step's CuwheelsError (after writing the report) on failure."""
        ...
