"""The compile commands of a package's own build, read through a stand-in ninja.

torch's BuildExtension writes ``build.ninja`` and runs ``ninja`` (CMake's Ninja generator does
the same). ``capture_commands`` runs the package's build (``pip wheel``, as the host backend runs
it) with a stand-in ``ninja`` first on PATH, which asks the real ninja for the file's compile
database (``ninja -t compdb -x``: every command line fully expanded) and compiles nothing. It
puts an empty object file (an empty C file, compiled once) where each object would be, so that a
package with several extensions (one ninja run each) goes on to the next; what the build then
links and packs from those is deleted. ``tools.probing.probe_build`` compiles some of the units it
returns.

The stand-in is written by distlib's ``ScriptMaker``: on POSIX a script whose shebang is this
Python, on Windows ``ninja.exe``, distlib's console launcher with the script inside, since
Windows finds only ``.exe`` files on PATH. Each function here that differs takes the ``host``
(``tools.hostplat``; default: this machine's), so both are written and run on any machine.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from distlib.resources import finder
from distlib.scripts import ScriptMaker, enquote_executable

from tools.core.errors import ProbeError
from tools.hostplat import HostOS, current
from tools.pipeline.build_toolchain import build_process_env, pip_wheel_command
from tools.pipeline.buildenv import available_memory_gib, build_env, size_jobs
from tools.pipeline.prelude import Prelude, prepare
from tools.pipeline.report import Progress
from tools.plan.job import BuildJob, Inputs

#: The package's build with nothing compiled (setup.py, torch's import, links of empty objects)
#: takes seconds to a few minutes.
CAPTURE_TIMEOUT = 1800
#: The stand-in ninja's exit status when it has no stand-in object and stops the build.
STOP_STATUS = 86

SOURCE_SUFFIXES = {".cu": "cuda", ".cpp": "c++", ".cc": "c++", ".cxx": "c++", ".c": "c"}

_SHIM = '''\
#!python
# A stand-in for ninja while tools/probing/compdb.py reads a build. Version checks and -t tools go to
# the real ninja; a build records the compile database of its ninja file and compiles nothing:
# it puts an empty object where each object would be, so the package's build goes on to its
# next extension (or, without one, stops the build).
import json, os, shutil, subprocess, sys
REAL, OUT, STUB, EXECS = {real!r}, {out!r}, {stub!r}, {execs!r}
args = sys.argv[1:]
if any(a == "--version" or a.startswith("-t") for a in args):
    if not EXECS:  # Windows has no exec: os.execv starts the program and returns at once
        sys.exit(subprocess.call([REAL, *args]))
    os.execv(REAL, [REAL, *args])
directory, ninja_file = os.getcwd(), "build.ninja"
for flag, value in zip(args, args[1:]):
    if flag == "-C":
        directory = os.path.join(directory, value)
    elif flag == "-f":
        ninja_file = value
proc = subprocess.run([REAL, "-C", directory, "-f", ninja_file, "-t", "compdb", "-x"],
                      capture_output=True, text=True)
if proc.returncode != 0:
    sys.stderr.write("cuwheels probe: ninja -t compdb failed: " + proc.stderr)
    sys.exit(proc.returncode)
os.makedirs(OUT, exist_ok=True)
n = len([f for f in os.listdir(OUT) if f.startswith("compdb-")])
record = {{"directory": directory, "ninja_file": os.path.join(directory, ninja_file),
          "commands": json.loads(proc.stdout)}}
with open(os.path.join(OUT, "compdb-%d.json" % n), "w") as fh:
    json.dump(record, fh, indent=1)
sys.stderr.write("cuwheels probe: recorded %d compile commands from %s\\n"
                 % (len(record["commands"]), record["ninja_file"]))
if not STUB:
    sys.exit({stop})
for entry in record["commands"]:
    target = os.path.join(entry["directory"], entry["output"])
    if target.endswith((".o", ".obj")):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(STUB, target)

'''


@dataclass(frozen=True)
class Unit:
    """One translation unit as the package's build would compile it."""

    name: str          # path in the source tree (absolute when outside it)
    kind: str          # cuda, c++ or c
    command: str       # the exact shell command line from the ninja file
    directory: Path    # where ninja runs it
    output: Path       # the object file it writes
    weight: int = 0    # bytes of the unit and the tree's headers it includes (rank_units)



def stand_in_object(path: Path, *, host: HostOS = current()) -> Path | None:
    """An empty object file (an empty C file compiled), or None when no C compiler answers:
    ``cc -c -x c /dev/null``; on a Windows ``host`` (default: this machine's) MSVC's ``cl /c``
    of an empty ``.c`` file beside ``path`` (``stand-in.obj``), which is removed after."""
    return host.stand_in_object(path)


class _ShimMaker(ScriptMaker):
    """distlib's ScriptMaker writing for one platform, whichever this machine is: with
    ``launchers`` (``HostOS.script_launchers``) the launcher ``ninja.exe``, else a shebang
    script with its mode bits set. distlib decides by ``os.name`` (``_is_nt``) and keeps its
    launchers' bytes only on Windows (``_get_launcher``); both are set here, for distlib 0.4.4
    (the project's pin)."""

    def __init__(self, source_dir: Path, target_dir: Path, *, launchers: bool):
        super().__init__(str(source_dir), str(target_dir), add_launchers=launchers)
        self._is_nt = launchers
        self.set_mode = not launchers
        self.variants = {""}            # ninja only, no ninja-3.12
        self.force = self.clobber = True
        self.executable = enquote_executable(sys.executable)

    def _get_launcher(self, kind: str) -> bytes:
        # t64.exe: the console launcher for x64 (the win_amd64 runners)
        return finder("distlib").find(f"{kind}64.exe").bytes


def write_shim(bin_dir: Path, real_ninja: str, out: Path, stub: Path | None, *,
               host: HostOS = current()) -> Path:
    """Write the stand-in ninja into ``bin_dir`` (see the module docstring): ``ninja``, or
    ``ninja.exe`` on a Windows ``host``; without a ``stub`` object it stops the package's
    build after the first ninja file."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ninja-shim-") as source:
        (Path(source) / "ninja").write_text(_SHIM.format(
            real=real_ninja, out=str(out), stub=str(stub) if stub else None, execs=host.execs,
            stop=STOP_STATUS))
        made = _ShimMaker(Path(source), bin_dir, launchers=host.script_launchers).make("ninja")
    if len(made) != 1:
        raise ProbeError(f"the stand-in ninja was not written into {bin_dir} ({made})")
    return Path(made[0])


def read_units(record_dir: Path, tree: Path) -> list[Unit]:
    """The compile commands the stand-in ninja recorded, as units (sources only, no links)."""
    units, seen = [], set()
    for path in sorted(record_dir.glob("compdb-*.json"), key=lambda p: int(p.stem.split("-")[1])):
        record = json.loads(path.read_text())
        for entry in record["commands"]:
            directory = Path(entry["directory"])
            source = (directory / entry["file"]).resolve()
            kind = SOURCE_SUFFIXES.get(source.suffix)
            if kind is None:
                continue
            name = (source.relative_to(tree.resolve()).as_posix()
                    if source.is_relative_to(tree.resolve()) else str(source))
            if name in seen:
                continue
            seen.add(name)
            units.append(Unit(name, kind, entry["command"], directory,
                              directory / entry["output"]))
    return units


def capture_commands(python: Path, tree: Path, env: dict[str, str], work: Path, *,
                     isolation: bool, timeout: float = CAPTURE_TIMEOUT,
                     host: HostOS = current()) -> list[Unit]:
    """Run the package's build with the stand-in ninja and return the units it would compile
    (``host``: whose stand-in and object, default: this machine's).

    ProbeError when the build writes no compile commands (no ninja in the build environment,
    a build that doesn't use torch's ninja path, or one that failed before it got there).
    """
    real = shutil.which("ninja", path=build_process_env(python, env)["PATH"])
    if real is None:
        raise ProbeError(
            f"ninja is not in the build environment of {tree.name}",
            hint="the probe reads the command lines from the ninja file torch's BuildExtension "
                 "writes; add ninja to the recipe's build.requires")
    record_dir, log = work / "commands", work / "capture.log"
    shutil.rmtree(record_dir, ignore_errors=True)
    stub = host.stand_in_object(work / "shim" / f"stand-in{host.object_suffix}")
    shim_dir = write_shim(work / "shim", real, record_dir, stub, host=host).parent
    cmd = pip_wheel_command(python, tree, work / "dist", isolation=isolation)
    full_env = build_process_env(python, env, first_on_path=(shim_dir,))
    with log.open("w") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        try:
            proc = subprocess.run(cmd, cwd=tree, env=full_env, stdout=fh,
                                  stderr=subprocess.STDOUT, timeout=timeout)
            status = proc.returncode
        except subprocess.TimeoutExpired:
            status = None
    # what the build linked and packed from stand-in objects is no product: remove it
    shutil.rmtree(work / "dist", ignore_errors=True)
    for built in (tree / "build").glob("lib.*"):
        shutil.rmtree(built, ignore_errors=True)
    units = read_units(record_dir, tree) if record_dir.is_dir() else []
    if units:
        return units
    text = log.read_text(errors="replace")
    tail = "\n".join(text.strip().splitlines()[-12:])
    if status is None:
        why = f"it ran for {timeout:.0f} s without running ninja"
    elif status == 0:
        why = "it finished without running ninja (so nothing says how it compiles)"
    else:
        why = f"it stopped (exit {status}) before running ninja"
    hint = ("the probe needs a build that compiles through torch's BuildExtension with ninja "
            "(or CMake's Ninja generator)")
    if isolation:
        hint += ("; with build.isolation: true pip puts its own ninja first on PATH: probe "
                 "with isolation false")
    raise ProbeError(f"the build of {tree.name} wrote no compile commands: {why}; log: {log}\n"
                     f"{tail}", hint=hint + "; read the log for the first error")


@dataclass(frozen=True)
class BuildCommands:
    """A cell's prelude and the compile commands of its package's build."""

    prelude: Prelude
    #: The build's variables the commands were read with (one nvcc thread, the cell's archs).
    env: dict[str, str]
    units: list[Unit]


def read_build(job: BuildJob, work: Path, inputs: Inputs, progress: Progress) -> BuildCommands:
    """Run the cell's ``toolchain``, ``source`` and ``python`` steps, then the ``commands``
    step: the package's build through the stand-in ninja, as :func:`capture_commands` reads it,
    sized for one nvcc thread (the unit list and the kernel measurement read it so)."""
    cell, recipe = job.cell, job.recipe
    prelude = prepare(job, work, inputs, progress)
    sizing = size_jobs(cores=1, available_gib=available_memory_gib(),
                       job_memory_gib=recipe.build.job_memory_gib, nvcc_threads=1,
                       archs=len(cell.archs))
    env = build_env(recipe, cell, sizing, archs=cell.archs, cuda_home=prelude.nvcc.cuda_home)

    def commands(step):
        found = capture_commands(prelude.python.python, prelude.source.tree, env, work,
                                 isolation=recipe.build.isolation)
        step.detail.update(recorded=len(found))
        return found

    return BuildCommands(prelude, env, progress.run("commands", commands))
