"""tools.plan.recipes.model: recipe loading and validation: the good recipe loads; each bad one is
named precisely."""

from __future__ import annotations

import re

import pytest

from tools.core.errors import RecipeError
from tools.plan.recipes.model import load_all, load_recipe, recipe_folders


def test_good_recipe_loads(write_recipe, good_recipe, mini_table):
    r = load_recipe(write_recipe(good_recipe), mini_table)
    assert r.package == "demo_ext"
    assert [t.cuda for t in r.cuda] == ["12.9", "13.0"]
    assert r.target("13.0").torch == ("2.10", "2.9")  # default first, as written
    assert r.archs_for("12.9", mini_table) == ("80", "90", "120")
    assert r.archs_for("13.0", mini_table) == ("80", "90")  # from "*"
    assert r.pythons_for("2.8", mini_table) == ["3.10", "3.11", "3.12", "3.13"]
    assert r.patches[0].path.is_file()
    assert r.check is None  # no kernel check declared, none in the folder


def test_abi_defaults_to_one_build_per_python_and_torch(write_recipe, good_recipe, mini_table):
    r = load_recipe(write_recipe(good_recipe), mini_table)
    assert (r.abi.python, r.abi.torch, r.abi.collapsed) == ("cpython", "exact", False)
    good_recipe["abi"] = {"python": "abi3", "python_from": "3.11", "torch": "stable", "torch_from": "2.8",
                          "reason": "py_limited_api=True and TORCH_TARGET_VERSION=2.8 in setup.py"}
    r = load_recipe(write_recipe(good_recipe), mini_table)
    assert (r.abi.python, r.abi.python_from, r.abi.torch, r.abi.torch_from) == ("abi3", "3.11", "stable", "2.8")
    # abi3 from 3.11 serves 3.11 and newer of the torches it serves, nothing older.
    assert r.served_pythons(("2.10", "2.9"), mini_table) == ["3.11", "3.12", "3.13", "3.14"]


def test_inherit_takes_the_table_default(write_recipe, good_recipe, mini_table):
    good_recipe["archs"] = "inherit"
    r = load_recipe(write_recipe(good_recipe), mini_table)
    assert r.archs_for("13.0", mini_table) == ("75", "80", "86", "90", "100", "110", "120")


def _set(data, path, value):
    *parents, last = path.split("/")
    for key in parents:
        data = data[key]
    if value is _DELETE:
        del data[last]
    else:
        data[last] = value


_DELETE = object()

# (id, key path to change, new value, substrings the message must contain)
BAD = [
    # an unknown top-level key is probably a typo of a real one
    ("unknown-key", "enviroment", {"X": 1}, ["enviroment: unknown key", "use one of"]),
    # a nested unknown key, in source
    ("unknown-nested-key", "source/md5", "abc", ["source.md5: unknown key"]),
    # the sha256 is what makes the build reproducible
    ("missing-sha256", "source/sha256", _DELETE, ["source.sha256: required key is missing"]),
    ("missing-imports", "imports", _DELETE, ["imports: required key is missing"]),
    # YAML turns an unquoted 12.8 into a float
    ("wrong-type-version", "source/version", 1.0, ["source.version: must be a string",
                                                   "quote version numbers"]),
    ("wrong-type-isolation", "build/isolation", "no", ["build.isolation: must be true or false"]),
    ("bad-sha256", "source/sha256", "abc123", ["source.sha256", "not 64 lowercase hex"]),
    ("sdist-name-mismatch", "source/sdist", "other-1.0.0.tar.gz",
     ["source.sdist", "not the sdist of demo-ext 1.0.0"]),
    ("cuda-not-in-table", "cuda/11.8", {"torch": ["2.8"], "reason": "old GPUs need it"},
     ["cuda.11.8", "not in the compatibility table"]),
    ("torch-not-in-table", "cuda/12.9/torch", ["2.5"], ["cuda.12.9.torch",
                                                       "torch '2.5' is not in the compatibility"]),
    # torch 2.9 has no CUDA 12.9 build in the table
    ("torch-cuda-combination", "cuda/12.9/torch", ["2.9"],
     ["torch 2.9 is not published for CUDA 12.9", "torch series built for CUDA 12.9: 2.8"]),
    # torch 2.8 supports 3.9-3.13 only
    ("torch-python-combination", "python", ">=3.14",
     ["no Python version of torch 2.8", "satisfies python '>=3.14'"]),
    # CUDA 13 dropped Volta
    ("arch-too-old-for-cuda", "archs", {"*": ["70", "80"]},
     ["archs.*", "sm_70 cannot be compiled by CUDA 13.0"]),
    # CUDA 12.6 predates Blackwell; here via a CUDA-specific list
    ("arch-too-new-for-cuda", "archs", {"*": ["80"], "13.0": ["80", "121"]},
     ["archs.13.0", "sm_121 cannot be compiled by CUDA 13.0"]),
    ("archs-bad-string", "archs", "all", ["archs", "neither 'inherit' nor a mapping"]),
    ("bad-specifier", "python", "3.10+", ["python", "not a PEP 440 specifier"]),
    ("reserved-env", "env/MAX_JOBS", {"value": "4", "reason": "the runner has 4 cores"},
     ["env.MAX_JOBS", "set by the pipeline", "job_memory_gib"]),
    ("env-without-reason", "env/DEMO_FORCE_BUILD", {"value": "TRUE"},
     ["env.DEMO_FORCE_BUILD.reason: required key is missing"]),
    ("reason-too-short", "cuda/12.9/reason", "yes", ["cuda.12.9.reason", "too short"]),
    ("arch-env-style", "arch_env/style", "cmake", ["arch_env.style", "not one of plain, torch"]),
    ("torch-in-build-requires", "build/requires",
     [{"requirement": "torch>=2.8", "reason": "it needs torch to build"}],
     ["build.requires[0]", "torch comes from the cell"]),
    ("package-folder-mismatch", "package", "other_ext", ["package", "differs from the folder"]),
    ("schema-version", "schema", 2, ["schema: version 2 is not understood"]),
    # a fixed thread count needs the count
    ("fixed-threads-without-count", "build/nvcc_threads_fixed", True,
     ["build.nvcc_threads_fixed", "doesn't say to what"]),
    # a rebuild says why; build numbers count up from 0
    ("build-number-without-reason", "build/number", 1, ["build.number: a rebuild needs its reason"]),
    ("build-number-negative", "build/number", -1, ["build.number: -1 is not a build number"]),
    ("build-number-not-a-number", "build/number", "2", ["build.number: must be"]),
    ("build-number-reason-without-number", "build/number_reason", "rebuilt against the fixed patch",
     ["build.number_reason: explains a rebuild, but build.number is 0"]),
    # abi: what the binary depends on, which decides how many builds serve the matrix
    ("abi-python-kind", "abi", {"python": "pypy", "torch": "exact", "reason": "a pybind11 module"},
     ["abi.python", "'pypy' is not one of cpython, abi3, none"]),
    ("abi-torch-kind", "abi", {"python": "cpython", "torch": "any", "reason": "a pybind11 module"},
     ["abi.torch", "'any' is not one of exact, stable"]),
    ("abi-without-reason", "abi", {"python": "none", "torch": "exact"}, ["abi.reason: required key is missing"]),
    ("abi3-without-python-from", "abi", {"python": "abi3", "torch": "exact", "reason": "py_limited_api=True"},
     ["abi.python_from", "abi3 needs the oldest Python"]),
    ("python-from-without-abi3", "abi", {"python": "none", "python_from": "3.10", "torch": "exact",
                                         "reason": "no Python C API"}, ["abi.python_from", "only means something"]),
    ("python-from-not-a-version", "abi", {"python": "abi3", "python_from": "310", "torch": "exact",
                                          "reason": "py_limited_api=True"}, ["abi.python_from", "not a Python version"]),
    ("stable-without-torch-from", "abi", {"python": "none", "torch": "stable", "reason": "TORCH_TARGET_VERSION"},
     ["abi.torch_from", "stable needs the oldest torch series"]),
    ("torch-from-unknown", "abi", {"python": "none", "torch": "stable", "torch_from": "2.5",
                                   "reason": "TORCH_TARGET_VERSION=2.5"},
     ["abi.torch_from", "torch '2.5' is not in the compatibility table"]),
    # the recipe lists torch 2.8 (CUDA 12.9) and 2.9 (CUDA 13.0): a build for 2.10's shim can't load there
    ("torch-from-newer-than-a-listed-series", "abi", {"python": "none", "torch": "stable", "torch_from": "2.10",
                                                      "reason": "TORCH_TARGET_VERSION=2.10"},
     ["cuda.12.9.torch: lists torch 2.8, older than abi.torch_from 2.10", "cuda.13.0.torch: lists torch 2.9",
      "drop 2.9 or lower abi.torch_from"]),
    ("patch-bad-name", "patches", [{"file": "fix.patch", "reason": "fixes the build",
                                    "upstream": "not submitted"}],
     ["patches[0].file", "not named NNNN-Subject.patch"]),
    # the sdist's name becomes a path in the work folder, written and deleted there
    ("sdist-absolute", "source/sdist", "/tmp/victim/demo_ext-1.0.0.tar.gz",
     ["source.sdist: '/tmp/victim/demo_ext-1.0.0.tar.gz' is not a plain file name"]),
    ("sdist-dotdot", "source/sdist", "../../demo_ext-1.0.0.tar.gz",
     ["source.sdist: '../../demo_ext-1.0.0.tar.gz' is not a plain file name"]),
    ("version-not-pep440", "source/version", "1.0.0/../../x",
     ["source.version: '1.0.0/../../x' is not a PEP 440 version"]),
    ("pypi-not-a-name", "source/pypi", "demo ext", ["source.pypi: 'demo ext' is not a PyPI project"]),
    # the host after '@' is the one a download would ask
    ("url-userinfo", "source/url",
     "https://files.pythonhosted.org@127.0.0.1:8443/demo_ext-1.0.0.tar.gz",
     ["source.url", "has a user name or password before '@'", "would go to '127.0.0.1'"]),
    ("url-port", "source/url", "https://files.example.invalid:8443/demo_ext-1.0.0.tar.gz",
     ["source.url", "names a port"]),
    ("url-broken-host", "source/url", "https://[files.example.invalid/demo_ext-1.0.0.tar.gz",
     ["source.url", "is not a URL (Invalid IPv6 URL)"]),
    # a build requirement is a PEP 508 requirement, never an installer option or a URL
    ("requirement-option", "build/requires",
     [{"requirement": "--extra-index-url=http://127.0.0.1:8443/simple", "reason": "mirror"}],
     ["build.requires[0].requirement: '--extra-index-url=http://127.0.0.1:8443/simple' is not a "
      "PEP 508 requirement", "installer options are not requirements"]),
    ("requirement-url", "build/requires",
     [{"requirement": "ninja @ https://127.0.0.1/ninja.whl", "reason": "a faster build"}],
     ["build.requires[0].requirement", "names a URL"]),
    ("requirement-newline", "build/requires",
     [{"requirement": "ninja\n--index-url=http://x", "reason": "a faster build"}],
     ["build.requires[0].requirement: contains a newline"]),
    # variables the system, the tools or the pipeline read are not the package's
    ("env-ld-preload", "env/LD_PRELOAD", {"value": "/tmp/x.so", "reason": "a faster malloc"},
     ["env.LD_PRELOAD: LD_PRELOAD is not the package's to set: the dynamic loader"]),
    ("env-path", "env/PATH", {"value": "/tmp:/usr/bin", "reason": "its own compiler"},
     ["env.PATH: PATH is not a package's build variable: a one-word name"]),
    ("env-pip", "env/PIP_EXTRA_INDEX_URL", {"value": "http://x", "reason": "a mirror for it"},
     ["env.PIP_EXTRA_INDEX_URL", "pip reads PIP_* as its options"]),
    ("env-newline", "env/DEMO_FORCE_BUILD", {"value": "TRUE\nLD_PRELOAD=/tmp/x.so",
                                             "reason": "never download a prebuilt wheel"},
     ["env.DEMO_FORCE_BUILD.value: contains a newline"]),
    ("arch-env-system-name", "arch_env/name", "PYTHONPATH",
     ["arch_env.name: PYTHONPATH is not the package's to set"]),
    # numbers that are not sizes
    ("job-memory-nan", "build/job_memory_gib", float("nan"),
     ["build.job_memory_gib: nan is not a size of one compile job"]),
    ("job-memory-inf", "build/job_memory_gib", float("inf"),
     ["build.job_memory_gib: inf is not a size of one compile job"]),
    ("job-memory-string", "build/job_memory_gib", "3.5",
     ["build.job_memory_gib: must be an integer or a number, got a string ('3.5')"]),
    ("nvcc-threads-absurd", "build/nvcc_threads", 1_000_000_000,
     ["build.nvcc_threads: 1000000000 is not a thread count for nvcc's --threads (1 to 64)"]),
    ("build-number-absurd", "build/number", 10 ** 12, ["build.number", "is not a build number"]),
]


@pytest.mark.parametrize("case_id,path,value,expect", BAD, ids=[b[0] for b in BAD])
def test_bad_recipe_is_named(case_id, path, value, expect, write_recipe, good_recipe, mini_table):
    _set(good_recipe, path, value)
    folder = write_recipe(good_recipe, name="demo_ext")
    with pytest.raises(RecipeError) as info:
        load_recipe(folder, mini_table)
    message = str(info.value)
    assert str(folder / "recipe.yaml") in message  # the file is named
    for part in expect:
        assert part in message, f"{part!r} not in:\n{message}"


@pytest.mark.parametrize("key,value,message", [
    ("isolation", "no", "build.isolation: must be true or false"),
    ("requires", "ninja", "build.requires: must be a list, got a string ('ninja')"),
    ("job_memory_gib", None, "build.job_memory_gib: must be an integer or a number"),
])
def test_a_wrong_required_key_beside_an_optional_one_is_named(key, value, message, write_recipe,
                                                              good_recipe, mini_table):
    """``nvcc_threads`` (optional) made the wrong key's block look complete: a KeyError."""
    good_recipe["build"].update({"nvcc_threads": 4, key: value})
    with pytest.raises(RecipeError, match=re.escape(message)):
        load_recipe(write_recipe(good_recipe), mini_table)


def test_allowed_variables_are_the_packages_own(write_recipe, good_recipe, mini_table):
    good_recipe["env"].update({name: {"value": "1", "reason": "what the build script reads"}
                               for name in ("FORCE_CUDA", "DEMO_EXT_WITH_OPS", "BUILD_TARGET")})
    names = [v.name for v in load_recipe(write_recipe(good_recipe), mini_table).env]
    assert names == ["DEMO_FORCE_BUILD", "FORCE_CUDA", "DEMO_EXT_WITH_OPS", "BUILD_TARGET"]


def test_two_recipes_of_one_project_are_refused(write_recipe, good_recipe, mini_table, tmp_path):
    first = write_recipe(good_recipe)
    good_recipe.update(package="demo_ext_again")
    good_recipe["source"]["pypi"] = "Demo_Ext"  # the same project, spelled another way
    second = write_recipe(good_recipe)
    with pytest.raises(RecipeError) as info:
        load_all(tmp_path / "recipes", mini_table)
    assert f"{first / 'recipe.yaml'} and {second / 'recipe.yaml'} both build demo-ext" in \
        str(info.value)


def test_a_recipe_file_that_is_no_file_is_listed_and_named(write_recipe, good_recipe,
                                                          mini_table, tmp_path):
    write_recipe(good_recipe)
    bad = tmp_path / "recipes" / "zero"
    bad.mkdir()
    (bad / "recipe.yaml").symlink_to("/dev/zero")
    assert bad in recipe_folders(tmp_path / "recipes")
    with pytest.raises(RecipeError, match="zero/recipe.yaml: is not a regular file"):
        load_all(tmp_path / "recipes", mini_table)


def test_patch_listed_but_missing(write_recipe, good_recipe, mini_table):
    folder = write_recipe(good_recipe, patches=False)
    with pytest.raises(RecipeError, match=r"patches\[0\]\.file: 0001-Read-arch-list.patch is "
                                          r"listed but patches/0001-Read-arch-list.patch does not"):
        load_recipe(folder, mini_table)


def test_patch_present_but_unlisted(write_recipe, good_recipe, mini_table):
    folder = write_recipe(good_recipe, extra_files=("0002-Stray.patch",))
    with pytest.raises(RecipeError, match=r"patches/0002-Stray.patch is in the folder but not "
                                          r"listed"):
        load_recipe(folder, mini_table)


# ---- the kernel check entry (check: {file, reason}) -------------------------------------------

def test_kernel_check_loads(write_recipe, good_recipe, mini_table):
    good_recipe["check"] = {"file": "check.py", "reason": "demo_op against torch.softmax"}
    folder = write_recipe(good_recipe)
    (folder / "check.py").write_text("OPS = ('demo_op',)\n")
    check = load_recipe(folder, mini_table).check
    assert (check.file, check.path, check.reason) == ("check.py", folder / "check.py",
                                                      "demo_op against torch.softmax")


@pytest.mark.parametrize("entry, present, message", [
    # declared, but the file was never added
    ({"file": "check.py", "reason": "compares demo_op"}, False,
     "check.file: check.py is declared but does not exist beside recipe.yaml"),
    # a path out of the recipe folder, or not Python
    ({"file": "../check.py", "reason": "compares demo_op"}, False,
     "check.file: '../check.py' is not a Python file name in the recipe folder"),
    ({"file": "check.sh", "reason": "compares demo_op"}, False,
     "check.file: 'check.sh' is not a Python file name"),
    # every line carries its why
    ({"file": "check.py", "reason": "x"}, True, "check.reason: reason is too short"),
    ({"file": "check.py"}, True, "check.reason: required key is missing"),
    # present in the folder, but the recipe doesn't say so: it would never run
    (None, True, "check: check.py is in the recipe folder but not declared"),
])
def test_kernel_check_problems_are_named(write_recipe, good_recipe, mini_table, entry, present,
                                         message):
    if entry is not None:
        good_recipe["check"] = entry
    folder = write_recipe(good_recipe)
    if present:
        (folder / "check.py").write_text("OPS = ('demo_op',)\n")
    with pytest.raises(RecipeError) as info:
        load_recipe(folder, mini_table)
    assert message in str(info.value)


def test_every_problem_is_reported_at_once(write_recipe, good_recipe, mini_table):
    good_recipe["source"]["sha256"] = "nope"
    good_recipe["python"] = "3.10+"
    good_recipe["typo"] = 1
    with pytest.raises(RecipeError) as info:
        load_recipe(write_recipe(good_recipe), mini_table)
    assert "3 problems" in str(info.value)


def test_not_yaml(tmp_path, mini_table):
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "recipe.yaml").write_text("package: [unclosed\n")
    with pytest.raises(RecipeError, match=r"recipe.yaml \(line \d+, column \d+\): not valid YAML"):
        load_recipe(folder, mini_table)


def test_repository_recipes_are_valid():
    recipes = load_all()
    names = {r.package for r in recipes}
    assert {"flash_attn", "xformers", "causal_conv1d", "mamba_ssm"} <= names
    assert len(recipe_folders()) == len(recipes)
    for r in recipes:
        for t in r.cuda:
            assert t.torch, r.package
            # ranges that follow the table, never lists a new series would have to be added to
            assert t.range is not None, (r.package, t.cuda)


@pytest.mark.parametrize("path,value,expect", [
    ("archs", {"*": ["80", "90", "80"], "12.9": ["80", "90", "120"]},
     "archs.*: lists the arch '80' more than once"),
    ("imports", ["demo_ext", "demo_ext"], "imports: lists the module 'demo_ext' more than once"),
    ("build/requires", [{"requirement": "ninja", "reason": "the build runs ninja"},
                        {"requirement": "Ninja>=1.11", "reason": "the same, spelled again"}],
     "build.requires: lists the requirement 'Ninja>=1.11' more than once"),
])
def test_a_repeated_list_item_is_named(path, value, expect, write_recipe, good_recipe,
                                       mini_table):
    _set(good_recipe, path, value)
    folder = write_recipe(good_recipe)
    with pytest.raises(RecipeError) as info:
        load_recipe(folder, mini_table)
    message = str(info.value)
    assert str(folder / "recipe.yaml") in message and expect in message
    assert "(rule: each " in message and "fix: remove the repeated " in message
    assert message.count("\n  - ") == 1  # the repeat alone: the list still counts
