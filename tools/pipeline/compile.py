"""The compile step of a build on this machine: the package's own build, sized, cached, sharded.

The host backend runs it after the prelude (``tools.pipeline.prelude``): ``pip wheel`` of the
patched source with the build's Python, ``MAX_JOBS``/``NVCC_THREADS`` sized for this machine
(``tools.pipeline.buildenv``), through ccache (``tools.pipeline.ccache``), reading the kernel
shard caches of the cell's compile group where they are offered (``tools.pipeline.shardcache``).
A failure names the file that failed and the exit status (137: killed, most likely out of
memory).
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from tools.core.errors import CompileError, ToolchainError
from tools.plan.groups import cell_group, group_key, read_units
from tools.plan.job import BuildJob
from tools.plan.recipes.model import Recipe
from . import ccache, shardcache
from .build_toolchain import build_process_env, pip_wheel_command
from .buildenv import available_memory_gib, build_env, size_for, usable_cores
from .compilelog import failing_file
from .prelude import Prelude
from .report import Progress, Step


_PROGRESS = re.compile(r"^\[(\d+)/(\d+)\]")


@dataclass(frozen=True)
class PipWheel:
    """The package's own build as the host backend runs it: ``pip wheel`` of ``tree`` with
    ``python`` into ``out_dir`` (``isolation``: the recipe's; ``offline``: no index)."""

    python: Path
    tree: Path
    out_dir: Path
    isolation: bool = True
    offline: bool = False


def compile_wheel(build: PipWheel, env: dict[str, str], log: Path, *,
                  on_line: Callable[[str], None] | None = None, timeout: float = 6 * 3600,
                  path_prefix: tuple[str, ...] = ()) -> Path:
    """Run the package's own build (``pip wheel``) and return the unrepaired wheel.

    Every line goes to ``log``; ninja's ``[N/M]`` progress lines go to ``on_line``. A failure
    raises CompileError naming the file that failed, the exit status (137: OOM-killed) and the
    log. ``path_prefix`` goes first on PATH (the compiler cache's ``c++``); an inherited
    PYTHONPATH is dropped, one in ``env`` is kept.
    """
    python, tree, out_dir = build.python, build.tree, build.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = pip_wheel_command(python, tree, out_dir, isolation=build.isolation,
                            offline=build.offline)
    full_env = build_process_env(python, env, first_on_path=tuple(map(Path, path_prefix)))
    start = time.monotonic()
    with log.open("a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        proc = subprocess.Popen(cmd, cwd=tree, env=full_env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace")
        assert proc.stdout is not None
        for line in proc.stdout:
            fh.write(line)
            if on_line and _PROGRESS.match(line.strip()):
                on_line(line.strip())
            if time.monotonic() - start > timeout:
                proc.kill()
                break
        code = proc.wait()
    if code != 0:
        text = log.read_text(errors="replace")
        culprit = failing_file(text)
        if code in (-9, 137) or "Killed" in text[-5000:]:
            raise CompileError(
                f"the compile was killed (exit {code}), most likely out of memory; log: {log}",
                hint="lower MAX_JOBS (raise build.job_memory_gib in the recipe), or build on a "
                     "machine with more memory")
        where = f" while compiling {culprit}" if culprit else ""
        raise CompileError(f"the package's build failed (exit {code}){where}; full log: {log}",
                           hint="read the first error in the log; a patch in the recipe may be "
                                "needed for this CUDA/torch version")
    wheels = sorted(out_dir.glob("*.whl"))
    if len(wheels) != 1:
        raise CompileError(f"the build made {len(wheels)} wheels in {out_dir}, expected one")
    return wheels[0]


def choose_shards(job: BuildJob, shard_caches: tuple[Path, ...],
                  progress: Progress) -> shardcache.ShardUse | None:
    """Which offered shard caches the build reads (None when none were offered)."""
    cell, recipe = job.cell, job.recipe
    if not shard_caches:
        return None
    use = shardcache.choose(list(shard_caches), group=cell_group(cell, recipe),
                            key=group_key(cell, recipe))
    for refused in use.refused:
        progress.say(f"shard cache not read: {refused['cache']}: {refused['why']}")
    progress.say(f"shard caches read: {len(use.used)}"
                 + (f" (partial: {', '.join(use.partial)})" if use.partial else ""))
    return use


@dataclass(frozen=True)
class CompileSettings:
    """How the compile step runs: the archs, through the compiler cache or not, the kernel
    shard caches offered (their compile group's are read), and offline (no index)."""

    archs: tuple[str, ...]
    cache: bool = True
    shard_caches: tuple[Path, ...] = ()
    offline: bool = False


def compile_package(job: BuildJob, prelude: Prelude, settings: CompileSettings, work: Path,
                    step: Step, progress: Progress) -> Path:
    """The ``compile`` step on this machine: the package's own build (``pip wheel``) of the
    prelude's source with its Python, sized for this machine, through ccache (reading the
    compile group's shard caches) unless ``settings.cache`` is off; returns the unrepaired
    wheel. The cache's hits and misses (per unit, with the shards) go in the step's report,
    also after a failed compile."""
    cell, recipe = job.cell, job.recipe
    nvcc, bp = prelude.nvcc, prelude.python
    sizing = size_for(recipe, settings.archs, cores=usable_cores(),
                      available_gib=available_memory_gib())
    env = build_env(recipe, cell, sizing, archs=settings.archs, cuda_home=nvcc.cuda_home)
    use = choose_shards(job, settings.shard_caches, progress) if settings.cache else None
    if use is not None:
        env.update(use.env)   # the shards' command lines are the cell's
        step.detail["shards"] = use.describe()
    progress.say(f"sizing: {sizing.note}")
    progress.say("environment: " + " ".join(f"{k}={v}" for k, v in sorted(env.items())))
    step.detail.update(env=env, sizing=asdict(sizing), log=str(work / "compile.log"))
    setup = ccache.prepare(work, site=ccache.site_packages(bp.python),
                           cuda_home=nvcc.cuda_home) if settings.cache else None
    if setup:
        progress.say(f"compiler cache: ccache {setup.version} in {setup.directory} "
                     "(--no-cache builds without it)")
        step.detail["cache"] = setup.describe()
        if use is not None and use.used:
            setup.env.update(ccache.shard_reader_env(use.used))
    else:
        step.detail["cache"] = {"tool": None, "why": "--no-cache"}
    try:
        build = PipWheel(bp.python, prelude.source.tree, work / "dist",
                         isolation=recipe.build.isolation, offline=settings.offline)
        return compile_wheel(build, {**env, **(setup.env if setup else ccache.disabled_env())},
                             work / "compile.log", on_line=_Counter(progress),
                             path_prefix=setup.path_prefix if setup else ())
    finally:
        if setup:
            _report_cache(setup, step, progress)
        if setup and use is not None:
            _report_units(setup, use, recipe, step, progress)


class _Counter:
    """Ninja's ``[N/M]`` lines as progress, at most one every 5 seconds."""

    def __init__(self, progress: Progress):
        self.progress, self.last = progress, 0.0

    def __call__(self, line: str) -> None:
        now = time.monotonic()
        if now - self.last > 5:
            self.last = now
            counter = line.split("]", 1)[0] + "]"
            # torch may pass -c twice
            source = re.search(r"\s-c\s+(?:-c\s+)*(\S+)", line)
            name = Path(source.group(1)).name if source else line[len(counter):80]
            self.progress.say(f"compiling {counter} {name}")


def _report_cache(setup: ccache.CompilerCache, step: Step, progress: Progress) -> None:
    """Put the build's cache hits and misses in the report, also after a failed compile (an
    unreadable stats log is noted, never hides the compile's own error)."""
    try:
        stats = ccache.read_stats(setup)
    except ToolchainError as exc:
        step.detail["cache"]["stats_error"] = str(exc)
        return
    step.detail["cache"].update(hits=stats.hits, direct_hits=stats.direct_hits,
                                preprocessed_hits=stats.preprocessed_hits, misses=stats.misses,
                                counters=stats.counters)
    progress.say(f"compiler cache: {stats.summary}")


def _report_units(setup: ccache.CompilerCache, use: shardcache.ShardUse, recipe: Recipe,
                  step: Step, progress: Progress) -> None:
    """Put each unit's cache result in the report, each miss with its reason."""
    units = read_units(recipe)
    per_unit = shardcache.sort_results(ccache.unit_results(setup.stats_log), use,
                                       units.sharded() if units else ())
    step.detail["cache"]["per_unit"] = per_unit
    progress.say(f"shard caches: {per_unit['shard_hits']} unit(s) read from "
                 f"{len(use.used)} shard cache(s), {len(per_unit['misses'])} compiled here")
    for miss in per_unit["misses"]:
        progress.say(f"  compiled here: {miss['unit']}: {miss['why']}")
