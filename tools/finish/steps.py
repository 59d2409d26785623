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
from pathlib import Path
from typing import Any

from .archcheck import check_binaries
from tools.pipeline.buildenv import DEFAULT_SOURCE_DATE_EPOCH
from tools.core.manifest import DEFAULT_PLATFORM, Manifest
from tools.plan.cells import Cell
from tools.pipeline.report import Progress, Step
from tools.plan.recipes.model import Recipe
from .usertools import check_as_users_do
from .checks import check_archs, check_tags, cuda_archs
from .wheelmeta import set_version_and_pin
from .raw import FinishSettings, RawWheel
from .wheelplatform import finish_platform

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


def finish_wheel(raw: RawWheel, work: Path, progress: Progress,
                 settings: FinishSettings = FinishSettings()) -> tuple[Path, dict[str, Any]]:
    """Repair, inspect (binaries, ABI and archs), set version/pin/manifest and check the tags of
    ``raw``.

    What differs by platform (the repair tool, the inspection) is the wheel platform's
    (``tools.finish.wheelplatform``). Returns the finished wheel (under
    ``work``) and the manifest it carries, whose ``checks`` say what ran.
    """
    cell, recipe, archs, backend, nvcc = raw.cell, raw.recipe, raw.archs, raw.backend, raw.nvcc
    torch_version, torch_cuda = raw.torch_version, raw.torch_cuda
    plat, wheel_platform, epoch = settings.plat, settings.wheel_platform, settings.epoch
    recipe_revision, manifest_extra = settings.recipe_revision, settings.manifest_extra
    built = raw.path
    # Cells name their platform once the plan does; until then every cell is Linux x86_64.
    platform_name = wheel_platform or getattr(cell, "platform", DEFAULT_PLATFORM)
    target = finish_platform(platform_name)
    checks: dict[str, str] = {}
    # A wheel built on another machine than its cell's, or holding a binary for another, is
    # refused before a repair tool chokes on it (delvewheel raises a traceback on an ELF .pyd).
    check_tags(built, platform=platform_name)
    check_binaries(built)

    def repair(step: Step) -> Path:
        done = target.repair(raw, work, plat, progress)
        checks["repair"] = done.check
        step.detail.update(done.detail)
        return done.wheel

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
        modules = target.inspect(raw, repaired, unpacked, checks, step.detail)
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
