"""The machines a release is planned for: ``recipes/runners.yaml`` (or another file of its shape).

A **runner** is what one CI job gets: its ``runs-on`` label, cores, memory (the machine's, and
what a build in the builder container gets of it), disk, the provider's job limit and the
**budget** the plan gives one job (less than the limit, so that a job still saves its cache and
uploads its report), and the **setup** every job pays before it compiles (the builder image
pulled, the tools and the cell's torch installed). The file has one ``default`` runner and,
under ``packages``, overrides for single recipes (only the fields that differ), and under
``platforms``, the runner of each wheel platform other than Linux x86_64 (again only the fields
that differ from the default: an arm64 runner's label, a Windows runner's). A package's override
is for its Linux x86_64 jobs only: its label names a Linux x86_64 machine. A fork with
larger or self-hosted runners points the plan at its own file (``python -m tools.matrix
--runners FILE``; in CI the repository variable ``CUWHEELS_RUNNERS``) and gets fewer shards
from the same recipes: the plan (``tools.plan.stages``) sizes jobs and shards for these figures,
and every job it plans carries its runner's label, which the workflow runs it on.

Read strictly, like the table and the recipes (``tools.plan.schema``): every problem names the
file, the field, the rule and the fix, all of them in one error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from tools import RECIPES_DIR
from tools.core.errors import PlanError
from tools.core.variant import DEFAULT_PLATFORM, PLATFORM_PART
from .schema import Problems, load_yaml

#: The runner file the plan reads when no other is named.
RUNNERS_PATH = RECIPES_DIR / "runners.yaml"
RUNNERS_SCHEMA = 1
#: A ``runs-on`` label: what GitHub's labels are made of (no spaces, no expression syntax).
_LABEL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


@dataclass(frozen=True)
class Runner:
    """One runner's figures (see the module docstring), and why they are what they are."""

    label: str
    cores: int
    memory_gib: float
    build_memory_gib: float
    disk_gib: float
    job_limit_hours: float
    budget_hours: float
    setup_minutes: float
    reason: str

    @property
    def setup_hours(self) -> float:
        """The setup every job pays, in hours."""
        return self.setup_minutes / 60


#: The figures a runner entry has, with their types (``reason`` besides them).
_FIELDS = {"label": str, "cores": int, "memory_gib": (int, float),
           "build_memory_gib": (int, float), "disk_gib": (int, float),
           "job_limit_hours": (int, float), "budget_hours": (int, float),
           "setup_minutes": (int, float)}


@dataclass(frozen=True)
class Runners:
    """The runner file: the default runner and the per-recipe ones (overrides applied)."""

    path: Path
    default: Runner
    packages: dict[str, Runner]
    #: The runner of each platform other than Linux x86_64 (the default runs those).
    platforms: dict[str, Runner] = field(default_factory=dict)

    def for_package(self, package: str, platform: str = DEFAULT_PLATFORM) -> Runner:
        """The runner ``package``'s jobs on ``platform`` run on: for Linux x86_64 its override,
        else the default; for another platform that platform's runner (PlanError when the file
        has none: the default's label is a Linux x86_64 machine)."""
        if platform == DEFAULT_PLATFORM:
            return self.packages.get(package, self.default)
        if platform not in self.platforms:
            raise PlanError(f"{self.path}: platforms: no runner for {platform}, whose cells the "
                            "plan has", hint=f"add platforms.{platform} with its runs-on label "
                                             "and the figures that differ from the default")
        return self.platforms[platform]


def _check_runner(p: Problems, runner: Runner, where: str,
                  only: set[str] | None = None) -> None:
    """The rules a complete runner keeps, each reported at ``where``; with ``only``, just the
    problems of those fields (an override whose default is wrong: its own figures)."""
    def add(name: str, reason: str, fix: str | None = None) -> None:
        if only is None or name in only:
            p.add(f"{where}.{name}", reason, fix)

    if not _LABEL_RE.fullmatch(runner.label):
        add("label", f"{runner.label[:40]!r} is not a runner label",
            "use the label runs-on takes: letters, digits, '.', '_' and '-'")
    for name in ("cores", "memory_gib", "build_memory_gib", "disk_gib", "job_limit_hours",
                 "budget_hours"):
        if getattr(runner, name) <= 0:
            add(name, "must be more than 0")
    if runner.setup_minutes < 0:
        add("setup_minutes", "must not be negative")
    if runner.build_memory_gib > runner.memory_gib:
        add("build_memory_gib",
            f"{runner.build_memory_gib} GiB is more than the runner's {runner.memory_gib} GiB",
            "the build gets part of the machine's memory, never more")
    if runner.budget_hours >= runner.job_limit_hours:
        add("budget_hours",
            f"{runner.budget_hours} h leaves nothing of the {runner.job_limit_hours} h job "
            "limit to save the cache and upload the report",
            "make the budget less than the job limit")
    if runner.setup_minutes / 60 >= runner.budget_hours:
        add("setup_minutes",
            f"{runner.setup_minutes} min of setup leaves nothing of the {runner.budget_hours} h "
            "budget to compile", "raise the budget or lower the setup")


def parse_runners(raw: object, path: Path, packages: set[str] | None = None) -> Runners:
    """The runner file's data (``raw``, read from ``path``) as :class:`Runners`; PlanError listing
    every problem. ``packages``: the recipes' names, when known, so that an override of a recipe
    that doesn't exist is named. A platform's runner must be one of a platform the cell ids know
    (``tools.core.variant.PLATFORM_PART``); one whose platform a table lacks is never used."""
    platforms = set(PLATFORM_PART)
    p = Problems(path, PlanError)
    top = p.entry(raw, "", {"schema": int, "default": dict}, {"packages": dict, "platforms": dict})
    if top is None:
        p.raise_if_any()
        raise PlanError(f"{path}: not a runner file")
    if top["schema"] != RUNNERS_SCHEMA:
        p.add("schema", f"must be {RUNNERS_SCHEMA}", "this checkout reads runner files of "
                                                     f"schema {RUNNERS_SCHEMA}")
    entry = p.entry(top["default"], "default", {**_FIELDS, "reason": str})
    if entry is None:
        p.raise_if_any()
    p.reason(entry["reason"], "default.reason")
    default = Runner(**{f.name: entry[f.name] for f in fields(Runner)})
    before = len(p.items)
    _check_runner(p, default, "default")
    # An override inherits the default's figures: while those are wrong, only the override's own
    # fields are checked, so a problem of the default is named once, not under every override.
    default_ok = len(p.items) == before
    overrides: dict[str, Runner] = {}
    by_platform: dict[str, Runner] = {}
    for section, names, unknown, into in (
            ("packages", packages, "no recipe has this name", overrides),
            ("platforms", platforms, "no platform has this name", by_platform)):
        for name, value in (top.get(section) or {}).items():
            where = f"{section}.{name}"
            if names is not None and name not in names:
                p.add(where, unknown, f"use a {'recipe' if section == 'packages' else 'platform'}"
                                      f"'s name: {', '.join(sorted(names))}")
                continue
            if section == "platforms" and name == DEFAULT_PLATFORM:
                p.add(where, f"{DEFAULT_PLATFORM} runs on the default runner",
                      "change default: instead")
                continue
            got = p.mapping(value, where, {"reason": str}, _FIELDS)
            if got is None or "reason" not in got:
                continue
            p.reason(got["reason"], f"{where}.reason")
            if len(got) == 1:
                p.add(where, "overrides nothing", "name the fields that differ from the "
                                                  "default, or remove the entry")
            runner = replace(default, **got)
            _check_runner(p, runner, where, None if default_ok else set(got))
            into[str(name)] = runner
    p.raise_if_any()
    return Runners(path, default, overrides, by_platform)


def load_runners(path: Path = RUNNERS_PATH, packages: set[str] | None = None) -> Runners:
    """Read and check a runner file (:func:`parse_runners`)."""
    return parse_runners(load_yaml(path, PlanError), path, packages)
