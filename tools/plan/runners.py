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
file, the field, the rule and the fix, all of them in one error. The file's shape (the keys,
each figure's type and bound, a label runs-on takes) is the JSON Schema ``runners.schema.json``
beside this module; the rules between figures (the build's memory within the machine's, the
budget within the job limit, the setup within the budget) are here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from tools import RECIPES_DIR
from tools.core.errors import PlanError
from tools.core.variant import DEFAULT_PLATFORM, PLATFORM_PART
from .jsonshape import check_shape
from .schema import Problems, load_yaml

#: The runner file the plan reads when no other is named.
RUNNERS_PATH = RECIPES_DIR / "runners.yaml"
#: The runner file's shape: its keys, each figure's type and bound, a label runs-on takes (no
#: spaces, no expression syntax).
RUNNERS_SCHEMA_FILE = Path(__file__).with_name("runners.schema.json")


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
    """The rules between a complete runner's figures, each reported at ``where``; with ``only``,
    just the problems of those fields (an override whose default is wrong: its own figures).
    Each figure's own bound is the schema's."""
    def add(name: str, reason: str, fix: str | None = None) -> None:
        if only is None or name in only:
            p.add(f"{where}.{name}", reason, fix)

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
    # a figure out of its bound is named and still read: the rules between figures run too
    check_shape(p, raw, RUNNERS_SCHEMA_FILE, keep_bounded=True)
    top = p.shaped(raw, "")
    entry = p.shaped((top or {}).get("default"), "default")
    if top is None or entry is None:
        p.raise_if_any()
        raise PlanError(f"{path}: not a runner file")
    p.reason(entry["reason"], "default.reason")
    default = Runner(**{f.name: entry[f.name] for f in fields(Runner)})
    _check_runner(p, default, "default")
    # An override inherits the default's figures: while those are wrong, only the override's own
    # fields are checked, so a problem of the default is named once, not under every override.
    default_ok = not any(item.startswith("default.") for item in p.items)
    overrides: dict[str, Runner] = {}
    by_platform: dict[str, Runner] = {}
    for section, names, unknown, into in (
            ("packages", packages, "no recipe has this name", overrides),
            ("platforms", platforms, "no platform has this name", by_platform)):
        for name, value in (p.shaped(top.get(section), section) or {}).items():
            where = f"{section}.{name}"
            if names is not None and name not in names:
                p.add(where, unknown, f"use a {'recipe' if section == 'packages' else 'platform'}"
                                      f"'s name: {', '.join(sorted(names))}")
                continue
            if section == "platforms" and name == DEFAULT_PLATFORM:
                p.add(where, f"{DEFAULT_PLATFORM} runs on the default runner",
                      "change default: instead")
                continue
            got = p.shaped(value, where)
            if got is None:
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
