"""Release candidates: ``python -m tools.refresh --rc`` proposes a table row for a torch series
whose candidate is on PyTorch's test index before its final reaches PyPI, and every refresh
turns such a row into the release row once the final is there.

The test index (``https://download.pytorch.org/whl/test/torch/``) lists each candidate under its
final's version (``torch-2.16.0-...whl`` and ``torch-2.16.0+cu132-...``); a later candidate
replaces the files under the same name. So a candidate is told apart by the commit it was built
from, ``git_version`` in its ``torch/version.py``. Its row is read like a release's
(``tools.upstream.registry.read_torch``, on the plain build, the one that goes to PyPI): Python
versions and manylinux baseline from the file names, the CUDA build from the wheel's pins and
``torch/version.py``, the C++ ABI from ``libshm.so``; the CUDA variants from the ``+cuXYZ``
files. It is written as a row with ``candidate: {git, index}`` (``tools.plan.table``), whose
cells build into the pre-release index only. Only a series newer than every row of the table
gets one (a patch release's candidate would stand in for a series that has a final).

Where the test index doesn't answer, that is said and nothing is proposed from it. A candidate
the index lists but whose wheel can't be read, or whose facts it doesn't give, stops the refresh
(RegistryError naming the table, the row and the wheel): nothing is written.
"""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version
from ruamel.yaml.comments import CommentedMap

from tools.core.errors import RegistryError
from tools.plan.table import Table, version_key
from .registry import Registry, TorchFacts, read_torch
from .yamltext import flow, like, quoted, source

#: A torch wheel's link on the test index's page: its href and the file name's parts.
_LINK_RE = re.compile(r'href="([^"#]*?(torch-(\d+\.\d+\.\d+)(?:%2B|\+)?(cu\d+)?-cp\d+-cp\d+t?-'
                      r'(?:manylinux|linux)[\w.]*x86_64\.whl))[#"]')
_FIX = ("nothing was written; run again when the test index serves the wheel, or run the "
        "refresh without --rc")


def candidate_files(page: str, base: str) -> dict[str, dict[str, list]]:
    """release -> ``{"plain": [file dicts], "cuda": [CUDA versions]}`` from the test index's page:
    the plain builds (the one PyPI will get) in the shape of PyPI's JSON files (absolute URL, no
    size: the reader asks the server), and the CUDA versions of the ``+cuXYZ`` builds."""
    out: dict[str, dict[str, list]] = {}
    for href, name, release, cu in _LINK_RE.findall(page):
        entry = out.setdefault(release, {"plain": [], "cuda": []})
        if cu:
            cuda = f"{int(cu[2:-1])}.{cu[-1]}"
            if cuda not in entry["cuda"]:
                entry["cuda"].append(cuda)
        else:
            entry["plain"].append({"filename": urllib.parse.unquote(name),
                                   "packagetype": "bdist_wheel", "yanked": False, "size": None,
                                   "url": urllib.parse.urljoin(base, href)})
    for entry in out.values():
        entry["cuda"].sort(key=version_key)
    return out


def newest_candidates(files: dict[str, dict[str, list]], table: Table,
                      finals: dict[str, str]) -> dict[str, str]:
    """series -> the candidate release to consider: one of a series newer than every release
    row of the table and with no final on PyPI (``finals``: series -> PyPI's newest release)."""
    releases = [s for s, t in table.torch.items() if t.candidate is None]
    newest = max(releases, key=version_key) if releases else "0.0"
    out: dict[str, str] = {}
    for release in files:
        try:
            v = Version(release)
        except InvalidVersion:
            continue
        series = f"{v.major}.{v.minor}"
        if version_key(series) <= version_key(newest) or series in finals:
            continue
        if series not in out or v > Version(out[series]):
            out[series] = release
    return dict(sorted(out.items(), key=lambda kv: version_key(kv[0])))


def read_candidate(registry: Registry, release: str, entry: dict[str, list], where: str
                   ) -> TorchFacts:
    """The facts of one candidate, read like a release's from its plain x86_64 build. Anything
    that can't be read is a RegistryError naming ``where`` (the table and the row), the wheel
    and the fix: a candidate row is never written with a fact missing."""
    page = registry.test
    if not entry["plain"]:
        raise RegistryError(f"{where}: {page} lists torch {release} only as +cuXYZ builds, no "
                            "plain x86_64 wheel (the PyPI build) to read pypi_cuda, the C++ ABI "
                            "and git_version from", hint=_FIX)
    doc = {"releases": {release: entry["plain"]}}
    try:
        facts = read_torch(registry, doc, page, release, listing=page)
    except RegistryError as exc:
        raise RegistryError(f"{where}: the release candidate's wheel could not be read: "
                            f"{exc.message}", hint=_FIX) from None
    missing = [k for k in ("pypi_cuda", "manylinux", "cxx11_abi", "git")
               if getattr(facts, k) is None] + ([] if facts.python else ["python"])
    if missing:
        said = "; ".join(facts.notes) or "the wheel does not say"
        raise RegistryError(f"{where}: {', '.join(missing)} could not be read from the release "
                            f"candidate's wheel ({facts.how.get('read', page)}): {said}",
                            hint=_FIX)
    facts.variants = entry["cuda"]
    facts.how["cuda"] = f"{page} (torch-{release}+cuXYZ x86_64 wheels)"
    facts.how["git"] = f"torch/version.py git_version {facts.git}"
    return facts


def candidate_index(registry: Registry) -> str:
    """The test index's root, which the candidate's CUDA folders are under (``.../whl/test/``)."""
    return urllib.parse.urljoin(registry.test, "..")


def row_values(facts: TorchFacts, table: Table) -> tuple[list[str], list[str]]:
    """(the row's CUDA versions: the candidate's variants the table has an entry for, else its
    PyPI build's; the variants the table has no entry for)."""
    cuda = [c for c in facts.variants or () if c in table.cuda]
    unknown = [c for c in facts.variants or () if c not in table.cuda]
    return cuda or [facts.pypi_cuda], unknown


def candidate_map(facts: TorchFacts, index: str) -> CommentedMap:
    """The row's ``candidate: {git, index}`` in flow style."""
    m = CommentedMap()
    m["git"] = facts.git
    m["index"] = index
    m.fa.set_flow_style()
    return m


def table_where(table_path: Path, series: str) -> str:
    """How messages name a row: ``recipes/table.yaml: torch."2.16"``."""
    return f'{table_path}: torch."{series}"'


def promote(row: CommentedMap, entry: Any, facts: TorchFacts, date: str, proposal: Any) -> None:
    """The final of a series the table has as a release candidate is on PyPI: the row becomes
    the release row (``candidate:`` dropped, every value the final's, its source the final's
    reads), so that its cells build again against the final, into the normal index."""
    git = entry.candidate.git[:7]
    missing = [k for k in ("pypi_cuda", "manylinux", "cxx11_abi") if getattr(facts, k) is None]
    if missing or not facts.python:
        proposal.notes.append(f"torch {facts.series}: the final {facts.release} is on PyPI, but "
                              f"{', '.join(missing or ['python'])} could not be read from it, so "
                              f"the release candidate row (git {git}) is kept; check by hand")
        return
    del row["candidate"]
    row["release"] = like(row["release"], facts.release)
    row["python"] = flow(facts.python)
    if facts.variants:
        row["cuda"] = flow(facts.variants)
    row["pypi_cuda"] = like(row["pypi_cuda"], facts.pypi_cuda)
    row["manylinux"] = like(row["manylinux"], facts.manylinux)
    row["cxx11_abi"] = facts.cxx11_abi
    row["source"] = like(row["source"], source(
        facts, ["python", "pypi_cuda", "manylinux", "cxx11_abi", "cuda"], date)
        + f"; was the release candidate git {git} until then")
    proposal.changes.append(f"torch {facts.series}: the final {facts.release} is on PyPI: the "
                            f"release candidate row (git {git}) becomes the release row; its "
                            "cells build again against the final, into the normal index (the "
                            "candidate's wheels stay in the pre-release index)")
    proposal.agreement.append(f"torch {facts.series}: promoted from its release candidate "
                              f"({facts.release})")
    proposal.notes.extend(facts.notes)


def refresh_candidates(registry: Registry, doc: CommentedMap, table: Table, table_path: Path,
                       finals: dict[str, str], date: str, proposal: Any) -> None:
    """``--rc``: a row for each release candidate on PyTorch's test index of a series newer
    than the table's releases; a candidate row the index has a newer candidate for is updated.
    ``finals``: series -> PyPI's newest release; ``proposal``: the refresh's Proposal (its
    ``torch``, ``changes``, ``agreement`` and ``notes`` are added to)."""
    try:
        page = registry.test_page()
    except RegistryError as exc:
        proposal.notes.append(f"PyTorch's test index could not be read ({exc.message}): no "
                              "release candidate was looked for")
        return
    files = candidate_files(page, registry.test)
    index = candidate_index(registry)
    found = newest_candidates(files, table, finals)
    rows = doc["torch"]
    for series, release in found.items():
        facts = read_candidate(registry, release, files[release], table_where(table_path, series))
        proposal.torch.append(facts)
        cuda, unknown = row_values(facts, table)
        if unknown:
            proposal.notes.append(f"torch {release} (release candidate): the test index has CUDA "
                                  f"{', '.join(unknown)}, which the table has no cuda: entry for")
        if facts.pypi_cuda not in table.cuda:
            raise RegistryError(f"{table_where(table_path, series)}: the release candidate's "
                                f"PyPI build is CUDA {facts.pypi_cuda}, which the table has no "
                                "cuda: entry for", hint=f"add cuda.\"{facts.pypi_cuda}\" to "
                                f"{table_path} first; nothing was written")
        current = table.torch.get(series)
        if current is not None and current.candidate.git == facts.git \
                and current.release == release:
            proposal.agreement.append(f"torch {series}: release candidate {facts.git[:7]} "
                                      f"agrees ({release})")
            continue
        row = rows[series] if current is not None else CommentedMap()
        for key, value in (("release", quoted(release)), ("python", flow(facts.python)),
                           ("cuda", flow(cuda)), ("pypi_cuda", quoted(facts.pypi_cuda)),
                           ("manylinux", quoted(facts.manylinux)), ("cxx11_abi", facts.cxx11_abi),
                           ("candidate", candidate_map(facts, index))):
            row[key] = value
        row["source"] = quoted("release candidate on PyTorch's test index: " + source(
            facts, ["python", "pypi_cuda", "manylinux", "cxx11_abi", "cuda", "git"], date))
        if current is None:
            rows.insert(len(rows), quoted(series), row)
            rows.yaml_set_comment_before_after_key(quoted(series), before="\n", indent=2)
            proposal.changes.append(f"torch {series}: release candidate {release} (git "
                                    f"{facts.git[:7]}, Python {', '.join(facts.python)}, CUDA "
                                    f"{', '.join(cuda)}; its cells build into the pre-release "
                                    "index only)")
        else:
            proposal.changes.append(f"torch {series}: release candidate git "
                                    f"{current.candidate.git[:7]} -> {facts.git[:7]} (the test "
                                    "index has a newer candidate; its cells build again)")
        proposal.notes.extend(facts.notes)
    for series, t in table.torch.items():
        if t.candidate is not None and series not in found and series not in finals:
            proposal.notes.append(f"torch {series}: the table's release candidate (git "
                                  f"{t.candidate.git[:7]}) is no longer on the test index and "
                                  "PyPI has no final: check whether it was withdrawn")
