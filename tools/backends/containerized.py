"""Container backend: cibuildwheel in the cell's manylinux CUDA image, the path CI publishes from.

:class:`ContainerBackend` (a ``tools.backends.base.Backend``) runs the steps engine -> image ->
source -> assemble -> cibuildwheel -> publish: it finds an engine (``tools.backends.engine``),
fetches, verifies and patches the sdist and assembles it with this project's tools and the
planned cell (``assemble``), runs cibuildwheel with the cell's plan (``tools.backends.cibw``), names
the cause of a failed run (``classify_failure``) and publishes the wheel that passed the finish
steps and the smoke test in the container. The commands run inside the image live in
``tools.backends.inside`` (``python -m tools.incontainer``); they take the cell from the staged
``cell.json``, never plan it again, and hand their results back in a file
(``tools.backends.result``): the compiler cache's figures, a kernel shard's record.

Layout of a cell's work directory (``build-cells/<cell id>/``)::

    sdist/<file>.tar.gz      the verified sdist
    src/                     what cibuildwheel copies into the container as /project:
      <sdist top dir>/       the patched tree it builds
      cuwheels/tools, cuwheels/recipes/{table.yaml,<package>/}, cuwheels/cell.json
                             this project's tools, the cell's recipe and the planned cell
                             (``Cell.to_json``), for the commands run in the container
    wheels/                  cibuildwheel's output
    container/result.json    what the container's commands hand back (mounted read-write)
    cibuildwheel.log, report.json

The container gets a memory limit with swap off (``--memory`` = ``--memory-swap``), so a build
that needs more is OOM-killed and reported, instead of swapping the machine to a halt; and a
CPU limit. Both default to this machine's available memory (less 1 GiB) and usable cores;
``CUWHEELS_CONTAINER_MEMORY_GIB`` and ``CUWHEELS_CONTAINER_CPUS`` set them (CI runners).

``python -m tools.build CELL --backend container --dry-run`` prints the exact commands (assemble the
source, run cibuildwheel with every option as a ``CIBW_*`` variable) without downloading anything
or needing an engine. ``python -m tools.container assemble CELL --work DIR`` is the first of them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import ClassVar, TextIO

from tools import ROOT
from tools.core import errors
from .base import BuildOptions, BuildResult
from .shardninja import CONTAINER_SHARD, CONTAINER_SHARDS, SHIM_DIR, ContainerShard, write_shim
from .result import CONTAINER_RESULT, RESULT_DIR, RESULT_FILE, ContainerResult, read_result
from .cibw import (
    CELL_FILE,
    ContainerSpec,
    PROJECT,
    TOOLS_DIR,
    TOOLS_PYTHON,
    Image,
    Invocation,
    ContainerLimits,
    Mounts,
    check_options,
    default_limits,
    default_mounts,
    identifier,
    plan_invocation,
    with_needs,
)
from tools.core.variant import opt_python_dir
from tools.pipeline.compilelog import failing_file
from tools.plan.job import BuildJob, Inputs
from .machine import MachineHook, current_machine
from .engine import ReadinessCheck, Readiness, find_engine, pull, qualified, readiness
from tools.core.errors import CompileError, CuwheelsError, ToolchainError
from tools.finish.steps import recipe_git_revision
from tools.core.manifest import read_manifest
from tools.pipeline import ccache, shardcache
from tools.pipeline.cudakit import PINS_DIR as TOOLKIT_PINS
from tools.plan.groups import cell_group, group_key, read_units
from tools.plan.cells import Cell
from tools.plan.recipes.model import Recipe
from tools.pipeline.buildreport import BuildReport, ReportedCache
from tools.pipeline.report import Progress, Step, reporting
from tools.pipeline.shardcache import ShardResult
from tools.pipeline.wheelhouse import publish
from tools.pipeline.source import prepare_source

#: The container backend's steps, as the progress lines and the report name them.
CONTAINER_STEPS = ["engine", "image", "source", "assemble", "cibuildwheel", "publish"]
#: Labels of a local stand-in image (``tools.localimage``): what it is and which policy its
#: glibc allows.
#: What cibuildwheel itself runs in the container (``oci_container.UTILITY_PYTHON``).
CIBW_UTILITY_PYTHON = "/opt/python/cp39-cp39/bin/python"


def image_for(cell: Cell, name: str, labels: Mapping[str, str],
              machine: MachineHook | None = None) -> Image:
    """The image the cell builds in and the policy its wheels are repaired to: the cell's
    manylinux tag, unless this machine's hook says otherwise for an image with these labels
    (``tools.backends.machine``: a local stand-in is repaired to the lowest policy the wheel's
    symbols allow)."""
    facts = (machine or current_machine()).image_facts(cell.platform_tag, labels)
    return Image(name, facts.plat or cell.platform_tag, facts.note,
                 tools_python=facts.tools_python or TOOLS_PYTHON)


def image_paths(cell: Cell, tools_python: str = TOOLS_PYTHON) -> dict[str, str]:
    """What the build needs inside the image, and why: path -> what it is for."""
    return {f"/opt/python/{opt_python_dir(cell.python)}/bin/python": f"the cell's Python {cell.python}",
            f"/usr/local/cuda-{cell.cuda}/bin/nvcc": f"the cell's CUDA {cell.cuda}",
            tools_python: "the finish step's Python" + (" (cp312)" if tools_python ==
                                                        TOOLS_PYTHON else " (the image's label)"),
            CIBW_UTILITY_PYTHON: "cibuildwheel's own helper Python (cp39)"}


def check_image(ready: Readiness, cell: Cell, run=subprocess.run,
                machine: MachineHook | None = None) -> list[str]:
    """Start one container from the image and list what of :func:`image_paths` it lacks, as
    ``path (what it is for)``; ToolchainError when no container starts."""
    facts = (machine or current_machine()).image_facts(cell.platform_tag, ready.labels)
    paths = image_paths(cell, facts.tools_python or TOOLS_PYTHON)
    script = "for p in " + " ".join(paths) + '; do [ -e "$p" ] || echo "$p"; done'
    argv = [ready.engine, *ready.runtime_args, "run", "--rm", "--pull=never", "--network=none",
            ready.image, "sh", "-c", script]
    try:
        proc = run(argv, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        raise ToolchainError(f"a container from {ready.image} did not finish a file check in "
                             "300 s") from None
    if proc.returncode != 0:
        raise ToolchainError(f"`{' '.join(argv[:-1])} ...` failed (exit {proc.returncode}): "
                             f"{(proc.stderr or proc.stdout).strip()[-400:]}")
    return [f"{p} ({paths[p]})" for p in proc.stdout.split() if p in paths]


@dataclass(frozen=True)
class Staged:
    """A cell's staged work directory: the tree cibuildwheel builds, and where it runs."""

    project: Path
    tree: Path
    sdist: Path
    sha256: str
    patches: tuple[str, ...]


def assemble(job: BuildJob, work: Path, inputs: Inputs = Inputs()) -> Staged:
    """Fetch, verify, extract and patch the sdist into ``work/src/``, and put this project's
    tools, the cell's recipe and the table beside it (``work/src/cuwheels``), with the planned
    cell as ``cell.json``: the commands in the container read the cell from there instead of
    planning it again (which would need every recipe it depends on)."""
    cell, recipe, table = job.cell, job.recipe, job.table
    prepared = prepare_source(recipe, work, sdist=inputs.sdist, sdist_dir=inputs.sdist_dir)
    project = prepared.tree.parent
    dest = project / TOOLS_DIR
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "tools", dest / "tools", ignore=ignore)
    # The wheel's SBOM names the tools' version, which pyproject.toml holds (tools.finish.sbom).
    shutil.copyfile(ROOT / "pyproject.toml", dest / "pyproject.toml")
    (dest / "recipes").mkdir(parents=True)
    shutil.copyfile(table.path, dest / "recipes" / "table.yaml")
    shutil.copytree(recipe.folder, dest / "recipes" / recipe.package, ignore=ignore)
    # The toolkit's pins are read when the tools are imported (tools.pipeline.cudakit), in the
    # container too, though the image brings its own toolkit.
    shutil.copytree(TOOLKIT_PINS, dest / "recipes" / TOOLKIT_PINS.name, ignore=ignore)
    (dest / CELL_FILE).write_text(json.dumps(cell.to_json(), indent=1) + "\n")
    # The folder the container's result file comes back through (``tools.backends.result``).
    (work / RESULT_DIR).mkdir(parents=True, exist_ok=True)
    return Staged(project, prepared.tree, prepared.sdist, prepared.sha256, prepared.patches)


#: Our CLI errors inside the container print ``<kind> error: <message>``.
_OUR_ERROR = re.compile(r"^(\w+) error: (.*)$")
#: How a compiler killed by the kernel's OOM killer shows in the log: gcc's driver ("Killed
#: signal terminated program cc1plus", then exit 1), nvcc ("'cicc' died due to signal 9"), a
#: shell or ninja (exit 137). The traceback after it can be long: search the whole compile.
_OOM = re.compile(r"Killed signal terminated program|died due to signal 9|\bKilled\b|"
                  r"code[= ]137\b|exit status 137|signal 9\b")
_CIBW_STEPS = (("Running before_all", "before-all"), ("Running before_build", "before-build"),
               ("Building wheel", "compile"), ("Repairing wheel", "repair"),
               ("Testing wheel", "test"))


def classify_failure(log_text: str, *, log: Path, limits: ContainerLimits, code: int) -> CuwheelsError:
    """The error a failed cibuildwheel run stands for: the finish step's own error when it
    raised one, else by the last step cibuildwheel started (an OOM kill says so).

    This reads the log, and must: the failures it names (a compiler killed for memory, a
    compile error, a failed repair or smoke test) leave no result file, since the process that
    would have handed one back (``tools.backends.result``) is the one that died or never ran.
    What the container does hand back, it hands back as a file."""
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
    compile_log = log_text[log_text.rfind("Building wheel..."):]
    if step == "compile" and _OOM.search(compile_log):
        culprit = failing_file(log_text)
        return CompileError(
            f"out of memory: the compiler was killed (SIGKILL, exit 137) in the container"
            f"{' while compiling ' + culprit if culprit else ''} (limit {limits.memory_gib} "
            f"GiB, no swap); log: {log}",
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


def _with_shards(mounts: Mounts, use: shardcache.ShardUse | None,
                 shard: ContainerShard | None) -> Mounts:
    """The mounts of a build that reads shard caches (each read-only under
    ``CONTAINER_SHARDS``) or, for a shard, writes its own cache (``CONTAINER_SHARD``)."""
    if shard is not None:
        shard.cache.mkdir(parents=True, exist_ok=True)
        return replace(mounts, volumes=(*mounts.volumes, f"{shard.cache}:{CONTAINER_SHARD}"),
                       env=(*mounts.env, *ccache.shard_writer_env(CONTAINER_SHARD).items()),
                       path_prefix=(str(PROJECT / TOOLS_DIR / SHIM_DIR), *mounts.path_prefix))
    if use is None or not use.used:
        return mounts
    inside = [CONTAINER_SHARDS / cache.name for cache in use.used]
    return replace(mounts, volumes=(*mounts.volumes, *(f"{cache}:{where}:ro" for cache, where
                                                        in zip(use.used, inside))),
                   env=(*mounts.env, *ccache.shard_reader_env(inside).items(),
                        *use.env.items()))


def _shard_done(shard: ContainerShard, code: int, result: ContainerResult | None, log: Path,
                step: Step) -> ShardResult:
    """A container shard's outcome: the shard record in the container's result file.

    The stand-in ninja stops the package's build on purpose once the shard's objects are built
    (a shard links nothing and makes no wheel), and cibuildwheel reports that stop as a failed
    build (exit 1). So the exit status can't say whether the shard worked: the result file can,
    as the stand-in hands the record back only after the real ninja built every object of the
    shard. A build that exited 0 never reached the stand-in's stop, so it built no shard.
    Otherwise the stand-in's own ``shard.json`` says why it stopped; CompileError naming it."""
    done = result.shard if result is not None else None
    if done is not None and done.complete and code != 0:
        step.detail.update(shard=done.to_json(), exit=code)
        return done
    record = shardcache.read_record(shard.cache)
    step.detail.update(shard=record.to_json() if record else None, exit=code)
    why = ((record.error if record is not None else None)
           or (f"cibuildwheel exit {code} before the stand-in ninja ran" if record is None
               else f"exit {code}"))
    name = record.shard if record is not None else shard.record.shard
    raise CompileError(f"shard {name} failed: {why}; log: {log}",
                       hint="read the log; a unit list that no longer matches needs "
                            "python -m tools.shard units <cell> --write")


def _cache_stats(result: ContainerResult | None, use: shardcache.ShardUse | None,
                 recipe: Recipe) -> ReportedCache | None:
    """What the compiler cache did, from the container's result file (None: the build ran
    without the cache, or stopped before ``incontainer ccache stats``); with shard caches read,
    each unit's result sorted against them."""
    if result is None or result.ccache is None:
        return None
    stats = result.ccache
    if use is not None and result.units is not None:
        listed = read_units(recipe)
        stats.per_unit = shardcache.sort_results(result.units, use,
                                                 listed.sharded() if listed else ())
    return stats


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


@dataclass(frozen=True)
class ContainerBackend:
    """The container backend (a ``tools.backends.base.Backend``): cibuildwheel in the cell's
    image.

    ``engine``: docker or podman (default: the first that can build, ``can_build`` says which
    can; an image that is not here is pulled first). ``image`` replaces the table's image for
    the cell's CUDA (a local stand-in, a mirror). ``memory_gib`` and ``cpus`` limit the
    container (default: ``cibw.default_limits``); ``mounts`` replaces the default mounts (the
    trust store, the pip cache and, with ``options.cache``, the compiler cache). A dry run
    prints the plan as a shell script on ``stdout`` (default: sys.stdout).

    Two things it builds: a cell's wheel (:meth:`build`) and a kernel shard of the cell's
    compile group (:meth:`build_shard`, ``tools.backends.shardninja``).
    """

    name: ClassVar[str] = "container"
    engine: str | None = None
    image: str | None = None
    memory_gib: int | None = None
    cpus: int | None = None
    can_build: ReadinessCheck = readiness
    mounts: Mounts | None = None
    stdout: TextIO | None = None
    #: What this machine adds (``tools.backends.machine``; default: the hook the environment
    #: names, else nothing).
    machine: MachineHook | None = None

    @property
    def steps(self) -> list[str]:
        """The container backend's steps."""
        return CONTAINER_STEPS

    def build(self, job: BuildJob, *, options: BuildOptions, progress: Progress) -> BuildResult:
        """Build one cell with cibuildwheel in its image; the report goes to
        ``<work_root>/<cell id>/report.json`` however the build ends.

        With ``options.dry_run``, print the plan and stop: no download, no engine needed, no
        report written. Otherwise an engine must be able to start a container from the image,
        and the image must hold the cell's Python and CUDA; the wheel reaches
        ``options.out_dir`` only after the repair, inspection and smoke test in the container
        passed. ``options.cache``: compile through ccache in the mounted compiler cache, its
        hits and misses in the report. ``options.needed`` are mounted read-only and installed
        into the test venv before the wheel.
        """
        return self._build(job, options, progress, None)

    def build_shard(self, job: BuildJob, shard: ContainerShard, *, options: BuildOptions,
                    progress: Progress) -> ShardResult:
        """Compile ``shard`` of ``job``'s compile group: the cell's own cibuildwheel build, the
        shard's cache mounted read-write and the stand-in ninja first on ``PATH``, stopped once
        the shard's objects are built (no wheel, no publish step). Returns the shard's record as
        the container handed it back; the report (its ``shard``) goes to
        ``<work_root>/<cell id>/report.json`` however the build ends. CompileError when the
        shard did not finish."""
        if options.dry_run:
            raise ToolchainError("a kernel shard has no dry run",
                                 hint="plan the cell's build instead: python -m tools.build "
                                      "CELL --backend container --dry-run")
        report = self._build(job, options, progress, shard).report
        assert report.shard is not None   # a shard's build that didn't raise handed it back
        return report.shard

    def _build(self, job: BuildJob, options: BuildOptions, progress: Progress,
               shard: ContainerShard | None) -> BuildResult:
        """The build of a wheel (``shard`` None) or of a kernel shard: the same steps up to
        cibuildwheel; see :meth:`build` and :meth:`build_shard`."""
        stdout = self.stdout or sys.stdout
        cell, recipe, table = job.cell, job.recipe, job.table
        engine, can_build, archs = self.engine, self.can_build, options.archs
        machine = self.machine or current_machine()
        inputs = Inputs(sdist=options.sdist, sdist_dir=options.sdist_dir)
        limits = default_limits()
        limits = ContainerLimits(self.memory_gib or limits.memory_gib, self.cpus or limits.cpus)
        work = options.work_root / cell.id
        mounts = with_needs(default_mounts(ccache=options.cache) if self.mounts is None
                            else self.mounts, options.needed)
        use = (shardcache.choose(list(options.shard_caches), group=cell_group(cell, recipe),
                                 key=group_key(cell, recipe))
               if options.shard_caches and options.cache and shard is None else None)
        mounts = _with_shards(mounts, use, shard)
        # The folder the container's result file comes back through (tools.backends.result).
        mounts = replace(mounts, volumes=(*mounts.volumes,
                                          f"{work / RESULT_DIR}:{CONTAINER_RESULT}"))
        image_name = self.image or cell.image
        relaxed = table.torch[cell.torch].nvcc_check_relaxed(cell.cuda)
        report = BuildReport(cell.id, "container", why=options.why, image=image_name,
                             archs=list(archs), label=cell.label, limits=asdict(limits),
                             workarounds=[f"relax_nvcc_check: {relaxed}"] if relaxed else [])
        if options.dry_run:
            spec = ContainerSpec(engine or "docker", limits, Image(image_name, cell.platform_tag),
                                 mounts)
            inv = plan_invocation(job, spec, archs=archs, work_root=options.work_root,
                                  inputs=inputs, recipe_revision=recipe_git_revision(recipe))
            check_options(inv.env, inv.cwd / inv.argv[-1], inv.cwd.parent / "wheels",
                          identifier(cell))
            stdout.write(inv.shell())
            stdout.flush()
            report.verdict, report.dry_run, report.script = "planned", True, inv.shell()
            return BuildResult(report)

        work.mkdir(parents=True, exist_ok=True)
        for volume in mounts.volumes:
            if not volume.endswith(":ro"):   # a cache the container writes: it must exist first
                Path(volume.split(":", 1)[0]).mkdir(parents=True, exist_ok=True)
        with reporting(work / "report.json", report, progress):
            def engine_step(step) -> Readiness:
                ready = find_engine(engine, image_name, can_build)
                step.detail.update(engine=ready.engine, why=ready.why)
                if not ready.local:
                    name = (qualified(image_name) if ready.engine.endswith("podman")
                            else image_name)
                    progress.say(f"pulling {name} with {ready.engine}")
                    pull(ready.engine, name)
                    ready = can_build(ready.engine, image_name)
                    if not ready.ok:
                        raise ToolchainError(f"pulled {image_name}, but {ready.why}")
                step.detail["runtime_args"] = list(ready.runtime_args)
                return ready

            ready = progress.run("engine", engine_step)
            report.engine = ready.engine

            def image_step(step) -> Image:
                missing = check_image(ready, cell, machine=machine)
                if missing:
                    raise ToolchainError(
                        f"{image_name} lacks what {cell.id} needs: {'; '.join(missing)}",
                        hint="use an image that has them (the table's image for CUDA "
                             f"{cell.cuda}, or `python -m tools.localimage --cuda {cell.cuda} "
                             f"--python {cell.python}`), or leave this Python out of the "
                             "recipe")
                # podman won't resolve a short name without a terminal to ask on; docker
                # assumes Docker Hub, which is what the qualified name says.
                name = qualified(image_name) if ready.engine.endswith("podman") else image_name
                chosen = image_for(cell, name, ready.labels, machine)
                step.detail.update(image=chosen.name, plat=chosen.plat, labels=ready.labels)
                if chosen.note:
                    progress.say(f"image: {chosen.note}")
                return chosen

            chosen = progress.run("image", image_step)
            report.plat = chosen.plat
            facts = machine.image_facts(cell.platform_tag, ready.labels)
            if facts.volumes:
                mounts = replace(mounts, volumes=mounts.volumes + facts.volumes)
            report.machine = dict(facts.report) or None

            def source(step) -> Staged:
                staged = assemble(job, work, inputs)
                step.detail.update(sdist=staged.sdist.name, sha256=staged.sha256,
                                   patches=list(staged.patches), tree=str(staged.tree))
                return staged

            staged = progress.run("source", source)
            if shard is not None:
                write_shim(staged.project / TOOLS_DIR, shard, PROJECT / staged.tree.name)
            if use is not None:
                for refused in use.refused:
                    progress.say(f"shard cache not read: {refused['cache']}: {refused['why']}")
                report.shards = use.describe()

            def plan_step(step) -> Invocation:
                spec = ContainerSpec(ready.engine, limits, chosen, mounts, ready.containers_conf)
                inv = plan_invocation(job, spec, archs=archs, work_root=options.work_root,
                                      tree_name=staged.tree.name, inputs=inputs,
                                      recipe_revision=recipe_git_revision(recipe))
                check_options(inv.env, staged.tree, work / "wheels", identifier(cell))
                step.detail.update(env=inv.env, argv=list(inv.argv), cwd=str(inv.cwd))
                if relaxed:
                    progress.say("workaround: torch's nvcc version check relaxed "
                                 f"({relaxed})")
                return inv

            inv = progress.run("assemble", plan_step)
            report.script = inv.shell()

            def run_step(step: Step) -> tuple[int, Path, ContainerResult | None]:
                """cibuildwheel itself, and the result file the container handed back."""
                if (work / "wheels").exists():
                    shutil.rmtree(work / "wheels")
                log = work / "cibuildwheel.log"
                step.detail["log"] = str(log)
                (work / RESULT_DIR / RESULT_FILE).unlink(missing_ok=True)   # an earlier run's
                code = run_cibuildwheel(inv, log, _progress_lines(cell, progress))
                return code, log, read_result(work / RESULT_DIR)

            if shard is not None:
                def shard_step(step: Step) -> ShardResult:
                    code, log, result = run_step(step)
                    return _shard_done(shard, code, result, log, step)

                report.shard = progress.run("cibuildwheel", shard_step)
                report.verdict = "passed"
                return BuildResult(report)

            def cibuildwheel_step(step: Step) -> Path:
                code, log, result = run_step(step)
                stats = _cache_stats(result, use, recipe)
                if stats is not None:
                    report.ccache = stats
                    step.detail["ccache"] = {k: v for k, v in asdict(stats).items()
                                             if v is not None}
                    progress.say(f"compiler cache: {stats.hits} hits ({stats.direct_hits} "
                                 f"direct, {stats.preprocessed_hits} preprocessed), "
                                 f"{stats.misses} misses")
                if code != 0:
                    raise classify_failure(log.read_text(errors="replace"), log=log,
                                           limits=limits, code=code)
                return _one_wheel(work / "wheels", step)

            wheel = progress.run("cibuildwheel", cibuildwheel_step)
            target = progress.run("publish", lambda step: publish(wheel, options.out_dir, step))
            report.verdict, report.wheel = "passed", str(target)
        return BuildResult(report, target)


def _progress_lines(cell: Cell, progress: Progress) -> Callable[[str], None]:
    """What of cibuildwheel's output becomes a progress line: our own lines and cibuildwheel's
    step markers, and otherwise one line every 10 s (a sign of life)."""
    last = [0.0]

    def on_line(line: str) -> None:
        now = time.monotonic()
        if line.startswith(f"[{cell.id} ") or any(m in line for m, _ in _CIBW_STEPS):
            progress.say(f"container: {line.strip()[:120]}")
        elif now - last[0] > 10 and line.strip():
            last[0] = now
            progress.say(f"container: {line.strip()[:120]}")
    return on_line


def _one_wheel(wheels: Path, step: Step) -> Path:
    """The one wheel cibuildwheel made (CompileError for none or several), its manifest in the
    step's details."""
    found = sorted(wheels.glob("*.whl"))
    if len(found) != 1:
        raise CompileError(f"cibuildwheel made {len(found)} wheels in {wheels}, expected one")
    with zipfile.ZipFile(found[0]) as zf:
        manifest = read_manifest(zf)
    step.detail.update(wheel=found[0].name, manifest=manifest)
    return found[0]
