"""What the front page tells people about the wheels of each variant index: the glibc each wheel
needs, the commands that install from an index, and the facts its picker chooses from.

The picker (platform, torch series, CUDA version, Python -> the commands for that variant index)
runs in the page from ``picker_facts``: one row per (variant index, platform, Python, project)
that a placed wheel really serves, so it offers only what the site has and says so when a
combination has none. The commands are spelled once, here (COMMANDS): the page's plain sections
render them with Jinja and the picker's script fills in the same strings, so a page without
JavaScript lists exactly what the picker shows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from markupsafe import Markup, escape
from packaging.tags import Tag

from tools.core.platforms import PLATFORMS, tag_platform
from tools.core.variant import Variant
from tools.plan.table import Table, python_key, version_key
from .frontpage import python_labels, python_sort_key
from .ledger_file import Entry
from .placement import FileView, wheel_tags

#: The commands for one project and one variant index; ``{project}``, ``{site}`` (the site's
#: address, ending in ``/``) and ``{index}`` (the variant index's path) are filled in.
#: ``--only-binary``: pip merges indexes, and a newer source release elsewhere would be built.
COMMANDS = {
    "pip": "pip install {project} --only-binary {project} --extra-index-url {site}{index}/simple/",
    "uv": "uv pip install {project} --extra-index-url {site}{index}/simple/",
    "select": "curl -O {site}cuwheels-select.pyz && python cuwheels-select.pyz {project} --index {site}",
}

#: A wheel for every platform (``none-any``): listed under each platform's name.
ANY_PLATFORM = "any"


def command(kind: str, project: str, site: Markup | str, index: str = "") -> Markup:
    """One of COMMANDS as HTML: ``project`` and ``index`` escaped, ``site`` as given (the page
    passes a ``<span class="site">`` its script fills in when it was built without a site URL)."""
    return Markup(escape(COMMANDS[kind]).replace("{site}", Markup(site)).replace(
        "{project}", escape(project)).replace("{index}", escape(index)))


def glibc_needed(tags: frozenset[Tag]) -> str:
    """The C library a wheel needs, for people: ``glibc 2.28 or newer`` for a
    ``manylinux_2_28`` tag (the lowest baseline among its tags: it installs from there on);
    for a plain ``linux_x86_64`` tag, which promises no baseline, the tag itself; ``none`` for
    Windows and for a wheel of any platform."""
    baselines, plain = [], []
    for tag in sorted({t.platform for t in tags}):
        if tag == "any" or tag.startswith("win"):
            continue
        parsed = tag_platform(tag)
        if parsed is None:
            plain.append(tag)  # musllinux, macOS: named as tagged
        elif parsed[1] is None:
            if tag.startswith("linux_"):
                plain.append(tag)
        else:
            baselines.append(parsed[1])
    if baselines:
        major, minor = min(baselines)
        return f"glibc {major}.{minor} or newer"
    if plain:
        return f"not stated: tagged {', '.join(plain)}"
    return "none"


def _platforms(tags: frozenset[Tag]) -> list[str]:
    """The platforms of PLATFORMS a wheel installs on; every one for a ``none-any`` wheel."""
    found = []
    for platform in sorted({t.platform for t in tags}):
        if platform == "any":
            return list(PLATFORMS)
        parsed = tag_platform(platform)
        if parsed is not None and parsed[0] not in found:
            found.append(parsed[0])
    return found


def _pythons(labels: tuple[str, ...], series: str, table: Table) -> list[str]:
    """The Python versions a wheel with these matrix labels (``3.12``, ``3.9+``, ``py3``)
    installs on, as the picker offers them: ``3.9+`` and ``py3`` expand to the Pythons the
    table lists for the torch ``series`` (from 3.9 on); a series the table lacks keeps the
    exact versions only."""
    known = table.torch[series].python if series in table.torch else ()
    found: list[str] = []
    for label in labels:
        if label.endswith("+") and label[:-1].replace(".", "").isdigit():
            found += [p for p in known if version_key(p) >= version_key(label[:-1])]
        elif label.startswith("py"):
            found += list(known)
        elif label.removesuffix("t").replace(".", "").isdigit():
            found.append(label)     # 3.12, or a free-threaded build: 3.14t
    return sorted(set(found), key=python_key)


def display_names(views: Mapping[str, FileView]) -> dict[str, str]:
    """Normalized project name -> the name its newest release spells (as the project pages
    and the commands show it)."""
    newest: dict[str, FileView] = {}
    for f in views.values():
        if f.project not in newest or f.sort_key > newest[f.project].sort_key:
            newest[f.project] = f
    return {project: f.entry.name for project, f in newest.items()}


def variant_wheels(placed: Mapping[Variant, list[Entry]],
                   views: Mapping[str, FileView]) -> dict[str, list[dict[str, Any]]]:
    """Per variant index path: a row per (project, platform) of its wheels with the Pythons
    they serve (as the coverage matrix labels them) and the glibc they need, for the page's
    plain sections."""
    out: dict[str, list[dict[str, Any]]] = {}
    names = display_names(views)
    for variant, entries in placed.items():
        rows: dict[tuple[str, str], dict[str, Any]] = {}
        for e in entries:
            tags = wheel_tags(e.filename)
            project = views[e.filename].project
            for platform in _platforms(tags) if not _is_any(tags) else [ANY_PLATFORM]:
                row = rows.setdefault((project, platform), {
                    "project": names[project], "platform": _shown(platform), "pythons": set(),
                    "glibc": defaultdict(list)})
                row["pythons"].update(python_labels(tags))
                row["glibc"][glibc_needed(tags) if platform.startswith("linux") or
                             platform == ANY_PLATFORM else "none"].append(e.version)
        out[variant.index_path] = [
            {"project": r["project"], "platform": r["platform"],
             "pythons": ", ".join(sorted(r["pythons"], key=python_sort_key)),
             "glibc": _glibc_summary(r["glibc"])}
            for _, r in sorted(rows.items(), key=lambda kv: (kv[0][0], _platform_order(kv[0][1])))]
    return out


def _is_any(tags: frozenset[Tag]) -> bool:
    return {t.platform for t in tags} == {"any"}


def _shown(platform: str) -> str:
    return "any platform" if platform == ANY_PLATFORM else PLATFORMS[platform].shown


def _platform_order(platform: str) -> int:
    order = list(PLATFORMS)
    return order.index(platform) if platform in order else -1


def _glibc_summary(by_need: Mapping[str, list[str]]) -> str:
    """One need for every version (``glibc 2.28 or newer``), else each with its versions."""
    if len(by_need) == 1:
        return next(iter(by_need))
    return "; ".join(f"{need} ({', '.join(dict.fromkeys(versions))})"
                     for need, versions in sorted(by_need.items()))


def picker_facts(placed: Mapping[Variant, list[Entry]], views: Mapping[str, FileView],
                 table: Table) -> dict[str, Any]:
    """What the page's picker chooses from, as JSON: the platforms, the variant indexes (path,
    torch series, CUDA version, and how each is shown), the commands (COMMANDS) and ``wheels``:
    ``[index number, platform, Python, project, glibc]`` for every combination a placed wheel
    serves, each once."""
    indexes, rows = [], set()
    names = display_names(views)
    for i, (variant, entries) in enumerate(placed.items()):
        indexes.append({
            "path": variant.index_path,
            "torch": ("pre-" if variant.prerelease else "") + variant.torch,
            "torch_shown": variant.torch + (" (release candidate)" if variant.prerelease else ""),
            "cuda": variant.cuda,
            "cuda_shown": variant.cuda if variant.exact_cuda else f"{variant.cuda}.x (any)",
        })
        for e in entries:
            tags = wheel_tags(e.filename)
            for python in _pythons(python_labels(tags), variant.torch, table):
                for platform in _platforms(tags):
                    need = glibc_needed(tags) if platform.startswith("linux") else "none"
                    rows.add((i, platform, python, names[views[e.filename].project], need))
    return {
        "platforms": [{"name": p.name, "shown": p.shown} for p in PLATFORMS.values()],
        "indexes": indexes,
        "commands": COMMANDS,
        "wheels": sorted(rows, key=lambda r: (r[0], r[1], python_key(r[2]), r[3], r[4])),
    }
