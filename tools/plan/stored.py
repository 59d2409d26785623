"""What the kernel store holds, as the plan reads it: the group keys whose kernels need no shard.

The kernel store (``tools.releasing.kernelstore``) keeps finished shard caches past a workflow
run, as the assets of one GitHub release, each entry named from its compile group's **key** (the
digest of everything that decides the objects, ``tools.plan.groups.group_key``) and its shard,
``K`` of ``N``. ``python -m tools.release kernels list --out FILE`` writes its listing; the plan
(``python -m tools.release batch --kernel-store FILE``, ``python -m tools.matrix --kernel-store
FILE``) reads it here.

**Covered.** A key is covered when the store holds every shard of one split of it: ``1..N`` of
the same ``N``. The shards of a split hold every kernel unit between them (``tools.plan.groups.
split`` puts each unit in one shard, and the unit list is the sdist's and patches', which the
key digests), and the store takes only shards whose record says they finished. A covered
group needs no shard: ``tools.plan.stages.plan_group(..., stored=True)`` plans its cells as
reading the store, each kernel estimated as a cache hit (``CACHE_HIT_SECONDS``), as from its
own run's shards. A key with a missing shard is not covered: its group is planned as before,
and its shards pull what the store has of them first, so they compile only the rest.

Read strictly: a listing of another schema, or an entry without its fields, is a PlanError naming
the file, the entry and the fix.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tools.core.errors import PlanError

LISTING_SCHEMA = 1
#: A group key as ``tools.plan.groups.group_key`` spells it (16 hex digits; longer allowed).
KEY = re.compile(r"[0-9a-f]{16,64}")
#: Each listed entry's fields and their types.
ENTRY_FIELDS = {"name": str, "key": str, "group": str, "index": int, "count": int,
                "bytes": int, "created": str}
_FIX = "write it again: python -m tools.release kernels list --repo OWNER/NAME --out FILE"


def read_listing(path: Path) -> list[dict]:
    """The entries of a kernel store listing (``kernels list --out``); PlanError naming the
    file, the entry and the field when it isn't one."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise PlanError(f"{path}: can't read the kernel store listing: {exc.strerror}",
                        hint=_FIX) from None
    except ValueError as exc:
        raise PlanError(f"{path}: not JSON ({exc})", hint=_FIX) from None
    if not isinstance(data, dict) or data.get("schema") != LISTING_SCHEMA:
        raise PlanError(f"{path}: not a kernel store listing of schema {LISTING_SCHEMA}",
                        hint=_FIX)
    entries = data.get("entries")
    if not isinstance(entries, list):
        raise PlanError(f"{path}: entries: must be a list", hint=_FIX)
    for i, entry in enumerate(entries):
        where = f"{path}: entries[{i}]"
        if not isinstance(entry, dict):
            raise PlanError(f"{where}: must be an object", hint=_FIX)
        for name, kind in ENTRY_FIELDS.items():
            if not isinstance(entry.get(name), kind) or isinstance(entry.get(name), bool):
                raise PlanError(f"{where}.{name}: must be a {kind.__name__}", hint=_FIX)
        if not KEY.fullmatch(entry["key"]):
            raise PlanError(f"{where}.key: {entry['key']!r} is not a group key (hex digits)",
                            hint=_FIX)
        if not 1 <= entry["index"] <= entry["count"]:
            raise PlanError(f"{where}: shard {entry['index']} of {entry['count']} is not one",
                            hint=_FIX)
    return entries


def covered_keys(entries: list[dict]) -> frozenset[str]:
    """The keys for which ``entries`` hold every shard of one split (see the module
    docstring)."""
    splits: dict[tuple[str, int], set[int]] = {}
    for e in entries:
        splits.setdefault((e["key"], e["count"]), set()).add(e["index"])
    return frozenset(key for (key, count), have in splits.items()
                     if have >= set(range(1, count + 1)))


def stored_keys(path: Path | None) -> frozenset[str]:
    """The covered keys of the listing at ``path``; none without one."""
    return covered_keys(read_listing(path)) if path else frozenset()


def stored_why(cell_hours: float, budget: float, on: str) -> str:
    """Why a covered group has no shards (its plan's ``why``)."""
    return (f"the kernel store holds every kernel of its key: no shards, each cell reads them "
            f"({cell_hours:.1f} of {budget:g} h {on})")
