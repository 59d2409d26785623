"""A kernel shard through the container backend: the cell's own build, told to compile a few units.

In the container, a shard's objects are only of use to the cells if its command lines are
theirs, byte for byte: the same image, compilers, paths and variables. So a container shard runs
the cell's own cibuildwheel build (the same staging, options and mounts, ``tools.backends.
container``) with two differences: ccache writes only into the shard's cache (mounted
read-write, ``tools.pipeline.ccache.shard_writer_env``), and a stand-in ``ninja`` is first on
``PATH``. When torch's ``BuildExtension`` runs ninja, the stand-in asks the real ninja for the
compile database, checks that the build's CUDA units are the plan's (else it writes the
difference into ``shard.json`` and stops), and has the real ninja build only the objects of the
shard's units (``ninja <object> ...``, ``MAX_JOBS`` at a time). It then writes ``shard.json``
(complete, with the compile's seconds), has ``python -m tools.incontainer shard-result`` hand
that record back as the container's result file (``tools.backends.result``) and stops the build
with :data:`STOP_STATUS`: a shard makes no wheel, so the package's build must not go on to link
one. cibuildwheel reports the stopped build as a failure; the result file, written only after
every object of the shard was built, is the shard's success, not cibuildwheel's exit status.
The host's shards (``tools.sharding.shard_build``) run the recorded command lines directly; the
record (``tools.pipeline.shardcache.ShardResult``) is the same.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tools.pipeline.shardcache import ShardResult
from .cibw import CONTAINER_TOOLS, IN_IMAGE_MODULE, TOOLS_VENV

#: The stand-in ninja's exit status once the shard's objects are built (the build stops there).
STOP_STATUS = 86
#: Where the shard's cache is mounted in the container (read-write).
CONTAINER_SHARD = PurePosixPath("/cuwheels-shard")
#: Where the cells' shard caches are mounted (read-only), one directory each.
CONTAINER_SHARDS = PurePosixPath("/cuwheels-shards")
#: The stand-in's folder inside the staged tools (``/project/cuwheels/shard-ninja``).
SHIM_DIR = "shard-ninja"
SPEC_FILE = "shard.json"

_SHIM = r'''#!/usr/bin/env python
# A stand-in for ninja in a kernel shard's container build (tools/backends/shardninja.py):
# build only the shard's objects with the real ninja, record them, stop the build.
import json, os, shutil, subprocess, sys, time
HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = json.load(open(os.path.join(HERE, "spec.json")))
path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if os.path.abspath(p) != HERE]
REAL = shutil.which("ninja", path=os.pathsep.join(path))
args = sys.argv[1:]
if REAL is None:
    sys.exit("cuwheels shard: no real ninja on PATH behind the stand-in")
if any(a == "--version" or a.startswith("-t") for a in args):
    os.execv(REAL, [REAL, *args])
directory, ninja_file = os.getcwd(), "build.ninja"
for flag, value in zip(args, args[1:]):
    if flag == "-C":
        directory = os.path.join(directory, value)
    elif flag == "-f":
        ninja_file = value
record = dict(SPEC["record"], complete=False, verdict="failed",
              env={k: os.environ[k] for k in ("NVCC_THREADS",) if k in os.environ})
out = SPEC["cache"]

def write(**fields):
    record.update(fields)
    with open(os.path.join(out, "shard.json.tmp"), "w") as fh:
        json.dump(record, fh, indent=1, sort_keys=True)
    os.replace(os.path.join(out, "shard.json.tmp"), os.path.join(out, "shard.json"))

proc = subprocess.run([REAL, "-C", directory, "-f", ninja_file, "-t", "compdb", "-x"],
                      capture_output=True, text=True)
if proc.returncode != 0:
    write(error="ninja -t compdb failed: " + proc.stderr[-800:])
    sys.exit(proc.returncode)
tree = SPEC["tree"]
targets, built = {}, set()
for entry in json.loads(proc.stdout):
    source = os.path.normpath(os.path.join(entry["directory"], entry["file"]))
    if source.endswith(".cu") and source.startswith(tree + "/"):
        name = source[len(tree) + 1:]
        built.add(name)
        targets.setdefault(name, entry["output"])
planned = set(SPEC["planned"])
if built != planned:
    write(error="the build's CUDA units are not the plan's: in the build, not in the list: "
          + (", ".join(sorted(built - planned)) or "none") + "; in the list, not in the build: "
          + (", ".join(sorted(planned - built)) or "none"))
    sys.exit(SPEC["stop"] + 1)
write()   # before the compile: a stopped shard says it is partial
jobs = os.environ.get("MAX_JOBS") or "1"
start = time.monotonic()
sys.stderr.write("cuwheels shard: building %d of %d units\n" % (len(SPEC["units"]), len(built)))
sys.stderr.flush()
code = subprocess.run([REAL, "-C", directory, "-f", ninja_file, "-j", jobs, "-v",
                       *[targets[u] for u in SPEC["units"]]]).returncode
seconds = round(time.monotonic() - start, 1)
if code != 0:
    write(error="the real ninja failed (exit %d) building the shard's units" % code,
          seconds={"(all units)": seconds})
    sys.exit(code)
write(complete=True, verdict="passed", seconds={"(all units)": seconds})
sys.stderr.write("cuwheels shard: done in %.0f s\n" % seconds)
# The record handed back as the container's result file: the host's signal that the shard is done.
handed = subprocess.run(SPEC["result"], env=dict(os.environ, PYTHONPATH=SPEC["pythonpath"]))
if handed.returncode != 0:
    sys.exit("cuwheels shard: the result was not written (exit %d)" % handed.returncode)
sys.exit(SPEC["stop"])
'''


@dataclass(frozen=True)
class ContainerShard:
    """What a shard build makes, as the container backend takes it
    (``ContainerBackend.build_shard``; ``tools.sharding.shard_build.ShardTarget`` is the plan's
    view): where its cache is on this machine, and what its ``shard.json`` starts with."""

    cache: Path
    record: ShardResult
    #: Every CUDA unit the plan's unit list has (the stand-in checks the build's against it).
    planned: tuple[str, ...]


def write_shim(tools_dir: Path, shard: ContainerShard, tree_in_container: PurePosixPath) -> Path:
    """Put the stand-in ninja and its spec into the staged tools (``<tools_dir>/shard-ninja``),
    returned as the folder to put first on the container's PATH (its path in the container is
    ``/project/cuwheels/shard-ninja``)."""
    folder = tools_dir / SHIM_DIR
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spec.json").write_text(json.dumps({
        "record": shard.record.to_json(), "units": shard.record.units,
        "planned": list(shard.planned), "cache": str(CONTAINER_SHARD),
        "tree": str(tree_in_container), "stop": STOP_STATUS,
        "result": [str(TOOLS_VENV / "bin" / "python"), "-m", IN_IMAGE_MODULE, "shard-result",
                   str(CONTAINER_SHARD / SPEC_FILE)],
        "pythonpath": str(CONTAINER_TOOLS),
    }, indent=1))
    shim = folder / "ninja"
    shim.write_text(_SHIM)
    shim.chmod(0o755)
    return folder
