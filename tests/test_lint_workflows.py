"""tools.devtools.workflow_audit: actionlint, zizmor and the workflow schema run for real on
workflows written here, their findings parsed and printed; the command's exit status.

(That the repository's own workflows are clean is tests/test_workflows.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import ROOT
from tools.core.errors import ToolchainError
from tools.devtools.workflow_audit import (WORKFLOWS_DIR, Finding, _zizmor_finding, display_path,
                                           lint, npm_integrity, workflow_files)
from tools.lint_workflows import main

#: A valid workflow that is unsafe: an untrusted title in a script, an unpinned action, a
#: checkout that keeps its credentials, default permissions.
UNSAFE = ("name: bad\n"
          "on: pull_request\n"
          "jobs:\n"
          "  a:\n"
          "    runs-on: ubuntu-24.04\n"
          "    steps:\n"
          "      - uses: actions/checkout@v4\n"
          "      - run: echo \"${{ github.event.pull_request.title }}\"\n")


def test_lint_reports_each_tool(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text(
        UNSAFE +
        "  b:\n"
        "    runs-on: ubuntu-24.04\n"
        "    permissions: {contents: maybe}\n"
        "    steps: [{run: echo}]\n")
    injection = tmp_path / "injection.yml"
    injection.write_text(UNSAFE)
    findings = lint([bad, injection])
    rules = {(f.tool, f.rule) for f in findings if f.file.endswith("bad.yml")}
    assert ("actionlint", "expression") in rules            # untrusted title in a script
    assert ("zizmor", "error") in rules                       # zizmor refuses the invalid file
    assert any(f.tool == "schema" and "permissions" in f.rule
               for f in findings if f.file.endswith("bad.yml"))
    rules = {(f.tool, f.rule) for f in findings if f.file.endswith("injection.yml")}
    assert {("zizmor", "template-injection"), ("zizmor", "unpinned-uses"),
            ("zizmor", "artipacked"), ("zizmor", "excessive-permissions")} <= rules


@pytest.mark.parametrize("data,expect", [
    # the empty input
    (b"", "sha512-z4PhNX7vuL3xVChQ1m2AB9Yg5AULVxXcg/SpIdNs6c5H0NE8XYXysP+DGNKHfuwvY7kxvUdBe"
          "oGlODJ6+SfaPg=="),
    # the FIPS 180-2 test vector
    (b"abc", "sha512-3a81oZNherrMQXNJriBBMRLm+k6JqX6iCp7u5ktV05ohkpkqJ0/BqDa6PCOj/uu9RU1EI2"
             "Q86A4qmslPpUyknw=="),
])
def test_npm_integrity(data, expect):
    assert npm_integrity(data) == expect


def test_finding_format():
    f = Finding("zizmor", ".github/workflows/x.yml", 3, 5, "template-injection", "high: boom")
    assert str(f) == ".github/workflows/x.yml:3:5: zizmor[template-injection] high: boom"


def _zizmor_entry(locations: list[dict], *, severity: str = "High") -> dict:
    return {"ident": "template-injection", "desc": "code injection via template expansion",
            "determinations": {"severity": severity}, "locations": locations}


def _location(kind: str, row: int, column: int, *, annotation: str | None = None) -> dict:
    key = {"Local": {"verbatim_path": ".github/workflows/x.yml"}}
    symbolic = {"kind": kind, "key": key, **({"annotation": annotation} if annotation else {})}
    return {"symbolic": symbolic,
            "concrete": {"location": {"start_point": {"row": row, "column": column}}}}


@pytest.mark.parametrize("entry,expect", [
    # zizmor counts rows and columns from 0; the finding from 1, at the primary location.
    (_zizmor_entry([_location("Related", 1, 1), _location("Primary", 7, 14, annotation="title")]),
     ".github/workflows/x.yml:8:15: zizmor[template-injection] high: code injection via "
     "template expansion (title)"),
    # no primary location: the first one; no annotation: no parentheses
    (_zizmor_entry([_location("Related", 0, 4)], severity="Informational"),
     ".github/workflows/x.yml:1:5: zizmor[template-injection] informational: code injection "
     "via template expansion"),
])
def test_zizmor_findings_are_read_at_their_primary_location(entry, expect):
    assert str(_zizmor_finding(entry)) == expect


@pytest.mark.parametrize("path,expect", [
    (ROOT / ".github" / "workflows" / "wheels.yml", ".github/workflows/wheels.yml"),
    (Path("/somewhere/else/x.yml"), "/somewhere/else/x.yml"),
])
def test_paths_are_shown_relative_to_the_repository(path, expect):
    assert display_path(path) == expect


def test_workflow_files(tmp_path):
    assert workflow_files() == sorted(WORKFLOWS_DIR.glob("*.yml")) + \
        sorted(WORKFLOWS_DIR.glob("*.yaml"))
    given = tmp_path / "a.yml"
    given.write_text(UNSAFE)
    assert workflow_files([str(given)]) == [given]
    with pytest.raises(ToolchainError, match="no such workflow file: .*missing.yml"):
        workflow_files([given, tmp_path / "missing.yml"])


def test_the_command_prints_each_finding_and_exits_1(tmp_path, capsys):
    unsafe = tmp_path / "unsafe.yml"
    unsafe.write_text(UNSAFE)
    assert main([str(unsafe)]) == 1
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines and all(line.startswith(f"{unsafe}:") for line in lines)
    assert any(" zizmor[template-injection] " in line for line in lines)
    assert err.strip() == f"{len(lines)} finding(s) in {unsafe}"


def test_the_command_refuses_a_missing_file(tmp_path, capsys):
    assert main([str(tmp_path / "missing.yml")]) == ToolchainError.exit_code
    assert "no such workflow file" in capsys.readouterr().err
