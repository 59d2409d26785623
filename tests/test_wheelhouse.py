"""tools.pipeline.wheelhouse: a verified wheel enters the wheelhouse whole, replacing one of its name."""

from __future__ import annotations

import io

from tools.pipeline.report import Progress
from tools.pipeline.wheelhouse import publish


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
    assert not list(out.glob(".*.part"))  # nothing half-copied is left beside it
