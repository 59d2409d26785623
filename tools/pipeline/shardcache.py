"""Shard caches as a cell's build sees them: which ones it may read, and what it got from them.

A kernel shard (``tools.sharding.shard_build``) compiles part of a compile group's CUDA units into a
cache directory of its own (ccache's file storage) holding ``shard.json``: the group, its key,
the shard's units, whether it finished, and the build variable that reaches the command lines
and depends on the machine (``NVCC_THREADS``). A cell's build reads the caches of its group
read-only, after its own cache: each kernel unit is then a hit and only the binding unit and the
link run. This module decides which of the offered caches are the group's (a cache of another
group or key is not used, and the report says so), and sorts the build's per-unit results into
hits and misses, each miss with its reason. A missing or partial shard never fails a build: its
units compile in the cell.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

#: The record a shard cache carries.
RECORD = "shard.json"
#: The variables a cell takes over from its shards, so that its command lines are theirs.
SHARED_ENV = ("NVCC_THREADS",)


@dataclass
class ShardResult:
    """A kernel shard's outcome, as its cache's ``shard.json`` holds it (and a shard build's
    report, under ``shard``): the shard, its group and key, its units with their seconds once
    compiled, whether it finished, the variable the cells take over, and what went wrong.

    The host's shards (``tools.sharding.shard_build``) write it through this type; a container
    shard's stand-in ninja (``tools.backends.shardninja``, a script run by the build's own
    Python, which can't import the tools) writes the same keys, read back through this type.
    """

    shard: str
    group: str
    key: str
    index: int
    count: int
    units: list[str]
    archs: list[str]
    estimate_seconds: float = 0.0
    #: unit -> seconds it took (a container shard: ``(all units)`` -> the whole compile's).
    seconds: dict[str, float] = field(default_factory=dict)
    verdict: Literal["passed", "failed"] = "failed"
    complete: bool = False
    env: dict[str, str] = field(default_factory=dict)
    #: Why the shard stopped (a container shard's stand-in says).
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """``shard.json``'s object (no ``error`` key when there is none)."""
        data = asdict(self)
        if self.error is None:
            del data["error"]
        return data

    @classmethod
    def from_json(cls, data: object, *, where: str) -> ShardResult:
        """The shard record in ``data``; ValueError naming ``where`` and the field when it
        isn't one."""
        names = {f.name for f in fields(cls)}
        if not isinstance(data, dict):
            raise ValueError(f"{where}: a shard record must be a JSON object")
        missing = sorted(f.name for f in fields(cls) if f.name not in data
                         and f.name in ("shard", "group", "key", "index", "count", "units",
                                        "archs"))
        unknown = sorted(set(data) - names)
        if missing or unknown:
            raise ValueError(f"{where}: a shard record " + "; ".join(
                ([f"lacks {', '.join(missing)}"] if missing else [])
                + ([f"has unknown fields {', '.join(unknown)}"] if unknown else [])))
        checks = {"shard": str, "group": str, "key": str, "index": int, "count": int,
                  "units": list, "archs": list, "estimate_seconds": (int, float),
                  "seconds": dict, "verdict": str, "complete": bool, "env": dict,
                  "error": (str, type(None))}
        for name, kind in checks.items():
            if name in data and not isinstance(data[name], kind):
                raise ValueError(f"{where}: a shard record's {name} must be "
                                 f"{getattr(kind, '__name__', kind)}, not "
                                 f"{type(data[name]).__name__}")
        if data.get("verdict", "failed") not in ("passed", "failed"):
            raise ValueError(f"{where}: a shard record's verdict is {data['verdict']!r}: "
                             "passed or failed")
        return cls(**data)


def read_record(cache: Path) -> ShardResult | None:
    """A shard cache's ``shard.json``, None when there is none or it isn't a shard record."""
    path = Path(cache) / RECORD
    try:
        return ShardResult.from_json(json.loads(path.read_text()), where=str(path))
    except (OSError, ValueError, TypeError):
        return None


def write_record(cache: Path, record: ShardResult) -> None:
    """Write ``shard.json`` whole (a reader never sees half of it)."""
    tmp = Path(cache) / (RECORD + ".tmp")
    tmp.write_text(json.dumps(record.to_json(), indent=1, sort_keys=True))
    os.replace(tmp, Path(cache) / RECORD)


def candidates(root: Path, group: str) -> list[Path]:
    """The shard cache directories of ``group`` under ``root`` (``<group>-shard<k>``), in shard
    order; none when ``root`` doesn't exist."""
    if not root.is_dir():
        return []
    prefix = f"{group}-shard"
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith(prefix)
             and p.name[len(prefix):].isdigit()]
    return sorted(found, key=lambda p: int(p.name[len(prefix):]))


@dataclass
class ShardUse:
    """Which offered shard caches a cell's build reads, and why the others are not read."""

    used: list[Path] = field(default_factory=list)
    #: The units the used caches hold (complete shards) or were to hold (partial ones).
    units: dict[str, str] = field(default_factory=dict)       # unit -> shard id
    partial: list[str] = field(default_factory=list)          # shard ids not finished
    refused: list[dict[str, str]] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        """The report's view."""
        return {"read": [str(p) for p in self.used], "partial": self.partial,
                "not_read": self.refused, "env": self.env}


def choose(offered: list[Path], *, group: str, key: str) -> ShardUse:
    """Of the ``offered`` shard caches, those of ``group`` with ``key`` (see the module
    docstring); the others are listed with the reason they are not read. When the used caches
    disagree on a shared variable, the first shard's value is taken (the others' units then
    miss, and the report says so)."""
    use = ShardUse()
    for cache in offered:
        record = read_record(cache)
        if record is None:
            use.refused.append({"cache": str(cache), "why": f"no readable {RECORD}"})
            continue
        if record.group != group or record.key != key:
            use.refused.append({"cache": str(cache),
                                "why": f"it belongs to group {record.group!r} with key "
                                       f"{record.key!r}, not {group!r} with key "
                                       f"{key!r} (other sources, patches, torch, archs or "
                                       "variables)"})
            continue
        sid = record.shard
        use.used.append(cache)
        if not record.complete:
            use.partial.append(sid)
        for unit in record.units:
            use.units[str(unit)] = sid
        for name in SHARED_ENV:
            value = record.env.get(name)
            if value is not None:
                use.env.setdefault(name, str(value))
    return use


def sort_results(results: dict[str, str], use: ShardUse, sharded: tuple[str, ...] = ()
                 ) -> dict[str, Any]:
    """A build's per-unit cache results (``tools.pipeline.ccache.unit_results``: path as ccache
    logged it -> ``shard hit``/``hit``/``miss``/...) as the report shows them: every unit with
    its result, and each miss of a kernel unit with why it wasn't in a shard cache."""
    def unit_of(logged: str) -> str:
        parts = Path(logged).parts
        while parts and parts[0] == "..":
            parts = parts[1:]
        return Path(*parts).as_posix() if parts else logged

    units = {unit_of(k): v for k, v in results.items()}
    misses = []
    for unit, result in sorted(units.items()):
        if result in ("shard hit", "hit"):
            continue
        sid = use.units.get(unit)
        if sid is None:
            why = ("no shard compiles it (the binding or another C++ unit)"
                   if unit not in sharded else "its shard's cache was not offered or not read")
        elif sid in use.partial:
            why = f"{sid} did not finish (a partial cache)"
        else:
            why = (f"{sid} lists it but its cache had no entry for this unit as this cell "
                   "compiles it: its preprocessed text or its command line differs from the "
                   "shard's (a header, a patch or a flag of this cell's torch series)")
        misses.append({"unit": unit, "result": result, "why": why})
    hits = sum(1 for r in units.values() if r in ("shard hit", "hit"))
    return {"units": units, "hits": hits, "shard_hits": sum(1 for r in units.values()
                                                             if r == "shard hit"),
            "misses": misses}
