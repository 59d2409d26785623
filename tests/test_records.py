"""tools.probing.records: which kernel records are due (never measured, other sources, a torch
series not measured), the probe jobs' matrix on each platform's runner, and the measurements
written into units.yaml, or said and left out."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from tools import ROOT
from tools.plan.cells import plan
from tools.plan.groups import UNITS_FILE, groups, read_units, sources_digest
from tools.plan.recipes.model import load_all
from tools.plan.runners import load_runners
from tools.plan.table import load_table
from tools.probing import records


@pytest.fixture
def recipes(tmp_path) -> Path:
    """A copy of the repository's recipes, which a test may edit."""
    root = tmp_path / "recipes"
    shutil.copytree(ROOT / "recipes", root)
    return root


def _due(root: Path):
    table = load_table(root / "table.yaml")
    return records.due_records(load_all(root, table), table)


def _edit_units(root: Path, package: str, edit) -> None:
    path = root / package / UNITS_FILE
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def _groups(root: Path, package: str, platform: str) -> list[str]:
    table = load_table(root / "table.yaml")
    rs = load_all(root, table)
    cells = [c for c in plan(rs, table) if c.package == package and c.platform == platform]
    return [g.id for g in groups(cells, rs)]


def test_the_records_due_are_those_never_measured_of_the_recipes_that_share_kernels(recipes):
    due, skipped = _due(recipes)
    got = {(d.package, d.cuda, d.platform) for d in due}
    # flash_attn and causal_conv1d share their kernels on Linux x86_64 for CUDA 12.8 and 13.0
    # (measured); what no machine here could measure is due on its own platform
    assert got == {(p, cuda, platform) for p in ("flash_attn", "causal_conv1d")
                   for cuda, platform in (("12.6", "linux_x86_64"), ("12.8", "linux_aarch64"),
                                          ("13.0", "linux_aarch64"))}
    assert {d.why for d in due} == {"never measured"}
    aarch64 = next(d for d in due if (d.package, d.cuda, d.platform)
                   == ("flash_attn", "13.0", "linux_aarch64"))
    assert aarch64.series == ("2.14", "2.13", "2.12", "2.11")
    assert aarch64.cell.endswith("-cu130-aarch64") and aarch64.key == "13.0-aarch64"
    assert not aarch64.stand_in          # the runner's toolkit is CUDA 13.0
    cu126 = next(d for d in due if (d.package, d.cuda) == ("flash_attn", "12.6"))
    assert cu126.stand_in and cu126.key == "12.6"
    # recipes whose kernels take torch's API are not measured again; Windows is said, not probed
    assert not {d.package for d in due} & {"mmcv", "mamba_ssm", "torch_scatter", "xformers"}
    assert skipped and all("win_amd64" in s and "MSVC" in s for s in skipped)
    assert any(s.startswith("flash_attn CUDA 13.0 on win_amd64: never measured") for s in skipped)


def test_a_series_the_record_lacks_and_other_sources_make_a_record_due(recipes):
    def drop_211(data):
        data["kernels"]["13.0"]["torch"].remove("2.11")
    _edit_units(recipes, "flash_attn", drop_211)
    _edit_units(recipes, "causal_conv1d",
                lambda data: data["kernels"]["13.0"].update(sources="0" * 64))
    due = {(d.package, d.cuda, d.platform): d for d in _due(recipes)[0]}
    assert due["flash_attn", "13.0", "linux_x86_64"].why == "torch 2.11 not measured"
    assert due["causal_conv1d", "13.0", "linux_x86_64"].why.startswith(
        "measured with other sources")
    assert due["flash_attn", "13.0", "linux_x86_64"].cell == "flash_attn-3.10-cu130"


def test_the_matrix_runs_each_record_on_its_platforms_runner(recipes):
    due, _ = _due(recipes)
    table = load_table(recipes / "table.yaml")
    runners = load_runners(recipes / "runners.yaml",
                           {r.package for r in load_all(recipes, table)})
    matrix = records.record_matrix(due, runners)["include"]
    by = {(e["package"], e["cuda"], e["platform"]): e for e in matrix}
    assert by["flash_attn", "13.0", "linux_aarch64"]["runner"] == "ubuntu-24.04-arm"
    assert by["flash_attn", "13.0", "linux_aarch64"]["stand_in"] == ""
    assert by["flash_attn", "12.6", "linux_x86_64"]["stand_in"] == "--toolkit-stand-in"
    assert by["flash_attn", "12.6", "linux_x86_64"]["runner"] == \
        runners.for_package("flash_attn").label
    assert len(matrix) == len(due)


def _measurement(cell: str, recipe_folder: Path, platform: str, torch: list[str],
                 measured: list[str] | None = None, **span) -> dict:
    """A kernels.json as ``python -m tools.probe CELL --across-torch`` writes it."""
    table = load_table(recipe_folder.parent / "table.yaml")
    recipe = next(r for r in load_all(recipe_folder.parent, table)
                  if r.folder == recipe_folder)
    record = {"platform": platform, "torch": torch, "digest": "d" * 64,
              "sources": sources_digest(recipe), "units": 72,
              "read_with": f"python -m tools.probe {cell} --across-torch --write", **span}
    if measured:
        record["measured"] = measured
    return {"cell": cell, "cuda": "13.0", "span": record, "verdicts": []}


def _write(folder: Path, name: str, data: dict) -> None:
    (folder / name / "kernels").mkdir(parents=True)
    (folder / name / "kernels" / "kernels.json").write_text(json.dumps(data))


def test_a_measurement_from_an_aarch64_runner_gives_its_series_one_kernel_group(recipes,
                                                                                tmp_path):
    assert len([g for g in _groups(recipes, "flash_attn", "linux_aarch64") if "cu130" in g]) == 4
    due = next(d for d in _due(recipes)[0] if (d.package, d.key) == ("flash_attn", "13.0-aarch64"))
    found = tmp_path / "artifacts"
    _write(found, f"kernels-{due.cell}", _measurement(
        due.cell, recipes / "flash_attn", "linux_aarch64", list(due.series)))
    table = load_table(recipes / "table.yaml")
    before = (recipes / "flash_attn" / UNITS_FILE).read_text()
    applied = records.apply_records(found, recipes, table)
    assert applied.lines == ["flash_attn CUDA 13.0 on linux_aarch64: 72 CUDA units alike in "
                             "torch 2.14, 2.13, 2.12, 2.11: one kernel group"]
    path = recipes / "flash_attn" / UNITS_FILE
    assert applied.old == {path: before} and (recipes / "flash_attn" / UNITS_FILE).read_text() \
        == before                                          # nothing written by apply itself
    text = applied.new[path]
    assert text.startswith(before.split("kernels:")[0])   # every line before the records kept
    path.write_text(text)
    units = read_units(next(r for r in load_all(recipes, table) if r.package == "flash_attn"))
    assert set(units.kernels) == {"13.0", "12.8", "13.0-aarch64"}
    assert [g for g in _groups(recipes, "flash_attn", "linux_aarch64") if "cu130" in g] == \
        ["flash_attn-cu130-kernels-aarch64"]
    assert ("flash_attn", "13.0-aarch64") not in {(d.package, d.key) for d in _due(recipes)[0]}


def test_a_measurement_in_which_no_two_series_agree_is_kept_and_not_due_again(recipes,
                                                                               tmp_path):
    cell = next(d.cell for d in _due(recipes)[0]
                if (d.package, d.key) == ("causal_conv1d", "13.0-aarch64"))
    found = tmp_path / "artifacts"
    _write(found, "one", _measurement(cell, recipes / "causal_conv1d", "linux_aarch64",
                                      ["2.14"], ["2.14", "2.13", "2.12", "2.11"]))
    table = load_table(recipes / "table.yaml")
    applied = records.apply_records(found, recipes, table)
    assert applied.lines == ["causal_conv1d CUDA 13.0 on linux_aarch64: no two of torch 2.14, "
                             "2.13, 2.12, 2.11 alike: each compiles its kernels (recorded, so "
                             "not measured again)"]
    for path, text in applied.new.items():
        path.write_text(text)
    assert ("causal_conv1d", "13.0-aarch64") not in {(d.package, d.key) for d in _due(recipes)[0]}
    # it shares nothing: one group per series, as before
    assert len([g for g in _groups(recipes, "causal_conv1d", "linux_aarch64")
                if "cu130" in g]) == 4


@pytest.mark.parametrize("case,expected", [
    ("sources", "measured with other sources than the recipe's now"),
    ("cell", "is not a planned cell"),
    ("json", "not a measurement (JSONDecodeError"),
    ("series", "measured torch 2.14, 2.9 on linux_aarch64, which this plan doesn't build there"),
    ("digest", "the record is not one the plan reads"),
    ("platform", "on linux_x86_64, which this plan doesn't build there"),
])
def test_a_measurement_that_does_not_fit_the_recipe_is_said_and_not_written(
        recipes, tmp_path, case, expected):
    cell = next(d.cell for d in _due(recipes)[0]
                if (d.package, d.key) == ("flash_attn", "13.0-aarch64"))
    data = _measurement(cell, recipes / "flash_attn", "linux_aarch64", ["2.14", "2.13"])
    if case == "sources":
        data["span"]["sources"] = "0" * 64
    elif case == "cell":
        data["cell"] = "flash_attn-3.10-cu999-aarch64"
    elif case == "series":
        data["span"]["torch"] = ["2.14", "2.9"]
    elif case == "digest":
        data["span"]["digest"] = "not a digest"
    elif case == "platform":
        data["span"]["platform"] = "linux_x86_64"
    found = tmp_path / "artifacts"
    _write(found, "k", data)
    if case == "json":
        (found / "k" / "kernels" / "kernels.json").write_text("{cut short")
    applied = records.apply_records(found, recipes, load_table(recipes / "table.yaml"))
    assert applied.new == {}
    assert len(applied.lines) == 1 and expected in applied.lines[0], applied.lines
    assert applied.lines[0].endswith("not written")


def test_due_table_names_the_command_and_says_when_all_are_current(recipes):
    due, skipped = _due(recipes)
    text = records.due_table(due, skipped)
    assert ("- flash_attn CUDA 12.6 on linux_x86_64 (torch 2.14, 2.13, 2.12, 2.11): never "
            "measured; measured with `python -m tools.probe flash_attn-3.10-cu126 "
            "--across-torch --toolkit-stand-in`") in text
    assert records.due_table([], []) == "- every kernel record is current"


def test_a_measurement_adding_a_series_keeps_the_recorded_digest_and_group_key(recipes,
                                                                               tmp_path):
    """The refresh's measurement of flash_attn CUDA 13.0 with one more series (here: the
    record narrowed to three series first, then measured again with all four, on a machine
    whose text hashes otherwise) keeps the group's key, so the kernel store's entries stay."""
    table = load_table(recipes / "table.yaml")
    recipe = next(r for r in load_all(recipes, table) if r.package == "flash_attn")
    digest = read_units(recipe).kernels["13.0"].digest
    _edit_units(recipes, "flash_attn", lambda d: d["kernels"]["13.0"]["torch"].remove("2.11"))
    due = next(d for d in _due(recipes)[0] if (d.package, d.key) == ("flash_attn", "13.0"))
    found = tmp_path / "artifacts"
    _write(found, "k", {**_measurement(due.cell, recipes / "flash_attn", "linux_x86_64",
                                       list(due.series), digest="e" * 64)})
    applied = records.apply_records(found, recipes, table)
    (path, text), = applied.new.items()
    record = yaml.safe_load(text)["kernels"]["13.0"]
    assert record["torch"] == ["2.14", "2.13", "2.12", "2.11"] and record["digest"] == digest


def test_the_probe_command_prints_what_is_due(recipes, capsys):
    from tools import probe
    assert probe.main(["--due", "--recipes", str(recipes), "--table",
                       str(recipes / "table.yaml")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("- causal_conv1d CUDA 12.6 on linux_x86_64 (torch 2.14, 2.13, 2.12, "
                          "2.11): never measured")
    assert "flash_attn CUDA 13.0 on win_amd64: never measured; not measured" in out
