"""A recipe that depends on another (torch_sparse imports torch_scatter): the ``depends`` block,
the plan's links between cells, the Requires-Dist, finding or first building the needed wheel,
and the container's mounts for it; then the real thing: a fixture extension whose package imports
tinyext, built on the host, its needed tinyext cell built first, both installed and imported by
the import check."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.fixtures.make_tinyext_sdist import make_sdist
from tests.test_build import PATCH, _recipe, _write
from tests.wheelfactory import make_wheel
from tools import ROOT
from tools.backends.cibw import (CONTAINER_NEEDS, ContainerSpec, ContainerLimits, Mounts, cibw_options,
                                 with_needs)
from tools.core.errors import PlanError, RecipeError, VerifyError
from tools.plan.cells import find_cell, plan
from tools.plan.job import BuildJob
from tools.builder.needs import find_wheel, is_wheel_of, provide
from tools.plan.recipes.model import load_all, load_recipe
from tools.finish.wheelmeta import read_metadata, set_version_and_pin

DEPENDS = [{"package": "demo_ext", "reason": "its package imports demo_ext"}]


def _dependent(good_recipe: dict, **changes) -> dict:
    data = copy.deepcopy(good_recipe)
    data.update(package="dep_ext", imports=["dep_ext"], depends=DEPENDS,
                source={**data["source"], "pypi": "dep-ext", "sdist": "dep_ext-1.0.0.tar.gz",
                        "url": "https://files.example.invalid/dep_ext-1.0.0.tar.gz"})
    data.update(changes)
    return data


# ---- the recipe's depends block ------------------------------------------------------------


def test_depends_loads(write_recipe, good_recipe, mini_table):
    r = load_recipe(write_recipe(_dependent(good_recipe)), mini_table)
    assert [(d.package, d.reason) for d in r.depends] == [("demo_ext", DEPENDS[0]["reason"])]
    assert load_recipe(write_recipe(good_recipe), mini_table).depends == ()


@pytest.mark.parametrize("entries, message", [
    ([{"package": "dep_ext", "reason": "x imports itself"}],
     "depends[0].package: a recipe can't depend on itself"),
    ([DEPENDS[0], DEPENDS[0]], "depends[1].package: demo_ext is listed twice"),
    ([{"package": "Torch-Scatter", "reason": "a PyPI name, not a folder"}],
     "depends[0].package: 'Torch-Scatter' is not a recipe folder name"),
    ([{"package": "demo_ext"}], "depends[0]"),
])
def test_bad_depends_are_named(write_recipe, good_recipe, mini_table, entries, message):
    folder = write_recipe(_dependent(good_recipe, depends=entries))
    with pytest.raises(RecipeError) as err:
        load_recipe(folder, mini_table)
    assert message in str(err.value) and str(folder / "recipe.yaml") in str(err.value)


# ---- the plan links cells ------------------------------------------------------------------


def test_each_cell_needs_the_same_cell_of_its_dependency(write_recipe, good_recipe, mini_table):
    write_recipe(good_recipe)
    write_recipe(_dependent(good_recipe))
    cells = plan(load_all(write_recipe(good_recipe).parent, mini_table), mini_table)
    dep = find_cell("dep_ext-3.12-cu130-torch2.9", cells)
    assert dep.needs == ("demo_ext-3.12-cu130-torch2.9",) and dep.needs_dist == ("demo-ext",)
    assert all(c.needs == () for c in cells if c.package == "demo_ext")
    as_json = dep.to_json()
    assert as_json["needs"] == ["demo_ext-3.12-cu130-torch2.9"]
    assert as_json["needs_dist"] == ["demo-ext"]


def test_a_dependency_that_lacks_a_cell_is_named(write_recipe, good_recipe, mini_table):
    narrow = copy.deepcopy(good_recipe)
    narrow["cuda"]["13.0"]["torch"] = ["2.10"]
    root = write_recipe(narrow).parent
    write_recipe(_dependent(good_recipe))
    with pytest.raises(PlanError) as err:
        plan(load_all(root, mini_table), mini_table)
    text = str(err.value) + (err.value.hint or "")
    assert "dep_ext/recipe.yaml: depends[0].package: demo_ext has no build serving" in text
    assert "CUDA 13.0, torch 2.9" in text
    assert "demo_ext/recipe.yaml" in text   # where to add it


def test_a_missing_recipe_and_a_cycle_are_named(write_recipe, good_recipe, mini_table):
    root = write_recipe(_dependent(good_recipe)).parent
    with pytest.raises(PlanError, match="there is no recipe 'demo_ext'"):
        plan(load_all(root, mini_table), mini_table)
    write_recipe({**good_recipe, "depends": [{"package": "dep_ext", "reason": "a cycle between the two test recipes"}]})
    with pytest.raises(PlanError, match=r"cycle \((dep_ext -> demo_ext -> dep_ext|"
                                        r"demo_ext -> dep_ext -> demo_ext)\)"):
        plan(load_all(root, mini_table), mini_table)


def test_the_repositorys_dependents_plan():
    """Every depends in the repository's recipes resolves for every cell."""
    for cell in plan():
        assert len(cell.needs) == len(cell.needs_dist)


# ---- the wheel requires its dependency ----------------------------------------------------


def test_the_wheel_requires_each_dependency_once(tmp_path):
    raw = make_wheel(tmp_path / "raw", "dep-ext", "1.0.0", requires_dist=["torch", "scipy"],
                     tag="py3-none-any")
    out = set_version_and_pin(raw, tmp_path / "out", label="cu130.torch2.13",
                              torch_pin="torch==2.13.*", manifest=None, epoch=1577750400,
                              requires=("demo-ext", "SciPy"))
    meta = read_metadata(out).splitlines()
    requires = [line for line in meta if line.startswith("Requires-Dist:")]
    # scipy was required already (names compare canonically); demo-ext is added
    assert requires == ["Requires-Dist: torch==2.13.*", "Requires-Dist: scipy",
                        "Requires-Dist: demo-ext"]


# ---- finding the needed wheel, or building it first -----------------------------------------


@pytest.fixture
def two_cells(write_recipe, good_recipe, mini_table):
    write_recipe(good_recipe)
    root = write_recipe(_dependent(good_recipe)).parent
    cells = plan(load_all(root, mini_table), mini_table)
    dep = find_cell("dep_ext-3.12-cu130-torch2.9", cells)
    return dep, find_cell(dep.needs[0], cells)


def _wheel_of(folder: Path, cell, *, python="cp312", build="") -> Path:
    """An empty file named as ``cell``'s wheel: finding wheels reads only their names."""
    folder.mkdir(parents=True, exist_ok=True)
    return _touch(folder / f"demo_ext-{cell.version}+{cell.label}{build}-{python}-{python}-"
                           "manylinux_2_28_x86_64.whl")


def _touch(path: Path) -> Path:
    path.write_bytes(b"")
    return path


def test_is_wheel_of_checks_name_version_label_and_python(two_cells, tmp_path):
    _, needed = two_cells
    right = _wheel_of(tmp_path / "a", needed)
    assert is_wheel_of(right, needed, "demo-ext")
    assert not is_wheel_of(_wheel_of(tmp_path / "b", needed, python="cp311"), needed, "demo-ext")
    other_label = tmp_path / "c" / right.name.replace("torch2.9", "torch2.10")
    other_label.parent.mkdir()
    assert not is_wheel_of(_touch(other_label), needed, "demo-ext")
    assert not is_wheel_of(right, needed, "other-ext")
    assert not is_wheel_of(_touch(tmp_path / "a" / "not-a-wheel.whl"), needed, "demo-ext")


def test_found_wheels_are_used_and_the_highest_build_wins(two_cells, tmp_path):
    cell, needed = two_cells
    out, house = tmp_path / "out", tmp_path / "house"
    _wheel_of(house, needed)
    rebuilt = _wheel_of(house, needed, build="-2")
    assert find_wheel(needed, "demo-ext", (out, house)) == rebuilt

    said, built = [], []
    got = provide(cell, [needed], search=(out, house), into=tmp_path / "needs",
                  build=lambda *a: built.append(a), say=said.append)
    assert built == [] and got == (tmp_path / "needs" / rebuilt.name,) and got[0].is_file()
    assert said == [f"needs {needed.id}: {rebuilt}"]


def test_a_missing_wheel_is_built_first(two_cells, tmp_path):
    cell, needed = two_cells
    calls, said = [], []

    def build(other, out: Path) -> Path:
        calls.append((other, out))
        return _wheel_of(out, needed)

    got = provide(cell, [needed], search=(tmp_path / "out",), into=tmp_path / "needs",
                  build=build, say=said.append)
    assert calls == [(needed, tmp_path / "needs" / "build")]   # the plan's cell itself
    assert got[0].parent == tmp_path / "needs" and is_wheel_of(got[0], needed, "demo-ext")
    assert "no wheel of it in" in said[0] and "building it first" in said[0]

    with pytest.raises(VerifyError, match=f"{cell.id} needs {needed.id}, whose build made"):
        provide(cell, [needed], search=(), into=tmp_path / "needs2", say=said.append,
                build=lambda other, out: _wheel_of(out, needed, python="cp311"))


# ---- the container gets the needed wheels ---------------------------------------------------


def test_the_container_mounts_the_needed_wheels_and_installs_them_first(world, tmp_path):
    table, recipes, cells = world()
    cell = cells[0]
    recipe = next(r for r in recipes if r.package == cell.package)
    folder = tmp_path / "needs"
    folder.mkdir()
    wheels = (_touch(folder / "demo_ext-1.0.0+cu130.torch2.9-cp312-cp312-linux_x86_64.whl"),)
    mounts = with_needs(Mounts(volumes=("/a:/b",)), wheels)
    assert mounts.volumes == ("/a:/b", f"{folder}:{CONTAINER_NEEDS}:ro")
    options = cibw_options(BuildJob(cell, recipe, table),
                           ContainerSpec("docker", ContainerLimits(8, 2), mounts=mounts), archs=cell.archs,
                           recipe_revision="abc")
    assert f"--volume {folder}:{CONTAINER_NEEDS}:ro" in options["CIBW_CONTAINER_ENGINE"]
    before_test = options["CIBW_BEFORE_TEST"]
    torch_install, needs_install = before_test.split(" && ")[-2:]
    assert "torch==" in torch_install
    assert needs_install == (f"python -m pip install --no-deps {CONTAINER_NEEDS}/"
                             f"{wheels[0].name}")
    assert with_needs(Mounts(), ()) == Mounts()


# ---- the real thing ------------------------------------------------------------------------


def tinydep_recipe(sdist: Path) -> dict:
    """The fixture recipe of tinydep (tinyext renamed, its package importing tinyext: make it
    with ``make_sdist(dir, name="tinydep", imports=("tinyext",))``), depending on tinyext."""
    dep = _recipe(sdist)
    dep.update(package="tinydep", imports=["tinydep_cuda", "tinydep"],
               depends=[{"package": "tinyext", "reason": "tinydep/__init__.py imports tinyext"}],
               source={**dep["source"], "pypi": "tinydep"},
               arch_env={**dep["arch_env"], "name": "TINYDEP_CUDA_ARCHS"}, patches=[])
    return dep


@pytest.mark.cuda
@pytest.mark.network
def test_a_dependent_builds_its_needed_cell_first_and_imports_with_it(tmp_path):
    """tinydep's package imports tinyext: building tinydep's cell with no tinyext wheel at hand
    builds tinyext's cell first (a real nvcc compile), then tinydep's; its import check
    installs both; only tinydep's wheel is published, and it requires tinyext."""
    sdists = tmp_path / "sdists"
    base, dep_sdist = make_sdist(sdists), make_sdist(sdists, name="tinydep", imports=("tinyext",))
    recipes = tmp_path / "recipes"
    _write(recipes, _recipe(base), {"0001-Mark-patched.patch": PATCH})
    dep = tinydep_recipe(dep_sdist)
    _write(recipes, dep, {})
    cuda = next(iter(dep["cuda"])).replace(".", "")
    cell, needed = f"tinydep-3.11-cu{cuda}", f"tinyext-3.11-cu{cuda}"
    out, work = tmp_path / "wheelhouse", tmp_path / "work"

    proc = subprocess.run([sys.executable, "-m", "tools.build", cell, "--backend", "host",
                           "--recipes", str(recipes), "--wheels", str(out), "--work", str(work),
                           "--sdist-dir", str(sdists)], cwd=ROOT, capture_output=True,
                          text=True, timeout=3600)

    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"needs {needed}: no wheel of it in {out}" in proc.stderr
    assert f"[{needed}" in proc.stderr            # its own build's progress lines
    (wheel,) = out.glob("*.whl")                  # the needed wheel is not published here
    assert wheel.name.startswith("tinydep-0.1.0+")
    assert "Requires-Dist: tinyext" in read_metadata(wheel).splitlines()
    report = json.loads((work / cell / "report.json").read_text())
    (kept,) = report["needs"]
    assert Path(kept).parent == work / cell / "needs" and Path(kept).name.startswith("tinyext-")
    verify = next(s for s in report["steps"] if s["name"] == "verify")
    assert verify["detail"]["smoke_test"] == "passed"
    with zipfile.ZipFile(kept) as zf:
        assert any(n.startswith("tinyext_cuda") for n in zf.namelist())

    # A second build finds the needed wheel in the output directory and builds nothing else.
    (out / Path(kept).name).write_bytes(Path(kept).read_bytes())
    cells = plan(load_all(recipes))
    assert find_wheel(find_cell(needed, cells), "tinyext", (out,)) == out / Path(kept).name


def test_a_free_threaded_cells_wheel_is_told_from_its_normal_siblings(tmp_path):
    """A 3.14 cell and a 3.14t cell make wheels of one version and label, cp314-cp314 and
    cp314-cp314t: each cell takes only its own."""
    from wheelfactory import make_wheel
    from tools.builder.needs import is_wheel_of
    from tools.plan.cells import find_cell, plan

    cells = plan()
    normal, free = (find_cell(f"causal_conv1d-{py}-cu130", cells) for py in ("3.14", "3.14t"))
    wheels = {abi: make_wheel(tmp_path, "causal-conv1d", normal.version, local=normal.label,
                              tag=f"cp314-{abi}-manylinux_2_28_x86_64") for abi in ("cp314", "cp314t")}
    assert [is_wheel_of(wheels[a], normal, "causal-conv1d") for a in ("cp314", "cp314t")] == [True, False]
    assert [is_wheel_of(wheels[a], free, "causal-conv1d") for a in ("cp314", "cp314t")] == [False, True]
