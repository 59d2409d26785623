"""The command line: options, overrides, human and JSON output, exit status.

    cuwheels-select flash-attn [--index https://example.org/cuwheels/] [--json]
    python -m tools.selector ...              (in the repository)
    python cuwheels-select.pyz ...            (the single file every site publishes)

See tools.selector for what it detects and answers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from packaging.version import InvalidVersion, Version

from tools.core.platforms import PLATFORMS
from tools.core.site import INDEX_URL

#: An index to read in place of the project's own when no --index is given (a fork's, a mirror).
INDEX_ENV = "CUWHEELS_INDEX"
from .answer import Answer, select
from .client import Index, IndexReadError, visible
from .detect import Machine, detect_machine
from .doctor import Diagnosis, doctor
from .fetch import DEFAULT_DEADLINE, origin
from .localread import read_tail
from .target import DOWNLOAD_DIR

EXIT_FITS, EXIT_NO_FIT, EXIT_INDEX = 0, 1, 3  # and 2 for bad arguments, from argparse
#: The most of an --error-file read: its end (a log's error is at its end).
ERROR_FILE_LIMIT = 1 << 20


# --------------------------------------------------------------------------- output


def format_machine(m: Machine) -> str:
    """The detected facts, one per line, with what couldn't be detected."""
    lines = [f"  python   {'.'.join(map(str, m.python))} ({m.python_tag}), {m.os} {m.arch}"
             + (f" ({m.platform})" if m.platform else " (no wheels for this platform)")
             + (f", glibc {m.glibc[0]}.{m.glibc[1]}" if m.glibc else "")]
    if m.torch:
        build = {"cuda": f"CUDA {m.torch_cuda}", "cpu": "CPU-only", "rocm": "ROCm"}.get(m.torch_build or "",
                                                                                        "build unknown")
        abi = {True: ", C++11 ABI", False: ", pre-C++11 ABI"}.get(m.cxx11_abi, "")  # type: ignore[arg-type]
        lines.append(f"  torch    {m.torch} ({build}{abi})")
    if m.driver or m.driver_cuda:
        parts = [p for p in (m.driver, f"CUDA {m.driver_cuda}" if m.driver_cuda else None) if p]
        lines.append(f"  driver   {', '.join(parts)}")
    if m.gpus:
        lines.append("  GPUs     " + ", ".join(f"sm_{g.sm}" + (f" ({g.name})" if g.name else "") for g in m.gpus))
    for key, why in m.unknown.items():
        lines.append(f"  ?        {key}: {why}")
    return "\n".join(lines)


def _whose(m: Machine) -> str:
    """The heading of the facts: this machine's, or those of the machine of another platform
    the answer is for."""
    return "The machine answered for (another platform):" if m.foreign else "This machine:"


def format_answer(a: Answer) -> str:
    """The human-readable answer."""
    there = " (run there)" if a.machine.foreign else ""
    out = [_whose(a.machine), format_machine(a.machine), ""]
    if a.fits:
        out += [f"{a.package} {a.version} fits: {a.filename}",
                f"  variant index: {a.index_url}", "",
                f"pip{there}:", f"  {a.pip}", "",
                f"uv (pip interface){there}:", f"  {a.uv['command'] if a.uv else ''}", "",
                "uv project (pyproject.toml):"]
        out += [f"  {line}" if line else "" for line in (a.uv or {}).get("pyproject", "").splitlines()]
        if a.download:
            out += ["", f"From this machine, that machine's wheel alone (no dependencies), into "
                        f"{DOWNLOAD_DIR}/:", f"  pip: {a.download['pip']}", f"  uv:  {a.download['uv']}"]
    else:
        out.append(f"No wheel fits: {a.reason}")
        out += [f"  - {r}" for r in a.reasons if r not in (a.reason or "")]
        if a.advice:
            out += ["", "What would help:"] + [f"  - {line}" for line in a.advice]
        if a.alternatives:
            out += ["", f"Other builds of {a.package} in the index:"]
            for alt in a.alternatives[:8]:
                if "pip" in alt:
                    out.append(f"  - {a.package} {alt['versions'][0]} fits from {alt['index']}: {alt['pip']}")
                else:
                    fit = "" if alt["fits_otherwise"] else " (not for this machine's Python/platform/driver)"
                    line = (f"  - torch {alt['torch']} + CUDA {alt['cuda']}: {alt['index_url']} "
                            f"({', '.join(alt['versions'][:4])}; {', '.join(alt['pythons'])}){fit}")
                    out.append(line)
                    if alt.get("torch_install") and alt["fits_otherwise"]:
                        out.append(f"      with torch from: {alt['torch_install']}")
    if a.build:
        out += ["", "Build from source:", f"  {a.build}"]
    if a.notes:
        out += ["", "Notes:"] + [f"  - {n}" for n in a.notes]
    return "\n".join(out)


def format_diagnosis(d: Diagnosis, m: Machine) -> str:
    """The human-readable diagnosis."""
    out = ["This machine:", format_machine(m), ""]
    if d.error:
        out += ["Error:"] + [f"  {line}" for line in d.error.strip().splitlines()[-3:]] + [""]
    out.append(f"Diagnosis ({d.kind}): {d.summary}")
    out += [f"  {line}" for line in d.details]
    if d.fixes:
        out += ["", "Fix:"] + [f"  - {f}" for f in d.fixes]
    return "\n".join(out)


# --------------------------------------------------------------------------- command line



def _seconds(text: str) -> float:
    """A positive number of seconds (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def _host(text: str) -> tuple[str, int | None]:
    """``HOST`` or ``HOST:PORT`` as ``(host, port)`` (argparse type)."""
    try:
        return origin(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _say(text: str, *, err: bool = False) -> None:
    """Print ``text`` with every character a terminal would act on escaped (tools.selector.client.
    visible): an index's text has been made visible already; this covers the rest (URLs and
    server messages in errors, an import error's text)."""
    print(visible(text, keep="\n\t"), file=sys.stderr if err else sys.stdout)


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    p = argparse.ArgumentParser(
        prog="cuwheels-select",
        description="Which cuwheels wheel fits this machine, with the pip and uv commands; or why an "
                    "installed one fails to import (--doctor).",
    )
    p.add_argument("package", nargs="?", help="project name, e.g. flash-attn")
    p.add_argument("--version", help="a version of the package (default: the newest that fits)")
    p.add_argument("--index", help=f"the cuwheels site: its URL or a local site directory (default: "
                                   f"${INDEX_ENV}, else {INDEX_URL}; --doctor reads an index only when "
                                   "given one)")
    p.add_argument("--site-url", help="public URL of a local --index, used in the printed commands")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--doctor", action="store_true", help="explain an import error of PACKAGE")
    err = p.add_mutually_exclusive_group()
    err.add_argument("--error", help="the error text to explain (default: try the import here)")
    err.add_argument("--error-file", type=Path, help="a file holding the error text (a log, a traceback)")
    p.add_argument("--detect", action="store_true", help="print the detected facts and exit")
    p.add_argument("--no-peek", action="store_true", help="never read a wheel's manifest for the GPU arch check")
    p.add_argument("--pre", action="store_true",
                   help="also consider wheels built against a torch release candidate (the "
                        "pre-release index pre/cuXYZ/torchX.Y/), after the release ones")
    p.add_argument("--timeout", type=_seconds, default=30,
                   help="seconds for one network request, from connecting to its last byte (default 30)")
    p.add_argument("--deadline", type=_seconds, default=DEFAULT_DEADLINE,
                   help=f"seconds for all the network requests of the run (default {DEFAULT_DEADLINE:g})")
    p.add_argument("--allow-host", action="append", default=[], type=_host, metavar="HOST[:PORT]",
                   help="a host the index's files may be read from besides the index's own (repeatable)")
    o = p.add_argument_group("facts of another machine (each replaces what is detected here)")
    o.add_argument("--python-version", help="3.12 (3.13t for free-threaded)")
    o.add_argument("--platform", choices=list(PLATFORMS),
                   help="the machine's OS and CPU: its commands then fetch that platform's wheel from here")
    o.add_argument("--machine", help="CPU arch as in wheel tags: x86_64, aarch64")
    o.add_argument("--glibc", help="glibc version, e.g. 2.28")
    o.add_argument("--torch-version", help="torch version with its label, e.g. 2.8.0+cu128 or 2.9.1+cpu")
    o.add_argument("--torch-cuda", help="CUDA version torch is built with (12.8; none for CPU)")
    o.add_argument("--cxx11-abi", help="torch's C++ ABI: 1 (C++11, torch >= 2.7) or 0")
    o.add_argument("--cuda-driver", help="NVIDIA driver version (580.65.06) or the CUDA version it supports (13.0)")
    o.add_argument("--sm", help="GPU compute capabilities: 90, 8.6, 80,120 or none")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.detect and not args.package:
        parser.error("PACKAGE is required (or --detect)")
    # The project's own index unless another is named; the doctor works offline unless told one.
    location = args.index or (None if args.doctor else os.environ.get(INDEX_ENV) or INDEX_URL)
    overrides = {k: getattr(args, k) for k in ("python_version", "platform", "machine", "glibc", "torch_version",
                                                "torch_cuda", "cxx11_abi", "cuda_driver", "sm")}
    try:
        machine = detect_machine(overrides)
    except ValueError as exc:
        parser.error(str(exc))
    if args.version is not None:
        try:
            Version(args.version)
        except InvalidVersion:
            parser.error(f"--version {args.version!r} is not a version (PEP 440), e.g. 2.8.3")
    if args.detect:
        _say(json.dumps(machine.to_json(), indent=2) if args.json else "This machine:\n" + format_machine(machine))
        return EXIT_FITS
    try:
        index = Index(location, site_url=args.site_url, timeout=args.timeout, deadline=args.deadline,
                      allow_hosts=tuple(args.allow_host)) if location else None
        if args.doctor:
            error, read_note = args.error, ""
            if args.error_file is not None:
                error, read_note = read_tail(args.error_file, ERROR_FILE_LIMIT)
                if error is None:
                    parser.error(f"--error-file: {read_note}: give a log or a file holding the error's text")
            d = doctor(args.package, machine, error=error, index=index, peek=not args.no_peek)
            d.details += [read_note] if read_note else []
            _say(json.dumps(d.to_json(machine), indent=2) if args.json else format_diagnosis(d, machine))
            return EXIT_FITS if d.kind == "ok" else EXIT_NO_FIT
        answer = select(index, args.package, machine, version=args.version, peek=not args.no_peek,
                        pre=args.pre)
    except IndexReadError as exc:
        _say(f"index error: {exc}", err=True)
        return EXIT_INDEX
    except OSError as exc:
        _say(f"error: {exc}", err=True)
        return EXIT_INDEX
    _say(json.dumps(answer.to_json(), indent=2) if args.json else format_answer(answer))
    return EXIT_FITS if answer.fits else EXIT_NO_FIT
