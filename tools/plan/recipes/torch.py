"""A recipe's torch series per CUDA version: ranges that narrow the table, or explicit lists.

Each entry under a recipe's ``cuda:`` says which torch series that CUDA version is built for, in
one of two forms:

- a range, ``"13.0": {torch_from: "2.11", torch_to: "2.14", reason: ...}`` (``torch_to``
  optional: open-ended), narrowed further by the recipe's own ``torch: {from:, to:, reason:}``
  when it has one (what the package itself supports: ``torch>=2.10`` in its requirements). The
  series built are the table's series inside both ranges that the table publishes for that CUDA
  version and that have a Python the recipe's ``python:`` allows, minus the recipe's
  ``exclude:`` entries (``{torch: "2.12", cuda: "13.0", reason: ...}``; without ``cuda``, every
  CUDA version). A series added to the table is built by every range that includes it, with no
  recipe edit; the newest series built is the CUDA version's default torch (the one whose cell
  id has no ``-torch`` part).
- a list, ``"12.9": {torch: ["2.8"], reason: ...}``: those series, the first the default.

Problems go into the recipe's ``Problems`` (file, key, rule and fix), like every other block;
the blocks' shape (keys, types, a reason on each) is the recipe schema's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.specifiers import SpecifierSet

from .shape import check_block_shape
from ..schema import Problems
from ..table import Table, version_key

_SERIES_RE = re.compile(r"\d+\.\d+")


@dataclass(frozen=True)
class TorchRange:
    """Torch series from ``first`` to ``last`` (None: every newer one too), both included."""

    first: str
    last: str | None = None

    def includes(self, series: str) -> bool:
        """Whether ``series`` lies in the range."""
        key = version_key(series)
        return version_key(self.first) <= key and (self.last is None
                                                   or key <= version_key(self.last))

    def __str__(self) -> str:
        """``2.8 to 2.10``, ``2.15 and newer``, ``2.8 only``: as messages name the range."""
        if self.last == self.first:
            return f"{self.first} only"
        return f"{self.first} to {self.last}" if self.last else f"{self.first} and newer"


@dataclass(frozen=True)
class Exclusion:
    """A torch series a range includes but the recipe doesn't build, for one CUDA version or
    (``cuda`` None) all of them, and why."""

    torch: str
    cuda: str | None
    reason: str

    def covers(self, series: str, cuda: str) -> bool:
        """Whether this exclusion takes out the (``series``, ``cuda``) pair."""
        return self.torch == series and self.cuda in (None, cuda)


@dataclass(frozen=True)
class CudaTarget:
    """One CUDA version a recipe builds for, and the torch series (default first) for it."""

    cuda: str
    torch: tuple[str, ...]
    reason: str
    #: The range the series come from (the recipe's own range applied); None for a list.
    range: TorchRange | None = None


@dataclass(frozen=True)
class TorchTargets:
    """A recipe's ``torch``, ``cuda`` and ``exclude`` keys, checked against the table."""

    cuda: tuple[CudaTarget, ...]
    range: TorchRange | None
    exclude: tuple[Exclusion, ...]


def _known(p: Problems, value: str, where: str, table: Table, *, bound: bool = True) -> bool:
    """A range bound (or, with ``bound`` False, an excluded series) is a series the table has: a
    typo like "2.1" for "2.10" would otherwise quietly take in every series."""
    if value in table.torch:
        return True
    shape = "" if _SERIES_RE.fullmatch(value) else " (a series is major.minor, quoted)"
    newest = max(table.torch, key=version_key) if table.torch else None
    beyond = (f"; the table's newest is {newest}, so a range from it includes no series the "
              "table knows" if bound and newest and _SERIES_RE.fullmatch(value)
              and version_key(value) > version_key(newest) else "")
    p.add(where, f"torch {value!r} is not in the compatibility table{shape}{beyond}",
          f"use one of {', '.join(table.torch)}, or add the series to the table first" if bound
          else f"exclude one of {', '.join(table.torch)}: a series the table lacks is never built")
    return False


def _recipe_range(p: Problems, raw: object, table: Table) -> TorchRange | None:
    """The recipe's own ``torch: {from, to, reason}``."""
    if raw is None:
        return None
    check_block_shape(p, raw, "torch")
    m = p.shaped(raw, "torch")
    if m is None:
        return None
    p.reason(m["reason"], "torch.reason")
    first, last = m["from"], m.get("to")
    ok = _known(p, first, "torch.from", table)
    ok = (last is None or _known(p, last, "torch.to", table)) and ok
    if not ok:
        return None
    if last is not None and version_key(last) < version_key(first):
        p.add("torch.to", f"{last} is before torch.from {first}, so the range is empty",
              "swap them: from is the oldest series built, to the newest")
        return None
    return TorchRange(first, last)


def _exclusions(p: Problems, raw: object, table: Table) -> list[tuple[int, Exclusion]]:
    """``exclude``: each entry's shape and names; whether a range includes it is checked once
    the ranges are known (:func:`_check_exclusions`)."""
    if raw is None:
        return []
    check_block_shape(p, raw, "exclude")
    if not isinstance(raw, list) or not p.usable("exclude"):
        return []
    out = []
    for i, entry in enumerate(raw):
        where = f"exclude[{i}]"
        m = p.shaped(entry, where)
        if m is None:
            continue
        p.reason(m["reason"], f"{where}.reason")
        ok = _known(p, m["torch"], f"{where}.torch", table, bound=False)
        cuda = m.get("cuda")
        if cuda is not None and cuda not in table.cuda:
            p.add(f"{where}.cuda", f"CUDA {cuda!r} is not in the compatibility table",
                  "use one of the recipe's CUDA versions (quoted), or leave cuda out to "
                  "exclude the series for every CUDA version")
            ok = False
        if ok:
            out.append((i, Exclusion(m["torch"], cuda, m["reason"])))
    return out


def _listed(p: Problems, where: str, cuda: str, raw: object, recipe_range: TorchRange | None,
            table: Table, spec: SpecifierSet) -> tuple[str, ...] | None:
    """An entry's explicit ``torch: [...]`` list, each series checked against the table."""
    torches = tuple(raw)
    for series in torches:
        t = table.torch.get(series)
        if t is None:
            p.add(f"{where}.torch", f"torch {series!r} is not in the compatibility table",
                  f"use one of {', '.join(table.torch)}")
        elif cuda not in t.cuda:
            builds = ", ".join(table.torch_for_cuda(cuda)) or "none"
            p.add(f"{where}.torch",
                  f"torch {series} is not published for CUDA {cuda} (it is for "
                  f"{', '.join(t.cuda)})",
                  f"torch series built for CUDA {cuda}: {builds}")
        elif recipe_range is not None and not recipe_range.includes(series):
            p.add(f"{where}.torch", f"torch {series} is outside the recipe's torch range "
                  f"({recipe_range})", "drop it from the list, or widen torch: from/to")
        elif not [py for py in t.python if spec.contains(f"{py}.0", prereleases=True)]:
            p.add(f"{where}.torch", f"no Python version of torch {series} "
                  f"({', '.join(t.python)}) satisfies python {str(spec)!r}",
                  "widen python: or drop this torch series")
    p.once(torches, f"{where}.torch", "torch series")
    return torches


def _cuda_range(p: Problems, where: str, m: dict, recipe_range: TorchRange | None,
                table: Table) -> TorchRange | None:
    """An entry's ``torch_from``/``torch_to``, inside the recipe's own range."""
    first, last = m.get("torch_from"), m.get("torch_to")
    ok = first is None or _known(p, first, f"{where}.torch_from", table)
    ok = (last is None or _known(p, last, f"{where}.torch_to", table)) and ok
    if not ok:
        return None
    if first is not None and last is not None and version_key(last) < version_key(first):
        p.add(f"{where}.torch_to", f"{last} is before torch_from {first}, so the range is empty",
              "swap them: torch_from is the oldest series built, torch_to the newest")
        return None
    if recipe_range is not None:
        first = max(filter(None, (first, recipe_range.first)), key=version_key)
        last = min(filter(None, (last, recipe_range.last)), key=version_key, default=None)
    if first is None:
        p.add(where, "a range needs its oldest torch series",
              f'add torch_from: "<series>" here, or torch: {{from: "<series>", reason: ...}} for '
              f"the whole recipe (series: {', '.join(table.torch)}); or list the series: "
              'torch: ["2.10", ...]')
        return None
    if last is not None and version_key(last) < version_key(first):
        p.add(where, f"its range ends at {last}, before {first} where the recipe's torch range "
              "starts, so it includes no series", "widen torch_to, or narrow torch: from")
        return None
    return TorchRange(first, last)


def _resolve(p: Problems, where: str, cuda: str, span: TorchRange,
             exclude: list[tuple[int, Exclusion]], table: Table,
             spec: SpecifierSet) -> tuple[str, ...] | None:
    """The series a range builds for ``cuda``, newest (the default) first."""
    published = [s for s in table.torch if span.includes(s) and cuda in table.torch[s].cuda]
    if not published:
        pairs = table.torch_for_cuda(cuda)
        has = (f"the table publishes CUDA {cuda} for torch {', '.join(pairs)}" if pairs else
               f"no torch series of the table is published for CUDA {cuda}")
        p.add(where, f"the torch range {span} includes no series the table publishes for CUDA "
              f"{cuda} ({has})", f"widen the range to one of those series, or drop CUDA {cuda}")
        return None
    usable = [s for s in published if [py for py in table.torch[s].python
                                       if spec.contains(f"{py}.0", prereleases=True)]]
    if not usable:
        p.add(where, f"no Python version of torch {', '.join(published)} (the range {span} for "
              f"CUDA {cuda}) satisfies python {str(spec)!r}",
              "widen python:, or move the range to series with such a Python")
        return None
    built = [s for s in usable if not any(x.covers(s, cuda) for _, x in exclude)]
    if not built:
        p.add(where, f"exclude takes out every series of its range {span} for CUDA {cuda} "
              f"({', '.join(usable)})", f"drop CUDA {cuda} instead, or remove an exclusion")
        return None
    return tuple(sorted(built, key=version_key, reverse=True))


def _check_exclusions(p: Problems, exclude: list[tuple[int, Exclusion]],
                      spans: dict[str, TorchRange | None], table: Table) -> None:
    """Each exclusion must take out a pair a range of the recipe would build: one outside every
    range, or of a CUDA version the table doesn't publish the series for, is a mistake.
    ``spans``: each CUDA version's range (None where the entry lists its series)."""
    seen: dict[tuple[str, str | None], int] = {}
    for i, x in exclude:
        where = f"exclude[{i}]"
        # one entry without cuda covers the series for every CUDA version: another entry of
        # the series, with or without cuda, says it twice
        earlier = [j for (series, cuda), j in seen.items()
                   if series == x.torch and (cuda == x.cuda or None in (cuda, x.cuda))]
        if earlier:
            p.add(where, f"torch {x.torch} is already excluded by exclude[{earlier[0]}]",
                  "remove one of the two entries")
            continue
        seen[(x.torch, x.cuda)] = i
        if x.cuda is not None and x.cuda not in spans:
            p.add(f"{where}.cuda", f"CUDA {x.cuda} is not one of this recipe's CUDA versions "
                  f"({', '.join(spans) or 'none'})",
                  "remove the entry: nothing of that CUDA version is built")
            continue
        if x.cuda is not None and spans[x.cuda] is None:
            p.add(where, f"cuda.{x.cuda} lists its torch series, so there is no range to "
                  "exclude from", f"drop {x.torch} from cuda.{x.cuda}.torch instead")
            continue
        ranges = {c: s for c, s in spans.items() if s is not None and x.cuda in (None, c)}
        if not ranges:
            p.add(where, "every CUDA version of the recipe lists its torch series, so there is "
                  "no range to exclude from", "drop the series from those lists instead")
            continue
        inside = [c for c, span in ranges.items() if span.includes(x.torch)]
        if not inside:
            said = "; ".join(f"CUDA {c}: {span}" for c, span in ranges.items())
            p.add(f"{where}.torch", f"torch {x.torch} is outside the recipe's torch "
                  f"range{'s' if len(ranges) > 1 else ''} ({said})",
                  "remove the entry: the range already leaves the series out")
        elif not [c for c in inside if c in table.torch[x.torch].cuda]:
            p.add(where, f"torch {x.torch} is not published for CUDA {', '.join(inside)} (the "
                  f"table has it for {', '.join(table.torch[x.torch].cuda)}), so no cell would "
                  "build it", "remove the entry")


def parse_torch_targets(p: Problems, raw_cuda: object, raw_torch: object, raw_exclude: object,
                        table: Table, spec: SpecifierSet) -> TorchTargets:
    """A recipe's ``cuda:`` entries resolved against the table (its ``torch:`` range and
    ``exclude:`` applied), sorted by CUDA version; every problem goes into ``p``."""
    recipe_range = _recipe_range(p, raw_torch, table)
    exclude = _exclusions(p, raw_exclude, table)
    out = []
    # CUDA version -> its range (None: a list); an entry with a problem of its own is left out,
    # so that an exclusion naming it isn't reported a second time.
    spans: dict[str, TorchRange | None] = {}
    failed: set[str] = set()
    if raw_cuda is not None:
        check_block_shape(p, raw_cuda, "cuda")
    usable = isinstance(raw_cuda, dict) and p.usable("cuda")
    for cuda, entry in (raw_cuda.items() if usable else ()):
        where = f"cuda.{cuda}"
        if not isinstance(cuda, str) or cuda not in table.cuda:
            p.add(where, f"CUDA {cuda!r} is not in the compatibility table ({table.path.name})",
                  f"use one of {', '.join(table.cuda)} (quoted), or add the CUDA version to the "
                  "table")
            continue
        failed.add(cuda)
        m = p.shaped(entry, where)
        if m is None:
            continue
        p.reason(m["reason"], f"{where}.reason")
        if "torch" in entry:
            if "torch_from" in entry or "torch_to" in entry:
                p.add(where, "gives both a list (torch) and a range (torch_from/torch_to)",
                      "keep one: the range, which follows the table, or the list")
                continue
            torches = _listed(p, where, cuda, m["torch"], recipe_range, table, spec) \
                if "torch" in m else None
            if torches is not None:
                out.append(CudaTarget(cuda, torches, m["reason"]))
                spans[cuda] = None
            continue
        if any(key in entry and key not in m for key in ("torch_from", "torch_to")) or \
                (recipe_range is None and raw_torch is not None and "torch_from" not in m):
            continue  # a bound of the wrong type, or the recipe's range, already reported
        span = _cuda_range(p, where, m, recipe_range, table)
        torches = _resolve(p, where, cuda, span, exclude, table, spec) if span else None
        if span is not None:
            spans[cuda] = span
        if torches is not None:
            out.append(CudaTarget(cuda, torches, m["reason"], span))
    failed -= set(spans)
    _check_exclusions(p, [(i, x) for i, x in exclude if x.cuda not in failed], spans, table)
    return TorchTargets(tuple(sorted(out, key=lambda t: version_key(t.cuda))), recipe_range,
                        tuple(x for _, x in exclude))


def why_not(targets: tuple[CudaTarget, ...], exclude: tuple[Exclusion, ...], spec: SpecifierSet,
            series: str, cuda: str, table: Table) -> str | None:
    """Why a recipe builds no cell of torch ``series`` for ``cuda`` (a pair of the table), in
    words; None when it does."""
    target = next((t for t in targets if t.cuda == cuda), None)
    if target is None:
        return f"it builds no CUDA {cuda} wheels"
    if series in target.torch:
        return None
    if target.range is None:
        return f"for CUDA {cuda} it lists torch {', '.join(target.torch)}"
    if not target.range.includes(series):
        return f"its CUDA {cuda} range is torch {target.range}"
    excluded = next((x for x in exclude if x.covers(series, cuda)), None)
    if excluded is not None:
        return f"excluded for CUDA {cuda}: {excluded.reason}"
    pythons = table.torch[series].python
    return (f"no Python of torch {series} ({', '.join(pythons)}) satisfies its python "
            f"{str(spec)!r}")


def check_patch_scopes(p: Problems, patches, targets: TorchTargets, table: Table,
                       spec: SpecifierSet) -> None:
    """A patch that says which torch series it is written for (``torch_from``, optionally
    ``torch_to``: each a series of the table) names series the recipe builds. A range or an
    exclusion that leaves such a series out means the range or the patch is out of date: the
    patch would be kept for a series nothing builds. ``patches``: the recipe's, each with
    ``file``, ``torch_from`` and ``torch_to``. Skipped while other problems are reported (a
    CUDA entry that failed would make every series look unbuilt)."""
    if p.items:
        return
    built = {s for t in targets.cuda for s in t.torch}
    for i, patch in enumerate(patches):
        where = f"patches[{i}]"
        bounds = {k: getattr(patch, k) for k in ("torch_from", "torch_to")
                  if getattr(patch, k) is not None}
        known = {k: s for k, s in bounds.items() if _known(p, s, f"{where}.{k}", table)}
        if len(known) == 2 and version_key(known["torch_to"]) < version_key(known["torch_from"]):
            p.add(f"{where}.torch_to", f"{known['torch_to']} is before torch_from "
                  f"{known['torch_from']}", "swap them: torch_from is the oldest series the patch "
                  "is written for, torch_to the newest")
            continue
        for key, series in known.items():
            if series in built:
                continue
            mine = [t.cuda for t in targets.cuda if t.cuda in table.torch[series].cuda]
            why = "; ".join(dict.fromkeys(
                w for c in mine if (w := why_not(targets.cuda, targets.exclude, spec, series, c,
                                                 table)))) or (
                f"the table publishes it for CUDA {', '.join(table.torch[series].cuda)}, none of "
                "which the recipe builds")
            p.add(f"{where}.{key}", f"{patch.file} is written for torch {series}, but the recipe "
                  f"builds no cell of torch {series} ({why})",
                  f"widen the range or remove the exclusion so that {series} is built, or, if the "
                  f"patch is for other series now, set {key} to one the recipe builds "
                  f"({', '.join(sorted(built, key=version_key)) or 'none'})")
