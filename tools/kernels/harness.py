"""The half of the kernel check that runs inside the environment under test.

``python kernelharness.py CHECK.py --device cuda --out RESULT.json``: loads a recipe's
``check.py``, hands its ``run(check)`` a :class:`Check`, and writes every comparison as JSON.
It imports nothing from this project and only the standard library at module level (torch is
imported when a check runs), because it is copied next to an environment that holds just torch
and the wheel under test: the build's smoke-test venv, or a cluster user's own environment.
``tools.kernels.check`` is the other half: it finds the GPU, runs this file and reads the result.

A check file declares ``OPS`` (the names of the operations it checks) and defines
``run(check)``; every declared op must end up compared (``check.compare``/``check.record``) or
skipped with a reason (``check.skip``, e.g. a kernel built only for another GPU generation), and
nothing undeclared may be compared: otherwise the verdict is ``error``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

#: Bumped when a key of the result changes meaning.
RESULT_SCHEMA = 1
#: How many lines of a traceback the result keeps.
_TRACEBACK_LINES = 25


class CheckDeclarationError(Exception):
    """A check file breaks the contract (no OPS, no run, an undeclared op)."""


class Check:
    """What a check file's ``run(check)`` receives: the device, torch, and the recorders."""

    def __init__(self, torch_module: Any, device: str, declared: tuple[str, ...]):
        self.torch = torch_module
        self.device = device
        self.declared = declared
        self.results: list[dict[str, Any]] = []
        self.skipped: dict[str, str] = {}

    def _known(self, op: str) -> None:
        if op not in self.declared:
            raise CheckDeclarationError(
                f"op {op!r} is compared but not declared in OPS ({', '.join(self.declared)})")

    def compare(self, op: str, got: Any, want: Any, *, atol: float, rtol: float = 0.0,
                baseline: Any = None, factor: float = 2.0, case: str = "",
                shape: Any = None) -> bool:
        """Compare ``got`` (the kernel's tensor) with ``want`` (the plain-torch reference).

        Element by element the tolerance is ``atol + rtol * |want|`` (``torch.allclose``'s
        rule). With ``baseline`` (the same reference computed by plain torch in the kernel's
        own low precision) it is at least ``factor`` times the baseline's worst error: the rule
        flash-attn's own tests use, so a kernel may be as inexact as torch is in that dtype,
        times ``factor``. A NaN or infinity in ``got`` fails. Records one result, whose
        ``abs_error`` and ``tolerance`` are one element's (the one nearest or furthest over its
        tolerance) and ``max_abs_error`` the largest error anywhere, and returns whether it
        passed; ``shape`` defaults to ``got``'s.
        """
        self._known(op)
        torch = self.torch
        g, w = got.detach().to(torch.float64), want.detach().to(torch.float64)
        dtype = str(got.dtype).removeprefix("torch.")
        shape = list(shape if shape is not None else got.shape)
        if g.shape != w.shape:
            return self._add(op, case, dtype, shape, "shape", float("inf"), 0.0,
                             note=f"got shape {list(g.shape)}, reference {list(w.shape)}")
        diff = (g - w).abs()
        allowed = atol + rtol * w.abs()
        base_error = None
        if baseline is not None:
            base_error = float((baseline.detach().to(torch.float64) - w).abs().max())
            allowed = torch.clamp(allowed, min=factor * base_error)
        finite = bool(torch.isfinite(g).all())
        if diff.numel() == 0:
            return self._add(op, case, dtype, shape, "abs_error", 0.0, atol)
        # error and tolerance are those of one element, the one nearest (or furthest over)
        # its tolerance, so that the pair says what decided; the largest error anywhere (an
        # element whose tolerance is larger, rtol * |want|) is kept beside them.
        worst = int(torch.argmax(diff - allowed))
        error = float(diff.reshape(-1)[worst]) if finite else float("inf")
        tolerance = float(allowed.reshape(-1)[worst])
        passed = finite and bool((diff <= allowed).all())
        extra = {"atol": atol, "rtol": rtol,
                 "max_abs_error": float(diff.max()) if finite else float("inf")}
        if base_error is not None:
            extra.update(baseline_error=base_error, baseline_factor=factor)
        return self._add(op, case, dtype, shape, "abs_error", error, tolerance,
                         passed=passed, **extra)

    def record(self, op: str, *, error: float, tolerance: float, metric: str, dtype: str,
               shape: Any, case: str = "") -> bool:
        """Record a comparison measured by the check itself (e.g. the fraction of elements a
        sparsity kernel chose differently, where ties make an exact match impossible);
        passes when ``error <= tolerance``."""
        self._known(op)
        return self._add(op, case, str(dtype).removeprefix("torch."), list(shape), metric,
                         float(error), float(tolerance))

    def skip(self, op: str, reason: str) -> None:
        """Say why ``op`` is not checked on this device (the result keeps the reason)."""
        self._known(op)
        self.skipped[op] = reason

    def _add(self, op: str, case: str, dtype: str, shape: list, metric: str, error: float,
             tolerance: float, *, passed: bool | None = None, **extra: Any) -> bool:
        ok = (error <= tolerance) if passed is None else passed
        entry = {"op": op, "case": case, "dtype": dtype, "shape": shape, "metric": metric,
                 "error": error, "tolerance": tolerance, "passed": ok, **extra}
        self.results.append(entry)
        mark = "ok  " if ok else "FAIL"
        label = f"{op} ({case})" if case else op
        largest = extra.get("max_abs_error")
        anywhere = (f", largest anywhere {largest:.3g}"
                    if largest is not None and largest > error else "")
        print(f"{mark} {label} {dtype} {shape}: {metric} {error:.3g} "
              f"(tolerance {tolerance:.3g}{anywhere})", flush=True)
        return ok


def load_check(path: Path) -> Any:
    """Import a check file as a module and check its declarations (``OPS``, ``run``)."""
    spec = importlib.util.spec_from_file_location(f"kernel_check_{Path(path).stem}", path)
    if spec is None or spec.loader is None:
        raise CheckDeclarationError(f"{path} cannot be loaded as Python")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ops = getattr(module, "OPS", None)
    if (not isinstance(ops, (tuple, list)) or not ops
            or not all(isinstance(o, str) and o for o in ops)):
        raise CheckDeclarationError(f"{path} must declare OPS, a non-empty tuple of op names")
    if len(set(ops)) != len(ops):
        raise CheckDeclarationError(f"{path}: OPS names an op twice")
    if not callable(getattr(module, "run", None)):
        raise CheckDeclarationError(f"{path} must define run(check)")
    return module


def _environment(torch: Any, device: str) -> dict[str, Any]:
    env = {"torch": torch.__version__, "torch_cuda": torch.version.cuda, "device": device}
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(device)
        env.update(gpu=props.name, capability=f"{props.major}.{props.minor}")
    return env


def run_file(path: Path, device: str) -> dict[str, Any]:
    """Run one check file on ``device``; the result says what was compared and the verdict
    (``passed``, ``failed``, or ``error`` when the check itself broke)."""
    start = time.monotonic()
    result: dict[str, Any] = {"schema": RESULT_SCHEMA, "check": str(path), "device": device,
                              "python": sys.executable, "results": [], "skipped": {}}
    check = None
    try:
        module = load_check(Path(path))
        result["ops"] = list(module.OPS)
        import torch
        result.update(_environment(torch, device))
        # Reproducible inputs; TF32 would make the fp32 references themselves inexact.
        torch.manual_seed(0)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        check = Check(torch, device, tuple(module.OPS))
        module.run(check)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        untouched = [op for op in module.OPS if op not in check.skipped
                     and not any(r["op"] == op for r in check.results)]
        if untouched:
            raise CheckDeclarationError(f"declared but never checked or skipped: "
                                        f"{', '.join(untouched)}")
        failed = [r for r in check.results if not r["passed"]]
        result["verdict"] = "failed" if failed else "passed"
    except Exception as exc:  # the check's own failure is a verdict, not a crash
        lines = traceback.format_exc().strip().splitlines()
        result["verdict"] = "error"
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["traceback"] = lines[-_TRACEBACK_LINES:]
        # Named apart from the message: a module missing from this environment is no failure
        # of the package's API, and the runner says which.
        if isinstance(exc, ModuleNotFoundError) and exc.name:
            result["missing_module"] = exc.name
    if check is not None:
        result["results"], result["skipped"] = check.results, check.skipped
    result["seconds"] = round(time.monotonic() - start, 2)
    return result


def main(argv: list[str] | None = None) -> int:
    """Run a check file and write its result: 0 passed, 1 failed, 2 the check broke."""
    ap = argparse.ArgumentParser(prog="kernelharness.py", description=main.__doc__)
    ap.add_argument("check", type=Path)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    result = run_file(args.check, args.device)
    tmp = args.out.with_name(args.out.name + ".part")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    tmp.replace(args.out)
    if result["verdict"] == "error":
        print(f"error: {result['error']}", file=sys.stderr)
    return {"passed": 0, "failed": 1}.get(result["verdict"], 2)


if __name__ == "__main__":
    sys.exit(main())
