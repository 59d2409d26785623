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

``python -m tools.kernelcheck flash_attn [--python PATH] [--json OUT]`` runs a recipe's check
in an environment where the wheel is installed (by default the Python running the command).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools import RECIPES_DIR
from tools.core.errors import VerifyError, cli
from tools.plan.recipe import load_recipe

#: The harness file copied next to the environment under test.
HARNESS = Path(__file__).resolve().with_name("harness.py")
#: The verdict when no GPU is visible: recorded, never counted as a pass.
NOT_RUN_NO_GPU = "not run: no GPU"
#: Exit status of the command when the check could not run (no GPU).
EXIT_NOT_RUN = 12
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


def find_gpu(python: Path | str, *, pythonpath: tuple[Path, ...] = ()) -> Gpu | None:
    """The GPU that ``python``'s torch sees (``torch.cuda.is_available()``), or None.

    Asked of the environment under test rather than of ``nvidia-smi``: a driver the wheel's
    torch can't use is no GPU for the check.
    """
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


def recipe_check(recipe_folder: Path) -> Path:
    """The check file a recipe declares (``check: {file: ...}`` in its recipe.yaml)."""
    recipe = load_recipe(recipe_folder)
    if recipe.check is None:
        raise VerifyError(f"{Path(recipe_folder) / 'recipe.yaml'} declares no kernel check",
                          hint="add check: {file: check.py, reason: ...} and the file")
    return recipe.check.path


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
    return (f"{r['op']}{case} {r['dtype']} shape {r['shape']}: {r['metric']} "
            f"{r['error']:.4g} {sign} tolerance {r['tolerance']:.4g}")


def raise_if_failed(result: dict[str, Any], *, what: str) -> None:
    """VerifyError naming each failing op, dtype, shape and error against its tolerance (or
    the check's own error); nothing for ``passed`` and ``not run``."""
    verdict = result["verdict"]
    if verdict == "error":
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


def print_result(result: dict[str, Any], stream=None) -> None:
    """One line per comparison and a verdict line, for people (on stdout by default)."""
    stream = stream or sys.stdout
    for r in result.get("results", []):
        print(("ok   " if r["passed"] else "FAIL ") + describe(r), file=stream)
    for op, why in sorted(result.get("skipped", {}).items()):
        print(f"skip {op}: {why}", file=stream)
    gpu = f" on {result['gpu']} (sm {result.get('capability')})" if result.get("gpu") else ""
    print(f"kernel check{gpu}: {result['verdict']}", file=stream)


@cli
def main(argv: list[str] | None = None) -> int:
    """``python -m tools.kernelcheck RECIPE|CHECK.py [--python PATH] [--json OUT]``

    Exit status: 0 passed, 10 failed or broke, 12 not run (no GPU).
    """
    ap = argparse.ArgumentParser(prog="python -m tools.kernelcheck",
                                 description="run a recipe's kernel check on this machine's GPU")
    ap.add_argument("target", help="a recipe name (flash_attn) or a check file")
    ap.add_argument("--python", default=sys.executable,
                    help="the Python of the environment holding torch and the installed wheel "
                         "(default: this one)")
    ap.add_argument("--recipes", type=Path, default=RECIPES_DIR, help="recipes directory")
    ap.add_argument("--device", default="cuda",
                    help="cuda (default), or cpu for a check of plain-torch code")
    ap.add_argument("--json", type=Path, help="also write the result here")
    args = ap.parse_args(argv)
    target = Path(args.target)
    check = target if target.suffix == ".py" else recipe_check(args.recipes / args.target)
    with tempfile.TemporaryDirectory(prefix="kernelcheck-") as work:
        result = run_check(check, args.python, workdir=Path(work), device=args.device,
                           gpu_finder=find_gpu)
    print_result(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    raise_if_failed(result, what=str(check))
    return EXIT_NOT_RUN if result["verdict"] == NOT_RUN_NO_GPU else 0


if __name__ == "__main__":
    sys.exit(main())
