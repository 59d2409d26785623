"""Build one matrix cell: source -> toolchain -> compile -> repair -> verify -> wheelhouse.

``python -m tools.build CELL_ID [--backend host|container|auto] [--archs 90] [--sdist PATH]``
(what ``nox -s build-<cell id>`` runs). Every step is timed and reported; the wheel reaches
``wheelhouse/`` only after every check passed, and the build report (JSON) says what each check
found. A failure names the step, explains itself and exits non-zero.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import RECIPES_DIR, ROOT, host
from .buildenv import (
    DEFAULT_SOURCE_DATE_EPOCH,
    available_memory_gib,
    build_env,
    size_for,
    usable_cores,
)
from .errors import CuwheelsError, ToolchainError, VerifyError, cli
from .manifest import MANIFEST_SCHEMA
from .matrix import Cell, find_cell, plan
from .recipe import Recipe, load_all
from .source import prepare_source
from .table import Table, arch_key, load_table
from .wheelmeta import set_version_and_pin

DEFAULT_OUT = ROOT / "wheelhouse"
DEFAULT_WORK = ROOT / "build-cells"


@dataclass
class Step:
    """One timed pipeline step in the report."""

    name: str
    seconds: float = 0.0
    status: str = "pending"
    detail: dict[str, Any] = field(default_factory=dict)


class Progress:
    """Prints which step runs and for how long, and collects the report's steps."""

    def __init__(self, cell_id: str, names: list[str], stream=sys.stderr):
        self.cell_id, self.names, self.stream = cell_id, names, stream
        self.steps: list[Step] = []
        self.start = time.monotonic()

    def _elapsed(self) -> str:
        s = int(time.monotonic() - self.start)
        return f"{s // 60}m{s % 60:02d}s"

    def say(self, text: str) -> None:
        """One line of progress, prefixed with the cell and the total time so far."""
        print(f"[{self.cell_id} {self._elapsed()}] {text}", file=self.stream, flush=True)

    def run(self, name: str, func, *args, **kwargs):
        """Run one step, timing it; a failure is recorded and re-raised."""
        step = Step(name)
        self.steps.append(step)
        index = self.names.index(name) + 1 if name in self.names else len(self.steps)
        self.say(f"step {index}/{len(self.names)}: {name} ...")
        t0 = time.monotonic()
        try:
            result = func(step, *args, **kwargs)
        except BaseException as exc:
            step.seconds = round(time.monotonic() - t0, 2)
            step.status = "failed"
            step.detail.setdefault("error", str(exc))
            self.say(f"step {index}/{len(self.names)}: {name} FAILED after {step.seconds:.0f}s")
            raise
        step.seconds = round(time.monotonic() - t0, 2)
        step.status = "ok"
        self.say(f"step {index}/{len(self.names)}: {name} ok ({step.seconds:.1f}s)")
        return result


HOST_STEPS = ["toolchain", "source", "python", "compile", "repair", "inspect", "metadata",
              "verify", "publish"]


def recipe_git_revision(recipe: Recipe) -> str:
    """The git commit of the recipe folder (with ``-dirty`` when it has local changes)."""
    def git(*args: str) -> str:
        proc = subprocess.run(["git", *args], cwd=recipe.folder, capture_output=True, text=True)
        return proc.stdout.strip() if proc.returncode == 0 else ""
    rev = git("log", "-1", "--format=%H", "--", ".") or "unknown"
    return rev + ("-dirty" if git("status", "--porcelain", "--", ".") else "")


def resolve_archs(cell: Cell, override: str | None, table: Table) -> tuple[str, ...]:
    """The cell's arch list, or ``--archs`` (``90`` or ``80,90``) checked against the toolkit."""
    if not override:
        return cell.archs
    archs = tuple(sorted({a.strip().removeprefix("sm_") for a in override.replace(";", ",")
                          .split(",") if a.strip()}, key=arch_key))
    can = table.cuda[cell.cuda].archs
    bad = [a for a in archs if a not in can]
    if bad:
        raise ToolchainError(f"--archs {override}: CUDA {cell.cuda} cannot compile "
                             f"{', '.join('sm_' + b for b in bad)}",
                             hint=f"CUDA {cell.cuda} compiles {', '.join(can)}")
    return archs


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


def finish_wheel(raw: Path, *, cell: Cell, recipe: Recipe, archs: tuple[str, ...],
                 torch_lib: Path, torch_version: str, work: Path, progress: Progress,
                 plat: str, manifest_extra: dict[str, Any],
                 recipe_revision: str | None = None,
                 epoch: int = DEFAULT_SOURCE_DATE_EPOCH) -> tuple[Path, dict[str, Any]]:
    """The steps both backends share after the compile: repair, inspect (ABI and archs), set
    version/pin/manifest, check tags. Returns the finished wheel and the manifest."""
    from .repair import repair_wheel
    from .verify import (
        abi_check,
        check_archs,
        check_tags,
        cuda_archs,
        extension_modules,
    )

    def repair(step: Step) -> Path:
        result = repair_wheel(raw, work / "repaired", plat=plat, log=work / "repair.log")
        step.detail.update(size_before=result.size_before, size_after=result.size_after,
                           platform_tags=list(result.platform_tags))
        if plat == "auto" and not any("manylinux_2_28" in t for t in result.platform_tags):
            progress.say(f"note: host build tagged {', '.join(result.platform_tags)}: it needs "
                         "this host's glibc or newer; the container backend makes manylinux_2_28")
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
        found = {m.relative_to(unpacked).as_posix(): cuda_archs(m) for m in modules}
        step.detail.update(abi_symbols_checked=abi.checked,
                           archs={k: {"sass": list(v.sass), "ptx": list(v.ptx)}
                                  for k, v in found.items()})
        check_archs(found, archs)
        return step.detail["archs"]

    found = progress.run("inspect", inspect)

    manifest = {
        "schema": MANIFEST_SCHEMA,
        "cell": cell.id,
        "package": cell.package,
        "version": cell.version,
        "python": cell.python,
        "cuda": cell.cuda,
        "torch": torch_version.split("+")[0],
        "cxx11_abi": cell.cxx11_abi,
        "archs": {"requested": list(archs), "found": found},
        "source": {"sdist": recipe.source.sdist, "sha256": recipe.source.sha256,
                   "url": recipe.source.url},
        "patches": [p.file for p in recipe.patches],
        "recipe_revision": recipe_revision or recipe_git_revision(recipe),
        "build_number": recipe.build.number,
        **manifest_extra,
    }

    def metadata(step: Step) -> Path:
        pin = f"torch=={cell.torch}.*"
        out = set_version_and_pin(repaired, work / "final", label=cell.label, torch_pin=pin,
                                  manifest=manifest, epoch=epoch, build_number=recipe.build.number)
        step.detail.update(wheel=out.name, torch_pin=pin, label=cell.label, build_number=recipe.build.number)
        return out

    final = progress.run("metadata", metadata)
    check_tags(final)
    return final, manifest


def build_host(cell: Cell, recipe: Recipe, table: Table, *, archs: tuple[str, ...],
               work: Path, out_dir: Path, progress: Progress, sdist: Path | None,
               sdist_dir: Path | None, wheelhouse: Path | None, offline: bool,
               torch_index: str | None) -> Path:
    """The host backend: every step on this machine; returns the published wheel."""
    from .verify import smoke_test

    def toolchain(step: Step) -> host.Nvcc:
        nvcc = host.find_nvcc()
        if warning := host.check_nvcc(nvcc, cell):
            progress.say(f"note: {warning}")
        step.detail.update(nvcc=nvcc.path, nvcc_version=nvcc.version, cuda_home=nvcc.cuda_home)
        return nvcc

    nvcc = progress.run("toolchain", toolchain)

    def source(step: Step):
        prepared = prepare_source(recipe, work, sdist=sdist, sdist_dir=sdist_dir)
        step.detail.update(sdist=prepared.sdist.name, sha256=prepared.sha256,
                           patches=list(prepared.patches))
        return prepared

    prepared = progress.run("source", source)

    def python(step: Step) -> host.BuildPython:
        bp = host.prepare_python(cell, recipe, table, work, wheelhouse=wheelhouse,
                                 offline=offline, index_url=torch_index, log=work / "python.log")
        step.detail.update(torch=bp.torch_version, torch_cuda=bp.torch_cuda,
                           cxx11_abi=bp.cxx11_abi)
        return bp

    bp = progress.run("python", python)

    sizing = size_for(recipe, archs, cores=usable_cores(), available_gib=available_memory_gib())
    env = build_env(recipe, cell, sizing, archs=archs, cuda_home=nvcc.cuda_home)

    def compile_(step: Step) -> Path:
        progress.say(f"sizing: {sizing.note}")
        progress.say("environment: " + " ".join(f"{k}={v}" for k, v in sorted(env.items())))
        step.detail.update(env=env, sizing=asdict(sizing), log=str(work / "compile.log"))
        last = [0.0]

        def on_line(line: str) -> None:
            now = time.monotonic()
            if now - last[0] > 5:
                last[0] = now
                counter = line.split("]", 1)[0] + "]"
                source = re.search(r"\s-c\s+(\S+)", line)
                progress.say(f"compiling {counter} "
                             f"{Path(source.group(1)).name if source else line[len(counter):80]}")
        return host.compile_wheel(bp.python, prepared.tree, env, work / "dist",
                                  work / "compile.log", isolation=recipe.build.isolation,
                                  on_line=on_line)

    raw = progress.run("compile", compile_)
    final, manifest = finish_wheel(
        raw, cell=cell, recipe=recipe, archs=archs, torch_lib=bp.torch_lib,
        torch_version=bp.torch_version, work=work, progress=progress, plat="auto",
        manifest_extra={"backend": "host", "compiler": compiler_versions(nvcc.path),
                        "torch_cuda": bp.torch_cuda, "archs_override": archs != cell.archs,
                        "build_platform": f"{platform.system()} {platform.machine()} glibc "
                                          f"{platform.libc_ver()[1]}"})

    def verify(step: Step) -> None:
        extra = (torch_index,) if torch_index else ()
        if not torch_index and (url := host.torch_index(cell, table)):
            extra = (url,)
        seconds = smoke_test(final, python=cell.python,
                             torch_requirement=host.torch_requirement(cell),
                             imports=recipe.imports, workdir=work / "smoke",
                             extra_index_urls=extra,
                             find_links=(wheelhouse,) if wheelhouse else (), offline=offline)
        step.detail.update(smoke_test="passed", imports=list(recipe.imports), seconds=seconds)

    progress.run("verify", verify)
    return progress.run("publish", lambda step: publish(final, out_dir, step))


def publish(wheel: Path, out_dir: Path, step: Step) -> Path:
    """Move a verified wheel into the wheelhouse atomically (same name: replaced)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".{wheel.name}.part"
    shutil.copyfile(wheel, tmp)
    target = out_dir / wheel.name
    tmp.replace(target)
    step.detail.update(wheel=str(target), size=target.stat().st_size)
    return target


def write_report(path: Path, report: dict[str, Any]) -> None:
    """Write the build report JSON atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".part")
    tmp.write_text(json.dumps(report, indent=2, default=str) + "\n")
    tmp.replace(path)


@contextmanager
def reporting(path: Path, report: dict[str, Any], progress: Progress) -> Iterator[None]:
    """Write the build report to ``path`` however the build ends: the steps with their times and
    details, and the error (kind and message) when one stopped it."""
    try:
        yield
    except CuwheelsError as exc:
        report["error"] = {"kind": exc.kind, "message": str(exc)}
        raise
    finally:
        report["steps"] = [asdict(s) for s in progress.steps]
        report["seconds"] = round(time.monotonic() - progress.start, 1)
        write_report(path, report)
        progress.say(f"report: {path}")


def engine_answers(engine: str) -> tuple[bool, str]:
    """Whether a container engine answers (``docker info``), and what it said."""
    exe = shutil.which(engine)
    if not exe:
        return False, f"{engine} is not installed"
    try:
        proc = subprocess.run([exe, "info"], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return False, f"`{engine} info` did not answer in 30 s"
    if proc.returncode != 0:
        first = (proc.stderr or proc.stdout).strip().splitlines()
        return False, f"`{engine} info` failed: {first[0] if first else 'no output'}"
    return True, f"{engine} answers"


def choose_backend(requested: str, engine: str | None) -> tuple[str, str]:
    """Resolve ``auto``: container when an engine answers, otherwise host; says why."""
    if requested != "auto":
        return requested, f"--backend {requested}"
    reasons = []
    for candidate in ([engine] if engine else ["docker", "podman"]):
        ok, why = engine_answers(candidate)
        if ok:
            return "container", f"auto: {why}"
        reasons.append(why)
    return "host", "auto: no container engine answers (" + "; ".join(reasons) + "), using host"


def build_cell(cell_id: str, *, backend: str = "auto", archs: str | None = None,
               sdist: Path | None = None, sdist_dir: Path | None = None,
               wheelhouse: Path | None = None, offline: bool = False,
               torch_index: str | None = None, out_dir: Path = DEFAULT_OUT,
               work_root: Path = DEFAULT_WORK, recipes_root: Path = RECIPES_DIR,
               engine: str | None = None, dry_run: bool = False,
               memory_gib: int | None = None, cpus: int | None = None,
               stream=None) -> dict[str, Any]:
    """Build one cell and return its report (also written to ``<work>/report.json``).

    Raises the step's CuwheelsError on failure, after writing the report.
    """
    table = load_table()
    recipes = load_all(recipes_root, table)
    cell = find_cell(cell_id, plan(recipes, table))
    recipe = next(r for r in recipes if r.package == cell.package)
    chosen, why = choose_backend(backend, engine)
    cell_archs = resolve_archs(cell, archs, table)
    if chosen == "container":
        from .container import CONTAINER_STEPS, build_container
        progress = Progress(cell.id, CONTAINER_STEPS, stream or sys.stderr)
        progress.say(f"backend: container ({why})")
        report = build_container(cell, recipe, table, archs=cell_archs, engine=engine,
                                 dry_run=dry_run, out_dir=out_dir, work_root=work_root,
                                 progress=progress, sdist=sdist, sdist_dir=sdist_dir,
                                 memory_gib=memory_gib, cpus=cpus)
        report.setdefault("why", why)
        return report
    progress = Progress(cell.id, HOST_STEPS, stream or sys.stderr)
    progress.say(f"backend: host ({why})")
    if dry_run:
        raise ToolchainError("--dry-run is for the container backend (it prints the "
                             "cibuildwheel command)", hint="add --backend container")
    work = work_root / cell.id
    work.mkdir(parents=True, exist_ok=True)
    for stale in ("compile.log", "python.log", "repair.log"):
        (work / stale).unlink(missing_ok=True)
    report: dict[str, Any] = {"cell": cell.id, "backend": "host", "why": why,
                              "archs": list(cell_archs), "label": cell.label,
                              "verdict": "failed"}
    with reporting(work / "report.json", report, progress):
        wheel = build_host(cell, recipe, table, archs=cell_archs, work=work, out_dir=out_dir,
                           progress=progress, sdist=sdist, sdist_dir=sdist_dir,
                           wheelhouse=wheelhouse, offline=offline, torch_index=torch_index)
        report.update(verdict="passed", wheel=str(wheel))
    return report


@cli
def main(argv: list[str] | None = None) -> int:
    """Build one cell (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m tools.build", description=__doc__.split("\n")[0])
    ap.add_argument("cell", help="cell id, e.g. causal_conv1d-3.11-cu130 (python -m tools.matrix"
                                 " --format ids lists them)")
    ap.add_argument("--backend", choices=["auto", "host", "container"], default="auto")
    ap.add_argument("--engine", choices=["docker", "podman"], help="container engine")
    ap.add_argument("--archs", help="override the arch list for a local build: 90 or 80,90")
    ap.add_argument("--sdist", type=Path, help="use this sdist file instead of downloading")
    ap.add_argument("--sdist-dir", type=Path, help="take the sdist from this directory")
    ap.add_argument("--wheelhouse", type=Path,
                    help="a directory of wheels (torch, build deps) to install from")
    ap.add_argument("--offline", action="store_true",
                    help="install only from --wheelhouse (no network)")
    ap.add_argument("--torch-index", help="index URL for the cell's torch build")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where verified wheels go")
    ap.add_argument("--work", type=Path, default=DEFAULT_WORK, help="per-cell work directories")
    ap.add_argument("--recipes", type=Path, default=RECIPES_DIR, help="recipes directory")
    ap.add_argument("--dry-run", action="store_true",
                    help="container backend: print the cibuildwheel command and stop")
    ap.add_argument("--memory", type=int, metavar="GIB",
                    help="container backend: memory limit (default: available memory - 1 GiB)")
    ap.add_argument("--cpus", type=int, help="container backend: CPU limit (default: all)")
    args = ap.parse_args(argv)
    if args.offline and not args.wheelhouse:
        ap.error("--offline needs --wheelhouse")
    report = build_cell(args.cell, backend=args.backend, archs=args.archs, sdist=args.sdist,
                        sdist_dir=args.sdist_dir, wheelhouse=args.wheelhouse,
                        offline=args.offline, torch_index=args.torch_index, out_dir=args.out,
                        work_root=args.work, recipes_root=args.recipes, engine=args.engine,
                        dry_run=args.dry_run, memory_gib=args.memory, cpus=args.cpus)
    if report.get("wheel"):
        print(report["wheel"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
