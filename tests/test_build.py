"""End to end: a real sdist through every pipeline step with the host backend and real nvcc.

The fixture is tinyext (tests/fixtures/tinyext), a real torch CUDA extension small enough to
compile in a few minutes on two cores; its recipe lives in a temporary recipes folder checked
against the real compatibility table. Bad inputs are checked through the same command line a
person uses (``python -m tools.build``).
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.fixtures.make_tinyext_sdist import make_sdist
from tinyext_support import cuda_torch_venv
from tools import ROOT
from tools import build as build_command
from tools.builder.orchestrate import BuildRequest, ContainerSettings, build_cell, resolve_archs
from tools.builder.planned import Planned
from tools.backends.engine import Readiness
from tools.kernels.check import find_gpu
from tools.core.errors import CompileError, SourceError, ToolchainError, VerifyError
from tools.core.manifest import read_manifest
from tools.plan.cells import cells_for
from tools.plan.job import Inputs
from tools.plan.recipes.model import load_recipe
from tools.core.digest import sha256_file
from tools.plan.table import load_table
from tools.pipeline.build_toolchain import find_nvcc

PATCH = """From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: cuwheels <cuwheels@example.invalid>
Subject: [PATCH] Mark the package as built from a patched tree

Why: exercises the patch step of the pipeline end to end.
Upstream: not applicable (test fixture).
---
 tinyext/__init__.py | 1 +
 1 file changed, 1 insertion(+)

--- a/tinyext/__init__.py
+++ b/tinyext/__init__.py
@@ -8,3 +8,4 @@ add_one = tinyext_cuda.add_one

 __all__ = ["add_one"]
 __version__ = "0.1.0"
+PATCHED_BY_RECIPE = True
"""

BREAK_PATCH = """From: cuwheels <cuwheels@example.invalid>
Subject: [PATCH] Break the kernel (test of compile failures)

---
--- a/csrc/add_one.cu
+++ b/csrc/add_one.cu
@@ -1,1 +1,2 @@
+#error "deliberately broken by the test recipe"
"""


def _recipe(sdist: Path, **changes) -> dict:
    """The fixture recipe for the local nvcc's CUDA and the newest torch the registry serves
    built for exactly that CUDA (so the registry is all the build needs)."""
    table = load_table()
    cuda = find_nvcc().version
    torch = next(s for s in reversed(table.torch_for_cuda(cuda))
                 if table.torch[s].pypi_cuda == cuda and "3.11" in table.torch[s].python)
    data = {
        "schema": 1,
        "package": "tinyext",
        "summary": "Test fixture: a tiny torch CUDA extension",
        "source": {"pypi": "tinyext", "version": "0.1.0", "sdist": sdist.name,
                   "sha256": sha256_file(sdist),
                   "url": f"https://files.example.invalid/{sdist.name}"},
        "imports": ["tinyext_cuda", "tinyext"],
        "python": ">=3.9",
        "cuda": {cuda: {"torch": [torch], "reason": "the registry's torch is built for it"}},
        "archs": {"*": ["90"]},
        "arch_env": {"name": "TINYEXT_CUDA_ARCHS", "style": "plain",
                     "reason": "setup.py turns it into -gencode flags"},
        "env": {},
        "build": {"isolation": False,
                  "requires": [{"requirement": "ninja", "reason": "parallel compiles"},
                               {"requirement": "setuptools", "reason": "the build backend"},
                               {"requirement": "wheel", "reason": "bdist_wheel"}],
                  "job_memory_gib": 1.5, "job_memory_reason": "measured: ~1.2 GiB per job"},
        "patches": [{"file": "0001-Mark-patched.patch", "reason": "exercise the patch step",
                     "upstream": "not applicable"}],
    }
    data.update(changes)
    return data


#: tinyext's kernel check: add_one on the GPU against plain torch (x + 1, exactly).
TINYEXT_CHECK = """OPS = ("add_one",)

def run(check):
    import tinyext
    x = check.torch.randn(1000, device=check.device)
    check.compare("add_one", tinyext.add_one(x), x + 1, atol=0.0)
"""


def _write(root: Path, data: dict, patches: dict[str, str], check: str | None = None) -> Path:
    folder = root / data["package"]
    (folder / "patches").mkdir(parents=True, exist_ok=True)
    if check is not None:
        (folder / "check.py").write_text(check)
        data = {**data, "check": {"file": "check.py", "reason": "add_one against x + 1"}}
    (folder / "recipe.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    for name, text in patches.items():
        (folder / "patches" / name).write_text(text)
    return root


def _cell(data: dict) -> str:
    cuda = next(iter(data["cuda"]))
    return f"tinyext-3.11-cu{cuda.replace('.', '')}"


def _build(recipes: Path, cell: str, out: Path, work: Path, *extra: str, timeout=1800):
    return subprocess.run([sys.executable, "-m", "tools.build", cell, "--backend", "host",
                           "--recipes", str(recipes), "--wheels", str(out), "--work", str(work),
                           *extra], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def sdist(tmp_path_factory):
    return make_sdist(tmp_path_factory.mktemp("sdist"))


@pytest.mark.cuda
@pytest.mark.network
def test_fixture_builds_through_every_step(sdist, tmp_path):
    data = _recipe(sdist)
    data["build"].update(number=1, number_reason="exercises the build tag through every step")
    recipes = _write(tmp_path / "recipes", data, {"0001-Mark-patched.patch": PATCH},
                     check=TINYEXT_CHECK)
    cell = _cell(data)
    out, work = tmp_path / "wheelhouse", tmp_path / "work"
    proc = _build(recipes, cell, out, work, "--sdist", str(sdist))
    assert proc.returncode == 0, proc.stderr[-4000:]

    # progress names each step with the time so far
    for step in ("toolchain", "source", "python", "compile", "repair", "inspect", "metadata",
                 "verify", "kernels", "publish"):
        assert f": {step} ok (" in proc.stderr, step
    wheels = list(out.glob("*.whl"))
    assert len(wheels) == 1
    wheel = wheels[0]
    torch_series = next(iter(data["cuda"].values()))["torch"][0]
    cuda_nodot = next(iter(data["cuda"])).replace(".", "")
    assert f"tinyext-0.1.0+cu{cuda_nodot}.torch{torch_series}-1-cp311-cp311-manylinux_" in wheel.name
    with zipfile.ZipFile(wheel) as zf:
        meta = zf.read(f"tinyext-0.1.0+cu{cuda_nodot}.torch{torch_series}.dist-info/METADATA")
        manifest = read_manifest(zf)
        names = zf.namelist()
        init = zf.read("tinyext/__init__.py").decode()
    assert f"Requires-Dist: torch=={torch_series}.*".encode() in meta
    assert "PATCHED_BY_RECIPE = True" in init                      # the patch was applied
    assert not any("libtorch" in n or "libc10" in n for n in names)  # torch not grafted
    assert manifest["cell"] == cell and manifest["archs"]["requested"] == ["90"]
    found = manifest["archs"]["found"]
    assert [v["sass"] for v in found.values()] == [["90"]]
    assert manifest["source"]["sha256"] == sha256_file(sdist)
    assert manifest["patches"] == ["0001-Mark-patched.patch"]
    assert manifest["build_number"] == 1
    # setuptools took the fixture's LICENSE by its default license-files; the finish step saw it
    assert manifest["checks"]["licenses"] == "passed: 1 license file(s): licenses/LICENSE"
    assert manifest["compiler"]["nvcc"].startswith("Build cuda_") or "cuda" in \
        manifest["compiler"]["nvcc"].lower()

    report = json.loads((work / cell / "report.json").read_text())
    assert report["verdict"] == "passed"
    steps = {s["name"]: s for s in report["steps"]}
    assert all(s["status"] == "ok" and s["seconds"] >= 0 for s in steps.values())
    assert steps["repair"]["detail"]["size_before"] > 0 < steps["repair"]["detail"]["size_after"]
    assert steps["verify"]["detail"]["smoke_test"] == "passed"
    assert steps["inspect"]["detail"]["abi_symbols_checked"] > 0
    # the kernel check ran on the GPU the smoke-test venv's torch sees, or, with none, says so
    gpu = find_gpu(work / cell / "smoke" / "smoke-venv" / "bin" / "python")
    kernel_check = steps["kernels"]["detail"]["kernel_check"]
    assert manifest["kernel_check"] == kernel_check
    if gpu is None:
        assert kernel_check["verdict"] == "not run: no GPU" and kernel_check["compared"] == 0
    else:
        assert kernel_check["verdict"] == "passed" and kernel_check["gpu"] == gpu.name
        assert kernel_check["max_errors"]["add_one"]["float32"]["error"] == 0.0


@pytest.mark.cuda
@pytest.mark.network
def test_failed_check_leaves_no_wheel(sdist, tmp_path):
    """The smoke test fails (a module the wheel doesn't have): nothing reaches the wheelhouse,
    the report says which step failed."""
    data = _recipe(sdist, imports=["tinyext_cuda", "tinyext.not_there"])
    recipes = _write(tmp_path / "recipes", data, {"0001-Mark-patched.patch": PATCH})
    out, work = tmp_path / "wheelhouse", tmp_path / "work"
    proc = _build(recipes, _cell(data), out, work, "--sdist", str(sdist))
    assert proc.returncode == VerifyError.exit_code, proc.stderr[-3000:]
    assert "tinyext.not_there" in proc.stderr
    assert not list(out.glob("*.whl")) if out.exists() else True
    report = json.loads((work / _cell(data) / "report.json").read_text())
    assert report["verdict"] == "failed"
    assert [s["name"] for s in report["steps"] if s["status"] == "failed"] == ["verify"]


@pytest.mark.cuda
@pytest.mark.network
def test_a_wheel_without_its_license_is_refused_and_not_published(tmp_path):
    """The sdist ships no LICENSE, so the compiled wheel carries none: the finish step refuses
    it before repairing it, naming the wheel, the rule and the fix; nothing reaches the
    wheelhouse or the finish folders, and the report says why."""
    bare = make_sdist(tmp_path / "sdist", license_file=False)
    data = _recipe(bare)
    recipes = _write(tmp_path / "recipes", data, {"0001-Mark-patched.patch": PATCH})
    out, work = tmp_path / "wheelhouse", tmp_path / "work"
    proc = _build(recipes, _cell(data), out, work, "--sdist", str(bare))
    assert proc.returncode == VerifyError.exit_code, proc.stderr[-3000:]
    assert "tinyext-0.1.0-cp311-cp311-linux_x86_64.whl carries no upstream license: its " \
           "METADATA (Metadata-Version" in proc.stderr
    assert "add it to the build through the recipe's patch" in proc.stderr
    assert not (out.exists() and list(out.glob("*.whl")))
    cell_work = work / _cell(data)
    # Only the compile's own output (dist/) holds a wheel: none was repaired or finished.
    wheels = list(cell_work.rglob("*.whl"))
    assert wheels and {p.parent.name for p in wheels} == {"dist"}
    report = json.loads((cell_work / "report.json").read_text())
    assert report["verdict"] == "failed" and report["error"]["kind"] == "verify"
    assert "carries no upstream license" in report["error"]["message"]
    assert [s["name"] for s in report["steps"]][-1] == "compile"


@pytest.mark.cuda
@pytest.mark.network
def test_compile_failure_names_the_file_and_keeps_the_log(sdist, tmp_path):
    data = _recipe(sdist)
    data["patches"].append({"file": "0002-Break-the-kernel.patch", "reason": "a compile error",
                            "upstream": "not applicable"})
    recipes = _write(tmp_path / "recipes", data, {"0001-Mark-patched.patch": PATCH,
                                                  "0002-Break-the-kernel.patch": BREAK_PATCH})
    out, work = tmp_path / "wheelhouse", tmp_path / "work"
    proc = _build(recipes, _cell(data), out, work, "--sdist", str(sdist))
    assert proc.returncode == CompileError.exit_code, proc.stderr[-3000:]
    assert "add_one.cu" in proc.stderr and "compile.log" in proc.stderr
    assert "deliberately broken" in (work / _cell(data) / "compile.log").read_text()
    assert not out.exists() or not list(out.glob("*.whl"))


def test_wrong_sha256_stops_before_compiling(sdist, tmp_path):
    data = _recipe(sdist)
    data["source"]["sha256"] = "0" * 64
    recipes = _write(tmp_path / "recipes", data, {"0001-Mark-patched.patch": PATCH})
    proc = _build(recipes, _cell(data), tmp_path / "out", tmp_path / "work", "--sdist",
                  str(sdist), timeout=300)
    assert proc.returncode == SourceError.exit_code
    assert "0" * 64 in proc.stderr and sha256_file(sdist) in proc.stderr
    report = json.loads((tmp_path / "work" / _cell(data) / "report.json").read_text())
    assert [s["name"] for s in report["steps"]] == ["toolchain", "source"]


def test_nvcc_of_another_major_is_refused(sdist, tmp_path):
    table = load_table()
    nvcc_major = find_nvcc().version.split(".")[0]
    other = next((c for c in table.cuda if c.split(".")[0] != nvcc_major), None)
    if other is None:
        pytest.fail("the table has a single CUDA major; this test needs two")
    torch = table.torch_for_cuda(other)[-1]
    data = _recipe(sdist, cuda={other: {"torch": [torch], "reason": "another CUDA major"}},
                   archs={"*": ["80"]})
    recipes = _write(tmp_path / "recipes", data, {"0001-Mark-patched.patch": PATCH})
    proc = _build(recipes, _cell(data), tmp_path / "out", tmp_path / "work", timeout=300)
    assert proc.returncode == ToolchainError.exit_code
    assert f"needs CUDA {other}" in proc.stderr and "refuses a different major" in proc.stderr


def test_python_not_installed(sdist, tmp_path):
    data = _recipe(sdist)
    cuda = next(iter(data["cuda"]))
    torch = data["cuda"][cuda]["torch"][0]
    missing = [py for py in load_table().torch[torch].python
               if shutil.which(f"python{py}") is None]
    if not missing:
        pytest.fail(f"every Python torch {torch} supports is installed; pick another case")
    recipes = _write(tmp_path / "recipes", data, {"0001-Mark-patched.patch": PATCH})
    cell = f"tinyext-{missing[-1]}-cu{cuda.replace('.', '')}"
    proc = _build(recipes, cell, tmp_path / "out", tmp_path / "work", "--sdist", str(sdist),
                  timeout=300)
    assert proc.returncode == ToolchainError.exit_code, proc.stderr[-2000:]
    assert f"Python {missing[-1]} is not installed" in proc.stderr


def test_auto_backend_falls_back_to_host_and_says_why(sdist, tmp_path):
    """Whatever engines this machine has: the probe is told that none answers."""
    data = _recipe(sdist)
    data["source"]["sha256"] = "0" * 64   # stop right after the backend choice is printed
    recipes = _write(tmp_path / "recipes", data, {"0001-Mark-patched.patch": PATCH})
    stream = io.StringIO()
    planned = Planned.make(recipes)
    with pytest.raises(SourceError):
        build_cell(planned.cell(_cell(data)), planned, BuildRequest(
            out_dir=tmp_path / "o", work_root=tmp_path / "w", inputs=Inputs(sdist=sdist),
            stream=stream, container=ContainerSettings(
                can_build=lambda engine, image: Readiness(engine, image, False,
                                                          f"{engine} is not installed"))))
    assert "(docker is not installed; podman is not installed), using host)" in \
        stream.getvalue()


def test_archs_override_is_checked_against_the_toolkit(mini_table, write_recipe, good_recipe):
    cell = next(c for c in cells_for(load_recipe(write_recipe(good_recipe), mini_table),
                                     mini_table) if c.id == "demo_ext-3.12-cu130")
    assert resolve_archs(cell, None, mini_table) == cell.archs
    assert resolve_archs(cell, "sm_90a;80, 90", mini_table) == ("80", "90", "90a")
    with pytest.raises(ToolchainError, match="--archs 70,121: CUDA 13.0 cannot compile "
                                             "sm_70, sm_121") as info:
        resolve_archs(cell, "70,121", mini_table)
    assert info.value.hint.startswith("CUDA 13.0 compiles 75, 80")


def test_archs_override_keeps_the_recipes_arch_specific_targets(mini_table, write_recipe,
                                                                 good_recipe):
    good_recipe["archs"] = {"*": ["80", "90a"]}
    cell = next(c for c in cells_for(load_recipe(write_recipe(good_recipe), mini_table),
                                     mini_table) if c.id == "demo_ext-3.12-cu130")
    assert cell.archs == ("80", "90a")
    assert resolve_archs(cell, "90a", mini_table) == ("90a",)
    assert resolve_archs(cell, "80", mini_table) == ("80",)
    with pytest.raises(ToolchainError, match="--archs 80,90: the cell demo_ext-3.12-cu130 is "
                                             "built for sm_90a, and sm_90 lacks") as info:
        resolve_archs(cell, "80,90", mini_table)
    assert info.value.hint == "name the arch as the recipe does: --archs 80,90a"


@pytest.mark.cuda
@pytest.mark.network
def test_build_with_an_existing_python_offline(sdist, tmp_path, monkeypatch):
    """--interpreter with --offline: the environment's own torch and build requirements, no venv,
    nothing downloaded (every proxy points at a closed port, pip and uv are told to stay
    offline), nothing installed into the environment."""
    env_python = cuda_torch_venv(tmp_path / "cluster-env")   # made before the network goes
    data = _recipe(sdist, cuda={find_nvcc().version: {
        "torch": ["2.13"], "reason": "the environment's torch (tinyext_support's)"}})
    recipes = _write(tmp_path / "recipes", data, {"0001-Mark-patched.patch": PATCH},
                     check=TINYEXT_CHECK)
    before = _distributions(env_python)
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                "all_proxy"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("UV_OFFLINE", "1")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    out, work = tmp_path / "wheelhouse", tmp_path / "work"
    stream = io.StringIO()
    cell = _cell(data)
    planned = Planned.make(recipes)
    result = build_cell(planned.cell(cell), planned, BuildRequest(
        backend="auto", inputs=Inputs(sdist=sdist, offline=True), python=env_python,
        out_dir=out, work_root=work, stream=stream, gpu_finder=lambda python, **_: None,
        container=ContainerSettings(
            can_build=lambda engine, image: pytest.fail("--interpreter must not probe engines"))))
    report = result.report
    assert report.verdict == "passed", stream.getvalue()[-3000:]
    assert result.wheel == Path(report.wheel)
    assert report.why == f"--interpreter {env_python}"
    names = [s["name"] for s in json.loads((work / cell / "report.json").read_text())["steps"]]
    assert names == ["python", "toolchain", "source", "compile", "repair", "inspect",
                     "metadata", "verify", "kernels", "publish"]
    assert not (work / cell / "venv").exists()                 # no venv was made
    wheel = Path(report.wheel)
    assert wheel.parent == out and "+cu130.torch2.13-cp311-cp311-" in wheel.name
    with zipfile.ZipFile(wheel) as zf:
        manifest = read_manifest(zf)
    assert manifest["existing_python"] is True and manifest["torch"] == "2.13.0"
    assert manifest["kernel_check"]["verdict"] == "not run: no GPU"
    assert "--no-index" in (work / cell / "compile.log").read_text().splitlines()[0]
    assert _distributions(env_python) == before                # the environment is untouched


def _distributions(python: Path) -> str:
    proc = subprocess.run([str(python), "-c", "import importlib.metadata as m; print(sorted("
                           "f'{d.name}=={d.version}' for d in m.distributions()))"],
                          capture_output=True, text=True, check=True, timeout=120)
    return proc.stdout.strip()


def test_python_with_the_container_backend_is_refused(sdist, tmp_path):
    data = _recipe(sdist)
    recipes = _write(tmp_path / "recipes", data, {"0001-Mark-patched.patch": PATCH})
    proc = _build(recipes, _cell(data), tmp_path / "out", tmp_path / "work", "--backend",
                  "container", "--interpreter", sys.executable, timeout=300)
    assert proc.returncode == ToolchainError.exit_code
    assert "the container backend brings its own" in proc.stderr


@pytest.mark.parametrize("args, message", [
    (["--offline"], "--offline needs --wheelhouse (or --interpreter"),
    (["--offline", "--interpreter", "/x/python"], "--offline needs --sdist or --sdist-dir"),
])
def test_offline_needs_what_it_cannot_download(tmp_path, args, message):
    proc = subprocess.run([sys.executable, "-m", "tools.build", "tinyext-3.11-cu130", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and message in proc.stderr


def test_the_cell_of_a_plan_handed_on_is_built_as_planned(world, tmp_path, monkeypatch, capsys):
    """``--plan FILE`` (what the nox build sessions pass): the cell is taken from that plan, not
    planned again. The plan here says one arch where the recipe says three; the dry run's
    script builds the planned one, and without --plan the recipe's."""
    world()
    monkeypatch.setenv("CUWHEELS_CONTAINER_MEMORY_GIB", "14")
    monkeypatch.setenv("CUWHEELS_CONTAINER_CPUS", "4")
    here = ["--recipes", str(tmp_path / "recipes"), "--table", str(tmp_path / "table.yaml")]
    listing = subprocess.run([sys.executable, "-m", "tools.matrix", "--format", "json", *here],
                             cwd=ROOT, capture_output=True, text=True, check=True, timeout=120)
    cells = json.loads(listing.stdout)
    for cell in cells:
        if cell["id"] == "demo_ext-3.12-cu129":
            cell["archs"] = ["90"]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(cells))
    command = ["demo_ext-3.12-cu129", "--backend", "container", "--dry-run", *here,
               "--work", str(tmp_path / "work")]
    assert build_command.main([*command, "--plan", str(plan)]) == 0
    assert "# archs: sm_90\n" in capsys.readouterr().out
    assert build_command.main(command) == 0
    assert "# archs: sm_80 sm_90 sm_120\n" in capsys.readouterr().out
