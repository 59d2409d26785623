"""Refresh: follow the registry, and propose the change to the table and the recipes.

    python -m tools.refresh [--write] [--summary FILE]

Reads the registry through ``tools.upstream.registry`` (PyPI's JSON API, one torch wheel per series read
with HTTP range requests, torch's own index of CUDA variants where it answers; for a new series
also one wheel per other platform of the table, whose ``torch/version.py`` gives the row's
``platforms:`` block, ``tools.upstream.platforms``), compares every
torch series with its row in ``recipes/table.yaml`` (the agreement: a row that differs is named
with the value and the reason), proposes rows for new series and the newest release of each
recipe's package, once its sdist is downloaded, its sha256 checked and the recipe's patches
applied to it with the source step's own code. A new series needs no recipe edit: every recipe
whose torch range includes it builds it (``tools.plan.recipes.torch``), and the summary says which
do, with their cells, and why the others don't.

Every value it proposes carries where it was read (a row's ``source:``, an end-of-line comment on
a recipe's version). A fact it cannot read is never guessed: it is left out, and a note says what
a person must check. Without ``--write`` the change is printed as a unified diff; with it, every
file is written or none is (every registry read happens before the first write, and the new
table and recipes are validated by the loaders first). YAML comments and layout are kept
(ruamel.yaml round-trips the files byte for byte).
"""

from __future__ import annotations

import datetime
import difflib
import os
import re
import tempfile
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import Version
from ruamel.yaml.comments import CommentedMap

from tools import RECIPES_DIR
from tools.core.digest import sha256_file
from tools.core.errors import (CuwheelsError, PatchError, RecipeError, RegistryError, SourceError,
                               TableError)
from tools.core.variant import DEFAULT_PLATFORM
from tools.plan.cells import cells_for
from tools.plan.recipes.model import RECIPE_FILE, Recipe, load_all, parse_recipe, recipe_folders
from .candidates import promote, refresh_candidates
from .exclusions import add_exclusion, check, note_refused
from .cudadrop import drop_unpublished_cuda
from .yamltext import dump as _dump, flow as _flow, like as _like, quoted as _q, show as _show
from .yamltext import source as _source, yaml_rt as _yaml
from .platforms import platforms_block
from .registry import (TORCH_VARIANTS, Registry, TorchFacts, newest_by_series, newest_release,
                       parse_variants, platform_variants, read_platform, read_torch,
                       read_variant_page)
from .verdicts import (ProbeTarget, Verdict, added_pairs, judge, probe_targets, read_reports,
                       verdict_lines)
from tools.pipeline.source import apply_patches, extract_sdist
from tools.plan.schema import parse_yaml, read_text
from tools.plan.table import Table, parse_table, version_key

# --------------------------------------------------------------------------- the proposal


@dataclass
class Proposal:
    """Everything one run found: new file texts, what changed and why, what a person must check."""

    old: dict[Path, str] = field(default_factory=dict)
    new: dict[Path, str] = field(default_factory=dict)
    changes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    torch: list[TorchFacts] = field(default_factory=list)
    agreement: list[str] = field(default_factory=list)
    #: Per new torch series: which recipes' torch ranges build it, and why the others don't.
    plan: list[str] = field(default_factory=list)
    #: Per new (series, CUDA) pair and recipe: the cell to probe, or why none (--probe-plan).
    targets: list[ProbeTarget] = field(default_factory=list)
    #: What the probe reports say of each target (--probes; "not probed yet" without them).
    verdicts: list[Verdict] = field(default_factory=list)

    def diff(self, root: Path) -> str:
        """The whole change as one unified diff, paths relative to ``root``."""
        out = []
        for path, text in self.new.items():
            rel = os.path.relpath(path, root)
            out += difflib.unified_diff(self.old[path].splitlines(True), text.splitlines(True),
                                        f"a/{rel}", f"b/{rel}")
        return "".join(out)


def refresh_torch(doc: CommentedMap, table: Table, facts_by_series: dict[str, TorchFacts],
                  variants: dict[str, set[str]] | None, why_no_variants: str, date: str,
                  proposal: Proposal,
                  on_platforms: dict[str, dict[str, set[str]]] | None = None) -> None:
    """Compare each series with the table row (agreement) and propose rows for new series.
    ``on_platforms``: per platform other than Linux x86_64, release -> the CUDA versions of its
    ``+cuXYZ`` wheels on torch's own index (None: that page was not read)."""
    rows = doc["torch"]
    newest = max(table.torch, key=version_key)
    for series, facts in facts_by_series.items():
        seen_cuda = sorted(variants.get(facts.release, ()), key=version_key) if variants else None
        unknown = [c for c in seen_cuda or () if c not in table.cuda]
        facts.variants = [c for c in seen_cuda or () if c in table.cuda] if variants else None
        if unknown:
            proposal.notes.append(f"torch {facts.release}: torch's index has CUDA "
                                  f"{', '.join(unknown)}, which the table has no cuda: entry for; "
                                  "add it (archs, default_archs, min_driver, image) to build it")
        if facts.variants is not None:
            facts.how["cuda"] = f"{TORCH_VARIANTS} (torch-{facts.release}+cuXYZ x86_64 wheels)"
        if series in table.torch and table.torch[series].candidate is not None:
            promote(rows[series], table.torch[series], facts, date, proposal)
            if "candidate" not in rows[series] and "platforms" not in rows[series]:
                # the final is on PyPI: its other platforms are read as a new series' are
                _add_platforms(rows[series], table, facts, list(rows[series]["cuda"]),
                               on_platforms, date, proposal)
        elif series in table.torch:
            _agree(rows[series], table.torch[series], facts, date, proposal)
        elif version_key(series) > version_key(newest):
            _new_row(rows, table, facts, date, proposal, on_platforms)
    if variants is None:
        proposal.notes.append(f"torch's own index could not be read ({why_no_variants}): the "
                              "table's `cuda:` lists (variants beyond the PyPI build) were not "
                              f"checked; compare them with {TORCH_VARIANTS} by hand")


def _agree(row: CommentedMap, entry: Any, facts: TorchFacts, date: str,
           proposal: Proposal) -> None:
    """Agreement with one existing row; every difference becomes a change naming its reason."""
    wanted = {"release": facts.release, "python": facts.python, "pypi_cuda": facts.pypi_cuda,
              "manylinux": facts.manylinux, "cxx11_abi": facts.cxx11_abi,
              "free_threaded": facts.free_threaded}
    current = {"release": entry.release, "python": list(entry.python),
               "pypi_cuda": entry.pypi_cuda, "manylinux": entry.manylinux,
               "cxx11_abi": entry.cxx11_abi, "free_threaded": list(entry.free_threaded)}
    changed = []
    for key, value in wanted.items():
        if value is None or value == [] or value == current[key]:
            continue
        why = {"release": "a newer release of the series is on PyPI"}.get(key, "the registry "
                                                                           "says otherwise")
        proposal.changes.append(f"torch {facts.series}: {key} {_show(current[key])} -> "
                                f"{_show(value)} ({why}; {facts.how.get(key, 'PyPI JSON')})")
        if key not in row:
            # a row that had none (free_threaded): the list goes after python:, as the rows have it
            row.insert(list(row).index("python") + 1, key, _flow(value))
        else:
            row[key] = _flow(value) if isinstance(value, list) else (
                value if isinstance(value, bool) else _like(row[key], value))
        changed.append(key)
    cuda = list(entry.cuda)
    if facts.variants is not None and facts.variants and facts.variants != cuda:
        proposal.changes.append(f"torch {facts.series}: cuda {_show(cuda)} -> "
                                f"{_show(facts.variants)} ({facts.how['cuda']})")
        row["cuda"] = _flow(facts.variants)
        changed.append("cuda")
    elif facts.variants is None and facts.pypi_cuda and facts.pypi_cuda not in cuda:
        row["cuda"] = _flow(sorted([*cuda, facts.pypi_cuda], key=version_key))
        proposal.changes.append(f"torch {facts.series}: cuda gains {facts.pypi_cuda}, the PyPI "
                                "build's CUDA")
        changed.append("cuda")
    if changed:
        row["source"] = _like(row["source"], f"{row['source']}; refreshed: "
                                             f"{_source(facts, changed, date)}")
        proposal.agreement.append(f"torch {facts.series}: differs in {', '.join(changed)}")
    else:
        proposal.agreement.append(f"torch {facts.series}: agrees ({facts.release})")
    for note in facts.notes:
        proposal.notes.append(note)


def _add_platforms(row: CommentedMap, table: Table, facts: TorchFacts, cuda: list[str],
                   on_platforms: dict[str, dict[str, set[str]]] | None, date: str,
                   proposal: Proposal) -> None:
    """The row's ``platforms:`` block from what was read of the table's other platforms
    (``tools.upstream.platforms``), with its changes and notes."""
    block, changes, notes = platforms_block(facts, cuda, table, on_platforms, date)
    if block is not None:
        row["platforms"] = block
    proposal.changes.extend(changes)
    proposal.notes.extend(notes)


def _new_row(rows: CommentedMap, table: Table, facts: TorchFacts, date: str,
             proposal: Proposal,
             on_platforms: dict[str, dict[str, set[str]]] | None = None) -> None:
    missing = [k for k in ("pypi_cuda", "manylinux", "cxx11_abi")
               if getattr(facts, k) is None] + ([] if facts.python else ["python"])
    if facts.pypi_cuda and facts.pypi_cuda not in table.cuda:
        missing.append(f"cuda.{facts.pypi_cuda} (the table has no entry for the CUDA "
                       "version of its PyPI build)")
    if missing:
        proposal.notes.append(f"new torch series {facts.series} ({facts.release}) is left out: "
                              f"{', '.join(missing)} could not be read or is missing; "
                              + "; ".join(facts.notes or ["add it by hand"]))
        return
    cuda = facts.variants or [facts.pypi_cuda]
    row = CommentedMap()
    row["release"] = _q(facts.release)
    row["python"] = _flow(facts.python)
    if facts.free_threaded:
        row["free_threaded"] = _flow(facts.free_threaded)
    row["cuda"] = _flow(cuda)
    row["pypi_cuda"] = _q(facts.pypi_cuda)
    row["manylinux"] = _q(facts.manylinux)
    row["cxx11_abi"] = facts.cxx11_abi
    row["source"] = _q(_source(facts, ["python", "pypi_cuda", "manylinux", "cxx11_abi", "cuda"]
                               + (["free_threaded"] if facts.free_threaded else []), date))
    note = []
    if facts.variants is None:
        note.append("torch's own index was not read, so only the PyPI build's CUDA is recorded; "
                    "check the other variants on download.pytorch.org")
    if note:
        row["note"] = _q(". ".join(n[0].upper() + n[1:] for n in note) + ".")
    rows.insert(len(rows), _q(facts.series), row)
    rows.yaml_set_comment_before_after_key(_q(facts.series), before="\n", indent=2)
    proposal.changes.append(f"torch {facts.series}: new series ({facts.release}, Python "
                            f"{', '.join(facts.python)}, CUDA {', '.join(cuda)}, manylinux "
                            f"{facts.manylinux}, C++11 ABI {_show(facts.cxx11_abi)})")
    proposal.notes.extend(facts.notes)
    _add_platforms(row, table, facts, cuda, on_platforms, date, proposal)


# --------------------------------------------------------------------------- recipes


def refresh_recipe(registry: Registry, recipe: Recipe, doc: CommentedMap, date: str,
                   workdir: Path, proposal: Proposal) -> bool:
    """Propose the newest release of a recipe's package when its sdist is there and the recipe's
    patches apply to it; otherwise a note says what stops it. True when the recipe changed."""
    src = recipe.source
    if src.git is not None:
        proposal.agreement.append(f"{recipe.package}: builds commit {src.git.commit[:12]} of "
                                  f"{src.git.repository} (a git source: no registry lists its "
                                  "releases, so a person moves the commit)")
        return False
    data, json_url = registry.project(src.pypi)
    latest = newest_release(data)
    if latest is None or Version(latest) <= Version(src.version):
        proposal.agreement.append(f"{recipe.package}: {src.version} is the newest release of "
                                  f"{src.pypi}" if latest else f"{recipe.package}: {src.pypi} "
                                  "has no final release on PyPI")
        return False
    proposal.agreement.append(f"{recipe.package}: builds {src.version}; PyPI's newest is {latest}")
    files = [f for f in data["releases"][latest] if not f.get("yanked")]
    sdists = [f for f in files if f.get("packagetype") == "sdist"]
    what = f"{recipe.package}: {src.pypi} {latest} is out (the recipe builds {src.version})"
    if not sdists:
        kinds = ", ".join(sorted({f["filename"].rsplit("-", 1)[-1] for f in files})) or "nothing"
        proposal.notes.append(f"{what}, but it has no sdist on PyPI (files: {kinds}); the recipe "
                              "builds from an sdist: check whether upstream publishes one "
                              "elsewhere, or wait for it")
        return False
    sdist = sdists[0]
    if not sdist["filename"].endswith(".tar.gz"):
        proposal.notes.append(f"{what}, but its sdist {sdist['filename']} is not a .tar.gz; "
                              "the source step extracts only .tar.gz")
        return False
    url = urllib.parse.urljoin(json_url, sdist["url"])
    sha = sdist["digests"]["sha256"]
    archive = registry.download(url, workdir / sdist["filename"])
    if sha256_file(archive) != sha:
        raise RegistryError(f"{url}: downloaded bytes have sha256 {sha256_file(archive)}, "
                            f"the registry says {sha}", hint="nothing was written; run again")
    try:
        # Without patches there is nothing to try; the source step extracts it when building
        # (flash-attn's 8 MB sdist takes 8 s to extract here).
        tree = extract_sdist(archive, workdir / f"src-{recipe.package}") if recipe.patches \
            else None
        applied = apply_patches(tree, recipe.patches) if tree else ()
    except (SourceError, PatchError) as exc:
        proposal.notes.append(f"{what}, but the recipe's patches do not apply to its sdist: "
                              f"{exc.message}; refresh the patch against {latest}, then bump "
                              "the recipe")
        return False
    s = doc["source"]
    for key, value in (("version", latest), ("sdist", sdist["filename"]), ("sha256", sha),
                       ("url", url)):
        s[key] = _like(s[key], value)
    patched = f"patches {', '.join(applied)} apply" if applied else "no patches"
    s.yaml_add_eol_comment(f"PyPI JSON releases['{latest}'] (sdist, sha256, URL), read by "
                           f"tools.refresh on {date}; {patched}", "version")
    proposal.changes.append(f"{recipe.package}: {src.version} -> {latest} ({sdist['filename']}, "
                            f"sha256 {sha[:12]}...; {patched} to it)")
    requires_python = sdist.get("requires_python")
    if requires_python and requires_python != str(recipe.python):
        proposal.notes.append(f"{recipe.package} {latest}: requires-python is "
                              f"{requires_python!r}, the recipe says {str(recipe.python)!r}; "
                              "check the recipe's python:")
    torch_req = [r for r in data.get("info", {}).get("requires_dist") or []
                 if re.match(r"torch\b", r)] if data.get("info", {}).get("version") == latest \
        else []
    proposal.notes.append(f"{recipe.package} {latest}: check its changelog against the recipe's "
                          "torch ranges, env and build requirements"
                          + (f" (it requires {', '.join(torch_req)})" if torch_req else ""))
    return True


# --------------------------------------------------------------------------- the run


def propose(registry: Registry, *, recipes_dir: Path = RECIPES_DIR,
            table_path: Path | None = None, date: str | None = None,
            probes: Path | None = None, rc: bool = False,
            reprobe: tuple[str, ...] = ()) -> Proposal:
    """Read the registry and work out the whole change; nothing is written. ``probes``: a
    folder of probe reports (``probe.json``, the refresh workflow's probe jobs) of the cells
    :func:`tools.upstream.verdicts.probe_targets` names; a recipe whose probe failed to compile
    gets an exclusion of the new series in the same change. ``rc``: also read PyTorch's test
    index for release candidates (``refresh_candidates``). ``reprobe``: series the table already
    has, probed as if they were new (after a toolchain or recipe change, or to learn where the
    recipes stand against the newest series): their targets and verdicts join the new ones', and
    a failure excludes the series the same way."""
    table_path = table_path or recipes_dir / "table.yaml"
    date = date or datetime.date.today().isoformat()
    proposal = Proposal()
    table_text = read_text(table_path, TableError)
    table = parse_table(parse_yaml(table_text, table_path, TableError), table_path)
    for series in reprobe:
        if series not in table.torch:
            raise TableError(f"--reprobe {series}: torch {series!r} is not a series of {table_path} "
                             f"(it has {', '.join(sorted(table.torch, key=version_key))})",
                             hint="name a series the table has; a series it lacks is probed "
                                  "when the refresh proposes its row")
    recipes = load_all(recipes_dir, table)
    table_doc = _yaml().load(table_text)

    torch_doc, torch_url = registry.project("torch")
    oldest = min(table.torch, key=version_key)
    releases = {s: r for s, r in newest_by_series(torch_doc).items()
                if version_key(s) >= version_key(oldest)}
    # One wheel per series, each a few range requests: read side by side; for a series new to
    # the table (or a release candidate row whose final is out), one wheel per other platform.
    newest = max(table.torch, key=version_key)
    fresh = [s for s in releases
             if (s not in table.torch and version_key(s) > version_key(newest))
             or (s in table.torch and table.torch[s].candidate is not None
                 and not table.torch[s].platforms)]
    others = [(s, name, p.tag) for s in fresh for name, p in table.platforms.items()
              if name != DEFAULT_PLATFORM]
    with ThreadPoolExecutor(max_workers=4) as pool:
        read = pool.map(lambda r: read_torch(registry, torch_doc, torch_url, r), releases.values())
        on = pool.map(lambda o: read_platform(registry, torch_doc, torch_url, releases[o[0]],
                                              o[1], o[2]), others)
        facts = dict(zip(releases, read))
        for (series, name, _tag), got in zip(others, on):
            facts[series].platforms[name] = got
    proposal.torch = list(facts.values())
    page, why = read_variant_page(registry)
    variants, why = parse_variants(page, registry) if page is not None else (None, why)
    on_platforms = None if variants is None else {
        name: platform_variants(page, p.tag) for name, p in table.platforms.items()
        if name != DEFAULT_PLATFORM}
    refresh_torch(table_doc, table, facts, variants, why, date, proposal, on_platforms)
    if rc:
        refresh_candidates(registry, table_doc, table, table_path, releases, date, proposal)
    else:
        proposal.agreement += [f"torch {s}: a release candidate (git {t.candidate.git[:7]}); PyPI "
                               "has no final yet (--rc reads the test index)"
                               for s, t in table.torch.items()
                               if t.candidate is not None and s not in releases]
    known = {p for t in table.torch.values() for p in t.python}
    new_pythons = sorted({p for f in facts.values() for p in f.python} - known, key=version_key)
    if new_pythons:
        proposal.changes.append(f"new Python versions torch ships for: {', '.join(new_pythons)}")

    proposal.old[table_path] = table_text
    proposal.new[table_path] = _dump(table_doc)
    with tempfile.TemporaryDirectory(prefix="cuwheels-refresh-") as tmp:
        for recipe in recipes:
            path = recipe.path
            text = path.read_text(encoding="utf-8")
            doc = _yaml().load(text)
            if refresh_recipe(registry, recipe, doc, date, Path(tmp), proposal):
                proposal.old[path], proposal.new[path] = text, _dump(doc)
    _drop_retired_cuda(proposal, table, table_path, recipes)
    for path in [p for p in proposal.new if proposal.new[p] == proposal.old[p]]:
        del proposal.new[path], proposal.old[path]
    new_table, new_recipes = _validate(proposal, table_path, recipes_dir)
    added = added_pairs(table, new_table)
    added += [(series, None) for series in reprobe if (series, None) not in added]
    proposal.targets = probe_targets(added, new_table, new_recipes)
    reports = read_reports(probes) if probes is not None else None
    proposal.verdicts = [judge(t, reports) for t in proposal.targets]
    if any(v.state == "fails" for v in proposal.verdicts):
        exclude_failures(proposal, {r.package: r.path for r in new_recipes}, new_table, date)
        new_table, new_recipes = _validate(proposal, table_path, recipes_dir)
    proposal.plan = planned_for([s for s in new_table.torch if s not in table.torch], new_table,
                                new_recipes)
    return proposal


def exclude_failures(proposal: Proposal, paths: dict[str, Path], table: Table, date: str) -> None:
    """An exclusion in each recipe whose probe failed to compile (``tools.upstream.exclusions``),
    on top of whatever else the proposal changes in it; one its loader refuses becomes a note."""
    for v in proposal.verdicts:
        if v.state != "fails":
            continue
        path = paths[v.target.package]
        old = proposal.old.get(path) or path.read_text(encoding="utf-8")
        doc = _yaml().load(proposal.new.get(path, old))
        add_exclusion(doc, v, date)
        text = _dump(doc)
        problem = check(text, path, table)
        if problem:
            proposal.notes.append(note_refused(v, path, problem))
            continue
        proposal.old[path], proposal.new[path] = old, text
        scope = f" for CUDA {v.target.builds[0]}" if len(v.target.builds) == 1 else ""
        proposal.changes.append(f"{v.target.package}: excludes torch {v.target.series}{scope}, "
                                f"whose probe {v.text}")


def _drop_retired_cuda(proposal: Proposal, table: Table, table_path: Path,
                       recipes: list[Recipe]) -> None:
    """Each recipe's CUDA entry whose series the proposed table no longer publishes for that
    CUDA version is dropped in the same change (``tools.upstream.cudadrop``)."""
    new_table = parse_table(parse_yaml(proposal.new[table_path], table_path, TableError),
                            table_path)
    for recipe in recipes:
        path = recipe.path
        text = proposal.new.get(path) or path.read_text(encoding="utf-8")
        doc = _yaml().load(text)
        changes = drop_unpublished_cuda(doc, recipe, table, new_table)
        if changes:
            proposal.old.setdefault(path, path.read_text(encoding="utf-8"))
            proposal.new[path] = _dump(doc)
            proposal.changes.extend(changes)


def _validate(proposal: Proposal, table_path: Path, recipes_dir: Path
              ) -> tuple[Table, list[Recipe]]:
    """Load the proposed table and recipes with the project's own loaders (a RecipeError or
    TableError here means the proposal itself is wrong: nothing is written); returns them."""
    table = parse_table(parse_yaml(proposal.new.get(table_path, proposal.old.get(
        table_path, table_path.read_text(encoding="utf-8"))), table_path, TableError), table_path)
    recipes = []
    for folder in recipe_folders(recipes_dir):
        path = folder / RECIPE_FILE
        text = proposal.new.get(path) or path.read_text(encoding="utf-8")
        recipes.append(parse_recipe(parse_yaml(text, path, RecipeError), path, table))
    return table, recipes


def planned_for(added: list[str], table: Table, recipes: list[Recipe]) -> list[str]:
    """Per torch series in ``added`` (new rows of ``table``): the recipes whose torch ranges
    build it, with their cells per CUDA version, and why each other recipe doesn't. A recipe
    needs no edit for a series its range includes; one that should build it and doesn't needs
    its range (or its CUDA versions) widened."""
    out = []
    for series in added:
        built, not_built = [], []
        for recipe in recipes:
            cells = [c for c in cells_for(recipe, table)
                     if series in (c.serves_torch or (c.torch,))]
            if cells:
                # per platform (Linux x86_64 unnamed, as in the cell ids) and CUDA version
                per: dict[tuple[str, str], int] = {}
                for c in cells:
                    per[(c.platform, c.cuda)] = per.get((c.platform, c.cuda), 0) + 1
                built.append(f"{recipe.package} (" + ", ".join(
                    ("" if platform == DEFAULT_PLATFORM else f"{platform} ")
                    + f"CUDA {cuda}: {n} cell{'s' if n > 1 else ''}"
                    for (platform, cuda), n in per.items()) + ")")
                continue
            why = dict.fromkeys(recipe.why_not(series, cuda, table)
                                for cuda in table.torch[series].cuda)
            not_built.append(f"{recipe.package} ({'; '.join(why)})")
        rc = " (release candidate: into the pre-release index only)" \
            if table.torch[series].candidate else ""
        line = f"torch {series}{rc}: " + (f"built with no recipe edit by {', '.join(built)}"
                                          if built else "no recipe's torch range builds it")
        if not_built:
            line += f"; not by {', '.join(not_built)}"
        out.append(line)
    return out


def write_all(new: dict[Path, str], old: dict[Path, str]) -> None:
    """Write every file or none: all are written aside first, then renamed into place; a failed
    rename puts back the ones already renamed."""
    staged: dict[Path, Path] = {}
    done: list[Path] = []
    try:
        for path, text in new.items():
            tmp = path.with_name(f".{path.name}.refresh")
            tmp.write_text(text, encoding="utf-8")
            staged[path] = tmp
        for path, tmp in staged.items():
            os.replace(tmp, path)
            done.append(path)
    except OSError as exc:
        for path in done:
            path.write_text(old[path], encoding="utf-8")
        raise CuwheelsError(f"writing {path} failed ({exc}); every file is as it was") from None
    finally:
        for tmp in staged.values():
            tmp.unlink(missing_ok=True)


def summary(proposal: Proposal) -> str:
    """The change in words (markdown): what is new, the facts read, what a person must check."""
    lines = ["## Registry refresh", ""]
    lines += [f"- {c}" for c in proposal.changes] or ["- nothing new"]
    lines += ["", "### torch as the registry has it", "",
              "| series | release | Python | free-threaded | CUDA (PyPI) | manylinux | C++11 ABI "
              "| torch's index |", "|---|---|---|---|---|---|---|---|"]
    for f in proposal.torch:
        lines.append(f"| {f.series} | {f.release} | {', '.join(f.python)} | "
                     f"{', '.join(f.free_threaded) or '-'} | {f.pypi_cuda or '?'} | "
                     f"{f.manylinux or '?'} | "
                     f"{_show(f.cxx11_abi) if f.cxx11_abi is not None else '?'}"
                     f" | {', '.join(f.variants) if f.variants is not None else 'not read'} |")
    if proposal.plan:
        lines += ["", "### New series in the plan", ""] + [f"- {p}" for p in proposal.plan]
    if proposal.verdicts:
        lines += ["", "### Probes against what is new", ""]
        lines += [f"- {v}" for v in verdict_lines(proposal.verdicts)]
    lines += ["", "### Agreement with the table", ""] + [f"- {a}" for a in proposal.agreement]
    if proposal.notes:
        lines += ["", "### For a person to check", ""] + [f"- {n}" for n in proposal.notes]
    return "\n".join(lines) + "\n"
