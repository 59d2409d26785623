"""``python -m tools.kernelcheck``: the kernel check: a recipe's ``check.py`` run on a GPU against plain-torch references.

The command only: it parses the arguments, calls ``tools.kernels.check`` and prints the result.
"""

import argparse
import json
import sys
from pathlib import Path

from tools import RECIPES_DIR
from tools.core.cliopts import option
from tools.core.errors import cli
from tools.kernels.check import (EXIT_NOT_RUN, NOT_RUN_NO_GPU, find_gpu, format_result,
                                 raise_if_failed, resolve_target, run_target)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command's arguments."""
    ap = argparse.ArgumentParser(prog="python -m tools.kernelcheck",
                                 description="Run a recipe's kernel check on this machine's GPU.")
    ap.add_argument("target", help="a recipe name (flash_attn) or a check file")
    option(ap, "--interpreter", "--python", default=sys.executable, metavar="PATH",
           help="the Python of the environment holding torch and the installed wheel "
                         "(default: this one)")
    ap.add_argument("--recipes", type=Path, default=RECIPES_DIR, help="recipes directory")
    ap.add_argument("--device", default="cuda",
                    help="cuda (default), or cpu for a check of plain-torch code")
    ap.add_argument("--json", type=Path, help="also write the result here")
    return ap.parse_args(argv)


@cli
def main(argv: list[str] | None = None) -> int:
    """``python -m tools.kernelcheck RECIPE|CHECK.py [--interpreter PATH] [--json OUT]``

    Exit status: 0 passed, 10 failed or broke (or --interpreter names none), 12 not run
    (no GPU).
    """
    args = parse_args(argv)
    target = resolve_target(args.target, args.recipes)
    result = run_target(target, args.interpreter, device=args.device, gpu_finder=find_gpu)
    print(format_result(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    raise_if_failed(result, what=str(target.check), modules=target.modules)
    return EXIT_NOT_RUN if result["verdict"] == NOT_RUN_NO_GPU else 0


if __name__ == "__main__":
    sys.exit(main())
