"""The finish steps: what turns a raw wheel from a package's own build into a publishable one.

repair (auditwheel, torch/CUDA libraries excluded; delvewheel for Windows) -> inspect (every
binary is for the machine the tag names; every torch symbol resolves in the cell's torch, or on
Windows every imported DLL is allowed; the recipe's ``abi`` claims hold (tools.abicheck); the SASS inside covers the
requested archs) -> metadata (local version label, torch pin, build tag, the ``cuwheels.json``
manifest; then the wheel as users' tools see it: installer's RECORD validation and ``auditwheel
show``, tools.finish.usertools) -> the platform tag check. Before any of it, the raw wheel must carry its upstream license
files (tools.finish.licenses), and the final wheel must still carry them. The host
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .archcheck import check_binaries
from tools.pipeline.buildenv import DEFAULT_SOURCE_DATE_EPOCH
from tools.core.digest import sha256_file
from tools.core.errors import VerifyError
from tools.core.manifest import DEFAULT_PLATFORM, Manifest
from tools.plan.cells import Cell
from tools.pipeline.report import Progress, Step
from tools.plan.recipes.model import Recipe
from .usertools import check_as_users_do
from .checks import check_archs, check_tags, cuda_archs
from .licenses import check_licenses, licenses_summary
from .sbom import (PatchFile, SbomInputs, Tool, build_venv_tools, check_wheel_sbom,
                   installed_tool, project_tool, sbom_bytes, sbom_document, sbom_member,
                   sbom_record, validate_sbom, wheel_generator)
from .wheelmeta import final_name, set_version_and_pin
from .raw import FinishSettings, RawWheel
from .wheelplatform import FinishPlatform, finish_platform

#: The finish steps, as the progress lines and the report name them.
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


@dataclass
class Finishing:
    """One wheel going through the finish steps: what they read, and the ``checks`` they write
    into its manifest as each runs."""

    raw: RawWheel
    work: Path
    progress: Progress
    settings: FinishSettings
    #: The cell's platform (``linux_x86_64``, ``win_amd64``): its tag and its finish seam.
    platform: str
    target: FinishPlatform
    checks: dict[str, str] = field(default_factory=dict)


def repair_step(step: Step, f: Finishing) -> Path:
    """The platform's repair tool on the raw wheel; returns the repaired wheel."""
    done = f.target.repair(f.raw, f.work, f.settings.plat, f.progress)
    f.checks["repair"] = done.check
    step.detail.update(done.detail)
    return done.wheel


def inspect_step(step: Step, f: Finishing, repaired: Path) -> tuple[dict[str, Any], Any]:
    """Tags, binaries, the platform's ABI inspection and the archs of ``repaired``; returns
    the archs found (per extension module) and the recipe's ABI claims as checked."""
    unpacked = f.work / "unpacked"
    if unpacked.exists():
        shutil.rmtree(unpacked)
    check_tags(repaired, platform=f.platform)
    binaries = check_binaries(repaired)
    f.checks["binaries"] = (f"passed: {len(binaries.binaries)} compiled file(s), each for "
                            f"{', '.join(binaries.platforms)}")
    with zipfile.ZipFile(repaired) as zf:
        zf.extractall(unpacked)
    modules = f.target.inspect(f.raw, repaired, unpacked, f.checks, step.detail)
    found = {m.relative_to(unpacked).as_posix(): cuda_archs(m) for m in modules}
    step.detail.update(binaries=binaries.summary(),
                       archs={k: {"sass": list(v.sass), "ptx": list(v.ptx)}
                              for k, v in found.items()})
    check_archs(found, f.raw.archs)
    return step.detail["archs"], step.detail["abi"]


def build_manifest(f: Finishing, found: dict[str, Any], claims: Any) -> dict[str, Any]:
    """The ``cuwheels.json`` manifest of the wheel: what was built, from what, how, and the
    checks that passed."""
    raw, settings = f.raw, f.settings
    cell, recipe = raw.cell, raw.recipe
    return Manifest(
        cell=cell.id, package=cell.package, version=cell.version, python=cell.python,
        cuda=cell.cuda, torch=raw.torch_version.split("+")[0], cxx11_abi=cell.cxx11_abi,
        archs_requested=raw.archs, archs_found=found, sdist=recipe.source.sdist,
        sha256=recipe.source.sha256, url=recipe.source.url,
        patches=tuple(p.file for p in recipe.patches),
        recipe_revision=settings.recipe_revision or recipe_git_revision(recipe),
        build_number=recipe.build.number, backend=raw.backend, compiler=compiler_versions(raw.nvcc),
        torch_cuda=raw.torch_cuda, archs_override=raw.archs != cell.archs, abi=claims,
        build_platform=build_platform(), extra=dict(settings.manifest_extra or {}),
        platform=f.platform, checks=dict(f.checks),
    ).to_json()


def build_tools(f: Finishing) -> tuple[Tool, ...]:
    """The tools of the build the SBOM names: this project's, the repair tool that ran here, the
    package's build backend (the raw wheel's ``Generator:``) and the recipe's build requirements
    at the versions of the build venv, which holds the build's torch (``raw.torch_lib``)."""
    recipe = f.raw.recipe
    repair = f.target.repair_tool
    tools = {t.name: t for t in build_venv_tools(
        f.raw.torch_lib.parent.parent, (d.requirement for d in recipe.build.requires),
        isolated=recipe.build.isolation)}
    generator = wheel_generator(f.raw.path)
    # The backend that wrote the wheel says its own version; the venv's copy may say nothing
    # (an isolated build).
    if generator is not None and not (tools.get(generator.name) and tools[generator.name].version):
        tools[generator.name] = generator
    tools[repair] = installed_tool(repair, "the finish step's environment, which repaired the wheel")
    tools["cuwheels-tools"] = project_tool()
    return tuple(sorted(tools.values(), key=lambda t: t.name))


def sbom_step(f: Finishing, repaired: Path, manifest: dict[str, Any]
              ) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The wheel's SBOM (tools.finish.sbom), made from ``manifest`` and validated before
    anything is written; returns the manifest with ``checks.sbom`` (path, format, sha256) and
    the file to add to ``.dist-info``. VerifyError when it does not validate."""
    cell, recipe = f.raw.cell, f.raw.recipe
    names = final_name(repaired, label=cell.label, build_number=recipe.build.number)
    patches = tuple(PatchFile(p.file, sha256_file(p.path), p.reason) for p in recipe.patches)
    data = sbom_bytes(sbom_document(SbomInputs(
        manifest, names.dist_name, str(names.version), names.file_name, patches,
        build_tools(f), f.settings.epoch)))
    member = sbom_member(names.dist_info)
    validate_sbom(data, wheel=names.file_name, member=member)
    checks = {**manifest["checks"], "sbom": sbom_record(member, data)}
    return {**manifest, "checks": checks}, {member.split("/", 1)[1]: data}


def metadata_step(step: Step, f: Finishing, repaired: Path, manifest: dict[str, Any]
                  ) -> tuple[Path, dict[str, Any]]:
    """Version label, torch pin, build tag, requirements, manifest and SBOM written into the
    wheel, then the wheel checked as users' tools read it; returns the final wheel and its
    manifest (with ``checks.sbom``)."""
    cell, recipe = f.raw.cell, f.raw.recipe
    pin = cell.torch_pin
    manifest, sbom_file = sbom_step(f, repaired, manifest)
    out = set_version_and_pin(repaired, f.work / "final", label=cell.label, torch_pin=pin,
                              manifest=manifest, epoch=f.settings.epoch,
                              build_number=recipe.build.number, requires=cell.needs_dist,
                              dist_files=sbom_file)
    step.detail.update(wheel=out.name, torch_pin=pin, label=cell.label,
                       build_number=recipe.build.number)
    try:
        # Repair and rewrite keep every .dist-info file; a wheel that lost its license on the
        # way is still refused, and removed, so it cannot be published from the work folder.
        step.detail.update(licenses=list(check_licenses(out)))
        # The SBOM as the wheel carries it: the bytes the manifest's checks.sbom hashed.
        step.detail.update(sbom=check_wheel_sbom(out))
        if step.detail["sbom"] != manifest["checks"]["sbom"]:
            raise VerifyError(f"{out.name}: its SBOM is not the one its manifest records",
                              hint="set_version_and_pin wrote another SBOM than the metadata "
                                   "step made: finish the wheel again")
    except VerifyError:
        out.unlink()
        raise
    if cell.needs_dist:
        step.detail.update(requires=list(cell.needs_dist))
    # The tools users run must take the wheel as it will be published.
    seen = check_as_users_do(out)
    step.detail.update(record_files_validated=seen.record_files,
                       auditwheel_show=(seen.auditwheel_constraint or "no glibc constraint")
                       if seen.auditwheel_ran else "not run: a Windows wheel (ELF only)")
    return out, manifest


def finish_wheel(raw: RawWheel, work: Path, progress: Progress,
                 settings: FinishSettings = FinishSettings()) -> tuple[Path, dict[str, Any]]:
    """Repair, inspect (binaries, ABI and archs), set version/pin/manifest and check the tags of
    ``raw``, once it is known to carry its upstream license files (VerifyError otherwise, before
    anything is written).

    What differs by platform (the repair tool, the inspection) is the wheel platform's
    (``tools.finish.wheelplatform``). Returns the finished wheel (under
    ``work``) and the manifest it carries, whose ``checks`` say what ran.
    """
    # Cells name their platform once the plan does; until then every cell is Linux x86_64.
    platform_name = settings.wheel_platform or getattr(raw.cell, "platform", DEFAULT_PLATFORM)
    f = Finishing(raw, work, progress, settings, platform_name, finish_platform(platform_name))
    # A wheel built on another machine than its cell's, or holding a binary for another, is
    # refused before a repair tool chokes on it (delvewheel raises a traceback on an ELF .pyd).
    check_tags(raw.path, platform=platform_name)
    check_binaries(raw.path)
    # Checked before anything is written: a wheel without its upstream license never reaches
    # the repaired or final folders, let alone the wheelhouse.
    f.checks["licenses"] = licenses_summary(check_licenses(raw.path))
    repaired = progress.run("repair", repair_step, f)
    found, claims = progress.run("inspect", inspect_step, f, repaired)
    manifest = build_manifest(f, found, claims)
    final, manifest = progress.run("metadata", metadata_step, f, repaired, manifest)
    check_tags(final, platform=platform_name)
    return final, manifest
