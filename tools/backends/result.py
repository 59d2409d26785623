"""What a container build hands back to the host: a result file, not lines in cibuildwheel's log.

cibuildwheel copies the staged tree into the container (``/project`` is a copy, not a mount), so
the container's commands write their results into a folder of the cell's work directory that is
mounted read-write at :data:`CONTAINER_RESULT` (``<work>/container/`` on this machine):
``result.json``, one :class:`ContainerResult`. ``python -m tools.incontainer ccache stats``
writes what the compiler cache did; a kernel shard's stand-in ninja has ``python -m
tools.incontainer shard-result`` write the shard's record once its units are compiled. The host
side (``tools.backends.containerized``) reads it back through the same type.

A failure that leaves no result (an OOM kill, a compile error, a failed repair) is still named
from the log (``containerized.classify_failure``): the process that would have written the
file is the one that died.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields
from pathlib import Path, PurePosixPath

from tools.core.errors import ToolchainError
from tools.pipeline.buildreport import ReportedCache
from tools.pipeline.shardcache import ShardResult

#: Where the result folder is mounted in the container (read-write).
CONTAINER_RESULT = PurePosixPath("/cuwheels-result")
#: The result folder in the cell's work directory, and the file in it.
RESULT_DIR = "container"
RESULT_FILE = "result.json"
#: The version of :class:`ContainerResult`'s shape; the host refuses any other.
RESULT_SCHEMA = 1


@dataclass
class ContainerResult:
    """What the container's commands found: the compiler cache's figures for the compile (with
    each unit's result, path as ccache logged it -> ``hit``/``shard hit``/``miss``...), and a
    kernel shard's record when the build was a shard's."""

    ccache: ReportedCache | None = None
    units: dict[str, str] | None = None
    shard: ShardResult | None = None
    schema: int = RESULT_SCHEMA

    def to_json(self) -> dict[str, object]:
        """The object ``result.json`` holds."""
        return {"schema": self.schema,
                "ccache": None if self.ccache is None else {
                    f.name: getattr(self.ccache, f.name) for f in fields(self.ccache)
                    if getattr(self.ccache, f.name) is not None},
                "units": self.units,
                "shard": None if self.shard is None else self.shard.to_json()}

    @classmethod
    def from_json(cls, data: object, *, where: str) -> ContainerResult:
        """The result in ``data``; ToolchainError naming ``where`` and the field when it isn't
        one of this schema version."""
        def bad(rule: str) -> ToolchainError:
            return ToolchainError(f"{where}: {rule}",
                                  hint="the container ran another version of the tools than "
                                       "this machine: stage the cell again")
        if not isinstance(data, dict) or set(data) != {"schema", "ccache", "units", "shard"}:
            raise bad("must be an object with schema, ccache, units and shard")
        if data["schema"] != RESULT_SCHEMA:
            raise bad(f"schema {data['schema']!r}: this code reads container results of schema "
                      f"{RESULT_SCHEMA}")
        ccache, units, shard = data["ccache"], data["units"], data["shard"]
        if ccache is not None:
            try:
                ccache = ReportedCache(**ccache)
            except TypeError as exc:
                raise bad(f"ccache has the wrong fields ({exc})") from None
        if units is not None and not (isinstance(units, dict) and all(
                isinstance(v, str) for v in units.values())):
            raise bad("units must map each unit to its result (a string)")
        if shard is not None:
            try:
                shard = ShardResult.from_json(shard, where=f"{where}: shard")
            except ValueError as exc:
                raise bad(str(exc).removeprefix(f"{where}: ")) from None
        return cls(ccache, units, shard)


def write_result(folder: Path, result: ContainerResult) -> Path:
    """Write ``result.json`` into ``folder`` whole (merged with one already there: the compile's
    figures and a shard's record come from two commands); returns its path."""
    path = Path(folder) / RESULT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_file():
        old = read_result(folder)
        if old is not None:
            result = ContainerResult(result.ccache or old.ccache, result.units or old.units,
                                     result.shard or old.shard)
    tmp = path.with_suffix(".part")
    tmp.write_text(json.dumps(result.to_json(), indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


def read_result(folder: Path) -> ContainerResult | None:
    """The container's ``result.json`` in ``folder``; None when the container wrote none (it
    died first, or nothing in it had a result to hand back); ToolchainError naming the file
    when it isn't a result."""
    path = Path(folder) / RESULT_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ToolchainError(f"{path}: not JSON ({exc})",
                             hint="the container stopped while writing it: build again") from None
    return ContainerResult.from_json(data, where=str(path))
