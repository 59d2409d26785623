"""The kernel check (tools.kernels.check, tools.kernels.harness and the command tools.kernelcheck):
every recipe's check file read statically, and the harness run for real.

No GPU is needed: the harness (tools/kernels/harness.py) runs fixture checks of plain-torch code
on CPU tensors in a real torch environment (tests/fixtures/kernelchecks/: one passing, one
failing beyond tolerance), through the same runner the pipeline uses. Which GPU an environment
has is injected (``gpu_finder``), so the no-GPU path is the same on every machine. The recipes'
own checks need the packages' CUDA kernels and a GPU; here they are compiled and their
declarations checked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tinyext_support import cuda_torch_venv
from tools import RECIPES_DIR, ROOT
from tools.core.errors import VerifyError
from tools.hostplat import windows
from tools.kernels.check import (EXIT_NOT_RUN, NOT_RUN_NO_GPU, CheckTarget, declared_ops,
                                 environment_python, raise_if_failed, resolve_target, run_check,
                                 run_target, summary)
from tools.plan.recipes.model import load_all, recipe_folders

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "kernelchecks"


def no_gpu(python, **_):
    """A GPU probe answering that the environment sees no GPU."""
    return None


@pytest.fixture(scope="module")
def torch_python(tmp_path_factory):
    """A real Python with torch (the registry's CUDA 13.0 build; CPU tensors need no GPU)."""
    return cuda_torch_venv(tmp_path_factory.mktemp("torchenv") / "venv")


# ---- the recipes' check files, read without running them ------------------------------------

@pytest.mark.parametrize("folder", recipe_folders(RECIPES_DIR), ids=lambda f: f.name)
def test_every_recipe_declares_a_check_that_compiles_and_declares_its_ops(folder):
    recipe = next(r for r in load_all(RECIPES_DIR) if r.folder == folder)
    assert recipe.check is not None, f"{folder.name} declares no kernel check"
    source = recipe.check.path.read_text()
    compile(source, str(recipe.check.path), "exec")
    ops = declared_ops(recipe.check.path)
    assert ops
    # every declared op is named again after OPS: compared, recorded or skipped
    for op in ops:
        assert source.count(f'"{op}"') >= 2, f"{op} is declared but never used"


@pytest.mark.parametrize("text, message", [
    ("OPS = ('a',\ndef run(check):\n    pass\n", "was never closed"),       # syntax error
    ("def run(check):\n    pass\n", "declares no OPS"),
    ("OPS = ()\ndef run(check):\n    pass\n", "declares no OPS"),           # empty
    ("OPS = ('a', 'a')\ndef run(check):\n    pass\n", "names an op twice"),
    ("OPS = ('a',)\n", "defines no run(check)"),
    ("OPS = ('a',)\ndef run(check):\n    check.compare('b', 1, 1, atol=0)\n",
     "compare() names op 'b', which OPS doesn't declare"),
    ("OPS = ('a',)\ndef run(check):\n    check.skip('c', 'why')\n", "skip() names op 'c'"),
])
def test_declared_ops_rejects(tmp_path, text, message):
    path = tmp_path / "check.py"
    path.write_text(text)
    with pytest.raises(VerifyError, match=message.replace("(", r"\(").replace(")", r"\)")):
        declared_ops(path)


# ---- the harness and the runner, for real on CPU tensors ------------------------------------

@pytest.mark.network
def test_passing_check_records_every_comparison(torch_python, tmp_path):
    result = run_check(FIXTURES / "passing.py", torch_python, workdir=tmp_path, device="cpu")
    assert result["verdict"] == "passed", result
    assert json.loads((tmp_path / "kernelcheck.json").read_text()) == result
    rows = result["results"]
    assert {(r["op"], r["dtype"]) for r in rows} == {
        ("blocked_matmul", "float32"), ("blocked_matmul", "bfloat16"),
        ("softmax", "float32"), ("softmax", "bfloat16"), ("relative", "float64")}
    for r in rows:
        assert set(r) >= {"op", "case", "dtype", "shape", "metric", "error", "tolerance",
                          "passed", "max_abs_error"}
        # error and tolerance are one element's: a pass never reads "error > tolerance"
        assert r["passed"] and 0 <= r["error"] <= r["tolerance"]
        assert r["error"] <= r["max_abs_error"]
    assert rows[0]["shape"] == [64, 32] and rows[0]["metric"] == "abs_error"
    # the largest error (0.5, allowed 1.001 where |want| is 1000) is not what decided: the
    # element nearest its tolerance is (1e-4 against 1e-3 + 1e-3 * 0.001)
    relative = next(r for r in rows if r["op"] == "relative")
    assert relative["max_abs_error"] == pytest.approx(0.5)
    assert relative["error"] == pytest.approx(1e-4)
    assert relative["tolerance"] == pytest.approx(1e-3 + 1e-6)
    softmax = next(r for r in rows if r["op"] == "softmax")
    assert softmax["baseline_factor"] == 2 and "baseline_error" in softmax
    assert result["skipped"] == {"not_on_this_device":
                                 "shows a skipped op and its reason in the result"}
    assert result["device"] == "cpu" and result["torch"].startswith("2.")
    raise_if_failed(result, what="passing.py")  # a pass raises nothing


@pytest.mark.network
def test_failing_check_names_op_dtype_shape_and_error_against_tolerance(torch_python,
                                                                        tmp_path):
    result = run_check(FIXTURES / "failing.py", torch_python, workdir=tmp_path, device="cpu")
    assert result["verdict"] == "failed"
    ok, bad = result["results"]
    assert ok["passed"] and not bad["passed"]
    assert bad["error"] > 1 > bad["tolerance"]       # a whole block missing: errors of order 1+
    with pytest.raises(VerifyError) as info:
        raise_if_failed(result, what="tinyext.whl")
    text = str(info.value)
    assert "1 of 2 comparisons out of tolerance" in text
    assert (f"blocked_matmul (last block dropped) float32 shape [64, 32]: abs_error "
            f"{bad['error']:.4g} > tolerance {bad['tolerance']:.4g}") in text
    kept = summary(result)
    assert kept["verdict"] == "failed" and kept["compared"] == 2
    assert kept["max_errors"]["blocked_matmul"]["float32"]["error"] == bad["error"]


@pytest.mark.network
@pytest.mark.parametrize("body, message", [
    ("    raise RuntimeError('CUDA error: no kernel image is available')\n",
     "RuntimeError: CUDA error: no kernel image is available"),
    ("    check.compare('un' + 'declared', check.torch.ones(2), check.torch.ones(2), atol=0)\n",
     "op 'undeclared' is compared but not declared"),
    ("    pass\n", "declared but never checked or skipped: a"),
])
def test_a_broken_check_is_an_error_not_a_pass(torch_python, tmp_path, body, message):
    check = tmp_path / "check.py"
    check.write_text("OPS = ('a',)\n\ndef run(check):\n" + body)
    result = run_check(check, torch_python, workdir=tmp_path / "work", device="cpu")
    assert result["verdict"] == "error"
    assert message in result["error"]
    with pytest.raises(VerifyError, match="kernel check of x.whl broke"):
        raise_if_failed(result, what="x.whl")


@pytest.mark.network
def test_a_check_that_kills_its_process_is_an_error(torch_python, tmp_path):
    """An illegal memory access aborts the process: no result file, still a verdict."""
    check = tmp_path / "check.py"
    check.write_text("OPS = ('a',)\n\ndef run(check):\n    import os\n    os._exit(134)\n")
    result = run_check(check, torch_python, workdir=tmp_path / "work", device="cpu")
    assert result["verdict"] == "error"
    assert "ended without a result (exit 134)" in result["error"]


def test_no_gpu_is_recorded_as_not_run_and_runs_nothing(tmp_path):
    """The probe says no GPU: nothing starts (the Python given doesn't even exist)."""
    result = run_check(FIXTURES / "failing.py", tmp_path / "no-such-python", workdir=tmp_path,
                       gpu_finder=no_gpu)
    assert result["verdict"] == NOT_RUN_NO_GPU == "not run: no GPU"
    assert result["results"] == []
    assert json.loads((tmp_path / "kernelcheck.json").read_text())["verdict"] == NOT_RUN_NO_GPU
    kept = summary(result)
    assert kept == {"verdict": "not run: no GPU", "check": "failing.py", "compared": 0,
                    "max_errors": {}, "device": "cuda"}
    raise_if_failed(result, what="x.whl")  # not run is no failure, and no pass either


@pytest.mark.network
@pytest.mark.parametrize("fixture, code, expected", [
    ("passing.py", 0, "kernel check: passed"),
    ("failing.py", VerifyError.exit_code, "1 of 2 comparisons out of tolerance"),
])
def test_command_line(torch_python, tmp_path, fixture, code, expected):
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, "-m", "tools.kernelcheck", str(FIXTURES / fixture),
                           "--interpreter", str(torch_python), "--device", "cpu", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == code, proc.stderr
    assert expected in proc.stdout + proc.stderr
    assert json.loads(out.read_text())["check"].endswith(fixture)


def test_command_line_without_a_gpu_exits_not_run(tmp_path, monkeypatch, capsys):
    """The GPU finder is told there is no GPU: the command says so and exits 12, not 0."""
    import tools.kernelcheck as kernelcheck
    monkeypatch.setattr(kernelcheck, "find_gpu", no_gpu)
    out = tmp_path / "result.json"
    code = kernelcheck.main(["flash_attn", "--interpreter", str(tmp_path / "unused"),
                             "--json", str(out)])
    assert code == EXIT_NOT_RUN == 12
    assert "kernel check: not run: no GPU" in capsys.readouterr().out
    assert json.loads(out.read_text())["check"].endswith("flash_attn/check.py")


@pytest.mark.network
def test_command_line_names_an_environment_without_torch(tmp_path):
    from tools.pipeline import venvs as pyenv
    bare = pyenv.create_venv(tmp_path / "bare", "3.11")
    proc = subprocess.run([sys.executable, "-m", "tools.kernelcheck", "causal_conv1d",
                           "--interpreter", str(bare)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == VerifyError.exit_code
    assert f"could not ask {bare} for a GPU: torch failed to import" in proc.stderr


# ---- --interpreter: an interpreter named by a path that may be relative ---------------------------

def test_command_line_names_a_relative_python_that_does_not_exist(tmp_path):
    """No traceback: the path, where it was looked for, and the fix; exit 10."""
    proc = subprocess.run([sys.executable, "-m", "tools.kernelcheck", "flash_attn",
                           "--interpreter", "relative/path/python"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == VerifyError.exit_code == 10, proc.stderr
    assert "Traceback" not in proc.stderr
    assert (f"Python interpreter relative/path/python (--interpreter) was not found (relative to "
            f"the current directory {ROOT})") in proc.stderr
    assert "fix: give the interpreter of the environment holding torch and the wheel as an " \
           "absolute path" in proc.stderr


def test_environment_python_makes_a_relative_path_absolute_without_resolving_links(
        tmp_path, monkeypatch):
    env_bin = tmp_path / "env" / "bin"
    env_bin.mkdir(parents=True)
    (env_bin / "python").symlink_to(sys.executable)
    monkeypatch.chdir(tmp_path)
    # The venv's own path, not the interpreter the link points at: that one has no venv.
    assert environment_python("env/bin/python") == env_bin / "python"
    assert environment_python(Path("env/bin/python")).is_absolute()


def test_environment_python_on_windows_takes_backslashes_and_names_scripts(tmp_path,
                                                                          monkeypatch):
    """On Windows a path may be written with \\ and a venv's interpreter is
    Scripts\\python.exe, which the hints name."""
    (tmp_path / "venv").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(VerifyError) as info:
        environment_python("venv\\Scripts\\python.exe", host=windows)
    assert "was not found (relative to the current directory" in str(info.value)
    with pytest.raises(VerifyError) as info:        # a bare name: looked up on PATH
        environment_python("venv", host=windows)
    assert info.value.hint.endswith("write ./venv/Scripts/python.exe")
    with pytest.raises(VerifyError) as info:
        environment_python("./venv", host=windows)
    assert info.value.hint == f"give the interpreter inside it, e.g. " \
                              f"{tmp_path / 'venv' / 'Scripts' / 'python.exe'}"


@pytest.mark.parametrize("given, message, fix", [
    ("./venv", "Python interpreter ./venv (--interpreter) is a directory (relative to the current "
               "directory {cwd})", "give the interpreter inside it, e.g. {cwd}/venv/bin/python"),
    ("venv", "Python interpreter 'venv' (--interpreter) is no command on PATH",  # a bare name
     "a bare name is looked up on PATH; for {cwd}/venv write ./venv/bin/python"),
    ("venv/bin/python3.99", "Python interpreter venv/bin/python3.99 (--interpreter) was not found "
                            "(relative to the current directory {cwd})", "an absolute path"),
    ("{cwd}/venv/bin/python3.99", "Python interpreter {cwd}/venv/bin/python3.99 (--interpreter) "
                                  "was not found\n", "an absolute path"),
    ("venv/notes.txt", "Python interpreter {cwd}/venv/notes.txt (--interpreter) is not executable",
     "an absolute path"),
    ("no-such-python-3.99", "Python interpreter 'no-such-python-3.99' (--interpreter) is no command "
                            "on PATH", "an absolute path"),
])
def test_environment_python_refuses(tmp_path, monkeypatch, given, message, fix):
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "notes.txt").write_text("not a program\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(VerifyError) as info:
        environment_python(given.format(cwd=tmp_path))
    assert message.format(cwd=tmp_path) in str(info.value) + "\n"
    assert fix.format(cwd=tmp_path) in info.value.hint


@pytest.mark.network
def test_a_relative_python_runs_the_check_from_its_own_directory(torch_python, tmp_path,
                                                                  monkeypatch):
    """The harness runs in an empty directory of its own: the relative path still names the
    interpreter given, from where the command was started."""
    monkeypatch.chdir(torch_python.parent.parent)
    relative = Path(torch_python.parent.name) / torch_python.name
    result = run_target(CheckTarget(FIXTURES / "passing.py"), relative, device="cpu")
    assert result["verdict"] == "passed", result
    assert result["python"] == str(torch_python)


# ---- a module missing from the environment is not an API change -----------------------------

def _broken_by_import(tmp_path, statement):
    """Run (with this Python, on CPU) a check that breaks importing ``statement`` at its top."""
    check = tmp_path / "check.py"
    check.write_text(f"{statement}\n\nOPS = ('a',)\n\ndef run(check):\n    pass\n")
    return run_check(check, sys.executable, workdir=tmp_path / "work", device="cpu")


def test_a_missing_package_under_test_is_named_with_the_install_fix(tmp_path):
    result = _broken_by_import(tmp_path, "import fused_softmax_not_installed")
    assert result["verdict"] == "error"
    assert result["missing_module"] == "fused_softmax_not_installed"
    assert result["python"] == sys.executable
    with pytest.raises(VerifyError) as info:
        raise_if_failed(result, what="check.py",
                        modules=("fused_softmax_not_installed._C", "fused_softmax_not_installed"))
    text = str(info.value)
    assert (f"the kernel check of check.py could not run: fused_softmax_not_installed is not "
            f"installed in {sys.executable}") in text
    assert f"fix: install the wheel under test there ({sys.executable} -m pip install" in text
    assert "API" not in text


def test_a_missing_dependency_is_named_too(tmp_path):
    """A module that is not the package under test (or a check named by its file, which says
    no package): named as missing all the same, with what to install."""
    result = _broken_by_import(tmp_path, "import einops_not_installed")
    with pytest.raises(VerifyError) as info:
        raise_if_failed(result, what="check.py", modules=("flash_attn",))
    text = str(info.value)
    assert f"einops_not_installed is not installed in {sys.executable}" in text
    assert "fix: install what provides einops_not_installed there" in text


def test_a_missing_submodule_of_an_installed_package_stays_an_api_question(tmp_path):
    """``json`` is installed and ``json.gone`` is not: the package's layout changed."""
    result = _broken_by_import(tmp_path, "import json.gone")
    assert result["missing_module"] == "json.gone"
    with pytest.raises(VerifyError) as info:
        raise_if_failed(result, what="check.py", modules=("json",))
    assert "an API the check calls may have changed" in info.value.hint


def test_a_recipe_target_names_the_package_under_test():
    target = resolve_target("flash_attn", RECIPES_DIR)
    assert target.check == RECIPES_DIR / "flash_attn" / "check.py"
    assert target.modules == ("flash_attn_2_cuda", "flash_attn")
    assert resolve_target("some/check.py", RECIPES_DIR) == CheckTarget(Path("some/check.py"))


@pytest.mark.network
def test_command_line_names_a_recipe_package_missing_from_the_environment(torch_python):
    """flash_attn is not installed in a torch-only environment: said so, not blamed on its API."""
    proc = subprocess.run([sys.executable, "-m", "tools.kernelcheck", "flash_attn",
                           "--interpreter", str(torch_python), "--device", "cpu"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == VerifyError.exit_code, proc.stderr
    assert "kernel check: error" in proc.stdout
    assert f"flash_attn is not installed in {torch_python}" in proc.stderr
    assert f"fix: install the wheel under test there ({torch_python} -m pip install" in proc.stderr
