"""Progress lines, and the build report written however a build ends."""

from __future__ import annotations

import io
import json

import pytest

from tools.core.errors import SourceError
from tools.pipeline.report import Progress, reporting


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
