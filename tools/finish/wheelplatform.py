"""What differs between wheel platforms in the finish steps: the repair tool and the inspection.

Linux (x86_64 and aarch64): auditwheel repairs (torch's and CUDA's libraries excluded), the
wheel must hold a compiled extension module, every torch symbol its modules use must resolve in
the cell's torch (the ABI check) and the recipe's ``abi`` claims must hold. Windows: delvewheel
repairs (torch's and the CUDA runtime's DLLs excluded) and every DLL a module imports must be
vendored, torch's, Python's or Windows'; the ABI check can't run there (``WINDOWS_ABI_NOTE``).
:func:`finish_platform` picks one by the wheel's platform; the finish steps
(``tools.finish.steps``) ask it and hold no platform conditional of their own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tools.core.errors import VerifyError
from tools.pipeline.report import Progress
from .abi import check_claims
from .archcheck import wheel_platforms
from .auditwheel_repair import repair_wheel
from .checks import abi_check, extension_modules
from .raw import RawWheel
from .winrepair import WINDOWS_ABI_NOTE, check_imports, repair_windows_wheel


@dataclass(frozen=True)
class Repaired:
    """A repaired wheel, what the manifest's ``checks`` says of the repair, and the repair
    step's report entries."""

    wheel: Path
    check: str
    detail: dict[str, Any] = field(default_factory=dict)


class FinishPlatform(Protocol):
    """The finish steps' view of one wheel platform."""

    #: The repair tool it runs (the SBOM names it with its version).
    repair_tool: str

    def repair(self, raw: RawWheel, work: Path, plat: str, progress: Progress) -> Repaired:
        """Repair ``raw`` into ``<work>/repaired`` (``plat``: the target policy where the tool
        has one), its log at ``<work>/repair.log``."""
        ...

    def inspect(self, raw: RawWheel, repaired: Path, unpacked: Path, checks: dict[str, str],
                detail: dict[str, Any]) -> list[Path]:
        """The platform's checks of ``repaired`` (extracted at ``unpacked``), written into
        ``checks`` (the manifest's) and ``detail`` (the step's report, with its ``abi``);
        returns the extension modules whose GPU code the arch check reads."""
        ...


@dataclass(frozen=True)
class LinuxFinish:
    """auditwheel, and the ABI check against the cell's torch."""

    repair_tool: str = "auditwheel"

    def repair(self, raw: RawWheel, work: Path, plat: str, progress: Progress) -> Repaired:
        """auditwheel to ``plat``; a note when ``auto`` tags it below the cell's manylinux."""
        cell = raw.cell
        result = repair_wheel(raw.path, work / "repaired", plat=plat, log=work / "repair.log")
        if plat == "auto" and cell.platform_tag not in result.platform_tags:
            where = "the local stand-in image" if raw.backend == "container" else "this host"
            progress.say(f"note: tagged {', '.join(result.platform_tags)}: it needs {where}'s "
                         f"glibc or newer; the table's manylinux image makes "
                         f"{cell.platform_tag}")
        return Repaired(result.wheel,
                        f"auditwheel --plat {plat}, torch's and CUDA's libraries excluded",
                        {"size_before": result.size_before, "size_after": result.size_after,
                         "platform_tags": list(result.platform_tags)})

    def inspect(self, raw: RawWheel, repaired: Path, unpacked: Path, checks: dict[str, str],
                detail: dict[str, Any]) -> list[Path]:
        """An extension module at least; every torch symbol resolves; the ``abi`` claims."""
        cell = raw.cell
        modules = extension_modules(unpacked)
        if not modules:
            raise VerifyError(f"{repaired.name} holds no compiled extension module",
                              hint="the package's build skipped its CUDA extension: check the "
                                   "recipe's FORCE_BUILD/SKIP_CUDA_BUILD env and that nvcc "
                                   "was found")
        abi = abi_check(modules, raw.torch_lib, torch_version=raw.torch_version)
        checks["abi_check"] = (f"passed: {abi.checked} torch symbols resolve in torch "
                               f"{raw.torch_version}")
        detail["abi_symbols_checked"] = abi.checked
        # What the recipe's abi claims beyond this torch: one build for many Pythons/torches.
        detail["abi"] = check_claims(repaired, modules, python_abi=cell.python_abi,
                                     torch_abi=cell.torch_abi, torch_from=cell.torch_from,
                                     serves=cell.serves_torch)
        return modules


@dataclass(frozen=True)
class WindowsFinish:
    """delvewheel, and every imported DLL accounted for."""

    repair_tool: str = "delvewheel"

    def repair(self, raw: RawWheel, work: Path, plat: str, progress: Progress) -> Repaired:
        """delvewheel (it has no policy: ``plat`` is not read)."""
        done = repair_windows_wheel(raw.path, work / "repaired", log=work / "repair.log")
        return Repaired(done.wheel, "delvewheel, torch's and the CUDA runtime's DLLs excluded",
                        {"size_before": done.size_before, "size_after": done.size_after,
                         "platform_tags": list(wheel_platforms(done.wheel))})

    def inspect(self, raw: RawWheel, repaired: Path, unpacked: Path, checks: dict[str, str],
                detail: dict[str, Any]) -> list[Path]:
        """Every DLL import allowed; the ABI check noted as not run."""
        imports = check_imports(repaired)
        checks["dll_imports"] = (f"passed: every DLL of {len(imports.imports)} file(s) is "
                                 "vendored, torch's, Python's or Windows'")
        checks["abi_check"] = WINDOWS_ABI_NOTE
        detail["abi"] = {"python": raw.cell.python_abi, "torch": raw.cell.torch_abi,
                         "checked": WINDOWS_ABI_NOTE}
        return sorted(unpacked.rglob("*.pyd"))


#: The finish platforms, by the prefix of the wheel platform they finish.
PLATFORMS: dict[str, FinishPlatform] = {"linux": LinuxFinish(), "win": WindowsFinish()}


def finish_platform(platform_name: str) -> FinishPlatform:
    """The finish platform of a wheel platform (``linux_x86_64``, ``win_amd64``, ...)."""
    return PLATFORMS["win" if platform_name.startswith("win") else "linux"]
