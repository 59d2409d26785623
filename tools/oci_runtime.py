"""``python -m tools.oci_runtime``: make a container engine start containers where the OCI runtime may not set resource limits.

The command line only; the logic is ``tools.devtools.rlimit_runtime``, whose rlimit-stripping
wrapper script runs ``tools.devtools.rlimit_runtime.wrap`` directly.
"""

import argparse
import shlex
import sys

from tools.devtools import rlimit_runtime


def parser() -> argparse.ArgumentParser:
    """The command line: ``check`` that an engine starts containers, or ``wrap`` a runtime (what the
    wrapper runs)."""
    p = argparse.ArgumentParser(prog="python -m tools.oci_runtime",
                                description="Make a container engine start containers where the OCI "
                                            "runtime may not set resource limits.")
    sub = p.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", aliases=["probe"],
                           help="start a container plainly, else through the wrapper")
    check.add_argument("--engine", default="podman", help="container engine (default %(default)s)")
    check.add_argument("--image", required=True, help="a local image (nothing is pulled)")
    wrap_p = sub.add_parser("wrap", help="strip rlimits, then exec RUNTIME ARGS")
    wrap_p.add_argument("runtime", help="the OCI runtime to run (runc, crun)")
    wrap_p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments, unchanged")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m tools.oci_runtime``; exit 0 when containers start."""
    ns = parser().parse_args(argv)
    if ns.command == "wrap":
        rlimit_runtime.wrap(ns.runtime, ns.args)
    result = rlimit_runtime.check_starts(ns.engine, ns.image)
    print(("ok: " if result.ok else "failed: ") + result.why)
    if result.runtime_args:
        print("engine arguments: " + shlex.join(result.runtime_args))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
