"""Progress lines, the build report written however a build ends, and publishing a wheel."""

from __future__ import annotations

import io
import json

import pytest

from tools.core.errors import SourceError
from tools.pipeline.report import Progress, publish, reporting


def test_steps_are_timed_numbered_and_reported(tmp_path):
    stream = io.StringIO()
    progress = Progress("demo-3.12-cu129", ["one", "two"], stream)
    report: dict = {"cell": "demo-3.12-cu129"}
    with pytest.raises(SourceError):
        with reporting(tmp_path / "report.json", report, progress):
            assert progress.run("one", lambda step: step.detail.update(x=1) or 7) == 7
            progress.run("two", lambda step: (_ for _ in ()).throw(SourceError("bad sha256")))
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("[demo-3.12-cu129 0m00s] step 1/2: one ...")
    assert "step 1/2: one ok (" in lines[1] and "step 2/2: two FAILED after" in lines[3]
    written = json.loads((tmp_path / "report.json").read_text())
    assert [(s["name"], s["status"]) for s in written["steps"]] == [("one", "ok"),
                                                                    ("two", "failed")]
    assert written["steps"][0]["detail"] == {"x": 1}
    assert written["error"] == {"kind": "source", "message": "bad sha256"}
    assert not list(tmp_path.glob("*.part"))


def test_publish_replaces_a_wheel_of_the_same_name(tmp_path):
    wheel = tmp_path / "build" / "x-1.0-cp312-cp312-manylinux_2_28_x86_64.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"new")
    out = tmp_path / "wheelhouse"
    out.mkdir()
    (out / wheel.name).write_bytes(b"old")
    progress = Progress("x", ["publish"], io.StringIO())
    target = progress.run("publish", lambda step: publish(wheel, out, step))
    assert target.read_bytes() == b"new" and sorted(p.name for p in out.iterdir()) == [wheel.name]
    assert progress.steps[0].detail == {"wheel": str(target), "size": 3}
