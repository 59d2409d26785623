"""The container backend up to the container: the dry run's script, the staged tree, the engine
it needs, how a failed run is named, and the local script.

No container engine is started here (which engines answer is injected where it matters, so a
machine with docker, podman or neither gets the same results).
"""

from __future__ import annotations

import copy
import io
import json
import os
import shlex
import subprocess
import sys
import types
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from tests.conftest import MINI_TABLE, plan_cell
from tools import ROOT
from tools import build as build_command
from tools.builder import orchestrate as build
from tools.builder.planned import Planned
from tools.backends import cibw
from tools.backends import containerized
from tools.backends.engine import Readiness
from tools.backends.result import ContainerResult, read_result, write_result
from tools.backends.shardninja import ContainerShard
from tools.pipeline import shardcache
from tools.pipeline.buildreport import ReportedCache, Step
from tools.pipeline.shardcache import ShardResult
from tools.core.errors import CompileError, PlanError, RepairError, ToolchainError, VerifyError
from tools.plan.cells import Cell, find_cell
from tools.plan.job import BuildJob, Inputs


# --- dry run: the printed script is the plan, and it runs ----------------------------------------

def _world_args(tmp_path) -> list[str]:
    """The command-line options that point tools.build at the test world."""
    return ["--recipes", str(tmp_path / "recipes"), "--table", str(tmp_path / "table.yaml"),
            "--work", str(tmp_path / "work")]


def _dry_run(monkeypatch, tmp_path, table, cell_id, capsys, *extra):
    monkeypatch.setenv("CUWHEELS_CONTAINER_MEMORY_GIB", "14")
    monkeypatch.setenv("CUWHEELS_CONTAINER_CPUS", "4")
    rc = build_command.main([cell_id, "--backend", "container", "--dry-run",
                             *_world_args(tmp_path), *extra])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return out, err


def test_dry_run_prints_a_script_that_runs(world, tmp_path, monkeypatch, capsys):
    table, recipes, cells = world()
    out, err = _dry_run(monkeypatch, tmp_path, table, "demo_ext-3.12-cu129", capsys)
    assert "backend: container (--backend container)" in err
    assert not (tmp_path / "work" / "demo_ext-3.12-cu129").exists()   # nothing downloaded
    assert out.startswith("#!/bin/sh\n# cell demo_ext-3.12-cu129: demo-ext 1.0.0, Python 3.12")
    assert "# workaround: none" in out
    assert subprocess.run(["sh", "-n"], input=out, text=True).returncode == 0
    lines = [line for line in out.splitlines() if not line.startswith("#")]
    assert lines[0] == "set -e"
    stage_line = lines[1]
    # the cibuildwheel command: a `cd`, an `env` with every CIBW_* variable, the command
    command = " ".join(line.rstrip("\\").strip() for line in lines[2:])
    words = shlex.split(command)
    assert words[0] == "cd" and words[2:4] == ["&&", "env"]
    variables = dict(w.split("=", 1) for w in words[4:] if w.startswith("CIBW_"))
    argv = words[4 + len(variables):]
    cell = find_cell("demo_ext-3.12-cu129", cells)
    # the default mounts, and the folder the container's result file comes back through
    mounts = cibw.default_mounts()
    result = tmp_path / "work" / cell.id / "container"
    mounts = replace(mounts, volumes=(*mounts.volumes, f"{result}:/cuwheels-result"))
    expected = cibw.plan_invocation(
        BuildJob(cell, next(r for r in recipes if r.package == "demo_ext"), table),
        cibw.ContainerSpec("docker", cibw.ContainerLimits(14, 4), mounts=mounts),
        archs=cell.archs, work_root=tmp_path / "work",
        recipe_revision=variables["CIBW_REPAIR_WHEEL_COMMAND"].rsplit(" ", 1)[-1])
    assert variables == expected.env and argv == list(expected.argv)
    # the first command stages the source for real (from the recipe's sdist, here local)
    stage_words = shlex.split(stage_line)
    proc = subprocess.run([*stage_words[3:], "--sdist",
                           str(tmp_path / "sdists" / "demo_ext-1.0.0.tar.gz")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    tree = Path(proc.stdout.strip())
    assert tree == Path(words[1]) / argv[-1]
    assert "# patched by the recipe" in (tree / "setup.py").read_text()
    assert (Path(words[1]).parent / "container").is_dir()   # the result folder, to mount
    # then the printed command itself, asked only what it would build
    env = {k: v for k, v in os.environ.items() if not k.startswith("CIBW_")} | variables
    proc = subprocess.run([*argv[:-1], "--print-build-identifiers", argv[-1]], cwd=words[1],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["cp312-manylinux_x86_64"]


def test_dry_run_names_the_sdist_given(world, tmp_path, monkeypatch, capsys):
    table, _, _ = world()
    sdist = tmp_path / "sdists" / "flashy-2.0.0.tar.gz"
    out, _ = _dry_run(monkeypatch, tmp_path, table, "flashy-3.11-cu126", capsys,
                      "--sdist", str(sdist), "--archs", "90")
    assert f"--sdist {sdist}" in out
    assert "# archs: sm_90\n" in out and "--archs 90 " in out
    assert "FLASHY_ARCH_LIST=9.0 " in out
    assert "NVCC_THREADS=1" in out  # one arch: nvcc runs one thread per arch at most


def test_stage_gives_the_container_the_tree_and_the_tools(world, tmp_path):
    table, recipes, cells = world()
    cell = find_cell("flashy-3.12-cu126", cells)
    recipe = next(r for r in recipes if r.package == "flashy")
    staged = containerized.assemble(BuildJob(cell, recipe, table), tmp_path / "work" / cell.id,
                                 Inputs(sdist=tmp_path / "sdists" / "flashy-2.0.0.tar.gz"))
    assert staged.project == tmp_path / "work" / cell.id / "src"
    assert sorted(p.name for p in staged.project.iterdir()) == ["cuwheels", "flashy-2.0.0"]
    assert staged.patches == ("0001-Read-arch-list.patch",)
    tools = staged.project / "cuwheels"
    assert (tools / "tools" / "container.py").is_file()
    assert not list(tools.rglob("__pycache__"))
    assert (tools / "recipes" / "table.yaml").read_text() == (tmp_path / "table.yaml").read_text()
    assert (tools / "recipes" / "flashy" / "patches" / "0001-Read-arch-list.patch").is_file()
    # the recipe, the table and the toolkit's pins (read when the tools are imported), no more
    assert sorted(p.name for p in (tools / "recipes").iterdir()) == [
        "cuda-toolkit", "flashy", "table.yaml"]
    # the planned cell goes with them: the commands in the container read it, never re-plan
    assert Cell.from_json(json.loads((tools / "cell.json").read_text())) == cell


def test_stage_of_a_dependent_stages_its_own_recipe_and_the_planned_needs(staged_dependent):
    """The container no longer plans, so a dependent's recipe goes without those it depends on:
    what it needs is in the staged cell."""
    _, cell, staged = staged_dependent
    tools = staged.project / "cuwheels"
    assert sorted(p.name for p in (tools / "recipes").iterdir()) == [
        "cuda-toolkit", "dep_ext", "table.yaml"]
    saved = Cell.from_json(json.loads((tools / "cell.json").read_text()))
    assert saved == cell and saved.needs == ("demo_ext-3.12-cu130-torch2.9",)


def test_relax_only_where_the_table_says(world, tmp_path, monkeypatch, capsys):
    data = copy.deepcopy(MINI_TABLE)
    data["torch"]["2.9"]["relax_nvcc_check"] = {
        "13.0": "test: pretend the cu130 build of torch 2.9 was compiled with CUDA 12"}
    table, recipes, cells = world(data)
    _, _, relaxed = plan_cell("demo_ext-3.12-cu130-torch2.9", table, recipes, cells, tmp_path)
    _, _, plain = plan_cell("demo_ext-3.12-cu130", table, recipes, cells, tmp_path)
    assert relaxed.env["CIBW_BEFORE_BUILD"].endswith(
        'tools.incontainer relax-nvcc-check --interpreter "$(command -v python)"')
    assert "relax-nvcc-check" not in plain.env["CIBW_BEFORE_BUILD"]
    assert "relax" not in " ".join(plain.env.values())
    out, _ = _dry_run(monkeypatch, tmp_path, table, "demo_ext-3.12-cu130-torch2.9", capsys)
    assert "# workaround: torch's nvcc version check relaxed (test: pretend" in out


# --- no engine: a clear error, or the host backend with a reason ---------------------------------

def _no_engine_path(tmp_path, monkeypatch):
    """A PATH whose docker fails as a client without a daemon does, and no podman."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text("#!/bin/sh\necho 'Cannot connect to the Docker daemon at "
                      "unix:///var/run/docker.sock. Is the docker daemon running?' >&2\nexit 1\n")
    docker.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))


def test_container_backend_without_an_engine_says_so(world, tmp_path, monkeypatch, capsys):
    world()
    _no_engine_path(tmp_path, monkeypatch)
    rc = build_command.main(["demo_ext-3.12-cu129", "--backend", "container",
                             *_world_args(tmp_path), "--wheels", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == ToolchainError.exit_code
    assert "toolchain error: no container engine can build from " in err
    assert "(`docker info` failed: Cannot connect to the Docker daemon" in err
    assert "podman is not installed" in err
    assert "fix: start the engine" in err and "--backend host" in err and "--dry-run" in err
    assert not (tmp_path / "out").exists()
    report = yaml.safe_load((tmp_path / "work" / "demo_ext-3.12-cu129" / "report.json")
                            .read_text())
    assert report["verdict"] == "failed" and report["error"]["kind"] == "toolchain"
    assert [s["name"] for s in report["steps"]] == ["engine"]


def _answering(*engines: str):
    """An engine probe under which exactly ``engines`` can build (from a local image)."""
    def probe(engine, image):
        if engine in engines:
            return Readiness(engine, image, True, "it starts containers", local=True)
        return Readiness(engine, image, False, f"`{engine} info` failed: not running")
    return probe


def _in_world(tmp_path, cell_id, stream, can_build, **asked) -> tuple:
    """The arguments of build_cell for a cell of the test world (planned once, here): the
    cell, the plan and the request (``asked`` adds to it; ``engine`` goes to the container's
    settings)."""
    planned = Planned.make(tmp_path / "recipes", tmp_path / "table.yaml")
    settings = build.ContainerSettings(engine=asked.pop("engine", None), can_build=can_build)
    return planned.cell(cell_id), planned, build.BuildRequest(
        work_root=tmp_path / "work", out_dir=tmp_path / "out", stream=stream,
        container=settings, **asked)


def test_container_backend_with_a_named_engine_that_does_not_answer(world, tmp_path):
    world()
    stream = io.StringIO()
    with pytest.raises(ToolchainError, match=r"no container engine can build from \S+ here "
                                             r"\(`docker info` failed: not running\)"):
        build.build_cell(*_in_world(tmp_path, "demo_ext-3.12-cu129", stream, _answering("podman"),
                                    backend="container", engine="docker"))
    assert "step 1/6: engine FAILED" in stream.getvalue()
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("answering,expect", [
    ((), "host (auto: no container engine can build from pytorch/manylinux2_28-builder:"
         "cuda12.9 here (`docker info` failed: not running; `podman info` failed: not "
         "running), using host)"),
    (("podman",), "container (auto: podman: it starts containers)"),
    (("docker", "podman"), "container (auto: docker: it starts containers)"),
])
def test_auto_backend_follows_the_engines_that_answer(world, tmp_path, capsys, answering,
                                                      expect):
    world()
    stream = io.StringIO()
    args = _in_world(tmp_path, "demo_ext-3.12-cu129", stream, _answering(*answering),
                     dry_run=True)
    if answering:
        result = build.build_cell(*args)
        report = result.report
        assert result.wheel is None
        assert report.verdict == "planned" and report.why == expect.split("(", 1)[1][:-1]
        script = capsys.readouterr().out
        assert script.startswith("#!/bin/sh\n")
        # the plan names the engine that can build, not a default
        assert f"CIBW_CONTAINER_ENGINE='{answering[0]}; create_args:" in script
    else:
        with pytest.raises(ToolchainError, match="--dry-run is for the container backend"):
            build.build_cell(*args)
    assert f"backend: {expect}" in stream.getvalue()


def test_auto_backend_falls_back_to_host_with_the_reason(world, tmp_path, monkeypatch, capsys):
    world()
    _no_engine_path(tmp_path, monkeypatch)
    chosen, why, engine = build.choose_backend("auto", None, "some/image:tag")
    assert chosen == "host" and engine is None
    assert why.startswith("auto: no container engine can build from some/image:tag here "
                          "(`docker info` failed: Cannot")
    assert why.endswith("podman is not installed), using host")
    # through the command line: the host backend starts (and stops at its first step here)
    rc = build_command.main(["demo_ext-3.12-cu129", *_world_args(tmp_path),
                             "--sdist", str(tmp_path / "missing")])
    err = capsys.readouterr().err
    assert rc != 0
    assert "backend: host (auto: no container engine can build from" in err


# --- a failed run names its cause ----------------------------------------------------------------

@pytest.mark.parametrize("log,kind,says", [
    # the finish step raised one of ours: the same error, its fix kept
    ("Repairing wheel...\n[demo 0m01s] step 2/3: inspect ...\nverify error: requested GPU archs "
     "missing\n  fix: check the arch env var\n", VerifyError, "in the container: requested GPU"),
    # nvcc killed at the container's memory limit
    ("Building wheel...\nKilled\nerror: command '/usr/local/cuda/bin/nvcc' failed with exit "
     "code 137\n", CompileError, "out of memory: the compiler was killed (SIGKILL, exit 137) in "
     "the container (limit 14 GiB, no swap)"),
    # gcc's driver turns the kill into exit 1, and a long traceback follows it
    ("Building wheel...\nFAILED: [code=1] /p/build/temp/csrc/tinyext.o\nc++: fatal error: Killed "
     "signal terminated program cc1plus\n" + "  File x, line 1\n" * 400, CompileError,
     "out of memory: the compiler was killed (SIGKILL, exit 137) in the container while "
     "compiling tinyext.o"),
    # a compile error names the file
    ("Building wheel...\ncsrc/kernel.cu(12): error: identifier \"x\" is undefined\n",
     CompileError, "while compiling csrc/kernel.cu:12"),
    # torch not installable
    ("Running before_build...\nERROR: No matching distribution found for torch==2.8.0\n",
     ToolchainError, "setting up the container's build environment failed (before-build"),
    ("Repairing wheel...\nTraceback...\n", RepairError, "the repair step failed"),
    ("Testing wheel...\nImportError: undefined symbol: _ZN3c10\n", VerifyError, "smoke test"),
    # the image has no interpreter for the cell's Python (e.g. 3.15 in an older image)
    ("Starting container image pytorch/x...\ncibuildwheel: error:   '/opt/python/cp315-cp315/"
     "bin/python' executable doesn't exist in image 'pytorch/x' to build 'cp315-manylinux_x86_64'"
     ".\n", ToolchainError, "the image lacks the cell's Python"),
    # the image never started
    ("Starting container image pytorch/x...\nError: pull access denied\n", ToolchainError,
     "cibuildwheel failed before building"),
])
def test_failures_are_classified(tmp_path, log, kind, says):
    exc = containerized.classify_failure(log, log=tmp_path / "cibuildwheel.log",
                                     limits=cibw.ContainerLimits(14, 4), code=1)
    assert type(exc) is kind and says in str(exc) and str(tmp_path / "cibuildwheel.log") in str(exc)


def test_classified_finish_error_keeps_its_fix(tmp_path):
    exc = containerized.classify_failure(
        "verify error: requested GPU archs missing\n  fix: check the arch env var\n",
        log=tmp_path / "l", limits=cibw.ContainerLimits(1, 1), code=1)
    assert exc.hint == "check the arch env var"


# --- the local script ---------------------------------------------------------------------------

def _local(world, tmp_path, *args):
    """Run scripts/build_local.sh with an interpreter that runs the real planner on the test world
    and prints what tools.build would be given (its working directory, then its argv)."""
    world()
    stub = tmp_path / "python"
    stub.write_text(f"""#!/bin/sh
if [ "$2" = tools.matrix ]; then
    shift 2
    exec {sys.executable} -m tools.matrix "$@" --recipes {tmp_path / 'recipes'} \\
        --table {tmp_path / 'table.yaml'}
fi
echo "$PWD"
for a in "$@"; do echo "$a"; done
""")
    stub.chmod(0o755)
    return subprocess.run([str(ROOT / "scripts" / "build_local.sh"), *args], capture_output=True,
                          text=True, env={**os.environ, "CUWHEELS_PYTHON": str(stub)})


@pytest.mark.parametrize("args,expected", [
    (["docker", "demo_ext", "3.12", "12.9"],
     ["demo_ext-3.12-cu129", "--backend", "container", "--engine", "docker"]),
    (["podman", "demo_ext", "3.12", "129", "--dry-run"],
     ["demo_ext-3.12-cu129", "--backend", "container", "--engine", "podman", "--dry-run"]),
    (["docker", "demo_ext", "3.11", "13.0", "--torch", "2.9", "--archs", "90"],
     ["demo_ext-3.11-cu130-torch2.9", "--backend", "container", "--engine", "docker",
      "--archs", "90"]),
    # the default torch named explicitly is still the default torch's cell
    (["docker", "demo_ext", "3.11", "13.0", "--torch", "2.10"],
     ["demo_ext-3.11-cu130", "--backend", "container", "--engine", "docker"]),
])
def test_build_local_calls_the_container_backend(world, tmp_path, args, expected):
    proc = _local(world, tmp_path, *args)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [str(ROOT), "-m", "tools.build", *expected]


@pytest.mark.parametrize("args,rc,says", [
    (["lxc", "demo_ext", "3.12", "12.9"], 2, "unknown engine: lxc"),
    (["docker", "demo_ext", "312", "12.9"], 2, "PYTHON is like 3.12"),
    (["docker", "demo_ext", "3.12", "cu129"], 2, "CUDA is like 12.9 or 129"),
    (["docker", "demo_ext"], 2, "usage:"),
    # no cell of the plan has Python 3.9 (demo_ext needs >= 3.10): the planner names the ones it has
    (["docker", "demo_ext", "3.9", "12.9"], PlanError.exit_code,
     "unknown Python version(s): 3.9: no cell of the plan has it"),
    (["docker", "demo_ext", "3.12", "12.9", "--torch", "2.9"], 2,
     "no cell of demo_ext for Python 3.12, CUDA 12.9, torch 2.9"),
    (["docker", "fused_thing", "3.12", "12.9"], PlanError.exit_code,
     "unknown package(s): fused_thing"),
])
def test_build_local_rejects_bad_arguments(world, tmp_path, args, rc, says):
    proc = _local(world, tmp_path, *args)
    assert proc.returncode == rc and says in proc.stderr, proc.stderr


# --- what the container hands back: its result file ----------------------------------------------

def test_the_cache_figures_come_from_the_result_file_sorted_against_the_shards(tmp_path):
    """The figures ``incontainer ccache stats`` wrote into the result file become the report's,
    each unit's result sorted against the shard caches read."""
    cache = tmp_path / "g-shard1"
    cache.mkdir()
    shardcache.write_record(cache, ShardResult("g-shard1", "g", "k", 1, 1, ["csrc/a.cu"], ["90"],
                                               verdict="passed", complete=True))
    use = shardcache.choose([cache], group="g", key="k")
    write_result(tmp_path / "container", ContainerResult(
        ccache=ReportedCache("ccache 4.10", "/cuwheels-ccache", 1, 1, 0, 1),
        units={"../../csrc/a.cu": "shard hit", "../../csrc/b.cpp": "miss"}))
    recipe = types.SimpleNamespace(folder=tmp_path / "no-recipe")   # no units.yaml there
    stats = containerized._cache_stats(read_result(tmp_path / "container"), use, recipe)
    assert (stats.hits, stats.misses, stats.tool) == (1, 1, "ccache 4.10")
    assert stats.per_unit["units"] == {"csrc/a.cu": "shard hit", "csrc/b.cpp": "miss"}
    assert containerized._cache_stats(None, use, recipe) is None   # no result: no figures


def _shard(tmp_path) -> ContainerShard:
    return ContainerShard(tmp_path / "cache", ShardResult("g-shard1", "g", "k", 1, 2,
                                                          ["csrc/a.cu"], ["90"]), ("csrc/a.cu",))


def test_a_shard_is_done_when_its_result_file_says_so_not_by_the_exit_status(tmp_path):
    """The stand-in ninja stops the build once the shard's objects are built, so cibuildwheel
    exits 1: the record handed back in the result file is the success."""
    shard, step = _shard(tmp_path), Step("cibuildwheel")
    done = ShardResult("g-shard1", "g", "k", 1, 2, ["csrc/a.cu"], ["90"],
                       seconds={"(all units)": 3.0}, verdict="passed", complete=True)
    result = ContainerResult(shard=done)
    assert containerized._shard_done(shard, 1, result, tmp_path / "log", step) == done
    assert step.detail == {"shard": done.to_json(), "exit": 1}
    # exit 0: the build went past the stand-in's stop, so no shard was built
    with pytest.raises(CompileError, match="shard g-shard1 failed: cibuildwheel exit 0"):
        containerized._shard_done(shard, 0, result, tmp_path / "log", Step("cibuildwheel"))


def test_a_shard_without_a_result_says_why_from_its_own_record(tmp_path):
    shard = _shard(tmp_path)
    with pytest.raises(CompileError, match="shard g-shard1 failed: cibuildwheel exit 1 before "
                                           "the stand-in ninja ran; log: "):
        containerized._shard_done(shard, 1, None, tmp_path / "log", Step("cibuildwheel"))
    shard.cache.mkdir()
    shardcache.write_record(shard.cache, ShardResult(
        "g-shard1", "g", "k", 1, 2, ["csrc/a.cu"], ["90"],
        error="the build's CUDA units are not the plan's: ..."))
    with pytest.raises(CompileError, match="failed: the build's CUDA units are not the plan's"):
        containerized._shard_done(shard, 87, None, tmp_path / "log", Step("cibuildwheel"))


def test_no_cache_turns_the_compiler_cache_off_in_the_container_plan(world, tmp_path,
                                                                     monkeypatch, capsys):
    table, _, _ = world()
    monkeypatch.setenv("CUWHEELS_CCACHE_DIR", str(tmp_path / "cc"))
    on, _ = _dry_run(monkeypatch, tmp_path, table, "demo_ext-3.12-cu129", capsys)
    off, _ = _dry_run(monkeypatch, tmp_path, table, "demo_ext-3.12-cu129", capsys, "--no-cache")
    assert f"--volume {tmp_path / 'cc'}:/cuwheels-ccache" in on
    assert "# compiler cache: ccache in /cuwheels-ccache" in on
    assert "/cuwheels-ccache" not in off and "# compiler cache: off" in off
    assert "CCACHE_DISABLE=1" in off


@pytest.mark.parametrize("cell_id, folder", [("causal_conv1d-3.14-cu130", "cp314-cp314"),
                                             ("causal_conv1d-3.14t-cu130", "cp314-cp314t")])
def test_the_image_check_looks_for_the_cells_own_interpreter(cell_id, folder):
    """The manylinux folder of a free-threaded build is cp314-cp314t (never cp314t-cp314t)."""
    from tools.backends.containerized import image_paths
    from tools.plan.cells import find_cell
    paths = image_paths(find_cell(cell_id))
    assert paths[f"/opt/python/{folder}/bin/python"] == \
        f"the cell's Python {cell_id.split('-')[1]}"
