"""tools.probing.kernelsame: a unit's compile command turned into a preprocessing one, the text
compared across torch series with the paths that differ by construction made equal, the torch
headers that make two series differ named, and the span the plan groups by written."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tools.core.errors import ProbeError, ToolchainError
from tools.plan.groups import UNITS_FILE
from tools.plan.job import load_job
from tools.probing import kernelsame
from tools.probing.compdb import Unit

NINJA_NVCC = ("/usr/local/cuda/bin/nvcc -MD -MF /w/build/x.o.d --generate-dependencies-with-"
              "compile --dependency-output /w/build/x.o.d -I/w/site/torch/include -c "
              "/w/src/csrc/x.cu -o /w/build/x.o -O3 -std=c++20 '-DNAME=\"a b\"'")


def test_preprocess_argv_swaps_the_compile_for_e_and_drops_dependency_files(tmp_path):
    argv = kernelsame.preprocess_argv(NINJA_NVCC, tmp_path / "x.ii")
    assert argv[0] == "/usr/local/cuda/bin/nvcc" and "-E" in argv and "-c" not in argv
    assert argv[argv.index("-o") + 1] == str(tmp_path / "x.ii")
    for gone in ("-MD", "-MF", "/w/build/x.o.d", "--generate-dependencies-with-compile",
                 "--dependency-output", "/w/build/x.o"):
        assert gone not in argv
    assert argv[-3:] == ["-O3", "-std=c++20", '-DNAME="a b"']       # the rest as written


def test_preprocess_argv_refuses_a_line_that_compiles_nothing(tmp_path):
    with pytest.raises(ProbeError, match="not a compile command"):
        kernelsame.preprocess_argv("nvcc --version", tmp_path / "x.ii")


def test_normalize_and_included_under():
    text = ('# 1 "/w/cell-a/work/src/x.cu"\n# 1 "/v/site-packages/torch/include/c10/a.h" 1\n'
            'int a;\n#line 7 "/v/site-packages/torch/include/ATen/b.h"\n'
            '# 3 "/usr/include/stdio.h" 3\n')
    assert kernelsame.included_under(text, "/v/site-packages/torch/include") == [
        "ATen/b.h", "c10/a.h"]
    out = kernelsame.normalize(text, {"/w/cell-a/work": "<work>", "/w/cell-a": "<cell>",
                                      "/v/site-packages": "<site-packages>"})
    assert '"<work>/src/x.cu"' in out and "<site-packages>/torch/include/c10/a.h" in out


def _series(torch: str, **units: tuple[str, dict[str, str]]) -> kernelsame.SeriesKernels:
    return kernelsame.SeriesKernels(f"pkg-3.12-cu130-torch{torch}", torch, {
        name: kernelsame.UnitText(digest, headers) for name, (digest, headers) in units.items()})


def test_compare_names_the_headers_that_differ():
    a = _series("2.14.1", **{"k1.cu": ("x", {"c10/a.h": "1", "c10/b.h": "2"}),
                             "k2.cu": ("y", {})})
    b = _series("2.13.0", **{"k1.cu": ("z", {"c10/a.h": "1", "c10/b.h": "3"}),
                             "k2.cu": ("y", {})})
    verdicts = {v.unit: v for v in kernelsame.compare([a, b])}
    assert verdicts["k2.cu"].same and verdicts["k2.cu"].torch_headers == 0
    k1 = verdicts["k1.cu"]
    assert not k1.same and k1.torch_headers == 2 and k1.differing_headers == ["c10/b.h"]
    assert k1.digests == {"2.14.1": "x", "2.13.0": "z"}
    table = kernelsame.format_table("pkg-3.12-cu130", [a, b], list(verdicts.values()))
    assert "1 of 2 CUDA units preprocess the same against torch 2.14.1, 2.13.0" in table
    assert "| `k1.cu` | 2 | 1: `c10/b.h` | the same |" in table


def test_another_command_line_is_not_the_same_though_the_text_is():
    a = _series("2.14.1", **{"k1.cu": ("x", {})})
    b = _series("2.11.0", **{"k1.cu": ("x", {})})
    b.units["k1.cu"].flags = "another -std"
    verdict, = kernelsame.compare([a, b])
    assert not verdict.same and verdict.flags_differ and verdict.differing_headers == []


def test_a_unit_one_series_lacks_is_not_the_same():
    a = _series("2.14.1", **{"k1.cu": ("x", {}), "k3.cu": ("w", {})})
    b = _series("2.13.0", **{"k1.cu": ("x", {})})
    verdicts = {v.unit: v for v in kernelsame.compare([a, b])}
    assert verdicts["k1.cu"].same and not verdicts["k3.cu"].same
    assert verdicts["k3.cu"].digests["2.13.0"] == "absent"


def test_the_span_is_the_series_that_preprocess_like_the_newest(tmp_path):
    job = load_job("causal_conv1d-3.12-cu130")
    new = _series("2.14.1+cu130", **{"a.cu": ("x", {}), "b.cu": ("y", {})})
    same = _series("2.13.0+cu130", **{"a.cu": ("x", {}), "b.cu": ("y", {})})
    other = _series("2.11.0+cu130", **{"a.cu": ("x", {}), "b.cu": ("q", {})})
    record = kernelsame.span_record(job, [new, same, other])
    assert record["torch"] == ["2.14", "2.13"] and record["units"] == 2
    assert record["digest"] == kernelsame.combined_digest(new) == kernelsame.combined_digest(same)
    assert record["platform"] == "linux_x86_64" and "--across-torch --write" in record["read_with"]
    assert record["measured"] == ["2.14", "2.13", "2.11"]
    # no two alike: the newest alone, the others named as measured (nothing shared, not due)
    alone = kernelsame.span_record(job, [new, other])
    assert alone["torch"] == ["2.14"] and alone["measured"] == ["2.14", "2.11"]
    # every series alike: no measured list, the record as before
    assert "measured" not in kernelsame.span_record(job, [new, same])


def test_a_new_series_that_differs_leaves_the_older_series_span_as_it_was():
    job = load_job("causal_conv1d-3.12-cu130")
    new = _series("2.16.0+cu130", **{"a.cu": ("changed", {})})
    older = [_series(f"{t}+cu130", **{"a.cu": ("x", {})}) for t in ("2.14.1", "2.13.0", "2.12.1")]
    record = kernelsame.span_record(job, [new, *older])
    assert record["torch"] == ["2.14", "2.13", "2.12"]
    assert record["measured"] == ["2.16", "2.14", "2.13", "2.12"]
    assert record["digest"] == kernelsame.combined_digest(older[0])
    # two sets of two: the one with the newest series
    also_new = _series("2.15.0+cu130", **{"a.cu": ("changed", {})})
    pair = kernelsame.span_record(job, [new, also_new, *older[:2]])
    assert pair["torch"] == ["2.16", "2.15"] and pair["digest"] == kernelsame.combined_digest(new)


def test_write_span_rewrites_only_the_kernels_block(tmp_path):
    path = tmp_path / UNITS_FILE
    original = ("# a header line\nschema: 1\nversion: '1.0'\nunits:\n  cuda: [a.cu]\n"
                "# a comment inside the file\nmeasured:\n  a.cu: 10\n")
    path.write_text(original)
    record = {"platform": "linux_x86_64", "torch": ["2.14", "2.13"], "digest": "d" * 64}
    kernelsame.write_span(path, "13.0", record)
    text = path.read_text()
    assert text.startswith(original)                       # every line before, comments too
    assert yaml.safe_load(text)["kernels"] == {"13.0": record}
    kernelsame.write_span(path, "12.8", {**record, "torch": ["2.10", "2.9"]})
    assert set(yaml.safe_load(path.read_text())["kernels"]) == {"13.0", "12.8"}
    # a block in the middle of the file is replaced, and what follows it kept
    path.write_text(original.replace("measured:", "kernels:\n  '13.0': {old: 1}\nmeasured:"))
    kernelsame.write_span(path, "13.0", record)
    data = yaml.safe_load(path.read_text())
    assert data["kernels"] == {"13.0": record} and data["measured"] == {"a.cu": 10}
    assert "# a comment inside the file" in path.read_text()
    kernelsame.write_span(path, "13.0", None)                    # measured again: none share
    assert path.read_text() == original
    # another platform's measurement goes under its own key, beside Linux x86_64's
    kernelsame.write_span(path, "13.0", record)
    kernelsame.write_span(path, "13.0", {**record, "platform": "linux_aarch64"})
    assert set(yaml.safe_load(path.read_text())["kernels"]) == {"13.0", "13.0-aarch64"}
    kernelsame.write_span(path, "13.0", None, platform="linux_aarch64")
    assert set(yaml.safe_load(path.read_text())["kernels"]) == {"13.0"}


def test_siblings_are_the_cells_that_differ_only_in_torch():
    job = load_job("flash_attn-3.12-cu130")
    found = kernelsame.siblings(job)
    assert [c.torch for c in found] == ["2.14", "2.13", "2.12", "2.11"]
    assert {(c.python, c.cuda, c.platform) for c in found} == {("3.12", "13.0", "linux_x86_64")}


HEADER = "#pragma once\ninline int kern(int x) { return x + 1; }\n"


def _torch_tree(root: Path, header: str) -> Path:
    include = root / "site-packages" / "torch" / "include"
    (include / "c10").mkdir(parents=True)
    (include / "c10" / "kern.h").write_text(header)
    (include / "c10" / "unused.h").write_text(f"// {root.name}\n")
    return include


@pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")
def test_a_unit_preprocesses_the_same_until_a_header_it_includes_changes(tmp_path):
    """Real preprocessing (the host compiler; nvcc's -E is driven the same way): two torch
    trees in different places with the same header give one digest; a comment added to the
    header (its code unchanged) gives another, and the header is named."""
    results = {}
    for name, header in (("a", HEADER), ("b", HEADER), ("c", "// a comment\n" + HEADER)):
        root = tmp_path / name
        include = _torch_tree(root, header)
        (root / "src").mkdir()
        (root / "src" / "k.cpp").write_text('#include "c10/kern.h"\nint k() { return kern(1); }\n')
        command = (f"c++ -MMD -MF {root}/k.o.d -I{include} -c {root}/src/k.cpp -o {root}/k.o "
                   "-O2")
        unit = Unit("src/k.cpp", "c++", command, root, root / "k.o")
        results[name] = kernelsame.preprocess_unit(
            unit, None, root / "pp" / "k.ii", kernelsame.TorchHeaders(include),
            {str(root): "<work>", str(include.parent.parent): "<site-packages>"})
        assert not (root / "k.o").exists() and not (root / "pp" / "k.ii").exists()
    assert results["a"].digest == results["b"].digest != results["c"].digest
    assert set(results["a"].torch_headers) == {"c10/kern.h"}        # unused.h isn't included
    series = [kernelsame.SeriesKernels(n, n, {"src/k.cpp": r}) for n, r in results.items()]
    verdict, = kernelsame.compare(series)
    assert not verdict.same and verdict.differing_headers == ["c10/kern.h"]


@pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")
def test_a_unit_that_does_not_preprocess_is_named(tmp_path):
    (tmp_path / "k.cpp").write_text('#include "missing.h"\n')
    unit = Unit("src/k.cpp", "c++", f"c++ -c {tmp_path}/k.cpp -o {tmp_path}/k.o", tmp_path,
                tmp_path / "k.o")
    with pytest.raises(ProbeError, match=r"(?s)src/k.cpp: preprocessing failed .*missing.h"):
        kernelsame.preprocess_unit(unit, None, tmp_path / "k.ii",
                                   kernelsame.TorchHeaders(tmp_path), {})


def test_a_cuda_version_with_one_torch_series_has_nothing_to_compare(tmp_path):
    job = load_job("flash_attn-3.12-cu129")              # CUDA 12.9 builds torch 2.8 alone
    assert [c.torch for c in kernelsame.siblings(job)] == ["2.8"]
    with pytest.raises(ProbeError, match="builds one torch series here .2.8., so there is "
                                         "nothing to compare"):
        kernelsame.across_torch(job, kernelsame.Inputs(), tmp_path)
    assert not any(tmp_path.iterdir())                     # refused before anything ran


def test_an_option_only_one_series_has_is_named_with_the_series():
    out = kernelsame.option_differences({
        "2.10.0+cu128": "nvcc -c x.cu -O3 -std=c++17",
        "2.8.0+cu128": "nvcc -c x.cu -O3 -std=c++17 -DPYBIND11_STDLIB=x -Xfatbin"})
    assert out == ["-DPYBIND11_STDLIB=x (2.8)", "-Xfatbin (2.8)"]
    verdict = kernelsame.UnitVerdict("k.cu", False, {}, 0, [], True, out)
    assert kernelsame.command_cell(verdict) == ("differ: `-DPYBIND11_STDLIB=x (2.8)`, "
                                                "`-Xfatbin (2.8)`")


@pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")
def test_a_macro_no_included_file_names_is_inert_and_one_that_is_named_is_not(tmp_path):
    """Real preprocessing: torch 2.8 put pybind11's -D options on every nvcc line; the kernel
    units include nothing that names them, so the two series' units are the same. A macro the
    unit's header names (it changes the text when defined) is never inert."""
    (tmp_path / "kern.h").write_text("#ifdef WIDE\ntypedef long T;\n#else\ntypedef int T;\n"
                                     "#endif\n")
    (tmp_path / "k.cpp").write_text('#include "kern.h"\nT k() { return 1; }\n')
    results = {}
    for torch, extra in (("2.10.0", ""), ("2.8.0", " -DPYBIND11_STDLIB=x -DWIDE"),
                         ("2.9.0", " -DPYBIND11_STDLIB=x")):
        unit = Unit("k.cpp", "c++", f"c++ -I{tmp_path} -c {tmp_path}/k.cpp -o {tmp_path}/k.o"
                    f" -O2{extra}", tmp_path, tmp_path / "k.o")
        results[torch] = kernelsame.preprocess_unit(
            unit, None, tmp_path / torch / "k.ii", kernelsame.TorchHeaders(tmp_path / "none"),
            {}, kernelsame.MacroUse())
    assert results["2.9.0"].inert == ["-DPYBIND11_STDLIB=x"]
    assert results["2.8.0"].inert == ["-DPYBIND11_STDLIB=x"]           # WIDE is named
    assert results["2.9.0"].flags == results["2.10.0"].flags != results["2.8.0"].flags
    series = [kernelsame.SeriesKernels(t, t, {"k.cpp": r}) for t, r in results.items()]
    same = kernelsame.compare([series[0], series[2]])[0]
    assert same.same and same.inert_differences == ["-DPYBIND11_STDLIB=x (2.9)"]
    assert "inert" in kernelsame.format_table("c", [series[0], series[2]], [same])
    differ = kernelsame.compare(series[:2])[0]
    assert not differ.same and differ.differing_options == ["-DWIDE (2.8)"]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_the_compiler_cache_leaves_an_inert_macro_out_of_its_key(tmp_path):
    """What makes an inert option safe to leave out: ccache, in the preprocessor mode a cell
    reads a shard's objects by, hits the object compiled without the option; another
    optimization level (an option that is not only the preprocessor's) misses."""
    from tools.pipeline.ccache import find_ccache
    (tmp_path / "k.cu").write_text("__global__ void k(float* x) { x[threadIdx.x] += 1.0f; }\n")
    env = {**os.environ, "CCACHE_DIR": str(tmp_path / "cache")}
    binary = find_ccache()
    for out, extra in (("a.o", []), ("b.o", ["-DPYBIND11_BUILD_ABI=\"_cxxabi1018\""]),
                       ("c.o", ["-O2"])):
        subprocess.run([binary, "nvcc", "-c", "k.cu", "-o", out, "-arch=sm_90", *extra],
                       cwd=tmp_path, env=env, check=True, timeout=300)
    stats = subprocess.run([binary, "--print-stats"], env=env, check=True,
                           capture_output=True, text=True, timeout=60).stdout
    counts = dict(line.split("\t") for line in stats.splitlines() if "\t" in line)
    assert (counts["preprocessed_cache_hit"], counts["cache_miss"]) == ("1", "2")


def test_the_stand_in_toolkit_answers_as_the_cells_cuda_and_preprocesses_with_the_real_one(
        tmp_path):
    from tools.pipeline.build_toolchain import find_nvcc
    from tools.probing import toolkitstandin
    try:
        real = find_nvcc(pypi=False)
    except ToolchainError:
        pytest.skip("needs a CUDA toolkit")
    other = "12.8" if real.version != "12.8" else "13.0"
    root = toolkitstandin.make(real, other, tmp_path)
    found = find_nvcc({"CUDA_HOME": str(root), "PATH": ""}, pypi=False)
    assert (found.version, found.cuda_home) == (other, str(root))
    (tmp_path / "k.cu").write_text("__global__ void kern_standin(float* x) "
                                   "{ x[0] = __CUDA_ARCH_LIST__; }\n")
    # an arch no CUDA 11 or newer compiles for (sm_30) is left out, as sm_70 is for CUDA 12.8's
    # lines under CUDA 13; the one the real compiler has stays
    arch = toolkitstandin.real_archs(Path(real.cuda_home) / "bin" / "nvcc")[-1]
    subprocess.run([str(root / "bin" / "nvcc"), "-E", "k.cu", "-o", "k.ii",
                    "-gencode", "arch=compute_30,code=sm_30",
                    f"-gencode=arch=compute_{arch},code=sm_{arch}"], cwd=tmp_path, check=True,
                   timeout=300)
    text = (tmp_path / "k.ii").read_text()
    assert "kern_standin" in text                                  # the real nvcc ran
    assert f"x[0] = {int(''.join(c for c in arch if c.isdigit())) * 10};" in text
    with pytest.raises(ProbeError, match="no stand-in is needed"):
        toolkitstandin.make(real, real.version, tmp_path)


def test_the_python_free_block_is_written_beside_the_kernels_block(tmp_path):
    path = tmp_path / UNITS_FILE
    original = "schema: 1\nversion: '1.0'\nunits:\n  cuda: [a.cu]\n"
    path.write_text(original)
    span = {"platform": "linux_x86_64", "torch": ["2.14", "2.13"], "digest": "d" * 64}
    free = {"platform": "linux_x86_64", "torch": ["2.14", "2.13"], "sources": "e" * 64}
    kernelsame.write_span(path, "13.0", free, block="python_free")
    kernelsame.write_span(path, "13.0", span)
    data = yaml.safe_load(path.read_text())
    assert data["kernels"] == {"13.0": span} and data["python_free"] == {"13.0": free}
    assert path.read_text().index("kernels:") < path.read_text().index("python_free:")
    kernelsame.write_span(path, "13.0", None)
    kernelsame.write_span(path, "13.0", None, block="python_free")
    assert path.read_text() == original


def test_a_series_whose_units_include_python_is_not_python_free():
    job = load_job("torch_scatter-3.12-cu130")
    free = _series("2.14.1+cu130", **{"a.cu": ("x", {})})
    bound = _series("2.13.0+cu130", **{"a.cu": ("y", {})})
    record = kernelsame.python_free_record(job, [free, bound])
    assert record["torch"] == ["2.14", "2.13"] and record["units"] == 1
    assert record["read_with"] == ("python -m tools.probe torch_scatter-3.12-cu130 "
                                   "--across-torch --write")
    bound.units["a.cu"].python_headers = 12           # torch/extension.h brings Python.h in
    assert kernelsame.python_free_record(job, [free, bound]) is None


def test_the_siblings_of_a_recipe_that_depends_on_another_are_planned_with_it():
    """torch_sparse needs torch_scatter's wheel: its plan links the two, so the probe plans
    every recipe of its folder (it used to stop at 'there is no recipe torch_scatter')."""
    job = load_job("torch_sparse-3.12-cu130")
    assert job.recipe.depends
    assert [c.torch for c in kernelsame.siblings(job)] == ["2.14", "2.13", "2.12", "2.11"]


def test_the_table_says_whether_the_pythons_of_a_series_share_the_units():
    free = _series("2.14.1+cu130", **{"a.cu": ("x", {}), "b.cu": ("y", {})})
    verdicts = kernelsame.compare([free, free])
    assert "0 of 2 CUDA units include Python's headers: the Pythons of a series share them" in \
        kernelsame.format_table("c", [free, free], verdicts)
    free.units["b.cu"].python_headers = 111
    assert "1 of 2 CUDA units include Python's headers (`b.cu`): each Python compiles them" in \
        kernelsame.format_table("c", [free, free], verdicts)


def test_a_measurement_that_adds_a_series_keeps_the_groups_digest():
    """Measured elsewhere (another machine's system headers, another digest), a record whose
    series include every series already recorded keeps the recorded digest, so the group's key
    and the kernel store's entries stay; other sources or a series dropped take the new one."""
    old = {"platform": "linux_x86_64", "torch": ["2.14", "2.13"], "digest": "a" * 64,
           "sources": "s" * 64}
    text = yaml.safe_dump({"schema": 1, "kernels": {"13.0": old}})
    grown = {**old, "torch": ["2.15", "2.14", "2.13"], "digest": "b" * 64}
    assert kernelsame.continued(text, "13.0", grown) == {**grown, "digest": "a" * 64}
    assert kernelsame.continued(text, "13.0", {**grown, "sources": "t" * 64})["digest"] == "b" * 64
    dropped = {**grown, "torch": ["2.15", "2.14"], "measured": ["2.15", "2.14", "2.13"]}
    assert kernelsame.continued(text, "13.0", dropped)["digest"] == "b" * 64
    aarch64 = {**grown, "platform": "linux_aarch64"}        # another platform's key: its own
    assert kernelsame.continued(text, "13.0", aarch64)["digest"] == "b" * 64
    alone = {**grown, "torch": ["2.15"], "measured": ["2.15", "2.14", "2.13"]}
    assert kernelsame.continued(text, "13.0", alone)["digest"] == "b" * 64
