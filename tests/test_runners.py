"""tools.plan.runners: the runner file, read strictly; the repository's own file; overrides; every
bad input named with its field, rule and fix."""

from __future__ import annotations

import copy
from dataclasses import fields

import pytest
import yaml

from tools.core.errors import PlanError
from tools.plan.recipes.model import load_all
from tools.plan.runners import RUNNERS_PATH, Runner, load_runners, parse_runners

#: A valid runner file: GitHub's standard runner, and one recipe on a larger one.
GOOD = {
    "schema": 1,
    "default": {"label": "ubuntu-24.04", "cores": 4, "memory_gib": 16, "build_memory_gib": 13.5,
                "disk_gib": 14, "job_limit_hours": 6, "budget_hours": 5, "setup_minutes": 45,
                "reason": "GitHub's standard runner for public repositories"},
    "packages": {"flashy": {"label": "linux-16-core", "cores": 16, "memory_gib": 64,
                            "build_memory_gib": 60, "reason": "a larger runner for the heavy one"}},
}


def parse(data, packages=None):
    return parse_runners(data, RUNNERS_PATH.with_name("test-runners.yaml"), packages)


def test_the_repositorys_runner_file_is_githubs_standard_runner():
    runners = load_runners(packages={r.package for r in load_all()})
    d = runners.default
    assert (d.label, d.cores, d.memory_gib, d.build_memory_gib, d.job_limit_hours,
            d.budget_hours) == ("ubuntu-24.04", 4, 16, 13.5, 6, 5)
    assert d.setup_hours == pytest.approx(0.75)
    assert runners.packages == {}
    assert runners.for_package("flash_attn") is d
    # the other platforms: GitHub's arm64 and Windows runners, the default's figures otherwise
    arm, win = runners.for_package("flash_attn", "linux_aarch64"), runners.platforms["win_amd64"]
    assert (arm.label, arm.cores, arm.memory_gib, arm.budget_hours) == ("ubuntu-24.04-arm", 4, 16, 5)
    assert (win.label, win.cores, win.memory_gib, win.build_memory_gib) == \
        ("windows-2022", 4, 16, 13)


def test_a_platform_without_a_runner_is_a_plan_error():
    runners = parse(copy.deepcopy(GOOD))
    with pytest.raises(PlanError, match="platforms: no runner for linux_aarch64"):
        runners.for_package("flashy", "linux_aarch64")
    # a package's override is its Linux x86_64 jobs' only
    data = copy.deepcopy(GOOD)
    data["platforms"] = {"linux_aarch64": {"label": "ubuntu-24.04-arm", "reason": "arm64 runner"}}
    runners = parse(data)
    assert runners.for_package("flashy", "linux_aarch64").label == "ubuntu-24.04-arm"
    assert runners.for_package("flashy").label == "linux-16-core"


def test_an_override_changes_only_the_fields_it_names(tmp_path):
    path = tmp_path / "runners.yaml"
    path.write_text(yaml.safe_dump(GOOD))
    runners = load_runners(path, {"flashy", "demo_ext"})
    big = runners.for_package("flashy")
    assert (big.label, big.cores, big.memory_gib, big.build_memory_gib) == \
        ("linux-16-core", 16, 64, 60)
    # the rest is the default's
    assert (big.budget_hours, big.job_limit_hours, big.setup_minutes, big.disk_gib) == (5, 6, 45, 14)
    assert big.reason == "a larger runner for the heavy one"
    assert runners.for_package("demo_ext") == runners.default


def _broken(change) -> dict:
    data = copy.deepcopy(GOOD)
    change(data)
    return data


@pytest.mark.parametrize("change,message", [
    # the budget must leave the job time to save its cache
    (lambda d: d["default"].update(budget_hours=6),
     "default.budget_hours: 6 h leaves nothing of the 6 h job limit to save the cache and upload "
     "the report\n    fix: make the budget less than the job limit"),
    # the build can't get more memory than the machine has
    (lambda d: d["default"].update(build_memory_gib=20),
     "default.build_memory_gib: 20 GiB is more than the runner's 16 GiB\n    fix: the build gets "
     "part of the machine's memory, never more"),
    # setup that eats the whole budget
    (lambda d: d["default"].update(setup_minutes=300),
     "default.setup_minutes: 300 min of setup leaves nothing of the 5 h budget to compile\n"
     "    fix: raise the budget or lower the setup"),
    # a label runs-on can't take (an expression would reach the workflow)
    (lambda d: d["default"].update(label="${{ evil }}"),
     "default.label: '${{ evil }}' is not a runner label\n    fix: use the label runs-on takes: "
     "letters, digits, '.', '_' and '-'"),
    (lambda d: d["default"].update(cores=0), "default.cores: must be more than 0"),
    # a figure of the wrong type, with YAML's usual suspect
    (lambda d: d["default"].update(cores="4"), "default.cores: must be an integer, got a string"),
    (lambda d: d["default"].pop("budget_hours"),
     "default.budget_hours: required key is missing\n    fix: add `budget_hours:` (an integer or "
     "a number)"),
    (lambda d: d["default"].update(reason="big"),
     "default.reason: reason is too short to explain anything"),
    (lambda d: d["default"].update(gpus=1), "default.gpus: unknown key"),
    (lambda d: d.update(schema=2), "schema: must be 1"),
    # an override is checked whole, after the default's figures are filled in
    (lambda d: d["packages"]["flashy"].update(memory_gib=8),
     "packages.flashy.build_memory_gib: 60 GiB is more than the runner's 8 GiB"),
    (lambda d: d["packages"]["flashy"].pop("reason"),
     "packages.flashy.reason: required key is missing"),
    (lambda d: d["packages"].update(demo_ext={"reason": "the same as the default"}),
     "packages.demo_ext: overrides nothing\n    fix: name the fields that differ from the "
     "default, or remove the entry"),
    (lambda d: d["packages"].update(nonesuch={"cores": 8, "reason": "a recipe that went away"}),
     "packages.nonesuch: no recipe has this name\n    fix: use a recipe's name: "
     "demo_ext, flashy"),
    # a platform's runner: a platform the table has, not Linux x86_64's (that is the default)
    (lambda d: d.update(platforms={"linux_riscv64": {"label": "riscv", "reason": "a board farm"}}),
     "platforms.linux_riscv64: no platform has this name\n    fix: use a "
     "platform's name: linux_aarch64, linux_x86_64, win_amd64"),
    (lambda d: d.update(platforms={"linux_x86_64": {"cores": 8, "reason": "a bigger default"}}),
     "platforms.linux_x86_64: linux_x86_64 runs on the default runner"),
    (lambda d: d.update(platforms={"win_amd64": {"label": "windows-2022"}}),
     "platforms.win_amd64.reason: required key is missing"),
    (lambda d: d.update(platforms={"win_amd64": {"build_memory_gib": 20,
                                                 "reason": "more than the machine"}}),
     "platforms.win_amd64.build_memory_gib: 20 GiB is more than the runner's 16 GiB"),
])
def test_bad_runner_files_are_refused_naming_field_rule_and_fix(change, message):
    with pytest.raises(PlanError) as info:
        parse(_broken(change), {"demo_ext", "flashy"})
    assert message in str(info.value)
    assert str(info.value).startswith(f"{RUNNERS_PATH.with_name('test-runners.yaml')}: ")


def test_every_problem_is_named_at_once():
    def change(d):
        d["default"].update(cores=0, budget_hours=7)
        d["packages"]["flashy"]["label"] = "a label"
    with pytest.raises(PlanError) as info:
        parse(_broken(change))
    text = str(info.value)
    assert ": 3 problems:" in text
    assert "default.cores" in text and "default.budget_hours" in text
    assert "packages.flashy.label" in text


def test_not_a_runner_file():
    with pytest.raises(PlanError, match=r"\(top level\): must be a mapping, got a list"):
        parse(["ubuntu-24.04"])


def test_an_unreadable_file_is_named(tmp_path):
    with pytest.raises(PlanError, match="runners.yaml: cannot be read"):
        load_runners(tmp_path / "runners.yaml")


def test_the_runner_files_shape_is_a_published_json_schema():
    """``runners.schema.json``: valid draft 2020-12, a description on every figure, and the
    repository's runner file satisfies it, as an editor checks it."""
    import json

    from jsonschema import Draft202012Validator

    from tools.plan.runners import RUNNERS_SCHEMA_FILE
    from tools.plan.schema import load_yaml
    schema = json.loads(RUNNERS_SCHEMA_FILE.read_text())
    Draft202012Validator.check_schema(schema)
    figures = {k: v for k, v in schema["$defs"].items() if k != "override"}
    assert set(figures) == {f.name for f in fields(Runner)}
    assert all(v.get("description") for v in [*figures.values(), *schema["properties"].values()])
    data = load_yaml(RUNNERS_PATH, PlanError)
    assert list(Draft202012Validator(schema).iter_errors(data)) == []


def test_a_figure_out_of_bounds_is_named_and_the_rules_between_figures_still_run():
    """The schema names ``cores: 0`` and keeps the figure, so the budget's rule is named in the
    same run."""
    def change(d):
        d["default"].update(cores=0, budget_hours=7)
    with pytest.raises(PlanError) as info:
        parse(_broken(change))
    assert "default.cores: must be more than 0\n    fix: write the runner's core count" in \
        str(info.value)
    assert "default.budget_hours: 7 h leaves nothing" in str(info.value)
