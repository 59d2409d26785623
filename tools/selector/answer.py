"""The answer: which wheel of a site fits the machine, with the pip and uv commands, or why none
does, what would (other variant indexes, other versions) and how to build one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import Version

from tools.core.platforms import PLATFORMS
from tools.core.variant import (PLATFORM_PART, PRERELEASE_ROOT, PYTHON_PART, Variant, cell_id, stable_torch_part,
                                torch_index_url, uv_index_name)
from . import advice as helps
from .checks import (PEEK_MAX, FileCandidate, WheelName, check, check_arch, driver_problem, file_variant, parse_wheel,
                     same_public)
from .client import Index, IndexFile
from .detect import Machine, release, series_or_none
from .target import download_commands, no_platform_reason, torch_advice


@dataclass
class Answer:
    """What to install (``fits``), or why nothing fits and what would."""

    package: str
    fits: bool
    machine: Machine
    version: str | None = None
    filename: str | None = None
    index_path: str | None = None
    index_url: str | None = None
    pip: str | None = None
    uv: dict[str, str] | None = None
    reason: str | None = None
    reasons: list[str] = field(default_factory=list)
    #: What would help, for the reason at hand (tools.selector.advice).
    advice: list[str] = field(default_factory=list)
    alternatives: list[dict[str, Any]] = field(default_factory=list)
    build: str | None = None
    notes: list[str] = field(default_factory=list)
    #: For a machine of another platform: pip's and uv's commands that fetch its wheel from here.
    download: dict[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        """The answer as printed by ``--json``."""
        doc: dict[str, Any] = {"package": self.package, "fits": self.fits}
        if self.fits:
            doc.update(version=self.version, filename=self.filename, index=self.index_path,
                       index_url=self.index_url, pip=self.pip, uv=self.uv)
            if self.download:
                doc["download"] = self.download
        else:
            doc.update(reason=self.reason, reasons=self.reasons, advice=self.advice,
                       alternatives=self.alternatives)
        doc.update(build=self.build, notes=self.notes, machine=self.machine.to_json())
        return doc


def install_commands(project: str, version: str, index_url: str, index_path: str) -> tuple[str, dict[str, str]]:
    """The pip command and the uv command + pyproject configuration for one wheel.

    ``--extra-index-url``, not ``--index-url``: the variant index holds only the extensions, and
    their dependencies (torch, einops...) must still come from the default index. pip merges all
    indexes and takes the best candidate, so the requirement pins the full version *with* its
    local label: PyPI can't host local versions, so only our index can satisfy it, and a newer
    release or an sdist of the same name elsewhere can never be picked (or built for an hour).
    uv's default strategy takes a package from the first index that has it, and it tries
    ``--extra-index-url`` before the default index: the same command means the same there. A uv
    project gets an ``explicit`` index, consulted only for the package its source names.
    """
    requirement = f"{project}=={version}"
    quoted = f'"{requirement}"'  # a project name and a version: nothing in it the shell expands
    pip = f"pip install {quoted} --extra-index-url {index_url}"
    name = uv_index_name(index_path)
    pyproject = (
        f"# in [project] dependencies: \"{requirement}\"\n"
        "[[tool.uv.index]]\n"
        f"name = \"{name}\"\n"
        f"url = \"{index_url}\"\n"
        "explicit = true\n\n"
        "[tool.uv.sources]\n"
        f"{project} = {{ index = \"{name}\" }}\n"
    )
    uv = {
        "command": f"uv pip install {quoted} --extra-index-url {index_url}",
        "requirement": requirement,
        "index_name": name,
        "pyproject": pyproject,
    }
    return pip, uv


@dataclass(frozen=True)
class RecipeAbi:
    """A recipe's ``abi`` as a site or a build manifest tells it: ``python`` is ``cpython``,
    ``abi3`` or ``none``; ``torch`` is ``exact`` or ``stable``, with ``torch_from`` for ``stable``."""

    python: str
    torch: str
    torch_from: str = ""


#: The python half of a recipe's ``abi`` from a wheel's abi tag (``cp312`` and the like: cpython).
_TAG_ABI = {"abi3": "abi3", "none": "none"}


def abi_from_manifest(manifest: dict[str, Any] | None) -> RecipeAbi | None:
    """The ``abi`` a build manifest records (as tools.finish.abi.check_claims writes it), or
    None when it records none or an incomplete one (a manifest from before the ``abi`` key)."""
    abi = (manifest or {}).get("abi")
    if not isinstance(abi, dict) or abi.get("python") not in ("cpython", "abi3", "none"):
        return None
    if abi.get("torch") == "exact":
        return RecipeAbi(abi["python"], "exact")
    torch_from = abi.get("torch_from")
    if abi.get("torch") == "stable" and isinstance(torch_from, str) and series_or_none(torch_from):
        return RecipeAbi(abi["python"], "stable", torch_from)
    return None


def recipe_abi(index: Index, files: list[IndexFile], *, peek: bool = True) -> RecipeAbi | None:
    """The ``abi`` of the recipe behind a project's newest wheel (of ``files``, on ``index``), or
    None when the site doesn't say.

    The index's JSON data (``_cuwheels``) lists ``serves`` exactly for a stable-ABI build, so a
    file with that data and no ``serves`` is an exact build, whose python half is in its abi tag
    (``cp312``, ``abi3``, ``none``). A stable build's ``torch_from``, which its cell id names, is
    only in the wheel's build manifest, as is everything for a site without the JSON pages: one
    manifest is read for them, when ``peek`` allows.
    """
    wheels = [(f, w) for f in files if (w := parse_wheel(f.filename)) is not None]
    if not wheels:
        return None
    newest, wheel = max(wheels, key=lambda fw: fw[1].version)
    extra = newest.extra or {}
    if extra.get("cuda") and not extra.get("serves"):
        return RecipeAbi(_TAG_ABI.get(wheel.abi, "cpython"), "exact")
    if not peek:
        return None
    manifest, _ = index.wheel_manifest(newest.url, newest.size)
    return abi_from_manifest(manifest)


def build_command(project: str, m: Machine, *, archs: list[str] | None = None,
                  abi: RecipeAbi | None = None) -> str:
    """How to build the package for machine ``m`` from a clone of the cuwheels repository.

    The cell id (tools.core.variant.cell_id) is for ``m``'s platform (an aarch64 machine's id
    ends in ``-aarch64``) and depends on the recipe's ``abi``: its python part is the
    interpreter, ``abi3`` or ``py3``, and a stable-ABI build's torch part is ``<torch_from>+``.
    Without ``abi`` (see recipe_abi), without a CUDA build of torch, or for a platform no cell id
    spells, no id is guessed: the planner lists the cells that serve the machine.
    """
    pkg = canonicalize_name(project).replace("-", "_")
    py = f"{m.python[0]}.{m.python[1]}"
    extra = f" --archs {','.join(archs)}" if archs else ""
    series = series_or_none(m.torch)
    # Cell ids name major.minor ("12.4", never "12.4.1"), as index paths do.
    cuda = ".".join(m.torch_cuda.split(".")[:2]) if m.torch_build == "cuda" and m.torch_cuda else None
    where = ("on that machine, " if m.foreign else "") + "in a clone of the cuwheels repository"
    platform = m.platform
    if abi is not None and cuda and series and platform in PLATFORM_PART:
        python = PYTHON_PART.get(abi.python, py)
        if abi.torch == "stable":
            return (f"nox -s build-{cell_id(pkg, python, cuda, stable_torch_part(abi.torch_from), platform)} -- "
                    f"--backend host{extra}  ({where})")
        return (f"nox -s build-{cell_id(pkg, python, cuda, series, platform)} -- --backend host{extra}  ({where}; "
                f"the session is build-{cell_id(pkg, python, cuda, platform=platform)} when torch {series} is "
                f"the recipe's first torch for CUDA {cuda}: `nox -l -t {pkg}` lists them)")
    filters = f"--package {pkg} --python {py}" + (f" --cuda {cuda}" if cuda else "") \
        + (f" --torch {series}" if series else "") + (f" --platform {platform}" if platform else "")
    return (f"python -m tools.matrix {filters} --format ids  ({where}: the cells that serve this "
            f"machine; build one with nox -s build-<id> -- --backend host{extra})")


def _tag_rank(w: WheelName) -> int:
    # Prefer the most specific wheel: cpXY-cpXY over abi3 over pure py3.
    return 2 if w.abi.startswith("cp") else 1 if w.abi == "abi3" else 0


def pick_order(cands: list[FileCandidate], pinned: bool) -> list[FileCandidate]:
    """Best first: final releases (unless a version is pinned), newest version, most specific
    tags, then the highest build tag (a recipe's build number: a rebuild wins, as in pip and uv)."""
    def key(c: FileCandidate) -> tuple:
        final = pinned or not c.wheel.version.is_prerelease
        return (final, c.wheel.version, _tag_rank(c.wheel), c.wheel.build or (-1, ""))
    return sorted(cands, key=key, reverse=True)


def _python_summary(cands: list[FileCandidate]) -> str:
    tags = sorted({f"{c.wheel.python}-{c.wheel.abi}" for c in cands})
    return ", ".join(tags)


def _variants_in(files: list[IndexFile]) -> dict[str, dict[str, Any]]:
    """``{index path: {variant, versions, pythons, files}}`` of the files that state a variant."""
    out: dict[str, dict[str, Any]] = {}
    for f in files:
        w = parse_wheel(f.filename)
        if w is None:
            continue
        v = file_variant(f, w)
        if v is None:
            continue
        # A stable-ABI build is in the variant index of every torch series it serves.
        for series, path in zip(v.served, v.index_paths):
            entry = out.setdefault(path, {"variant": Variant(v.cuda, series, v.cxx11_abi),
                                          "versions": set(), "files": []})
            entry["versions"].add(w.version.public)
            entry["files"].append((f, w))
    return out


def _sorted_versions(versions: Any) -> list[str]:
    return sorted(versions, key=Version, reverse=True)


def alternatives(index: Index, project: str, combined: list[IndexFile], m: Machine, *,
                 version: str | None, exclude: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Other variant indexes with wheels of ``project`` (of ``version`` if given), nearest first.

    ``fits_otherwise`` says whether one of its wheels fits this machine apart from the torch it
    needs (Python, platform, glibc, driver).
    """
    out = []
    series = series_or_none(m.torch)
    facts = index.facts()
    for path, entry in _variants_in(combined).items():
        if path in exclude:
            continue
        v: Variant = entry["variant"]
        files = [(f, w) for f, w in entry["files"] if version is None or same_public(w.version, version)]
        if not files:
            continue
        fits = False
        for f, w in files:
            c = FileCandidate(f, w, v, path)
            check(c, m, facts, index.facts_note)
            if not [k for k, _ in c.problems if k not in ("abi",)]:
                fits = True
                break
        item: dict[str, Any] = {
            "index": path, "index_url": index.index_url(path + "/"), "cuda": v.cuda, "torch": v.torch,
            "versions": _sorted_versions({w.version.public for _, w in files}),
            "pythons": sorted({f"{w.python}-{w.abi}" for _, w in files}),
            "fits_otherwise": fits,
        }
        if v.exact_cuda:
            item["torch_install"] = f'pip install "torch=={v.torch}.*" --index-url {torch_index_url(v.cuda)}'
        out.append(item)

    def key(item: dict[str, Any]) -> tuple:
        same_major = m.torch_cuda is not None and item["cuda"].split(".")[0] == m.torch_cuda.split(".")[0]
        distance = 99
        if series:
            a, b = release(item["torch"]), release(series)
            distance = abs((a[0] - b[0]) * 100 + a[1] - b[1])
        return (not item["fits_otherwise"], not same_major, distance, [-x for x in release(item["cuda"])])
    return sorted(out, key=key)


def select(index: Index, package: str, m: Machine, *, version: str | None = None, peek: bool = True,
           pre: bool = False) -> Answer:
    """The wheel of ``package`` (``version`` if given) that fits machine ``m``, or why none does,
    what would help (``advice``: tools.selector.advice) and, only where a build for this machine
    would give a wheel that fits, how to build one (for its platform, and for its GPUs when the
    wheels lack their kernels). ``pre``: also look, after the release indexes, in the
    pre-release index of the machine's (CUDA, torch) pair (builds against a torch release
    candidate); without it that index is never named.

    A machine of a platform the project builds nothing for (tools.core.platforms) is answered
    at once, without reading the index. For a machine of another platform than this one
    (``m.foreign``) the answer adds the commands that fetch its wheel from here."""
    if m.platform is None:
        return Answer(package=canonicalize_name(package), fits=False, machine=m, reason=no_platform_reason(m))
    ans, archs = _pick(index, package, m, version=version, peek=peek, pre=pre)
    if not ans.fits and archs is not None:
        abi = recipe_abi(index, index.files("", ans.package) or [], peek=peek)
        ans.build = build_command(ans.package, m, archs=archs, abi=abi)
    # What the pages listed that isn't the project's (tools.selector.client.Index.files).
    ans.notes = list(dict.fromkeys(ans.notes + index.notes))
    return ans


def _pick(index: Index, package: str, m: Machine, *, version: str | None,
          peek: bool, pre: bool = False) -> tuple[Answer, list[str] | None]:
    """select's answer without the build hint, and whether a build would help: None when it
    wouldn't, else the GPU archs it should add (empty: none)."""
    project = canonicalize_name(package)
    ans = Answer(package=project, fits=False, machine=m)
    combined = index.files("", project) or []
    if not combined:
        _unknown_project(index, ans)
        return ans, None
    if version is not None and not any(
        (w := parse_wheel(f.filename)) and same_public(w.version, version) for f in combined
    ):
        ans.reason = f"the index has no {project} {version}"
        have = {w.version.public for f in combined if (w := parse_wheel(f.filename))}
        ans.reasons = [f"versions in the index: {', '.join(_sorted_versions(have))}"]
        ans.advice = ["another version: leave out --version for the newest that fits, or pass one of "
                      + ", ".join(_sorted_versions(have))]
        ans.alternatives = alternatives(index, project, combined, m, version=None)
        return ans, None

    what = f"{project}{' ' + version if version else ''}"
    facts = index.facts()
    if m.torch is None:
        ans.reason = f"torch is not installed here, and {what} must match the torch it runs with"
        ans.reasons = ["install torch first (or pass --torch-version, e.g. 2.8.0+cu128), then run this again"]
        ans.alternatives = alternatives(index, project, combined, m, version=version)
        ans.advice = helps.cuda_torch_advice(project, ans.alternatives)
        return ans, None
    if m.torch_build in ("cpu", "rocm"):
        ans.reason = (f"torch {m.torch} is a {'CPU-only' if m.torch_build == 'cpu' else 'ROCm'} build; "
                      f"{project}'s wheels are CUDA extensions for a CUDA build of torch")
        ans.alternatives = alternatives(index, project, combined, m, version=version)
        ans.advice = helps.cuda_torch_advice(project, ans.alternatives)
        pypi = _torch_advice(index, m, ans.alternatives, installed_cpu=m.torch_build == "cpu")
        builds = facts.torch_builds(series_or_none(m.torch) or "", m.platform or "") if facts else None
        # PyPI's CUDA build is no help where this driver is too old for its CUDA.
        if builds is not None and builds.pypi_cuda and driver_problem(builds.pypi_cuda, m, facts)[0]:
            pypi = None
        ans.advice += [pypi] if pypi else []
        return ans, None
    series = series_or_none(m.torch)
    if m.torch_build is None or not m.torch_cuda or series is None:
        ans.reason = f"couldn't tell which CUDA torch {m.torch} is built with: pass --torch-cuda (e.g. 12.8)"
        ans.alternatives = alternatives(index, project, combined, m, version=version)
        # An unlabelled version is PyPI's build, whose CUDA (or none) the site may know.
        pypi = _torch_advice(index, m, ans.alternatives, unlabelled=True) if "+" not in m.torch else None
        ans.advice += [pypi] if pypi else []
        return ans, None

    if driver_problem(m.torch_cuda, m, facts)[0]:
        need = facts.driver_for(m.torch_cuda) if facts is not None else None
        ans.notes.append(f"this machine's NVIDIA driver is too old for torch {m.torch} itself "
                         f"(CUDA {m.torch_cuda} needs driver >= {need or 'a newer one'})")
    cuda = ".".join(m.torch_cuda.split(".")[:2])  # index paths name major.minor ("12.4", never "12.4.1")
    exact = Variant(cuda, series).index_path
    paths = (exact, Variant(cuda.split(".")[0], series).index_path)
    if pre:
        paths += (Variant(cuda, series, prerelease=True).index_path,)
    budget = [PEEK_MAX]
    seen: list[FileCandidate] = []
    for path in paths:
        files = index.files(path + "/", project) or []
        cands = []
        for f in files:
            w = parse_wheel(f.filename)
            if w is None or (version is not None and not same_public(w.version, version)):
                continue
            c = FileCandidate(f, w, file_variant(f, w), path)
            check(c, m, facts, index.facts_note)
            cands.append(c)
        seen += cands
        for c in pick_order([c for c in cands if not c.problems], pinned=version is not None):
            check_arch(c, m, index=index, peek=peek, budget=budget)
            if c.problems:
                continue
            _fits(ans, index, c, path, combined, m, version=version, exact=exact)
            return ans, None

    tv = f"torch {series} + CUDA {m.torch_cuda}"
    ans.alternatives = alternatives(index, project, combined, m, version=version, exclude=paths)
    driver = helps.driver_too_old(m, facts, seen)
    if not seen:
        ans.reason = f"no {what} wheel for {tv} (the variant index {exact}/simple/ has none)"
        ans.advice = (helps.driver_advice(project, m, facts, ans.alternatives) if driver
                      else helps.series_advice(project, m, series, ans.alternatives))
        return ans, None if driver else []
    ans.reasons = _summarize(seen, m)
    ans.reason = f"no {what} wheel for {tv} fits this machine; {ans.reasons[0]}"
    arch_failures = [c for c in seen if any(k == "arch" for k, _ in c.problems)]
    archs = sorted({g.sm for g in m.gpus}, key=int) if arch_failures and m.gpus else []
    ans.notes = list(dict.fromkeys(ans.notes + [n for c in seen for n in c.notes]))
    ans.advice = _advice_for(project, seen, m, facts, ans.alternatives, driver=driver)
    # Other versions in the same index that fit (when a version was asked for).
    if version is not None:
        others, _ = _pick(index, project, m, version=None, peek=peek, pre=pre)
        if others.fits:
            ans.alternatives.insert(0, {"index": others.index_path, "index_url": others.index_url,
                                        "versions": [Version(others.version or "0").public], "pip": others.pip,
                                        "fits_otherwise": True})
            ans.advice.append(f"{project} {Version(others.version or '0').public} fits: {others.pip}")
    return ans, None if driver or not helps.build_helps(seen) else archs


def _fits(ans: Answer, index: Index, c: FileCandidate, path: str, combined: list[IndexFile], m: Machine, *,
          version: str | None, exact: str) -> None:
    """Fill ``ans`` for candidate ``c`` of variant index ``path``, the wheel that fits."""
    project, series = ans.package, series_or_none(m.torch) or ""
    ans.fits = True
    ans.version, ans.filename, ans.index_path = c.version, c.file.filename, path
    ans.index_url = index.index_url(path + "/")
    ans.pip, ans.uv = install_commands(project, c.version, ans.index_url, path)
    ans.notes = list(dict.fromkeys(ans.notes + c.notes))
    if m.foreign:
        ans.download = download_commands(project, c.version, ans.index_url, c.wheel.platform, m)
        wheel_cuda = c.variant.cuda if c.variant is not None and c.variant.exact_cuda else None
        advice = torch_advice(series, wheel_cuda, m, index.facts())
        ans.notes += [f"on that machine: {advice}"] if advice else []
    if path.startswith(PRERELEASE_ROOT):
        ans.notes.append(f"built against a release candidate of torch {series} (the "
                         "pre-release index): once the final is out, its own build in "
                         f"{exact}/simple/ replaces it")
    newest = _sorted_versions({w.version.public for f in combined if (w := parse_wheel(f.filename))})
    if (version is None and newest and not same_public(c.wheel.version, newest[0])
            and not Version(newest[0]).is_prerelease):
        ans.notes.append(f"{project} {newest[0]} exists in the index, but not for torch {series} + "
                         f"CUDA {m.torch_cuda}")


def _unknown_project(index: Index, ans: Answer) -> None:
    """A project the index has no page for: no alternatives (another package is none), the
    packages it has, and those whose names are close."""
    project = ans.package
    ans.reason = f"{project} is not in the index at {index.root}"
    known = index.projects() or []
    squashed = project.replace("-", "")
    close = [p for p in known if squashed in p.replace("-", "") or p.replace("-", "") in squashed]
    if known:
        ans.reasons = [f"packages in the index: {', '.join(known[:20])}" + (" ..." if len(known) > 20 else "")]
    if close:
        ans.advice = [f"a package of that name: {', '.join(close[:5])}?"]


def _advice_for(project: str, seen: list[FileCandidate], m: Machine, facts: Any,
                alts: list[dict[str, Any]], *, driver: bool) -> list[str]:
    """What would help when the machine's variant indexes have wheels of ``project`` and none fits."""
    if driver:
        return helps.driver_advice(project, m, facts, alts)
    newest = pick_order(seen, pinned=True)[0].wheel.version
    group = [c for c in seen if same_public(c.wheel.version, newest)]
    kinds = [{k for k, _ in c.problems} for c in group]
    lines: list[str] = []
    if all(k & {"python", "requires-python"} for k in kinds):
        lines += helps.python_advice(project, newest.public, f"{group[0].index_path}/simple/", m, group)
    if all("platform" in k for k in kinds):
        shown = PLATFORMS[m.platform].shown if m.platform in PLATFORMS else f"{m.os} {m.arch}"
        lines.append(f"{project} {newest.public} has no wheel for {shown} in {group[0].index_path}/simple/")
    if all("yanked" in k for k in kinds):
        lines.append(f"another version: {project} {newest.public} is withdrawn (yanked)")
    if all("glibc" in k for k in kinds) and m.glibc:
        lines.append(f"a build on this machine (below): it links against this machine's glibc "
                     f"{m.glibc[0]}.{m.glibc[1]}; or a machine with a newer glibc")
    if all("arch" in k for k in kinds):
        lines.append("a build with kernels for this machine's GPUs (below: --archs "
                     f"{','.join(sorted({g.sm for g in m.gpus}, key=int))})")
    if all("abi" in k for k in kinds):
        lines.append(f"a torch of the C++ ABI {project} {newest.public} is built with (torch's own builds "
                     "use the C++11 ABI since torch 2.7), or a build against this torch (below)")
    fitting = [a for a in alts if a.get("fits_otherwise") and a.get("torch_install")]
    if fitting and not all("arch" in k for k in kinds):
        lines.append(f"or a torch whose variant index has a {project} wheel for this machine: "
                     f"torch {fitting[0]['torch']} + CUDA {fitting[0]['cuda']}: {fitting[0]['torch_install']}")
    return lines


def _torch_advice(index: Index, m: Machine, alts: list[dict[str, Any]], *,
                  installed_cpu: bool = False, unlabelled: bool = False) -> str | None:
    """What the site says of PyPI's torch of ``m``'s series on its platform (target.torch_advice),
    naming PyTorch's index of the CUDA the nearest variant index with wheels of that series has."""
    series = series_or_none(m.torch)
    if series is None:
        return None
    cuda = next((a["cuda"] for a in alts if a.get("torch") == series and "." in a.get("cuda", "")), None)
    return torch_advice(series, cuda, m, index.facts(), installed_cpu=installed_cpu, unlabelled=unlabelled)


def _summarize(cands: list[FileCandidate], m: Machine) -> list[str]:
    """Why nothing fits, nearest first: the newest version's wheels, those for this Python first;
    when none is for this Python, one line naming the Python tags there are."""
    newest = pick_order(cands, pinned=True)[0].wheel.version
    group = [c for c in cands if same_public(c.wheel.version, newest)]
    # Wheels for another OS/CPU or another Python are the farthest from fitting: reported last.
    distance = {"platform": 2, "python": 1}
    group.sort(key=lambda c: (max((distance.get(k, 0) for k, _ in c.problems), default=0), len(c.problems)))
    reasons: list[str] = []
    no_python = all(any(k == "python" for k, _ in c.problems) for c in group)
    if no_python:
        reasons.append(f"{newest.public} is built for {_python_summary(group)} only, this is "
                       f"Python {m.python[0]}.{m.python[1]} ({m.python_tag})")
    for c in group:
        for kind, message in c.problems:
            if kind == "python" and no_python:
                continue
            text = f"{c.file.filename} {message[3:]}" if message.startswith("it ") else f"{c.file.filename}: {message}"
            if text not in reasons:
                reasons.append(text)
    return reasons
