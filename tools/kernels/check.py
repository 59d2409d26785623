"""The kernel check: a recipe's ``check.py`` run on a GPU against plain-torch references.

The import smoke test shows a wheel loads; this shows its kernels compute the right numbers on
a real GPU: each recipe's ``check.py`` runs the package's main ops on small inputs and compares
them with plain torch (``scaled_dot_product_attention``, the package's own ``*_ref``
functions) within tolerances it states. The check runs in the environment under test (the
build's smoke-test venv, or any environment holding torch and the wheel) through
``tools/kernels/harness.py``, copied beside it, which writes one JSON result: per comparison the
op, dtype, shape, error, tolerance and pass/fail; the GPU; the verdict.

Without a GPU nothing runs and the verdict is ``not run: no GPU``, never a pass. Which GPU the
environment sees is a parameter (``gpu_finder``), so tests decide it.

``python -m tools.kernelcheck flash_attn [--interpreter PATH] [--json OUT]`` (the command module)
runs a recipe's check through :func:`run_target` in an environment where the wheel is installed.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.core import exitcodes
from tools.core.errors import VerifyError
from tools.hostplat import HostOS, current
from tools.pipeline.venvs import venv_python
from tools.plan.recipes.model import load_recipe

#: The harness file copied next to the environment under test.
HARNESS = Path(__file__).resolve().with_name("harness.py")
#: The verdict when no GPU is visible: recorded, never counted as a pass.
NOT_RUN_NO_GPU = "not run: no GPU"
#: Exit status of the command when the check could not run (no GPU).
EXIT_NOT_RUN = exitcodes.KERNEL_NOT_RUN
#: How many failing comparisons an error message lists.
_SHOWN = 8


@dataclass(frozen=True)
class Gpu:
    """The GPU an environment's torch sees."""

    name: str
    capability: str
    count: int


_GPU_QUERY = ("import json, torch; ok = torch.cuda.is_available(); p = ok and "
              "torch.cuda.get_device_properties(0); print(json.dumps({'ok': ok, "
              "'name': p.name if ok else None, 'cap': f'{p.major}.{p.minor}' if ok else None, "
              "'n': torch.cuda.device_count() if ok else 0}))")


def _child_env(pythonpath: tuple[Path, ...]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV")}
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(str(p) for p in pythonpath)
    return env


def environment_python(python: Path | str, *, host: HostOS = current()) -> Path:
    """The interpreter ``python`` names, as a path that works from any working directory.

    A path with a separator (``/``; on a Windows ``host``, default this machine's, also ``\\``)
    is taken relative to the current directory and made absolute (not resolved: a venv's
    ``bin/python`` is a link whose target lies outside the venv); a bare name is looked up on
    ``PATH``. VerifyError, naming the path and where it was looked for, when it is missing, a
    directory or not executable.
    """
    text = str(python)
    example = venv_python(Path("/path/to/venv"), host=host)
    fix = ("give the interpreter of the environment holding torch and the wheel as an absolute "
           f"path (e.g. {example.as_posix()}), or a relative path that exists from the "
           "current directory")
    if not any(sep in text for sep in host.path_separators):
        found = shutil.which(text)
        if found is None:
            here = Path(text).absolute()
            inside = ("/" + venv_python(Path(), host=host).as_posix()
                      if here.is_dir() else "")
            raise VerifyError(f"Python interpreter {text!r} (--interpreter) is no command on PATH",
                              hint=f"a bare name is looked up on PATH; for {here} write "
                                   f"./{text}{inside}" if here.exists() else fix)
        return Path(found)
    path = Path(text).absolute()
    where = "" if Path(text).is_absolute() else f" (relative to the current directory {Path.cwd()})"
    if path.is_dir():
        raise VerifyError(f"Python interpreter {text} (--interpreter) is a directory{where}",
                          hint=f"give the interpreter inside it, e.g. "
                               f"{venv_python(path, host=host)}")
    if not path.is_file():
        raise VerifyError(f"Python interpreter {text} (--interpreter) was not found{where}", hint=fix)
    if not os.access(path, os.X_OK):
        raise VerifyError(f"Python interpreter {path} (--interpreter) is not executable", hint=fix)
    return path


def find_gpu(python: Path | str, *, pythonpath: tuple[Path, ...] = ()) -> Gpu | None:
    """The GPU that ``python``'s torch sees (``torch.cuda.is_available()``), or None.

    Asked of the environment under test rather than of ``nvidia-smi``: a driver the wheel's
    torch can't use is no GPU for the check.
    """
    python = environment_python(python)
    proc = subprocess.run([str(python), "-c", _GPU_QUERY], capture_output=True, text=True,
                          env=_child_env(pythonpath), timeout=300)
    if proc.returncode != 0:
        raise VerifyError(f"the kernel check could not ask {python} for a GPU: torch failed "
                          f"to import:\n{proc.stderr.strip()[-800:]}",
                          hint="run the check with the Python of an environment holding the "
                               "wheel and its torch")
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    return Gpu(info["name"], info["cap"], info["n"]) if info["ok"] else None


GpuFinder = Callable[..., "Gpu | None"]


@dataclass(frozen=True)
class CheckTarget:
    """What the command checks: a check file and, when it was named by its recipe, the modules
    of the package under test (the recipe's ``imports``)."""

    check: Path
    modules: tuple[str, ...] = ()


def resolve_target(target: str, recipes: Path) -> CheckTarget:
    """A check file (``*.py``) as it is, or the check a recipe in ``recipes`` declares
    (``check: {file: ...}`` in its recipe.yaml) with the recipe's import names."""
    path = Path(target)
    if path.suffix == ".py":
        return CheckTarget(path)
    recipe = load_recipe(Path(recipes) / target)
    if recipe.check is None:
        raise VerifyError(f"{recipe.path} declares no kernel check",
                          hint="add check: {file: check.py, reason: ...} and the file")
    return CheckTarget(recipe.check.path, tuple(recipe.imports))


def declared_ops(check: Path) -> tuple[str, ...]:
    """The ops a check file declares, read without running it (nothing is imported).

    VerifyError when the file doesn't compile, has no literal ``OPS`` tuple of names or no
    ``run(check)``, or compares, records or skips an op by a literal name it doesn't declare.
    """
    path = Path(check)
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except SyntaxError as exc:
        raise VerifyError(f"{path}:{exc.lineno}: {exc.msg}",
                          hint="fix the check file's syntax") from None
    ops: tuple[str, ...] | None = None
    has_run = False
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "OPS"):
            try:
                value = ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError):
                value = None
            if (isinstance(value, (tuple, list)) and value
                    and all(isinstance(v, str) and v for v in value)):
                ops = tuple(value)
        elif isinstance(node, ast.FunctionDef) and node.name == "run" and node.args.args:
            has_run = True
    if ops is None:
        raise VerifyError(f"{path} declares no OPS",
                          hint='add OPS = ("op_name", ...) at the top level: the ops it checks')
    if len(set(ops)) != len(ops):
        raise VerifyError(f"{path}: OPS names an op twice")
    if not has_run:
        raise VerifyError(f"{path} defines no run(check)",
                          hint="define run(check): it receives the harness's Check object")
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("compare", "record", "skip") and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str) and node.args[0].value not in ops):
            raise VerifyError(f"{path}:{node.lineno}: {node.func.attr}() names op "
                              f"{node.args[0].value!r}, which OPS doesn't declare",
                              hint="add it to OPS or fix the name")
    return ops


def run_check(check: Path, python: Path | str, *, workdir: Path, device: str = "cuda",
              pythonpath: tuple[Path, ...] = (), gpu_finder: GpuFinder = find_gpu,
              timeout: float = 1800) -> dict[str, Any]:
    """Run ``check`` with ``python`` on ``device`` and return its result (also written to
    ``<workdir>/kernelcheck.json``).

    On ``cuda`` the GPU is asked of ``gpu_finder`` first; without one the result's verdict is
    :data:`NOT_RUN_NO_GPU` and nothing runs. ``device="cpu"`` runs the same harness on CPU
    tensors (for checks of plain-torch code: the harness's own tests). ``pythonpath`` puts
    directories (a wheel unpacked for an existing environment) before the environment's own.
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    out = workdir / "kernelcheck.json"
    out.unlink(missing_ok=True)
    if device.startswith("cuda"):
        gpu = gpu_finder(python, pythonpath=pythonpath)
        if gpu is None:
            result = {"check": str(check), "device": device, "verdict": NOT_RUN_NO_GPU,
                      "results": [], "skipped": {}}
            out.write_text(json.dumps(result, indent=1) + "\n")
            return result
    # Absolute: the harness runs in a directory of its own, where a relative path means nothing.
    python = environment_python(python)
    # Copied under a name of its own: a bare ``harness.py`` beside a check could be anything.
    harness = workdir / "kernelharness.py"
    shutil.copyfile(HARNESS, harness)
    # An empty working directory: a source tree there must not shadow the installed package.
    with tempfile.TemporaryDirectory(prefix="kernelcheck-cwd-", dir=workdir) as cwd:
        try:
            proc = subprocess.run([str(python), str(harness), str(Path(check).resolve()),
                                   "--device", device, "--out", str(out)], cwd=cwd,
                                  capture_output=True, text=True, env=_child_env(pythonpath),
                                  timeout=timeout)
            output = proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as exc:
            proc, output = None, f"timed out after {timeout:.0f} s: {exc}"
    (workdir / "kernelcheck.log").write_text(output)
    if proc is not None and out.is_file():
        return json.loads(out.read_text())
    # A crash (an illegal memory access aborts the process) or a timeout: no result file.
    tail = "\n".join(output.strip().splitlines()[-15:])
    result = {"check": str(check), "device": device, "verdict": "error",
              "error": f"the check process ended without a result "
                       f"(exit {proc.returncode if proc else 'timeout'}):\n{tail}",
              "results": [], "skipped": {}}
    out.write_text(json.dumps(result, indent=1) + "\n")
    return result


def summary(result: dict[str, Any]) -> dict[str, Any]:
    """What the build report and the wheel's manifest keep of a result: the verdict, the GPU,
    and the largest error of each op and dtype with its tolerance."""
    worst: dict[str, dict[str, dict[str, Any]]] = {}
    for r in result.get("results", []):
        per_dtype = worst.setdefault(r["op"], {})
        slack = r["error"] - r["tolerance"]
        kept = per_dtype.get(r["dtype"])
        if kept is None or slack > kept["error"] - kept["tolerance"]:
            per_dtype[r["dtype"]] = {"metric": r["metric"], "error": r["error"],
                                     "tolerance": r["tolerance"], "shape": r["shape"],
                                     "case": r["case"], "passed": r["passed"]}
    out = {"verdict": result["verdict"], "check": Path(result.get("check", "")).name,
           "compared": len(result.get("results", [])), "max_errors": worst}
    for key in ("device", "gpu", "capability", "torch", "error"):
        if result.get(key):
            out[key] = result[key]
    if result.get("skipped"):
        out["skipped"] = result["skipped"]
    return out


def describe(r: dict[str, Any]) -> str:
    """One comparison in words: op, case, dtype, shape, error against tolerance."""
    case = f" ({r['case']})" if r.get("case") else ""
    sign = "<=" if r["passed"] else ">"
    largest = r.get("max_abs_error")
    anywhere = (f" (largest anywhere {largest:.4g})"
                if largest is not None and largest > r["error"] else "")
    return (f"{r['op']}{case} {r['dtype']} shape {r['shape']}: {r['metric']} "
            f"{r['error']:.4g} {sign} tolerance {r['tolerance']:.4g}{anywhere}")


def _missing_module(result: dict[str, Any], what: str, modules: tuple[str, ...]
                    ) -> VerifyError | None:
    """The error for a check that broke because a top-level module is not installed where it
    ran; None for any other break. A missing submodule (``pkg.gone``) means the package is there
    and its layout changed: that stays an API question."""
    missing = result.get("missing_module")
    if not missing or "." in missing:
        return None
    python = result.get("python") or "the environment under test"
    if missing in {m.split(".")[0] for m in modules}:
        hint = (f"install the wheel under test there ({python} -m pip install "
                f"<the .whl file>), or give --interpreter the interpreter of the environment that "
                f"holds it")
    else:
        hint = (f"install what provides {missing} there ({python} -m pip install ...), or give "
                f"--interpreter the interpreter of an environment that has it; if the wheel under "
                f"test imports it, the wheel's metadata should require it")
    return VerifyError(f"the kernel check of {what} could not run: {missing} is not installed "
                       f"in {python}", hint=hint)


def raise_if_failed(result: dict[str, Any], *, what: str, modules: tuple[str, ...] = ()
                    ) -> None:
    """VerifyError naming each failing op, dtype, shape and error against its tolerance (or
    the check's own error); nothing for ``passed`` and ``not run``.

    A check that broke on a module not installed in its environment says so (naming the
    interpreter, with the install as the fix) rather than suspecting the package's API;
    ``modules`` are the package under test's own (the recipe's ``imports``).
    """
    verdict = result["verdict"]
    if verdict == "error":
        missing = _missing_module(result, what, modules)
        if missing is not None:
            raise missing
        trace = "\n".join(result.get("traceback", [])[-8:])
        raise VerifyError(f"the kernel check of {what} broke: {result.get('error')}"
                          + (f"\n{trace}" if trace else ""),
                          hint="an API the check calls may have changed with this version: "
                               "read the package's source and fix the recipe's check.py")
    if verdict != "failed":
        return
    failed = [r for r in result["results"] if not r["passed"]]
    lines = [f"  {describe(r)}" for r in failed]
    more = f"\n  ... and {len(lines) - _SHOWN} more" if len(lines) > _SHOWN else ""
    gpu = f" on {result['gpu']}" if result.get("gpu") else ""
    raise VerifyError(f"kernel check of {what}{gpu}: {len(failed)} of "
                      f"{len(result['results'])} comparisons out of tolerance:\n"
                      + "\n".join(lines[:_SHOWN]) + more,
                      hint="the kernels compute wrong numbers on this GPU: the wheel is kept "
                           "out of the wheelhouse; compare with the package's own tests")


def format_result(result: dict[str, Any]) -> str:
    """One line per comparison and skipped op, then the verdict line, for people."""
    lines = [("ok   " if r["passed"] else "FAIL ") + describe(r)
             for r in result.get("results", [])]
    lines += [f"skip {op}: {why}" for op, why in sorted(result.get("skipped", {}).items())]
    gpu = f" on {result['gpu']} (sm {result.get('capability')})" if result.get("gpu") else ""
    lines.append(f"kernel check{gpu}: {result['verdict']}")
    return "\n".join(lines)


def run_target(target: CheckTarget, python: Path | str, *, device: str = "cuda",
               gpu_finder: GpuFinder = find_gpu) -> dict[str, Any]:
    """Run ``target``'s check with ``python`` on ``device`` in a working directory of its own,
    removed afterwards; the result as :func:`run_check` gives it."""
    with tempfile.TemporaryDirectory(prefix="kernelcheck-") as work:
        return run_check(target.check, python, workdir=Path(work), device=device,
                         gpu_finder=gpu_finder)
