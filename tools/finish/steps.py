"""The finish steps: what turns a raw wheel from a package's own build into a publishable one.

repair (auditwheel, torch/CUDA libraries excluded; delvewheel for Windows) -> inspect (every
binary is for the machine the tag names; every torch symbol resolves in the cell's torch, or on
Windows every imported DLL is allowed; the recipe's ``abi`` claims hold (tools.abicheck); the SASS inside covers the
requested archs) -> metadata (local version label, torch pin, build tag, the ``cuwheels.json``
manifest; then the wheel as users' tools see it: installer's RECORD validation and ``auditwheel
show``, tools.finish.usertools) -> the platform tag check. The host
backend runs it after its compile; the container backend runs the same function inside the
image as cibuildwheel's repair command (``python -m tools.incontainer finish``). The import
smoke test follows in a fresh environment (``tools.finish.checks.smoke_test`` on the host,
cibuildwheel's test command in the container).
"""

from __future__ import annotations

import platform
import shutil
import subprocess
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .abi import check_claims
from .archcheck import check_binaries, wheel_platforms
from tools.pipeline.buildenv import DEFAULT_SOURCE_DATE_EPOCH
from tools.core.errors import VerifyError
from tools.core.manifest import DEFAULT_PLATFORM, Manifest
from tools.plan.cells import Cell
from tools.pipeline.report import Progress, Step
from tools.plan.recipe_model import Recipe
from .auditwheel_repair import repair_wheel
from .usertools import check_as_users_do
from .checks import abi_check, check_archs, check_tags, cuda_archs, extension_modules
from .wheelmeta import set_version_and_pin
from .winrepair import WINDOWS_ABI_NOTE, check_imports, repair_windows_wheel

#: The finish stage's own steps, as the progress lines and the report name them.
FINISH_STEPS = ["repair", "inspect", "metadata"]


def recipe_git_revision(recipe: Recipe) -> str:
    """The git commit of the recipe folder (with ``-dirty`` when it has local changes)."""
    def git(*args: str) -> str:
        proc = subprocess.run(["git", *args], cwd=recipe.folder, capture_output=True, text=True)
        return proc.stdout.strip() if proc.returncode == 0 else ""
    rev = git("log", "-1", "--format=%H", "--", ".") or "unknown"
    return rev + ("-dirty" if git("status", "--porcelain", "--", ".") else "")


def compiler_versions(nvcc: str | None) -> dict[str, str]:
    """nvcc's and gcc's version lines, for the manifest."""
    out = {}
    for name, cmd in (("nvcc", [nvcc or "nvcc", "--version"]), ("gcc", ["gcc", "--version"])):
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
            lines = [l for l in proc.stdout.splitlines() if l.strip()]
            out[name] = lines[-1] if name == "nvcc" else lines[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            out[name] = "unknown"
    return out


def build_platform() -> str:
    """The machine the wheel was finished on, for the manifest (``Linux x86_64 glibc 2.28``,
    ``Windows AMD64``)."""
    libc = platform.libc_ver()[1]
    return f"{platform.system()} {platform.machine()}" + (f" glibc {libc}" if libc else "")


def record_kernel_check(wheel: Path, manifest: dict[str, Any], result: dict[str, Any], *,
                        cell: Cell, recipe: Recipe, out_dir: Path,
                        epoch: int = DEFAULT_SOURCE_DATE_EPOCH) -> tuple[Path, dict[str, Any]]:
    """The finished ``wheel`` again, in ``out_dir``, with ``result`` (the kernel check's
    summary) as the manifest's ``kernel_check``; returns the new wheel and manifest.

    The check needs the wheel installed, so it runs after the metadata step; only
    ``cuwheels.json`` and RECORD differ from the wheel that was tested.
    """
    updated = {**manifest, "kernel_check": result}
    out = set_version_and_pin(wheel, out_dir, label=cell.label, torch_pin=cell.torch_pin,
                              manifest=updated, epoch=epoch, build_number=recipe.build.number,
                              requires=cell.needs_dist)
    return out, updated


@dataclass(frozen=True)
class RawWheel:
    """A wheel as a build made it: the cell and recipe it is of, the archs it was compiled for,
    the torch it was built against (its libraries in ``torch_lib``), the backend that built it
    and the nvcc it compiled with (None: not known here)."""

    path: Path
    cell: Cell
    recipe: Recipe
    archs: tuple[str, ...]
    torch_lib: Path
    torch_version: str
    torch_cuda: str
    backend: str
    nvcc: str | None


@dataclass(frozen=True)
class FinishSettings:
    """How a wheel is finished, where the backends differ."""

    #: auditwheel's target (``auto``: the lowest this build allows; the container passes the
    #: table's manylinux target, ``manylinux_2_28_aarch64`` for an aarch64 cell).
    plat: str = "auto"
    #: The cell's platform (``linux_x86_64``, ``linux_aarch64``, ``win_amd64``; None: the
    #: cell's).
    wheel_platform: str | None = None
    #: The recipe's git revision for the manifest (None: read from the checkout).
    recipe_revision: str | None = None
    #: SOURCE_DATE_EPOCH for the rewritten wheel's timestamps.
    epoch: int = DEFAULT_SOURCE_DATE_EPOCH
    #: More facts for the manifest's ``extra`` (the image, the workarounds, ``--python``).
    manifest_extra: dict[str, Any] | None = None


def finish_wheel(raw: RawWheel, work: Path, progress: Progress,
                 settings: FinishSettings = FinishSettings()) -> tuple[Path, dict[str, Any]]:
    """Repair, inspect (binaries, ABI and archs), set version/pin/manifest and check the tags of
    ``raw``.

    A Windows wheel is repaired with delvewheel and its DLL imports checked in place of the ABI
    check, which can't run there (tools.finish.winrepair). Returns the finished wheel (under
    ``work``) and the manifest it carries, whose ``checks`` say what ran.
    """
    cell, recipe, archs, backend, nvcc = raw.cell, raw.recipe, raw.archs, raw.backend, raw.nvcc
    torch_lib, torch_version, torch_cuda = raw.torch_lib, raw.torch_version, raw.torch_cuda
    plat, wheel_platform, epoch = settings.plat, settings.wheel_platform, settings.epoch
    recipe_revision, manifest_extra = settings.recipe_revision, settings.manifest_extra
    built = raw.path
    # Cells name their platform once the plan does; until then every cell is Linux x86_64.
    platform_name = wheel_platform or getattr(cell, "platform", DEFAULT_PLATFORM)
    windows = platform_name.startswith("win")
    checks: dict[str, str] = {}
    # A wheel built on another machine than its cell's, or holding a binary for another, is
    # refused before a repair tool chokes on it (delvewheel raises a traceback on an ELF .pyd).
    check_tags(built, platform=platform_name)
    check_binaries(built)

    def repair(step: Step) -> Path:
        if windows:
            done = repair_windows_wheel(built, work / "repaired", log=work / "repair.log")
            checks["repair"] = "delvewheel, torch's and the CUDA runtime's DLLs excluded"
            step.detail.update(size_before=done.size_before, size_after=done.size_after,
                               platform_tags=list(wheel_platforms(done.wheel)))
            return done.wheel
        result = repair_wheel(built, work / "repaired", plat=plat, log=work / "repair.log")
        checks["repair"] = f"auditwheel --plat {plat}, torch's and CUDA's libraries excluded"
        step.detail.update(size_before=result.size_before, size_after=result.size_after,
                           platform_tags=list(result.platform_tags))
        if plat == "auto" and cell.platform_tag not in result.platform_tags:
            where = "the local stand-in image" if backend == "container" else "this host"
            progress.say(f"note: tagged {', '.join(result.platform_tags)}: it needs {where}'s "
                         f"glibc or newer; the table's manylinux image makes "
                         f"{cell.platform_tag}")
        return result.wheel

    repaired = progress.run("repair", repair)

    def inspect(step: Step) -> dict[str, Any]:
        unpacked = work / "unpacked"
        if unpacked.exists():
            shutil.rmtree(unpacked)
        check_tags(repaired, platform=platform_name)
        binaries = check_binaries(repaired)
        checks["binaries"] = (f"passed: {len(binaries.binaries)} compiled file(s), each for "
                              f"{', '.join(binaries.platforms)}")
        with zipfile.ZipFile(repaired) as zf:
            zf.extractall(unpacked)
        if windows:
            imports = check_imports(repaired)
            modules = sorted(unpacked.rglob("*.pyd"))
            checks["dll_imports"] = (f"passed: every DLL of {len(imports.imports)} file(s) is "
                                     "vendored, torch's, Python's or Windows'")
            checks["abi_check"] = WINDOWS_ABI_NOTE
            step.detail["abi"] = {"python": cell.python_abi, "torch": cell.torch_abi,
                                  "checked": WINDOWS_ABI_NOTE}
        else:
            modules = extension_modules(unpacked)
            if not modules:
                raise VerifyError(f"{repaired.name} holds no compiled extension module",
                                  hint="the package's build skipped its CUDA extension: check the "
                                       "recipe's FORCE_BUILD/SKIP_CUDA_BUILD env and that nvcc "
                                       "was found")
            abi = abi_check(modules, torch_lib, torch_version=torch_version)
            checks["abi_check"] = f"passed: {abi.checked} torch symbols resolve in torch {torch_version}"
            step.detail["abi_symbols_checked"] = abi.checked
            # What the recipe's abi claims beyond this torch: one build for many Pythons/torches.
            step.detail["abi"] = check_claims(repaired, modules, python_abi=cell.python_abi,
                                              torch_abi=cell.torch_abi, torch_from=cell.torch_from,
                                              serves=cell.serves_torch)
        found = {m.relative_to(unpacked).as_posix(): cuda_archs(m) for m in modules}
        step.detail.update(binaries=binaries.summary(),
                           archs={k: {"sass": list(v.sass), "ptx": list(v.ptx)}
                                  for k, v in found.items()})
        check_archs(found, archs)
        return step.detail["archs"], step.detail["abi"]

    found, claims = progress.run("inspect", inspect)

    manifest = Manifest(
        cell=cell.id, package=cell.package, version=cell.version, python=cell.python,
        cuda=cell.cuda, torch=torch_version.split("+")[0], cxx11_abi=cell.cxx11_abi,
        archs_requested=archs, archs_found=found, sdist=recipe.source.sdist,
        sha256=recipe.source.sha256, url=recipe.source.url,
        patches=tuple(p.file for p in recipe.patches),
        recipe_revision=recipe_revision or recipe_git_revision(recipe),
        build_number=recipe.build.number, backend=backend, compiler=compiler_versions(nvcc),
        torch_cuda=torch_cuda, archs_override=archs != cell.archs, abi=claims,
        build_platform=build_platform(), extra=dict(manifest_extra or {}),
        platform=platform_name, checks=dict(checks),
    ).to_json()

    def metadata(step: Step) -> Path:
        pin = cell.torch_pin
        out = set_version_and_pin(repaired, work / "final", label=cell.label, torch_pin=pin,
                                  manifest=manifest, epoch=epoch, build_number=recipe.build.number,
                                  requires=cell.needs_dist)
        step.detail.update(wheel=out.name, torch_pin=pin, label=cell.label,
                           build_number=recipe.build.number)
        if cell.needs_dist:
            step.detail.update(requires=list(cell.needs_dist))
        # The tools users run must take the wheel as it will be published.
        seen = check_as_users_do(out)
        step.detail.update(record_files_validated=seen.record_files,
                           auditwheel_show=(seen.auditwheel_constraint or "no glibc constraint")
                           if seen.auditwheel_ran else "not run: a Windows wheel (ELF only)")
        return out

    final = progress.run("metadata", metadata)
    check_tags(final, platform=platform_name)
    return final, manifest
