"""The finish stage: what turns a raw wheel from a package's own build into a publishable one.

repair (auditwheel, torch/CUDA libraries excluded) -> inspect (every torch symbol resolves in
the cell's torch; the recipe's ``abi`` claims hold (tools.abicheck); the SASS inside covers the
requested archs) -> metadata (local version label, torch pin, build tag, the ``cuwheels.json``
manifest; then the wheel as users' tools see it: installer's RECORD validation and ``auditwheel
show``, tools.finish.usertools) -> the platform tag check. The host
backend runs it after its compile; the container backend runs the same function inside the
image as cibuildwheel's repair command (``python -m tools.incontainer finish``). The import
smoke test follows in a fresh environment (``tools.finish.verify.smoke_test`` on the host,
cibuildwheel's test command in the container).
"""

from __future__ import annotations

import platform
import shutil
import subprocess
import zipfile
from pathlib import Path
from typing import Any

from .abicheck import check_claims
from tools.pipeline.buildenv import DEFAULT_SOURCE_DATE_EPOCH
from tools.core.errors import VerifyError
from tools.core.manifest import Manifest
from tools.plan.matrix import Cell
from tools.pipeline.report import Progress, Step
from tools.plan.recipe import Recipe
from .repair import repair_wheel
from .usertools import check_as_users_do
from .verify import abi_check, check_archs, check_tags, cuda_archs, extension_modules
from .wheelmeta import set_version_and_pin

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
    """The machine the wheel was finished on, for the manifest (``Linux x86_64 glibc 2.28``)."""
    return f"{platform.system()} {platform.machine()} glibc {platform.libc_ver()[1]}"


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


def finish_wheel(raw: Path, *, cell: Cell, recipe: Recipe, archs: tuple[str, ...],
                 torch_lib: Path, torch_version: str, torch_cuda: str, work: Path,
                 progress: Progress, plat: str, backend: str, nvcc: str | None,
                 manifest_extra: dict[str, Any] | None = None,
                 recipe_revision: str | None = None,
                 epoch: int = DEFAULT_SOURCE_DATE_EPOCH) -> tuple[Path, dict[str, Any]]:
    """Repair, inspect (ABI and archs), set version/pin/manifest and check the tags of ``raw``,
    a wheel of ``cell`` built against torch ``torch_version`` (its libraries in ``torch_lib``).

    ``plat`` is auditwheel's target (``auto``: the lowest this build allows; the container
    passes the table's manylinux target). Returns the finished wheel (under ``work``) and the
    manifest it carries.
    """
    def repair(step: Step) -> Path:
        result = repair_wheel(raw, work / "repaired", plat=plat, log=work / "repair.log")
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
        with zipfile.ZipFile(repaired) as zf:
            zf.extractall(unpacked)
        modules = extension_modules(unpacked)
        if not modules:
            raise VerifyError(f"{repaired.name} holds no compiled extension module",
                              hint="the package's build skipped its CUDA extension: check the "
                                   "recipe's FORCE_BUILD/SKIP_CUDA_BUILD env and that nvcc was found")
        abi = abi_check(modules, torch_lib, torch_version=torch_version)
        # What the recipe's abi claims beyond this torch: one build for many Pythons/torches.
        step.detail["abi"] = check_claims(repaired, modules, python_abi=cell.python_abi,
                                          torch_abi=cell.torch_abi, torch_from=cell.torch_from,
                                          serves=cell.serves_torch)
        found = {m.relative_to(unpacked).as_posix(): cuda_archs(m) for m in modules}
        step.detail.update(abi_symbols_checked=abi.checked,
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
                           auditwheel_show=seen.auditwheel_constraint or "no glibc constraint")
        return out

    final = progress.run("metadata", metadata)
    check_tags(final)
    return final, manifest
