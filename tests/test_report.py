"""Progress lines, and the build report written however a build ends and read back through its type."""

from __future__ import annotations

import io
import json

import pytest

from tools.core.errors import SourceError
from tools.pipeline.buildreport import (SCHEMA_VERSION, BuildReport, ReportedCache, ReportError,
                                        ReportedError, read_report)
from tools.pipeline.report import Progress, reporting
from tools.pipeline.shardcache import ShardResult


def _report() -> BuildReport:
    return BuildReport("demo-3.12-cu129", "host", why="--backend host", archs=["80", "90"],
                       label="cu129.torch2.8")


def test_steps_are_timed_numbered_and_reported(tmp_path):
    stream = io.StringIO()
    progress = Progress("demo-3.12-cu129", ["one", "two"], stream)
    report = _report()
    with pytest.raises(SourceError):
        with reporting(tmp_path / "report.json", report, progress):
            assert progress.run("one", lambda step: step.detail.update(x=1) or 7) == 7
            progress.run("two", lambda step: (_ for _ in ()).throw(SourceError("bad sha256")))
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("[demo-3.12-cu129 0m00s] step 1/2: one ...")
    assert "step 1/2: one ok (" in lines[1] and "step 2/2: two FAILED after" in lines[3]
    written = json.loads((tmp_path / "report.json").read_text())
    assert written["schema"] == SCHEMA_VERSION
    assert [(s["name"], s["status"]) for s in written["steps"]] == [("one", "ok"),
                                                                    ("two", "failed")]
    assert written["steps"][0]["detail"] == {"x": 1}
    assert written["error"] == {"kind": "source", "message": "bad sha256"}
    assert not list(tmp_path.glob("*.part"))


def test_a_failed_build_reads_back_as_it_was_written(tmp_path):
    progress = Progress("demo-3.12-cu129", ["source"], io.StringIO())
    report = _report()
    with pytest.raises(SourceError):
        with reporting(tmp_path / "report.json", report, progress):
            progress.run("source", lambda step: (_ for _ in ()).throw(
                SourceError("bad sha256", hint="fetch it again")))
    back = read_report(tmp_path / "report.json")
    assert back == report
    assert back.verdict == "failed" and back.backend == "host"
    assert back.error == ReportedError("source", "bad sha256\n  fix: fetch it again")
    assert back.error.line() == "source error: bad sha256\n  fix: fetch it again"
    assert [(s.name, s.status) for s in back.steps] == [("source", "failed")]
    assert back.steps[0].detail == {"error": "bad sha256\n  fix: fetch it again"}


def test_a_passed_container_build_with_a_shard_reads_back_whole(tmp_path):
    """Every part of the type survives the file: the cache's figures, the shard caches read,
    a shard's record, the machine's entries, a path in a step's details (written as text)."""
    progress = Progress("demo-3.12-cu129", ["cibuildwheel", "publish"], io.StringIO())
    report = BuildReport("demo-3.12-cu129", "container", why="auto: podman can build",
                         image="img:1", limits={"memory_gib": 8, "cpus": 4}, workarounds=[],
                         archs=["90"], label="cu129.torch2.8")
    with reporting(tmp_path / "report.json", report, progress):
        progress.run("cibuildwheel", lambda step: step.detail.update(log=tmp_path / "x.log"))
        report.ccache = ReportedCache("ccache 4.10", "/c", 3, 2, 1, 4,
                                   per_unit={"units": {"a.cu": "hit"}, "hits": 1})
        report.shards = {"read": ["/s/g-shard1"], "partial": [], "not_read": [], "env": {}}
        report.shard = ShardResult("g-shard1", "g", "k", 1, 2, ["a.cu"], ["90"],
                                   seconds={"a.cu": 1.5}, verdict="passed", complete=True)
        report.machine = {"emulated": "aarch64"}
        report.engine, report.plat, report.script = "podman", "auto", "#!/bin/sh\n"
        report.verdict, report.wheel = "passed", str(tmp_path / "demo.whl")
    written = json.loads((tmp_path / "report.json").read_text())
    # the keys the workflows, the front page and the tests read are where they were
    assert {"cell", "backend", "verdict", "wheel", "ccache", "shards", "steps", "seconds",
            "image", "plat", "limits", "workarounds", "script"} <= set(written)
    assert "error" not in written and "needs" not in written   # None fields: not written
    assert written["steps"][0]["detail"] == {"log": str(tmp_path / "x.log")}
    back = read_report(tmp_path / "report.json")
    assert back.ccache == report.ccache and back.shard == report.shard
    assert back.to_json() == written


def test_another_schema_version_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "report.json"
    data = _report().to_json()
    path.write_text(json.dumps({**data, "schema": SCHEMA_VERSION + 1}))
    with pytest.raises(ReportError, match=rf"{path}: schema {SCHEMA_VERSION + 1}: this code "
                                          rf"reads build reports of schema {SCHEMA_VERSION}"):
        read_report(path)
    # a report without a schema (the shape before it had one) is refused the same way
    path.write_text(json.dumps({k: v for k, v in data.items() if k != "schema"}))
    with pytest.raises(ReportError, match=rf"{path}: schema None"):
        read_report(path)


@pytest.mark.parametrize("change, message", [
    ({"verdict": "maybe"}, "verdict is 'maybe': one of passed, failed, planned"),
    ({"backend": "cloud"}, "backend is 'cloud': one of host, container"),
    ({"archs": "90"}, "archs must be list, not str"),
    ({"error": "nvcc failed"}, "error must be dict, not str"),
    ({"error": {"kind": "compile"}}, "error has the wrong fields"),
    ({"steps": [{"name": "x"}]}, r"steps\[0\] must be an object with name"),
    ({"seconds": True}, "seconds must be a number, not bool"),
    ({"colour": "red"}, "colour is not a field of a schema 1 report"),
])
def test_a_report_of_the_wrong_shape_is_refused_naming_file_and_field(tmp_path, change, message):
    path = tmp_path / "report.json"
    path.write_text(json.dumps({**_report().to_json(), **change}))
    with pytest.raises(ReportError, match=f"{path}: {message}"):
        read_report(path)


def test_a_missing_or_unreadable_report_names_the_file(tmp_path):
    with pytest.raises(ReportError, match=f"{tmp_path / 'nope.json'}: no build report there"):
        read_report(tmp_path / "nope.json")
    (tmp_path / "half.json").write_text('{"cell": ')
    with pytest.raises(ReportError, match=f"{tmp_path / 'half.json'}: not a JSON build report"):
        read_report(tmp_path / "half.json")
