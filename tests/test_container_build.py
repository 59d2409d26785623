"""The container backend for real: cibuildwheel drives podman, in the local builder image, end to
end (engine, image, source, stage, cibuildwheel with the finish step and the smoke test inside
the container, publish), and a compile that outgrows the container's memory is named as such.

These start real containers. They need podman able to start a container from the local stand-in
image (``scripts/ci_podman.sh`` sets both up; ``.ci/run`` calls it): the engine's own readiness check
decides, and where it says no the tests skip with its reason, so a machine with docker, podman or
neither gets the same verdicts on everything else. torch comes from the registry the first time
and from the container pip cache (``~/.cache/cuwheels/container-pip``) after that.
"""

from __future__ import annotations

import io
import subprocess
import sys
import json
import zipfile

import pytest
import yaml

from tests.test_build import PATCH, _recipe, _write
from tools import ROOT
from tools.devtools import standin_image
from tools.builder.orchestrate import BuildRequest, ContainerSettings, build_cell
from tools.builder.planned import Planned
from tools.backends.engine import readiness
from tools.core.errors import CompileError
from tools.core.manifest import read_manifest
from tools.pipeline.build_toolchain import find_nvcc
from tools.plan.job import Inputs

#: The cell's Python: the one the causal_conv1d container run uses too, so both share one cached
#: torch download.
PYTHON = "3.12"


def podman_request(image: str, *, sdist=None, sdist_dir=None, memory_gib=None,
                   **asked) -> BuildRequest:
    """What every build here asks: the container backend on podman with ``image``, for sm_90."""
    return BuildRequest(backend="container", archs="90",
                        inputs=Inputs(sdist=sdist, sdist_dir=sdist_dir),
                        container=ContainerSettings(engine="podman", image=image,
                                                    memory_gib=memory_gib), **asked)


@pytest.fixture(scope="module")
def local_image() -> str:
    """The local stand-in image, when podman can start a container from it here."""
    try:
        cuda = find_nvcc().version
    except Exception as exc:   # no toolkit: the image can't exist either
        pytest.skip(f"no CUDA toolkit here: {exc}")
    image = standin_image.image_name(cuda)
    ready = readiness("podman", image)
    if not ready.ok or not ready.local:
        pytest.skip(f"no container can be started from {image}: {ready.why} "
                    f"(scripts/ci_podman.sh sets it up)")
    return image


def _tinyext(tmp_path, sdist):
    data = _recipe(sdist)
    recipes = _write(tmp_path / "recipes", data, {"0001-Mark-patched.patch": PATCH})
    cuda = next(iter(data["cuda"]))
    return recipes, f"tinyext-{PYTHON}-cu{cuda.replace('.', '')}", data


@pytest.fixture(scope="module")
def sdist(tmp_path_factory):
    from tests.fixtures.make_tinyext_sdist import make_sdist
    return make_sdist(tmp_path_factory.mktemp("sdist"))


@pytest.mark.slow       # 7 to 8 min (cibuildwheel, torch installed twice in the image): make test-slow
@pytest.mark.cuda
@pytest.mark.network
def test_tinyext_through_the_container_backend(local_image, sdist, tmp_path):
    recipes, cell, data = _tinyext(tmp_path, sdist)
    out, work = tmp_path / "wheelhouse", tmp_path / "work"
    stream = io.StringIO()
    planned = Planned.make(recipes)
    result = build_cell(planned.cell(cell), planned, podman_request(
        local_image, sdist=sdist, out_dir=out, work_root=work, stream=stream))
    report = result.report
    said = stream.getvalue()
    assert report.verdict == "passed", said[-4000:]
    for step in ("engine", "image", "source", "assemble", "cibuildwheel", "publish"):
        assert f": {step} ok (" in said, step
    # the stand-in's glibc is newer than manylinux_2_28: the wheel says what it needs
    assert "image: a local stand-in" in said
    assert report.image == local_image and report.plat == "auto"
    (wheel,) = out.glob("*.whl")
    assert result.wheel == wheel
    torch_series = next(iter(data["cuda"].values()))["torch"][0]
    assert f"+cu130.torch{torch_series}-cp312-cp312-manylinux_2_" in wheel.name
    assert "manylinux_2_28" not in wheel.name
    with zipfile.ZipFile(wheel) as zf:
        manifest = read_manifest(zf)
        init = zf.read("tinyext/__init__.py").decode()
        names = zf.namelist()
    assert "PATCHED_BY_RECIPE = True" in init
    assert not any("libtorch" in n or "libc10" in n for n in names)
    # the finish step ran inside the container
    assert manifest["backend"] == "container" and manifest["image"] == local_image
    assert manifest["build_platform"].endswith("glibc 2.36")
    assert [v["sass"] for v in manifest["archs"]["found"].values()] == [["90"]]
    log = (work / cell / "cibuildwheel.log").read_text()
    assert "Testing wheel..." in log          # cibuildwheel's smoke test ran in the container
    saved = json.loads((work / cell / "report.json").read_text())
    assert [s["name"] for s in saved["steps"]] == ["engine", "image", "source", "assemble",
                                                   "cibuildwheel", "publish"]


@pytest.mark.cuda
@pytest.mark.network
def test_image_without_the_cells_python_is_refused_before_compiling(local_image, sdist,
                                                                    tmp_path):
    """cp314 is not in the stand-in: a named error from the image step, nothing staged."""
    recipes, _, data = _tinyext(tmp_path, sdist)
    cuda = next(iter(data["cuda"]))
    table = tmp_path / "table.yaml"
    from tools.plan.table import TABLE_PATH
    import yaml
    raw = yaml.safe_load(TABLE_PATH.read_text())
    torch_series = next(iter(data["cuda"].values()))["torch"][0]
    raw["torch"][torch_series]["python"].append("3.14")
    table.write_text(yaml.safe_dump(raw, sort_keys=False))
    cell = f"tinyext-3.14-cu{cuda.replace('.', '')}"
    stream = io.StringIO()
    from tools.core.errors import ToolchainError
    planned = Planned.make(recipes, table)
    with pytest.raises(ToolchainError) as info:
        build_cell(planned.cell(cell), planned, podman_request(
            local_image, sdist=sdist, out_dir=tmp_path / "out", work_root=tmp_path / "work",
            stream=stream))
    assert f"{local_image} lacks what {cell} needs: /opt/python/cp314-cp314/bin/python " \
           "(the cell's Python 3.14)" in str(info.value)
    assert "tools.localimage" in info.value.hint
    assert not (tmp_path / "work" / cell / "src").exists()
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.cuda
@pytest.mark.network
def test_compile_over_the_memory_limit_is_named_out_of_memory(local_image, sdist, tmp_path):
    """A real nvcc compile in a container limited to less memory than it needs: exit 137,
    reported as out of memory, with the unit that was compiling; no wheel.

    Slow, and not in the default suite: at 1 GiB (the smallest whole limit) the compile sits at
    the limit, so whether the kernel kills it at once (4 min here) or lets it thrash for many
    minutes first depends on what else the machine is doing."""
    recipes, cell, _ = _tinyext(tmp_path, sdist)
    # The limit covers the whole container: pip's install of torch fits in 1 GiB (it streams),
    # the compile of a unit that includes torch's headers does not (about 1.2 GiB here).
    stream = io.StringIO()
    planned = Planned.make(recipes)
    with pytest.raises(CompileError) as info:
        build_cell(planned.cell(cell), planned, podman_request(
            local_image, sdist=sdist, out_dir=tmp_path / "out", work_root=tmp_path / "work",
            memory_gib=1, stream=stream,
            cache=False))   # a compiler-cache hit would compile nothing
    said = str(info.value)
    assert said.startswith("out of memory: the compiler was killed (SIGKILL, exit 137) in the "
                           "container while compiling tinyext.o")
    assert "limit 1 GiB, no swap" in said
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.cuda
@pytest.mark.network
def test_a_second_python_hits_the_compiler_cache_in_the_container(local_image, sdist, tmp_path,
                                                                    monkeypatch):
    """cp311 then cp312 through one compiler cache that starts empty: the CUDA kernel unit
    (add_one.cu, no Python.h) comes from the cache for cp312; the binding unit recompiles."""
    monkeypatch.setenv("CUWHEELS_CCACHE_DIR", str(tmp_path / "ccache"))
    reports = {}
    for python in ("3.11", "3.12"):
        data = _recipe(sdist)
        recipes = _write(tmp_path / f"recipes-{python}", data,
                         {"0001-Mark-patched.patch": PATCH})
        cuda = next(iter(data["cuda"])).replace(".", "")
        stream = io.StringIO()
        planned = Planned.make(recipes)
        reports[python] = build_cell(
            planned.cell(f"tinyext-{python}-cu{cuda}"), planned, podman_request(
                local_image, sdist=sdist, out_dir=tmp_path / "out", work_root=tmp_path / "work",
                stream=stream)).report
        assert reports[python].verdict == "passed", stream.getvalue()[-4000:]
        print(python, reports[python].ccache, stream.getvalue()[-600:])
    first, second = reports["3.11"].ccache, reports["3.12"].ccache
    # tinyext has three units: the binding (tinyext.cpp, includes Python.h) and two kernels
    assert (first.hits, first.misses) == (0, 3)
    assert (second.hits, second.preprocessed_hits, second.misses) == (2, 2, 1)
    assert second.dir == "/cuwheels-ccache"
    assert any((tmp_path / "ccache").iterdir())     # the cache is this machine's directory
    assert len(list((tmp_path / "out").glob("*.whl"))) == 2


@pytest.mark.slow
@pytest.mark.cuda
@pytest.mark.network
def test_a_dependent_in_the_container_gets_its_needed_wheel(local_image, sdist, tmp_path):
    """tinydep imports tinyext: with no tinyext wheel at hand, the container backend builds
    tinyext's cell first (in the container too), then tinydep's, whose import check in the
    container's test venv installs the mounted tinyext wheel first."""
    from tests.fixtures.make_tinyext_sdist import make_sdist
    from tests.test_needs import tinydep_recipe
    from tools.finish.wheelmeta import read_metadata

    sdists = tmp_path / "sdists"
    sdists.mkdir()
    (sdists / sdist.name).write_bytes(sdist.read_bytes())
    dep_sdist = make_sdist(sdists, name="tinydep", imports=("tinyext",))
    recipes, needed, _ = _tinyext(tmp_path, sdist)
    _write(recipes, tinydep_recipe(dep_sdist), {})
    cell = needed.replace("tinyext", "tinydep")
    out, work = tmp_path / "wheelhouse", tmp_path / "work"
    stream = io.StringIO()
    planned = Planned.make(recipes)
    report = build_cell(planned.cell(cell), planned, podman_request(
        local_image, sdist_dir=sdists, out_dir=out, work_root=work, stream=stream)).report
    said = stream.getvalue()
    assert report.verdict == "passed", said[-4000:]
    assert f"needs {needed}: no wheel of it in {out}" in said
    (wheel,) = out.glob("*.whl")
    assert wheel.name.startswith("tinydep-") and "Requires-Dist: tinyext" in \
        read_metadata(wheel).splitlines()
    log = (work / cell / "cibuildwheel.log").read_text()
    assert "/cuwheels-needs/tinyext-0.1.0+" in log      # installed into the test venv first
    assert "imported tinydep from" in log


@pytest.mark.slow
@pytest.mark.cuda
@pytest.mark.network
def test_container_shards_feed_container_cells(local_image, sdist, tmp_path, monkeypatch):
    """tinyext's compile group through the container backend: two shards, each the cell's own
    cibuildwheel build with a stand-in ninja that builds one kernel object into the shard's
    cache, then the cp311 and cp312 cells in the same image reading both caches read-only.
    Every kernel unit of the first cell is a shard hit; only the binding unit compiles."""
    from tests.test_shard import KERNELS
    from tools.pipeline import shardcache
    data = _recipe(sdist)
    recipes = _write(tmp_path / "recipes", data, {"0001-Mark-patched.patch": PATCH})
    cuda = next(iter(data["cuda"])).replace(".", "")
    group = f"tinyext-cu{cuda}"
    (recipes / "tinyext" / "units.yaml").write_text(yaml.safe_dump({
        "schema": 1, "version": "0.1.0",
        "cost": {"cuda": {"seconds": 10, "reason": "a test fixture's estimate"},
                 "c++": {"seconds": 30, "reason": "a test fixture's estimate"}},
        "units": {"c++": ["csrc/tinyext.cpp"], "cuda": KERNELS}}))
    monkeypatch.setenv("CUWHEELS_CCACHE_DIR", str(tmp_path / "local-ccache"))
    cache, work, out = tmp_path / "shards", tmp_path / "work", tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "tools.shard", "release", group, "--shards", "2", "--python",
         "3.11,3.12", "--backend", "container", "--engine", "podman", "--image", local_image,
         "--archs", "90", "--recipes", str(recipes), "--sdist", str(sdist), "--cache",
         str(cache), "--work", str(work), "--wheels", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=3600)
    logs = "\n".join(p.read_text()[-3000:] for p in (work / "release-logs").rglob("*.log"))
    assert proc.returncode == 0, proc.stdout + logs
    records = [shardcache.read_record(cache / f"{group}-shard{k}") for k in (1, 2)]
    assert [r.units for r in records] == [[KERNELS[0]], [KERNELS[1]]]
    assert all(r.complete for r in records), records
    for python, kernel_hit in (("3.11", "shard hit"), ("3.12", "hit")):
        report = json.loads((work / f"tinyext-{python}-cu{cuda}" / "report.json").read_text())
        assert report["verdict"] == "passed"
        assert report["shards"]["read"] == [str(cache / f"{group}-shard{k}") for k in (1, 2)]
        per_unit = report["ccache"]["per_unit"]
        assert per_unit["units"] == {KERNELS[0]: kernel_hit, KERNELS[1]: kernel_hit,
                                     "csrc/tinyext.cpp": "miss"}, per_unit
    assert len(list(out.glob("*.whl"))) == 2


@pytest.fixture(scope="module")
def arm64_image() -> str:
    """The arm64 stand-in image (``python -m tools.localimage --cuda 13.0 --arch arm64``), when
    podman can start a container from it here (on x86_64: through qemu-user)."""
    from tools.devtools import armimage
    from tools.pipeline import cudakit
    image = armimage.image_name(cudakit.CUDA)
    ready = readiness("podman", image)
    if not ready.ok or not ready.local:
        pytest.skip(f"no container can be started from {image}: {ready.why} (python -m "
                    f"tools.localimage --cuda {cudakit.CUDA} --arch arm64 builds it)")
    return image


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.timeout(3 * 3600)
def test_tinyext_for_aarch64_through_the_container_backend(arm64_image, sdist, tmp_path):
    """A linux_aarch64 cell in the arm64 stand-in: cibuildwheel, nvcc, the finish step and the
    import test all run as aarch64 programs (under qemu-user on an x86_64 machine: about half
    an hour here, most of it the binding's compile and torch's install). The wheel is an
    aarch64 manylinux wheel whose binary is aarch64 and holds sm_90 SASS."""
    from tools.core.binarch import read_binary
    from tools.devtools.armimage import PYTHON as ARM_PYTHON
    data = _recipe(sdist)
    recipes = _write(tmp_path / "recipes", data, {"0001-Mark-patched.patch": PATCH})
    cuda = next(iter(data["cuda"]))
    cell = f"tinyext-{ARM_PYTHON}-cu{cuda.replace('.', '')}-aarch64"
    out, work = tmp_path / "wheelhouse", tmp_path / "work"
    stream = io.StringIO()
    planned = Planned.make(recipes)
    result = build_cell(planned.cell(cell), planned, podman_request(
        arm64_image, sdist=sdist, out_dir=out, work_root=work, stream=stream))
    report, said = result.report, stream.getvalue()
    (work / "aarch64-build.log").write_text(said)
    assert report.verdict == "passed", said[-4000:]
    assert report.plat == "auto"
    (wheel,) = out.glob("*.whl")
    assert f"-cp{ARM_PYTHON.replace('.', '')}-" in wheel.name
    assert wheel.name.endswith("_aarch64.whl") and "-manylinux_2_" in wheel.name
    with zipfile.ZipFile(wheel) as zf:
        manifest = read_manifest(zf)
        (so,) = [n for n in zf.namelist() if n.endswith(".so")]
        binary = read_binary(zf.read(so)[:64])
    assert binary.arch == "aarch64", binary.describe()
    assert manifest["backend"] == "container" and manifest["image"] == arm64_image
    assert [v["sass"] for v in manifest["archs"]["found"].values()] == [["90"]]
    log = (work / cell / "cibuildwheel.log").read_text()
    assert "Testing wheel..." in log          # the import ran in the aarch64 container
