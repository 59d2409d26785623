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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The record a shard cache carries.
RECORD = "shard.json"
#: The variables a cell takes over from its shards, so that its command lines are theirs.
SHARED_ENV = ("NVCC_THREADS",)


def read_record(cache: Path) -> dict[str, Any] | None:
    """A shard cache's ``shard.json``, None when there is none or it isn't a JSON object."""
    try:
        data = json.loads((Path(cache) / RECORD).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_record(cache: Path, record: dict[str, Any]) -> None:
    """Write ``shard.json`` whole (a reader never sees half of it)."""
    tmp = Path(cache) / (RECORD + ".tmp")
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True))
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
        if record.get("group") != group or record.get("key") != key:
            use.refused.append({"cache": str(cache),
                                "why": f"it belongs to group {record.get('group')!r} with key "
                                       f"{record.get('key')!r}, not {group!r} with key "
                                       f"{key!r} (other sources, patches, torch, archs or "
                                       "variables)"})
            continue
        sid = str(record.get("shard", cache.name))
        use.used.append(cache)
        if not record.get("complete"):
            use.partial.append(sid)
        for unit in record.get("units") or ():
            use.units[str(unit)] = sid
        for name in SHARED_ENV:
            value = (record.get("env") or {}).get(name)
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
