"""A CUDA toolkit that answers the version question as another CUDA version, for measuring only.

Whether a recipe's kernel units depend on the torch series (``tools.probing.kernelsame``) is a
question about torch: which of its headers reach the units' text, and which options its extension
builder puts on their command lines. The toolkit is the same for every series of one CUDA
version, so the answer does not depend on which toolkit preprocesses the units, as long as the
package's ``setup.py`` and torch's extension builder choose the flags they would choose for that
CUDA version. Both choose them from ``nvcc --version``, and torch refuses a toolkit whose major
version is not its own. So where no toolkit of the cell's CUDA version can be had (PyPI ships a
full ``nvcc`` only for CUDA 13), :func:`make` lays out a toolkit root over this machine's whose
``bin/nvcc`` answers ``-V``/``--version`` as the cell's version and hands every other call to the
real compiler, less the ``-gencode`` entries of archs it no longer has (CUDA 13 dropped sm_70,
which 12.8 builds): the version checks pass, the flags are the ones a build of that CUDA version
gets, and the text is preprocessed with this machine's CUDA headers.

What it proves, and what not: that the units include the same torch headers (none, for a
patched recipe) and get the same command lines against every series, which is what decides
whether the series can share kernels. The digest it records is of the text with this machine's
CUDA headers, not the real toolkit's, so the record says which toolkit stood in; a cell built
with the real toolkit checks its own units again (the compiler cache's key), so a wrong record
costs a compile, never a wrong object. It is for ``--across-torch`` only: nothing is compiled
with it.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

from tools.core.errors import ProbeError
from tools.pipeline.build_toolchain import Nvcc

#: The stand-in ``nvcc``: a Python script run by the interpreter that made it. It answers the
#: version question in the real one's form (torch and the packages parse ``release X.Y``), drops
#: the ``-gencode`` entries of archs the real compiler no longer has (CUDA 12.8 still builds
#: sm_70, which CUDA 13 dropped), and runs the real compiler with the rest.
_SCRIPT = """#!{python}
# A stand-in for measuring only (tools/probing/toolkitstandin.py): it answers the version
# question as CUDA {version}, and runs the real nvcc of CUDA {real} for everything else,
# without the -gencode entries of archs CUDA {real} can't compile for (the same for every
# torch series, so the comparison between them is unchanged).
import os, re, sys

REAL = {nvcc!r}
SUPPORTED = {supported!r}
ARCH = re.compile(r"compute_([0-9]+[a-z]?)")


def unsupported(value):
    found = ARCH.search(value)
    return found is not None and found.group(1) not in SUPPORTED


args = sys.argv[1:]
if "-V" in args or "--version" in args:
    print("nvcc: NVIDIA (R) Cuda compiler driver (a stand-in over CUDA {real})")
    print("Cuda compilation tools, release {version}, V{version}.0")
    sys.exit(0)
out, i = [], 0
while i < len(args):
    arg = args[i]
    if arg in ("-gencode", "--generate-code") and i + 1 < len(args) and unsupported(args[i + 1]):
        i += 2
        continue
    if arg.startswith(("-gencode=", "--generate-code=")) and unsupported(arg.split("=", 1)[1]):
        i += 1
        continue
    out.append(arg)
    i += 1
os.execv(REAL, [REAL] + out)
"""


def real_archs(nvcc: Path) -> list[str]:
    """The virtual archs ``nvcc --list-gpu-arch`` names (``75``, ``90``, ``100``, ...)."""
    proc = subprocess.run([str(nvcc), "--list-gpu-arch"], capture_output=True, text=True,
                          timeout=120)
    if proc.returncode != 0:
        raise ProbeError(f"{nvcc} --list-gpu-arch failed: {proc.stderr.strip()[-300:]}")
    return re.findall(r"compute_([0-9]+[a-z]?)", proc.stdout)


def make(real: Nvcc, version: str, root: Path) -> Path:
    """A toolkit root under ``root`` over ``real``'s, whose ``bin/nvcc`` says it is CUDA
    ``version`` (see the module docstring); returns the root. Made anew each time."""
    if real.version == version:
        raise ProbeError(f"this machine's nvcc is CUDA {real.version} already: no stand-in is "
                         "needed", hint="drop --toolkit-stand-in")
    home = Path(real.cuda_home)
    out = root / f"toolkit-stand-in-{version}"
    (out / "bin").mkdir(parents=True, exist_ok=True)
    for entry in home.iterdir():
        if entry.name != "bin":
            _link(entry, out / entry.name)
    for entry in (home / "bin").iterdir():
        if entry.name != "nvcc":
            _link(entry, out / "bin" / entry.name)
    script = out / "bin" / "nvcc"
    nvcc = home / "bin" / "nvcc"
    script.write_text(_SCRIPT.format(python=sys.executable, version=version, real=real.version,
                                     nvcc=str(nvcc), supported=real_archs(nvcc)))
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return out


def _link(target: Path, link: Path) -> None:
    if link.is_symlink() or link.exists():
        link.unlink()
    os.symlink(target, link)
